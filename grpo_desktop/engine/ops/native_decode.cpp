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

#include "native_products.h"
#include "native_vec.h"

namespace {

// The decode attention's two products for the query heads of one key/value head, which read
// the same matrix: each load of it feeds every head, and the heads' sums (several blocks of 16
// outputs each) are independent chains, so no add waits for the one before it (one head and 16
// outputs at a time waited on every add, and loaded the matrix once per head). Each output is
// one sum over its terms in order (from 0, a rounded product then a rounded sum per term, as a
// plain loop): the same bits however the outputs are blocked.
typedef float vf16 __attribute__((vector_size(64), aligned(4)));  // 16 floats, any alignment

inline vf16 load16(const float* p) {
  vf16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// A key or value matrix of one head: a row's own, and where the row shares its prompt with
// another (`decode_step`'s lead rows: a group's answers), that row's copy, the same numbers:
// read by every row of the group, it stays in the cache (each row's own copy came from memory).
// `lead` may be used for outputs j < lead_cols (the scores: positions of the prompt) or terms
// i < lead_rows (the values: positions of the prompt).
struct HeadMatrix {
  const float* own;
  const float* lead;
  int64_t stride, lead_cols, lead_rows;
};

// out[g * ldo + j0 + j] = sum over i < n of a[g * lda + i] * M[i * stride + j0 + j], for the
// G heads g and j < 16 NV; terms i < split read lo, the others hi (the same numbers).
template <int G, int NV>
void heads_block(const float* a, int64_t lda, int64_t n, const float* lo, int64_t split,
                 const float* hi, int64_t stride, int64_t j0, float* out, int64_t ldo) {
  vf16 acc[G][NV];
  for (int g = 0; g < G; ++g)
    for (int v = 0; v < NV; ++v) acc[g][v] = vf16{};
  for (int64_t i = 0; i < n; ++i) {
    const float* M = i < split ? lo : hi;
    vf16 x[NV];
    for (int v = 0; v < NV; ++v) x[v] = load16(M + i * stride + j0 + 16 * v);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const float s = a[g * lda + i];
      for (int v = 0; v < NV; ++v) acc[g][v] = acc[g][v] + s * x[v];
    }
  }
  for (int g = 0; g < G; ++g)
    for (int v = 0; v < NV; ++v) std::memcpy(out + g * ldo + j0 + 16 * v, &acc[g][v], sizeof(vf16));
}

template <int G, int NV>
void heads_block_of(const float* a, int64_t lda, int64_t n, const HeadMatrix& M, int64_t j0,
                    float* out, int64_t ldo) {
  if (j0 + 16 * NV <= M.lead_cols)  // every output a position of the prompt
    heads_block<G, NV>(a, lda, n, M.lead, n, M.own, M.stride, j0, out, ldo);
  else
    heads_block<G, NV>(a, lda, n, M.lead, M.lead_rows, M.own, M.stride, j0, out, ldo);
}

template <int G>
void heads_blocks(const float* a, int64_t lda, int64_t n, const HeadMatrix& M, int64_t m, float* out,
                  int64_t ldo) {
  int64_t j0 = 0;
  if constexpr (G <= 4) {  // at most 16 accumulators (of 32 vector registers)
    for (; j0 + 64 <= m; j0 += 64) heads_block_of<G, 4>(a, lda, n, M, j0, out, ldo);
  }
  for (; j0 + 32 <= m; j0 += 32) heads_block_of<G, 2>(a, lda, n, M, j0, out, ldo);
  for (; j0 < m; j0 += 16) heads_block_of<G, 1>(a, lda, n, M, std::min(j0, m - 16), out, ldo);
}

// For heads g < G: out[g * ldo + j] = sum over i < n of a[g * lda + i] * M[i * stride + j], j < m.
// Blocks of 64 (for at most 4 heads), 32, then 16 outputs, the last ending at m (the outputs it
// shares with the block before get the same sums again); under 16 outputs, a running sum in
// `out` (from the row's own matrix).
void heads_times(const float* a, int64_t lda, int64_t n, const HeadMatrix& M, int64_t m, int64_t G,
                 float* out, int64_t ldo) {
  if (m < 16) {
    for (int64_t g = 0; g < G; ++g) {
      float* o = out + g * ldo;
      for (int64_t j = 0; j < m; ++j) o[j] = 0.f;
      for (int64_t i = 0; i < n; ++i) {
        const float ai = a[g * lda + i];
        const float* row = M.own + i * M.stride;
        for (int64_t j = 0; j < m; ++j) o[j] += ai * row[j];
      }
    }
    return;
  }
  for (int64_t g0 = 0; g0 < G; g0 += 8) {  // 8 heads at a time
    const float* ag = a + g0 * lda;
    float* og = out + g0 * ldo;
    switch (std::min<int64_t>(8, G - g0)) {
#define GRPO_HEADS(NG)                              \
  case NG:                                          \
    heads_blocks<NG>(ag, lda, n, M, m, og, ldo);    \
    break;
      GRPO_HEADS(1) GRPO_HEADS(2) GRPO_HEADS(3) GRPO_HEADS(4)
      GRPO_HEADS(5) GRPO_HEADS(6) GRPO_HEADS(7) GRPO_HEADS(8)
#undef GRPO_HEADS
    }
  }
}

// One head x (D = 2 half) rotated: torch's x * cos + roll(x, half) * sin, rounded as it rounds
// (two products, then their sum), in two halves (an index modulo D cost a division each).
inline void rotate(const float* x, const float* c, const float* s, int64_t half, float* out) {
#pragma omp simd
  for (int64_t j = 0; j < half; ++j) {
    const float a = x[j] * c[j];
    const float b = x[j + half] * s[j];
    out[j] = a + b;
  }
#pragma omp simd
  for (int64_t j = half; j < 2 * half; ++j) {
    const float a = x[j] * c[j];
    const float b = x[j - half] * s[j];
    out[j] = a + b;
  }
}

// One row's key/value heads [kh0, kh1) for `rope_attend` (one at a time) and `decode_step` (all):
// each key rotated and written at position L - 1 of its K (D, >= L; rows k2 apart; head kh at
// K0 + kh k1), each value at row L - 1 of its V (>= L, D; rows v2 apart; V0 + kh v1), then their
// query heads attended over positions [0, L) into out_row (H * D). row: the token's qkv
// (H + 2 Hkv, D); c, s: its angles (D); mask: its blocked positions (b3 apart) or null; buffer:
// H * (L + D) + D floats; lead_K0, lead_V0: another row's K0 and V0 whose positions [0, shared)
// hold the same keys and values (HeadMatrix), else K0 and V0 themselves. Not inlined: one
// compiled copy for both callers, so both round alike.
__attribute__((noinline)) void attend_heads(const float* row, const float* c, const float* s,
                                            float* K0, int64_t k1, int64_t k2, float* V0, int64_t v1,
                                            int64_t v2, int64_t L, int64_t H, int64_t Hkv, int64_t D,
                                            int64_t kh0, int64_t kh1, const bool* mask, int64_t b3,
                                            float sc, float* buffer, float* out_row,
                                            const float* lead_K0, const float* lead_V0, int64_t shared) {
  const int64_t G = H / Hkv, half = D / 2, h0 = kh0 * G, nq = (kh1 - kh0) * G;
  float* all_scores = buffer;      // (nq, L)
  float* q = buffer + nq * L;      // (nq, D) the query heads, rotated
  float* rotated = q + nq * D;     // (D) a key head, rotated
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    rotate(row + (H + kh) * D, c, s, half, rotated);
    float* K = K0 + kh * k1;
    for (int64_t d = 0; d < D; ++d) K[d * k2 + L - 1] = rotated[d];
    const float* vx = row + (H + Hkv + kh) * D;
    float* V = V0 + kh * v1;
    for (int64_t d = 0; d < D; ++d) V[(L - 1) * v2 + d] = vx[d];
  }
  for (int64_t h = 0; h < nq; ++h) {
    rotate(row + (h0 + h) * D, c, s, half, q + h * D);
  }
  for (int64_t kh = kh0; kh < kh1; ++kh) {  // the scores: its heads' q times its K (D, L)
    const int64_t b0 = (kh - kh0) * G;
    const HeadMatrix K{K0 + kh * k1, lead_K0 + kh * k1, k2, shared, 0};
    heads_times(q + b0 * D, D, D, K, L, G, all_scores + b0 * L, L);
  }
  for (int64_t h = 0; h < nq; ++h) {
    float* scores = all_scores + h * L;
    float top = kBlocked;
    for (int64_t l = 0; l < L; ++l) {
      float x = scores[l] * sc;
      if (mask && mask[l * b3]) x = kBlocked;
      scores[l] = x;
      top = x > top ? x : top;
    }
#pragma omp simd
    for (int64_t l = 0; l < L; ++l) scores[l] = std::exp(scores[l] - top);
    // Their sum in a fixed order (16 running sums, then the rest), whatever the buffer's
    // alignment: a vectorised reduction's grouping follows the alignment it peels for.
    vf16 part = vf16{};
    int64_t l = 0;
    for (; l + 16 <= L; l += 16) part = part + load16(scores + l);
    float sum = 0.f;
    for (int i = 0; i < 16; ++i) sum += part[i];
    for (; l < L; ++l) sum += scores[l];
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
  }
  for (int64_t kh = kh0; kh < kh1; ++kh) {  // its heads' probabilities times its V (L, D)
    const int64_t b0 = (kh - kh0) * G;
    const HeadMatrix V{V0 + kh * v1, lead_V0 + kh * v1, v2, 0, shared};
    heads_times(all_scores + b0 * L, L, L, V, D, G, out_row + (h0 + b0) * D, D);
  }
}

