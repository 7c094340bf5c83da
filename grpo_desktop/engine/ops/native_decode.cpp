// Fused CPU kernels for one decode step of the lean decoder (engine/sampling/decode.py and
// decode_script.py), compiled on the user's machine by engine/ops/native.py. Why they exist: a
// decode step of a small model is mostly small operations, each a pass over memory and a call;
// these do a layer's rotary embedding, key/value writes and attention in one pass per row and
// key/value head, SwiGLU's SiLU and product in one, and RMSNorm in one (torch's CPU rms_norm
// is five operations). Results equal torch's operations up to
// float rounding (tests/engine/ops/test_native.py); the keys and values written are torch's bits.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

constexpr float kBlocked = -3.0e38f;  // a masked score: finite, as -ffast-math assumes

// out[j] = sum over i < n of a[i] * M[i * stride + j], for j < m: a vector times a matrix whose
// rows are contiguous. Each sum adds its terms in the order i = 0, 1, ... (the rounding of a
// running sum in memory), but W of them at a time in registers, without the loads and stores:
// blocks of 64, then 16, the last block ending at m (the outputs it shares with the block before
// get the same sums again); for m under 16, i outer over a running sum in `out`.
template <int64_t W>
void vec_mat_block(const float* a, int64_t n, const float* M, int64_t stride, int64_t j0, float* out) {
  float acc[W] = {};
  for (int64_t i = 0; i < n; ++i) {
    const float ai = a[i];
    const float* row = M + i * stride + j0;
#pragma omp simd
    for (int64_t j = 0; j < W; ++j) acc[j] += ai * row[j];
  }
  for (int64_t j = 0; j < W; ++j) out[j0 + j] = acc[j];
}

void vec_mat(const float* a, int64_t n, const float* M, int64_t stride, int64_t m, float* out) {
  int64_t j0 = 0;
  for (; j0 + 64 <= m; j0 += 64) vec_mat_block<64>(a, n, M, stride, j0, out);
  for (; j0 + 16 <= m; j0 += 16) vec_mat_block<16>(a, n, M, stride, j0, out);
  if (j0 < m && m >= 16) {
    vec_mat_block<16>(a, n, M, stride, m - 16, out);
  } else if (j0 < m) {
    for (int64_t j = j0; j < m; ++j) out[j] = 0.f;
    for (int64_t i = 0; i < n; ++i) {
      const float ai = a[i];
      const float* row = M + i * stride;
      for (int64_t j = j0; j < m; ++j) out[j] += ai * row[j];
    }
  }
}

