// Fused CPU kernels for one decode step of the lean decoder (engine/sampling/decode.py and
// decode_script.py), compiled on the user's machine by engine/ops/native.py. Why they exist: a
// decode step of a small model is mostly small operations, each a pass over memory and a call;
// these do a layer's rotary embedding, key/value writes and attention in one pass per row and
// key/value head, SwiGLU's SiLU and product in one, and RMSNorm in one (torch's CPU rms_norm
// is five operations); and the step's matrix products (`linear`), which MKL runs slowly for a
// decode's few rows. Results equal torch's operations up to float rounding
// (tests/engine/ops/test_native.py); the keys and values written are torch's bits.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <memory>
#include <vector>

#include "native_vec.h"

namespace {

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


// ---- Products for the decode's few rows: x (M, K) · weight (N, K)^T (+ bias) -> (M, N). ----
// MKL's product, tuned for many rows, runs a decode step's 32 rows at 80-120 GFLOP/s on two
// Zen 4 cores where its large products run 200 (bench/kernel_levels.py). Here the rows are the
// vector: x is transposed into chunks of 32 rows (K, 32) (the last one 16 or 8 wide when it has
// that few), and each weight row's elements are broadcast against them, several weight rows at a
// time, so their accumulators stay in registers over the whole of K. Every output is one sum
// over k = 0, 1, ... (from its bias, else 0) with a fused multiply-add per term: the same bits
// whatever M, the thread count or the tile an output falls in; they differ from MKL's (blocked
// sums) by float rounding, as MKL's own differ between row counts. Builds for CPUs without AVX2
// and FMA (x86-64-v2: before 2013) run torch's product instead: there, in 4-float vectors
// without fused multiply-adds, this was 4-15x slower than MKL's.
#if defined(__AVX2__) && defined(__FMA__)
#define GRPO_PRODUCTS 1
typedef float vec16 __attribute__((vector_size(64), aligned(4)));  // 16 floats, any alignment
typedef float vec8 __attribute__((vector_size(32), aligned(4)));

// acc + s * x in one rounding, written out: the file's -ffp-contract=off keeps the compiler from
// fusing a product and a sum itself.
#if defined(__AVX512F__)
inline vec16 mul_add(float s, vec16 x, vec16 acc) {
  return (vec16)_mm512_fmadd_ps(_mm512_set1_ps(s), (__m512)x, (__m512)acc);
}
#endif

inline vec8 mul_add(float s, vec8 x, vec8 acc) {
  return (vec8)_mm256_fmadd_ps(_mm256_set1_ps(s), (__m256)x, (__m256)acc);
}

// The width of a chunk of `rows` rows in x transposed: 32, 16 or 8 floats a k.
inline int64_t chunk_width(int64_t rows) { return rows > 16 ? 32 : rows > 8 ? 16 : 8; }

// Weight rows go to the tiles 12 at a time (kTileRows; fewer only at the end of a thread's
// range, one by one there).
constexpr int kTileRows = 12;

// acc[j][v] = bias[j] + sum over k of w_j[k] * xt[k][n v .. n v + n) for vectors V of n floats,
// then out[m][j] for the chunk's m < rows. xt: (K, n MV) floats; w: R rows of K floats, `ldw`
// apart.
template <int R, int MV, typename V>
void product_tile(
    const float* xt, int64_t K, const float* w, int64_t ldw, const float* bias, float* out,
    int64_t ldo, int64_t rows) {
  constexpr int n = sizeof(V) / sizeof(float);
  V acc[R][MV];
  const float* wr[R];
  for (int j = 0; j < R; ++j) {
    wr[j] = w + j * ldw;
    for (int v = 0; v < MV; ++v) acc[j][v] = V{} + (bias ? bias[j] : 0.f);
  }
  for (int64_t k = 0; k < K; ++k) {
    V x[MV];
#pragma GCC unroll 4
    for (int v = 0; v < MV; ++v) std::memcpy(&x[v], xt + (k * MV + v) * n, sizeof(V));
#pragma GCC unroll 12
    for (int j = 0; j < R; ++j) {
      const float s = wr[j][k];
#pragma GCC unroll 4
      for (int v = 0; v < MV; ++v) acc[j][v] = mul_add(s, x[v], acc[j][v]);
    }
  }
  for (int j = 0; j < R; ++j)
    for (int v = 0; v < MV; ++v)
      for (int i = 0; i < n && v * n + i < rows; ++i) out[(v * n + i) * ldo + j] = acc[j][v][i];
}

// kTileRows weight rows against a chunk of `rows` rows of x transposed (chunk_width wide), or
// (`single`) one weight row. With AVX-512 (32 registers of 16 floats) one tile of 12 rows x 32
// (24 accumulators), 16 or 8; without (16 registers of 8) tiles of 3 x 32, 6 x 16 or 12 x 8
// rows (12 accumulators; more and GCC keeps them in memory).
inline void rows_tile(const float* xt, int64_t K, const float* w, const float* bias, float* out,
                      int64_t ldo, int64_t rows, bool single) {
#define GRPO_TILE(R, MV, V)                                                                  \
  for (int t = 0; t < (single ? 1 : kTileRows / R); ++t) {                                   \
    const float* b = bias ? bias + t * R : nullptr;                                          \
    if (single) {                                                                            \
      product_tile<1, MV, V>(xt, K, w, K, b, out, ldo, rows);                                \
    } else {                                                                                 \
      product_tile<R, MV, V>(xt, K, w + t * R * K, K, b, out + t * R, ldo, rows);            \
    }                                                                                        \
  }
#if defined(__AVX512F__)
  if (rows > 16) {
    GRPO_TILE(12, 2, vec16)
  } else if (rows > 8) {
    GRPO_TILE(12, 1, vec16)
  } else {
    GRPO_TILE(12, 1, vec8)
  }
#else
  if (rows > 16) {
    GRPO_TILE(3, 4, vec8)
  } else if (rows > 8) {
    GRPO_TILE(6, 2, vec8)
  } else {
    GRPO_TILE(12, 1, vec8)
  }
#endif
#undef GRPO_TILE
}

// Weight rows [n0, n1) for every chunk of rows: kTileRows at a time, then one by one. They write
// into a panel of kPanel columns, copied to `out` row by row: written straight there, a tile's
// 32 short stores land 4*N bytes apart, in one set of the L1 cache when N is a multiple of
// 1024 (the demo's gate/up: 1.5x slower on one thread).
constexpr int64_t kPanel = 8 * kTileRows;

void product_rows(const float* xt, const std::vector<int64_t>& chunk_rows, int64_t K, const float* w,
                  const float* bias, float* out, int64_t N, int64_t n0, int64_t n1) {
  float panel[32 * kPanel];
  for (int64_t p0 = n0; p0 < n1; p0 += kPanel) {
    const int64_t p1 = std::min(n1, p0 + kPanel);
    const float* chunk = xt;
    for (size_t c = 0; c < chunk_rows.size(); ++c) {
      const int64_t rows = chunk_rows[c];
      for (int64_t n = p0; n < p1;) {
        const bool full = n + kTileRows <= p1;
        const float* b = bias ? bias + n : nullptr;
        float* o = panel + (n - p0);
        rows_tile(chunk, K, w + n * K, b, o, kPanel, rows, !full);
        n += full ? kTileRows : 1;
      }
      for (int64_t i = 0; i < rows; ++i)
        std::memcpy(out + (static_cast<int64_t>(c) * 32 + i) * N + p0, panel + i * kPanel,
                    sizeof(float) * (p1 - p0));
      chunk += K * chunk_width(rows);
    }
  }
}

#endif  // AVX2 and FMA

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1 && x.scalar_type() == at::kFloat,
              "linear: x must be (M, K) float32 with contiguous rows");
  TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous() && weight.scalar_type() == at::kFloat &&
                  weight.size(1) == x.size(1),
              "linear: weight must be (N, K) contiguous float32, K as x's");
  const float* b = nullptr;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == weight.size(0) && bias->is_contiguous() &&
                    bias->scalar_type() == at::kFloat,
                "linear: bias must be (N) contiguous float32");
    b = bias->data_ptr<float>();
  }