// A decode's `blocked` (N, 1, 1, >= L) bool or None: its data and row / position strides, checked
// for `op`'s message; {nullptr, 0, 0} without one.
struct Blocked {
  const bool* data;
  int64_t row, position;
};

Blocked blocked_positions(const c10::optional<at::Tensor>& blocked, int64_t N, int64_t L,
                          const char* op) {
  if (!blocked.has_value() || !blocked->defined()) return {nullptr, 0, 0};
  TORCH_CHECK(blocked->scalar_type() == at::kBool && blocked->dim() == 4 && blocked->size(0) == N &&
                  blocked->size(3) >= L,
              op, ": blocked must be (N, 1, 1, >= L) bool");
  return {blocked->data_ptr<bool>(), blocked->stride(0), blocked->stride(3)};
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
  auto out = at::empty({N, H * D}, qkv.options());
  const float* qp = qkv.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  const int64_t cs = cos.stride(0), ss = sin.stride(0);
  float* kp = keys.data_ptr<float>();
  float* vp = values.data_ptr<float>();
  const int64_t k0 = keys.stride(0), k1 = keys.stride(1), k2 = keys.stride(2);
  const int64_t v0 = values.stride(0), v1 = values.stride(1), v2 = values.stride(2);
  const auto [bp, b0, b3] = blocked_positions(blocked, N, L, "rope_attend");
  const float sc = static_cast<float>(scaling);
  float* op = out.data_ptr<float>();
  // Whole rows to a thread (their heads' sums side by side) when there are rows for every
  // thread, else each key/value head apart: the same bits either way.
  const int64_t per = N >= at::get_num_threads() ? Hkv : 1;
  at::parallel_for(0, N * Hkv / per, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> buffer(H * (L + D) + D);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t n = r * per / Hkv, kh = r * per % Hkv;
      attend_heads(qp + n * R * D, cp + n * cs, sp + n * ss, kp + n * k0, k1, k2, vp + n * v0, v1,
                   v2, L, H, Hkv, D, kh, kh + per, bp ? bp + n * b0 : nullptr, b3, sc, buffer.data(),
                   op + n * H * D, kp + n * k0, vp + n * v0, 0);
    }
  });
  return out;
}