// One layer's attention for one new token per row.
//   qkv     (N, H + 2 Hkv, D) contiguous: this token's query, key and value heads, unrotated
//   cos/sin (N, 1, D), last dimension contiguous; sin with its first half negated, so that the
//           rotary embedding is x * cos + roll(x, D / 2) * sin
//   keys    (N, Hkv, D, capacity) and values (N, Hkv, capacity, D), each contiguous in its last
//           dimension: this token's rotated key and value are written at position L - 1, then
//           positions [0, L) are attended
//   blocked (N, 1, 1, >= L) bool or None: positions a row must not attend (its left padding)
// Returns (N, H * D): per query head h (key/value head h / (H / Hkv)),
// softmax(q_h · K * scaling) · V.
at::Tensor rope_attend(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                       at::Tensor keys, at::Tensor values, int64_t L, int64_t H, int64_t Hkv,
                       double scaling, const c10::optional<at::Tensor>& blocked) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.is_contiguous(), "rope_attend: qkv must be (N, heads, D) contiguous");
  TORCH_CHECK(qkv.scalar_type() == at::kFloat && keys.scalar_type() == at::kFloat &&
                  values.scalar_type() == at::kFloat && cos.scalar_type() == at::kFloat &&
                  sin.scalar_type() == at::kFloat,
              "rope_attend: float32 tensors only");
  const int64_t N = qkv.size(0), D = qkv.size(2), R = H + 2 * Hkv;
  TORCH_CHECK(Hkv > 0 && H % Hkv == 0 && qkv.size(1) == R && D % 2 == 0, "rope_attend: head counts");
  TORCH_CHECK(cos.size(-1) == D && sin.size(-1) == D && cos.stride(-1) == 1 && sin.stride(-1) == 1,
              "rope_attend: cos and sin must be (N, 1, D)");
  TORCH_CHECK(keys.size(0) == N && keys.size(1) == Hkv && keys.size(2) == D && keys.size(3) >= L,
              "rope_attend: keys must be (N, Hkv, D, >= L)");
  TORCH_CHECK(values.size(0) == N && values.size(1) == Hkv && values.size(2) >= L && values.size(3) == D,
              "rope_attend: values must be (N, Hkv, >= L, D)");
  TORCH_CHECK(keys.stride(3) == 1 && values.stride(3) == 1,
              "rope_attend: keys and values must be contiguous in their last dimension");
  TORCH_CHECK(L >= 1, "rope_attend: L must be at least 1");
  const int64_t G = H / Hkv, half = D / 2;
  auto out = at::empty({N, H * D}, qkv.options());
  const float* qp = qkv.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  const int64_t cs = cos.stride(0), ss = sin.stride(0);
  float* kp = keys.data_ptr<float>();
  float* vp = values.data_ptr<float>();
  const int64_t k0 = keys.stride(0), k1 = keys.stride(1), k2 = keys.stride(2);
  const int64_t v0 = values.stride(0), v1 = values.stride(1), v2 = values.stride(2);
  const bool* bp = nullptr;
  int64_t b0 = 0, b3 = 0;
  if (blocked.has_value() && blocked->defined()) {
    TORCH_CHECK(blocked->scalar_type() == at::kBool && blocked->dim() == 4 && blocked->size(0) == N &&
                    blocked->size(3) >= L,
                "rope_attend: blocked must be (N, 1, 1, >= L) bool");
    bp = blocked->data_ptr<bool>();
    b0 = blocked->stride(0);
    b3 = blocked->stride(3);
  }
  const float sc = static_cast<float>(scaling);
  float* op = out.data_ptr<float>();
  at::parallel_for(0, N * Hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> buffer(G * L + 2 * D);
    float* rotated = buffer.data() + G * L;  // (D) this key head, then each query head
    for (int64_t r = begin; r < end; ++r) {
      const int64_t n = r / Hkv, kh = r % Hkv;
      const float* c = cp + n * cs;
      const float* s = sp + n * ss;
      const float* row = qp + n * R * D;
      float* K = kp + n * k0 + kh * k1;
      float* V = vp + n * v0 + kh * v1;
      const float* kx = row + (H + kh) * D;
      for (int64_t j = 0; j < D; ++j) {
        const float a = kx[j] * c[j];
        const float b = kx[(j + half) % D] * s[j];
        rotated[j] = a + b;  // torch's x * cos + roll(x) * sin, rounded as it rounds
      }
      for (int64_t d = 0; d < D; ++d) K[d * k2 + L - 1] = rotated[d];
      const float* vx = row + (H + Hkv + kh) * D;
      for (int64_t d = 0; d < D; ++d) V[(L - 1) * v2 + d] = vx[d];
      const bool* mask = bp ? bp + n * b0 : nullptr;
      for (int64_t g = 0; g < G; ++g) {
        const float* qx = row + (kh * G + g) * D;
        float* q = rotated + D;
        for (int64_t j = 0; j < D; ++j) q[j] = qx[j] * c[j] + qx[(j + half) % D] * s[j];
        float* scores = buffer.data() + g * L;  // (L)
        vec_mat(q, D, K, k2, L, scores);  // the scores: q times K (D, L)
        float top = kBlocked;
        for (int64_t l = 0; l < L; ++l) {
          float x = scores[l] * sc;
          if (mask && mask[l * b3]) x = kBlocked;
          scores[l] = x;
          top = x > top ? x : top;
        }
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int64_t l = 0; l < L; ++l) {
          const float e = std::exp(scores[l] - top);
          scores[l] = e;
          sum += e;
        }
        if (mask) {
          for (int64_t l = 0; l < L; ++l) {
            if (mask[l * b3]) {
              sum -= scores[l];
              scores[l] = 0.f;
            }
          }
        }
        const float inv = 1.f / sum;
        for (int64_t l = 0; l < L; ++l) scores[l] *= inv;  // the probabilities
        float* o = op + n * H * D + (kh * G + g) * D;
        vec_mat(scores, L, V, v2, D, o);  // the output: the probabilities times V (L, D)
      }
    }
  });
  return out;
}

// SwiGLU's gate: gu (N, 2W) (gate then up, rows may be strided) -> silu(gate) * up (N, W).
at::Tensor silu_mul(const at::Tensor& gu, int64_t W) {
  TORCH_CHECK(gu.dim() == 2 && gu.size(1) == 2 * W && gu.stride(1) == 1 && gu.scalar_type() == at::kFloat,
              "silu_mul: gu must be (N, 2W) float32 with contiguous rows");
  const int64_t N = gu.size(0), st = gu.stride(0);
  auto out = at::empty({N, W}, gu.options());
  const float* p = gu.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, N, 8, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* g = p + n * st;
      const float* u = g + W;
      float* y = o + n * W;
#pragma omp simd
      for (int64_t j = 0; j < W; ++j) {
        const float x = g[j];
        y[j] = x / (1.0f + std::exp(-x)) * u[j];
      }
    }
  });
  return out;
}

// RMSNorm of rows: x (N, E) with contiguous rows -> x * (1 / sqrt(mean(x^2) + eps)) * weight, in
// torch's order of the two products.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1 && x.scalar_type() == at::kFloat,
              "rms_norm: x must be (N, E) float32 with contiguous rows");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(1) && weight.is_contiguous() &&
                  weight.scalar_type() == at::kFloat,
              "rms_norm: weight must be (E) float32");
  const int64_t N = x.size(0), E = x.size(1), st = x.stride(0);
  auto out = at::empty({N, E}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float e = static_cast<float>(eps);
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(E, 1));  // rows per thread
  at::parallel_for(0, N, grain, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* a = xp + n * st;
      float* y = op + n * E;
      float squares = 0.f;
#pragma omp simd reduction(+ : squares)
      for (int64_t j = 0; j < E; ++j) squares += a[j] * a[j];
      const float r = 1.f / std::sqrt(squares / static_cast<float>(E) + e);
#pragma omp simd
      for (int64_t j = 0; j < E; ++j) y[j] = (a[j] * r) * w[j];
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(grpo_desktop, m) {
  m.def(
      "rope_attend(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) keys, Tensor(b!) values, int L, "
      "int heads, int kv_heads, float scaling, Tensor? blocked) -> Tensor",
      &rope_attend);
  m.def("silu_mul(Tensor gu, int width) -> Tensor", &silu_mul);
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor", &rms_norm);
}