#if !defined(GRPO_PRODUCTS)
  (void)b;  // checked above all the same
  return at::linear(x, weight, bias);
#else
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0), sx = x.stride(0);
  auto out = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return out;
  // x transposed, chunk by chunk of 32 rows, padded with zero rows to chunk_width: chunk c is
  // (K, 32), the last one (K, 16) or (K, 8) when it has that few rows.
  std::vector<int64_t> chunk_rows;
  for (int64_t m = 0; m < M; m += 32) chunk_rows.push_back(std::min<int64_t>(32, M - m));
  // not zeroed first: the loop below writes every float of it, padding included
  std::unique_ptr<float[]> xt(new float[static_cast<size_t>(K) * 32 * chunk_rows.size()]);
  const float* xp = x.data_ptr<float>();
  float* to = xt.get();
  for (size_t c = 0; c < chunk_rows.size(); ++c) {
    const int64_t width = chunk_width(chunk_rows[c]), rows = chunk_rows[c];
    const float* from = xp + static_cast<int64_t>(c) * 32 * sx;
    // 16 k at a time, row by row: each cache line of x read once, the writes within a block of
    // 16 x width floats (k outer instead rereads a row's line 16 times, and the 32 rows' lines
    // share an L1 set when 4K bytes is a multiple of 4096: K 1024 ran at 69 GFLOP/s)
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
      const int64_t ks = std::min<int64_t>(16, K - k0);
      for (int64_t i = 0; i < width; ++i) {
        if (i < rows) {
          for (int64_t k = 0; k < ks; ++k) to[k * width + i] = from[i * sx + k0 + k];
        } else {
          for (int64_t k = 0; k < ks; ++k) to[k * width + i] = 0.f;
        }
      }
      to += ks * width;
    }
  }
  const float* w = weight.data_ptr<float>();
  float* o = out.data_ptr<float>();
  // Threads take whole tiles of weight rows, at least 64k multiply-adds each (a thread's start
  // costs microseconds: a small model's products run on one).
  const int64_t tiles = (N + kTileRows - 1) / kTileRows;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, kTileRows * K * M));
  at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    product_rows(xt.get(), chunk_rows, K, w, b, o, N, begin * kTileRows,
                 std::min(N, end * kTileRows));
  });
  return out;
#endif
}

}  // namespace

TORCH_LIBRARY(grpo_desktop, m) {
  m.def(
      "rope_attend(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) keys, Tensor(b!) values, int L, "
      "int heads, int kv_heads, float scaling, Tensor? blocked) -> Tensor",
      &rope_attend);
  m.def("silu_mul(Tensor gu, int width) -> Tensor", &silu_mul);
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor", &rms_norm);
  m.def("linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor", &linear);
}