// One row of SwiGLU's gate: gu (2W) (gate then up) -> y (W). Not inlined: one copy (see
// attend_heads).
__attribute__((noinline)) void silu_row(const float* g, int64_t W, float* y) {
  const float* u = g + W;
#pragma omp simd
  for (int64_t j = 0; j < W; ++j) {
    const float x = g[j];
    y[j] = x / (1.0f + std::exp(-x)) * u[j];
  }
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
    for (int64_t n = begin; n < end; ++n) silu_row(p + n * st, W, o + n * W);
  });
  return out;
}

// One row's RMSNorm: a (E) -> y (E) = a * (1 / sqrt(mean(a^2) + e)) * w. Not inlined: one copy
// (see attend_heads).
__attribute__((noinline)) void norm_row(const float* a, const float* w, float e, int64_t E, float* y) {
  float squares = 0.f;
#pragma omp simd reduction(+ : squares)
  for (int64_t j = 0; j < E; ++j) squares += a[j] * a[j];
  const float r = 1.f / std::sqrt(squares / static_cast<float>(E) + e);
#pragma omp simd
  for (int64_t j = 0; j < E; ++j) y[j] = (a[j] * r) * w[j];
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
    for (int64_t n = begin; n < end; ++n) norm_row(xp + n * st, w, e, E, op + n * E);
  });
  return out;
}



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
  // not zeroed first: `transposed` writes every float of it that the products read
  std::unique_ptr<float[]> xt(new float[static_cast<size_t>(K) * 32 * ((M + 31) / 32)]);
  const std::vector<int64_t> chunk_rows = transposed(x.data_ptr<float>(), sx, M, K, xt.get());
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


#if defined(GRPO_PRODUCTS)
// ---- A whole decode step in one call: every layer and the output layer. ----
// What decode_script.py's NATIVE_SOURCE does with the ops above, op by op (the same functions,
// so the same bits), but each thread takes a block of rows through the whole step: no barrier
// between operations, and each row's activations, keys and values stay in one core's cache
// (split op by op, the products by weight rows and the rest by rows, each op read half its input
// from the other core's cache). Every thread reads all the weights; the step's products then
// run each thread's rows against them, which for 16 rows a thread costs no more than 32 rows
// against half of them (bench/README.md, "session 30").
//   h (N, E) contiguous: the token's embeddings, updated in place (the residual stream)
//   cos, sin, blocked, L, the heads, scaling: as rope_attend's
//   per layer: norms' weights and eps, the joined q/k/v, o, joined gate/up and down weights
//   (out, in) contiguous with optional biases, keys and values as rope_attend's
//   lead (N) or None: for each row, a row whose keys and values at positions [0, shared) are
//   the same numbers (its group's prompt): the attention reads those there, so a group's rows
//   read one copy of their prompt's keys and values, from the cache (bench/README.md,
//   "session 30")
// Returns the logits (N, V).
struct StepLayer {
  const float *in_norm, *post_norm, *qkv_w, *qkv_b, *o_w, *o_b, *gu_w, *gu_b, *down_w, *down_b;
  float* keys;
  float* values;
  int64_t k0, k1, k2, v0, v1, v2;
  float eps;
};

const float* optional_data(const std::optional<at::Tensor>& t, int64_t n, const char* what) {
  if (!t.has_value() || !t->defined()) return nullptr;
  TORCH_CHECK(t->dim() == 1 && t->size(0) == n && t->is_contiguous() && t->scalar_type() == at::kFloat,
              "decode_step: ", what, " bias must be (", n, ") contiguous float32");
  return t->data_ptr<float>();
}

const float* weight_data(const at::Tensor& w, int64_t rows, int64_t cols, const char* what) {
  TORCH_CHECK(w.dim() == 2 && w.size(0) == rows && w.size(1) == cols && w.is_contiguous() &&
                  w.scalar_type() == at::kFloat,
              "decode_step: ", what, " weight must be (", rows, ", ", cols, ") contiguous float32");
  return w.data_ptr<float>();
}

// h (M, E) rows += x (M, E) rows, as torch's add_.
void add_rows(float* h, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) h[j] = h[j] + x[j];
}

at::Tensor decode_step(at::Tensor h, const at::Tensor& cos, const at::Tensor& sin,
                       const std::optional<at::Tensor>& blocked, int64_t L, at::TensorList input_norms,
                       at::TensorList post_norms, at::ArrayRef<double> eps, at::TensorList qkv_w,
                       const c10::List<std::optional<at::Tensor>>& qkv_b, at::TensorList o_w,
                       const c10::List<std::optional<at::Tensor>>& o_b, at::TensorList gate_up_w,
                       const c10::List<std::optional<at::Tensor>>& gate_up_b, at::TensorList down_w,
                       const c10::List<std::optional<at::Tensor>>& down_b, at::TensorList keys,
                       at::TensorList values, int64_t H, int64_t Hkv, int64_t D, int64_t F,
                       double scaling, const at::Tensor& norm_w, double norm_eps,
                       const at::Tensor& head_w, const std::optional<at::Tensor>& head_b,
                       const std::optional<at::Tensor>& lead, int64_t shared) {
  TORCH_CHECK(h.dim() == 2 && h.is_contiguous() && h.scalar_type() == at::kFloat,
              "decode_step: h must be (N, E) contiguous float32");
  const int64_t N = h.size(0), E = h.size(1), nl = static_cast<int64_t>(qkv_w.size());
  const int64_t R = H + 2 * Hkv, V = head_w.size(0);
  TORCH_CHECK(Hkv > 0 && H % Hkv == 0 && D % 2 == 0 && L >= 1, "decode_step: head counts or L");
  TORCH_CHECK(cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat && cos.dim() == 3 &&
                  sin.dim() == 3 && cos.size(0) == N && sin.size(0) == N && cos.size(-1) == D &&
                  sin.size(-1) == D && cos.stride(-1) == 1 && sin.stride(-1) == 1,
              "decode_step: cos and sin must be (N, 1, D) float32");
  const size_t n = static_cast<size_t>(nl);
  TORCH_CHECK(input_norms.size() == n && post_norms.size() == n && eps.size() == n && qkv_b.size() == n &&
                  o_w.size() == n && o_b.size() == n && gate_up_w.size() == n && gate_up_b.size() == n &&
                  down_w.size() == n && down_b.size() == n && keys.size() == n && values.size() == n,
              "decode_step: one entry per layer in every list");
  std::vector<StepLayer> layers(n);
  for (size_t i = 0; i < n; ++i) {
    StepLayer& s = layers[i];
    s.in_norm = weight_data(input_norms[i].view({1, -1}), 1, E, "input norm");
    s.post_norm = weight_data(post_norms[i].view({1, -1}), 1, E, "post-attention norm");
    s.eps = static_cast<float>(eps[i]);
    s.qkv_w = weight_data(qkv_w[i], R * D, E, "q/k/v");
    s.qkv_b = optional_data(qkv_b.get(i), R * D, "q/k/v");
    s.o_w = weight_data(o_w[i], E, H * D, "o");
    s.o_b = optional_data(o_b.get(i), E, "o");
    s.gu_w = weight_data(gate_up_w[i], 2 * F, E, "gate/up");
    s.gu_b = optional_data(gate_up_b.get(i), 2 * F, "gate/up");
    s.down_w = weight_data(down_w[i], E, F, "down");
    s.down_b = optional_data(down_b.get(i), E, "down");
    const at::Tensor &k = keys[i], &v = values[i];
    TORCH_CHECK(k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat && k.dim() == 4 &&
                    v.dim() == 4 && k.size(0) == N && k.size(1) == Hkv && k.size(2) == D && k.size(3) >= L &&
                    v.size(0) == N && v.size(1) == Hkv && v.size(2) >= L && v.size(3) == D &&
                    k.stride(3) == 1 && v.stride(3) == 1,
                "decode_step: keys must be (N, Hkv, D, >= L) and values (N, Hkv, >= L, D) float32");
    s.keys = k.data_ptr<float>();
    s.values = v.data_ptr<float>();
    s.k0 = k.stride(0), s.k1 = k.stride(1), s.k2 = k.stride(2);
    s.v0 = v.stride(0), s.v1 = v.stride(1), s.v2 = v.stride(2);
  }
  const float* nw = weight_data(norm_w.view({1, -1}), 1, E, "final norm");
  const float* hw = weight_data(head_w, V, E, "output layer");
  const float* hb = optional_data(head_b, V, "output layer");
  const auto [bp, b0, b3] = blocked_positions(blocked, N, L, "decode_step");
  const int64_t* lp_rows = nullptr;  // each row's lead: a row with its first `shared` positions
  if (lead.has_value() && lead->defined()) {
    TORCH_CHECK(lead->scalar_type() == at::kLong && lead->dim() == 1 && lead->size(0) == N &&
                    lead->is_contiguous() && shared >= 0 && shared < L,
                "decode_step: lead must be (N) int64 row indices and shared under L");
    lp_rows = lead->data_ptr<int64_t>();
    for (int64_t r = 0; r < N; ++r)
      TORCH_CHECK(lp_rows[r] >= 0 && lp_rows[r] < N, "decode_step: lead rows must be under N");
  }
  auto logits = at::empty({N, V}, h.options());
  if (N == 0) return logits;
  float* hp = h.data_ptr<float>();
  float* lp = logits.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  const int64_t cs = cos.stride(0), ss = sin.stride(0);
  const float sc = static_cast<float>(scaling), ne = static_cast<float>(norm_eps);
  const int64_t widest = std::max({E, H * D, F});  // the products' inputs
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    const int64_t M = end - begin, chunks = (M + 31) / 32;
    // this thread's rows: normed input, q/k/v, attended, gate/up, gated, a product's output;
    // x transposed; the attention's scores. One block, not zeroed: each part is written before
    // it is read.
    const int64_t sizes[] = {M * E, M * R * D, M * H * D, M * 2 * F, M * F, M * E,
                             widest * 32 * chunks, H * (L + D) + D};
    int64_t total = 0;
    for (const int64_t n : sizes) total += n;
    std::unique_ptr<float[]> scratch(new float[total]);
    float* parts[8];
    int64_t offset = 0;
    for (int i = 0; i < 8; offset += sizes[i], ++i) parts[i] = scratch.get() + offset;
    float *x = parts[0], *qkv = parts[1], *att = parts[2], *gu = parts[3], *gated = parts[4],
          *y = parts[5], *xt = parts[6], *buffer = parts[7];
    float* hr = hp + begin * E;
    auto product = [&](const float* in, int64_t K, const float* w, const float* b, int64_t out_n,
                       float* out) {
      const std::vector<int64_t> rows = transposed(in, K, M, K, xt);
      product_rows(xt, rows, K, w, b, out, out_n, 0, out_n);
    };
    for (const StepLayer& s : layers) {
      for (int64_t m = 0; m < M; ++m) norm_row(hr + m * E, s.in_norm, s.eps, E, x + m * E);
      product(x, E, s.qkv_w, s.qkv_b, R * D, qkv);
      for (int64_t m = 0; m < M; ++m) {
        const int64_t r = begin + m, lr = lp_rows ? lp_rows[r] : r;
        attend_heads(qkv + m * R * D, cp + r * cs, sp + r * ss, s.keys + r * s.k0, s.k1, s.k2,
                     s.values + r * s.v0, s.v1, s.v2, L, H, Hkv, D, 0, Hkv, bp ? bp + r * b0 : nullptr,
                     b3, sc, buffer, att + m * H * D, s.keys + lr * s.k0,
                     s.values + lr * s.v0, shared);
      }
      product(att, H * D, s.o_w, s.o_b, E, y);
      add_rows(hr, y, M * E);
      for (int64_t m = 0; m < M; ++m) norm_row(hr + m * E, s.post_norm, s.eps, E, x + m * E);
      product(x, E, s.gu_w, s.gu_b, 2 * F, gu);
      for (int64_t m = 0; m < M; ++m) silu_row(gu + m * 2 * F, F, gated + m * F);
      product(gated, F, s.down_w, s.down_b, E, y);
      add_rows(hr, y, M * E);
    }
    for (int64_t m = 0; m < M; ++m) norm_row(hr + m * E, nw, ne, E, x + m * E);
    product(x, E, hw, hb, V, lp + begin * V);
  });
  return logits;
}
#endif  // GRPO_PRODUCTS

}  // namespace

TORCH_LIBRARY(grpo_desktop, m) {
  m.def(
      "rope_attend(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) keys, Tensor(b!) values, int L, "
      "int heads, int kv_heads, float scaling, Tensor? blocked) -> Tensor",
      &rope_attend);
  m.def("silu_mul(Tensor gu, int width) -> Tensor", &silu_mul);
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor", &rms_norm);
  m.def("linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor", &linear);
#if defined(GRPO_PRODUCTS)
  m.def(
      "decode_step(Tensor(a!) h, Tensor cos, Tensor sin, Tensor? blocked, int L, Tensor[] input_norms, "
      "Tensor[] post_norms, float[] eps, Tensor[] qkv_w, Tensor?[] qkv_b, Tensor[] o_w, Tensor?[] o_b, "
      "Tensor[] gate_up_w, Tensor?[] gate_up_b, Tensor[] down_w, Tensor?[] down_b, Tensor(b!)[] keys, "
      "Tensor(c!)[] values, int heads, int kv_heads, int head_dim, int width, float scaling, "
      "Tensor norm_w, float norm_eps, Tensor head_w, Tensor? head_b, Tensor? lead=None, int shared=0) -> Tensor",
      &decode_step);
#endif
}
