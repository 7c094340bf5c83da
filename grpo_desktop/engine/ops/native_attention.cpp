// The log-prob and update passes' attention on the CPU, forward and backward, for
// engine/ops/fused_attention.py; compiled with native_decode.cpp into one library
// (engine/ops/native_build.py). Why: a GRPO pass attends each answer's ~60 tokens to its prompt
// and to itself, with a mask, at head widths of 32-128; torch's CPU flash-attention kernel is
// tiled for long sequences and, given a mask, computes every score and then masks it (forward
// 2.5-2.7 ms, backward 5.3-5.9 ms a layer on bench/vs_trl.py --quick's shapes). Here each
// query row reads only the keys its mask lets it see (from its first allowed key to its last),
// with the keys transposed once per row and key/value head so a block of queries' scores stays
// in vector registers, and the backward sums each key's and value's gradient over a chunk of
// query rows in registers, in the one task that owns that key/value head (no atomics, no
// reduction afterwards). Grouped heads (fewer key/value heads
// than query heads) are read in place. A query that may see no key gets zeros, as torch's.
// Results equal torch's scaled_dot_product_attention up to float rounding
// (tests/engine/ops/test_fused_attention.py).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <tuple>
#include <vector>

#include "native_vec.h"

namespace {

// The kernels need fused multiply-adds in vectors of 8 or 16 floats: builds for CPUs without AVX2
// and FMA (x86-64-v2) register no `attend`, and ops/fused_attention.py leaves the attention to
// torch there (these loops in 4-float vectors without fused multiply-adds were 7-12x slower).
#if defined(__AVX2__) && defined(__FMA__)
#define GRPO_ATTEND 1

// One vector register's floats, any alignment. Query rows handled together (kRows), vectors of
// keys per score block (kKeyVecs) and of a row's width per product slice (kSliceVecs): their
// accumulators fill the registers (AVX-512 has 32 of 16 floats, AVX2 16 of 8).
#if defined(__AVX512F__)
typedef float vec __attribute__((vector_size(64), aligned(4)));
constexpr int kLanes = 16, kRows = 4, kKeyVecs = 4, kSliceVecs = 4;
inline vec mul_add(float s, vec x, vec acc) {
  return (vec)_mm512_fmadd_ps(_mm512_set1_ps(s), (__m512)x, (__m512)acc);
}
#else
typedef float vec __attribute__((vector_size(32), aligned(4)));
constexpr int kLanes = 8, kRows = 4, kKeyVecs = 2, kSliceVecs = 2;
inline vec mul_add(float s, vec x, vec acc) {
  return (vec)_mm256_fmadd_ps(_mm256_set1_ps(s), (__m256)x, (__m256)acc);
}
#endif
constexpr int64_t kChunk = 32;  // query rows whose key and value gradients are summed together
// (acc + s * x in one rounding, written out: the file's -ffp-contract=off keeps the compiler
// from fusing a product and a sum itself.)

// Unaligned loads and stores as the instructions (a memcpy into a vector went through the stack
// in the AVX2 build: a store-forwarding stall on every load, 7x slower).
#if defined(__AVX512F__)
inline vec load(const float* p) { return (vec)_mm512_loadu_ps(p); }
inline void store(float* p, vec v) { _mm512_storeu_ps(p, (__m512)v); }
#else
inline vec load(const float* p) { return (vec)_mm256_loadu_ps(p); }
inline void store(float* p, vec v) { _mm256_storeu_ps(p, (__m256)v); }
#endif

// out[r][j .. j + kLanes W) = sum over d < D of a[r][d] * mt[d][j ..] for the kRows rows: scores
// (a = scaled queries, mt = keys transposed) or dout . v_j (a = dout, mt = values transposed).
template <int W>
inline void rows_by_columns(const float* const* a, int64_t D, const float* mt, int64_t Lp,
                            int64_t j, float* const* out) {
  vec acc[kRows][W];
  for (int r = 0; r < kRows; ++r)
    for (int w = 0; w < W; ++w) acc[r][w] = vec{};
  for (int64_t d = 0; d < D; ++d) {
    vec m[W];
    for (int w = 0; w < W; ++w) m[w] = load(mt + d * Lp + j + kLanes * w);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const float ar = a[r][d];
      for (int w = 0; w < W; ++w) acc[r][w] = mul_add(ar, m[w], acc[r][w]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int w = 0; w < W; ++w) store(out[r] + j + kLanes * w, acc[r][w]);
}

// The same for the columns [j0, j1) (multiples of 16, so of kLanes, inside mt's padded width).
void rows_by_matrix(const float* const* a, int64_t D, const float* mt, int64_t Lp, int64_t j0,
                    int64_t j1, float* const* out) {
  int64_t j = j0;
  for (; j + kLanes * kKeyVecs <= j1; j += kLanes * kKeyVecs)
    rows_by_columns<kKeyVecs>(a, D, mt, Lp, j, out);
  for (; j < j1; j += kLanes) rows_by_columns<1>(a, D, mt, Lp, j, out);
}

// out[r][c .. c + kLanes W) = sum over j in [j0, j1) of w[r][j] * rows[j][c ..] (rows `stride`
// apart): probabilities times values, or the scores' gradients times keys.
template <int W>
inline void weights_by_rows(const float* const* w, int64_t j0, int64_t j1, const float* rows,
                            int64_t stride, int64_t c, float* const* out) {
  vec acc[kRows][W];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < W; ++v) acc[r][v] = vec{};
  for (int64_t j = j0; j < j1; ++j) {
    vec x[W];
    for (int v = 0; v < W; ++v) x[v] = load(rows + j * stride + c + kLanes * v);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const float wr = w[r][j];
      for (int v = 0; v < W; ++v) acc[r][v] = mul_add(wr, x[v], acc[r][v]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < W; ++v) store(out[r] + c + kLanes * v, acc[r][v]);
}

// For all D columns (D a multiple of 16), kSliceVecs vectors at a time.
void weights_by_matrix(const float* const* w, int64_t j0, int64_t j1, const float* rows,
                       int64_t stride, int64_t D, float* const* out) {
  for (int64_t c = 0; c < D; c += kLanes * kSliceVecs) {
    switch (std::min<int64_t>(kSliceVecs, (D - c) / kLanes)) {
      case 4: weights_by_rows<4>(w, j0, j1, rows, stride, c, out); break;
      case 3: weights_by_rows<3>(w, j0, j1, rows, stride, c, out); break;
      case 2: weights_by_rows<2>(w, j0, j1, rows, stride, c, out); break;
      default: weights_by_rows<1>(w, j0, j1, rows, stride, c, out); break;
    }
  }
}

// g[j] += sum over rows r < n of w[r][j] * x[r] for j in [j0, j1) (w: rows Lp apart, x: rows
// of D floats, g: rows of D floats): the keys' and values' gradients for a chunk of query rows.
// Two keys and up to kSliceVecs vectors of their row at a time, summed over the rows in
// registers: a key's gradient row is read and written once per chunk, not once per block.
template <int W>
void keys_slice(const float* w, int64_t Lp, const float* x, int64_t n, const int64_t* ends,
                int64_t j0, int64_t j1, int64_t D, int64_t c, float* g) {
  int64_t j = j0;
  for (; j + 2 <= j1; j += 2) {
    vec acc[2][W];
    for (int v = 0; v < W; ++v) {
      acc[0][v] = load(g + j * D + c + kLanes * v);
      acc[1][v] = load(g + (j + 1) * D + c + kLanes * v);
    }
    // rows whose visible keys end at or before j see neither key (w = 0 there): skipped
    const int64_t r0 = ends ? std::upper_bound(ends, ends + n, j) - ends : 0;
    for (int64_t r = r0; r < n; ++r) {
      const float w0 = w[r * Lp + j], w1 = w[r * Lp + j + 1];
      const float* xr = x + r * D + c;
      for (int v = 0; v < W; ++v) {
        const vec xv = load(xr + kLanes * v);
        acc[0][v] = mul_add(w0, xv, acc[0][v]);
        acc[1][v] = mul_add(w1, xv, acc[1][v]);
      }
    }
    for (int v = 0; v < W; ++v) {
      store(g + j * D + c + kLanes * v, acc[0][v]);
      store(g + (j + 1) * D + c + kLanes * v, acc[1][v]);
    }
  }
  for (; j < j1; ++j) {
    vec acc[W];
    for (int v = 0; v < W; ++v) acc[v] = load(g + j * D + c + kLanes * v);
    const int64_t r0 = ends ? std::upper_bound(ends, ends + n, j) - ends : 0;
    for (int64_t r = r0; r < n; ++r)
      for (int v = 0; v < W; ++v) acc[v] = mul_add(w[r * Lp + j], load(x + r * D + c + kLanes * v), acc[v]);
    for (int v = 0; v < W; ++v) store(g + j * D + c + kLanes * v, acc[v]);
  }
}

// `ends`: each row's end of visible keys when they never decrease from row to row (causal and
// packed answers), else null.
void keys_update(const float* w, int64_t Lp, const float* x, int64_t n, const int64_t* ends,
                 int64_t j0, int64_t j1, int64_t D, float* g) {
  for (int64_t c = 0; c < D; c += kLanes * kSliceVecs) {
    switch (std::min<int64_t>(kSliceVecs, (D - c) / kLanes)) {
      case 4: keys_slice<4>(w, Lp, x, n, ends, j0, j1, D, c, g); break;
      case 3: keys_slice<3>(w, Lp, x, n, ends, j0, j1, D, c, g); break;
      case 2: keys_slice<2>(w, Lp, x, n, ends, j0, j1, D, c, g); break;
      default: keys_slice<1>(w, Lp, x, n, ends, j0, j1, D, c, g); break;
    }
  }
}

// out[(h G-index) Lq + i][d] = sc * x[h * sh + i * si + d] for the G heads and Lq queries of a
// task: its rows copied contiguous in one tight pass (their cache misses overlap, where reading
// each row when its block needs it waited for every one).
void gather_rows(const float* x, int64_t sh, int64_t si, int64_t G, int64_t Lq, int64_t D, float sc,
                 float* out) {
  for (int64_t h = 0; h < G; ++h)
    for (int64_t i = 0; i < Lq; ++i) {
      const float* row = x + h * sh + i * si;
      float* o = out + (h * Lq + i) * D;
      for (int64_t d = 0; d < D; ++d) o[d] = row[d] * sc;
    }
}

// Which keys query i of row b may see: [*start, *end), and `mask` (that row's Lk flags, true =
// attend) or null for every key in range. No mask: causal, aligned at the end (query i sees keys
// up to i + Lk - Lq).
struct Visible {
  const bool* mask;
  int64_t Bm, Lq, Lk;
  bool causal;

  const bool* row(int64_t b, int64_t i) const {
    return mask ? mask + ((Bm == 1 ? 0 : b) * Lq + i) * Lk : nullptr;
  }
  // [*start, *end) from the first to the last key the row may see; *m becomes null where it may
  // see every key in between (causal and prompt masks: no masking inside the range then).
  void range(const bool** m, int64_t i, int64_t* start, int64_t* end) const {
    int64_t s = 0, e = Lk;
    if (*m) {
      const void* last = memrchr(*m, 1, Lk);
      e = last ? static_cast<const bool*>(last) - *m + 1 : 0;
      const void* first = e ? std::memchr(*m, 1, e) : nullptr;
      s = first ? static_cast<const bool*>(first) - *m : e;
      if (s < e && std::memchr(*m + s, 0, e - s) == nullptr) *m = nullptr;
    } else if (causal) {
      e = std::min(Lk, i + Lk - Lq + 1);
    }
    *start = s;
    *end = e;
  }
};

// rows (L, D) with row stride `stride` -> out (D, Lp) (column j = row j), columns from L zeroed
void transpose_rows(const float* rows, int64_t L, int64_t D, int64_t stride, int64_t Lp, float* out) {
  for (int64_t d = 0; d < D; ++d) {
    float* o = out + d * Lp;
    for (int64_t j = 0; j < L; ++j) o[j] = rows[j * stride + d];
    for (int64_t j = L; j < Lp; ++j) o[j] = 0.f;
  }
}

void check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attend: q, k, v must be 4-d");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
                  v.scalar_type() == at::kFloat,
              "attend: float32 only");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1,
              "attend: each head's D values must be contiguous");
  TORCH_CHECK(k.sizes() == v.sizes() && k.size(0) == q.size(0) && k.size(3) == q.size(3),
              "attend: q (B, H, Lq, D), k and v (B, Hkv, Lk, D)");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "attend: H must be a multiple of Hkv");
  TORCH_CHECK(q.size(3) % 16 == 0 && q.size(3) > 0, "attend: D must be a multiple of 16");
}

Visible visible(const std::optional<at::Tensor>& allowed, const at::Tensor& q, const at::Tensor& k,
                bool causal) {
  const int64_t B = q.size(0), Lq = q.size(2), Lk = k.size(2);
  if (!allowed.has_value()) return Visible{nullptr, 1, Lq, Lk, causal};
  const at::Tensor& m = *allowed;
  TORCH_CHECK(m.scalar_type() == at::kBool && m.is_contiguous() && m.dim() == 4,
              "attend: the mask must be a contiguous bool (B or 1, 1, Lq, Lk)");
  TORCH_CHECK((m.size(0) == B || m.size(0) == 1) && m.size(1) == 1 && m.size(2) == Lq &&
                  m.size(3) == Lk,
              "attend: the mask must be (B or 1, 1, Lq, Lk)");
  return Visible{m.data_ptr<bool>(), m.size(0), Lq, Lk, false};
}

// A block of up to kRows queries i0 .. of one head: each row's visible keys, the block's
// columns [lo, hi) (hi a multiple of 16), and the rows' pointers (missing rows repeat the last
// one, their results go to scratch).
struct Block {
  int64_t n, lo, hi;
  int64_t start[kRows], end[kRows];
  const bool* mask[kRows];
};

Block block_of(const Visible& vis, int64_t b, int64_t i0, int64_t Lq) {
  Block blk;
  blk.n = std::min<int64_t>(kRows, Lq - i0);
  blk.lo = vis.Lk;
  int64_t hi = 0;
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = i0 + std::min<int64_t>(r, blk.n - 1);
    blk.mask[r] = vis.row(b, i);
    vis.range(&blk.mask[r], i, &blk.start[r], &blk.end[r]);
    if (r >= blk.n) blk.end[r] = blk.start[r];  // a repeated row sees nothing
    if (blk.start[r] < blk.end[r]) {
      blk.lo = std::min(blk.lo, blk.start[r]);
      hi = std::max(hi, blk.end[r]);
    }
  }
  blk.lo = blk.lo / 16 * 16;
  blk.hi = std::max(blk.lo, (hi + 15) / 16 * 16);
  return blk;
}

// Each row's scores outside its visible keys set to kBlocked, over the block's [lo, hi).
void mask_scores(const Block& blk, float* const* s) {
  for (int r = 0; r < kRows; ++r) {
    float* row = s[r];
    const int64_t a = std::max(blk.lo, std::min(blk.start[r], blk.hi));
    const int64_t e = std::max(a, std::min(blk.end[r], blk.hi));
    for (int64_t j = blk.lo; j < a; ++j) row[j] = kBlocked;
    for (int64_t j = e; j < blk.hi; ++j) row[j] = kBlocked;
    if (const bool* m = blk.mask[r])
      for (int64_t j = a; j < e; ++j) row[j] = m[j] ? row[j] : kBlocked;
  }
}

constexpr float kFloor = -80.f;

// p[r][j] = exp(s[r][j] - shift[r]) over [lo, hi) (masked scores give 0); 0 for a row that
// sees no key.
void exponentiate(const Block& blk, float* const* s, const float* shift, float* const* p) {
  for (int r = 0; r < kRows; ++r) {
    const float* row = s[r];
    float* out = p[r];
    const float c = shift[r];
    if (blk.start[r] >= blk.end[r]) {
      for (int64_t j = blk.lo; j < blk.hi; ++j) out[j] = 0.f;
      continue;
    }
    for (int64_t j = blk.lo; j < blk.hi; ++j) {
      // Arguments kept inside the vector exponential's fast range (below it the library
      // takes a scalar path per element); exp(-80) is 1.8e-35 of the largest term: 0 here.
      const float x = row[j] - c;
      const float e = std::exp(std::max(x, kFloor));
      out[j] = x > kFloor ? e : 0.f;
    }
  }
}

// out (B, Lq, H, D) and the log-sum-exp of each query's scores (B, H, Lq)
std::tuple<at::Tensor, at::Tensor> attend(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v,
                                          const std::optional<at::Tensor>& allowed, double scale,
                                          bool causal) {
  check(q, k, v);
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Lk = k.size(2), G = H / Hkv, Lp = (Lk + 15) / 16 * 16;
  const Visible vis = visible(allowed, q, k, causal);
  at::Tensor out = at::empty({B, Lq, H, D}, q.options());
  at::Tensor lse = at::empty({B, H, Lq}, q.options());
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  float *op = out.data_ptr<float>(), *lp = lse.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  at::parallel_for(0, B * Hkv, 1, [&](int64_t begin, int64_t stop) {
    std::vector<float> kt(D * Lp), qs(G * Lq * D), s(kRows * Lp), scratch(kRows * D);
    for (int64_t t = begin; t < stop; ++t) {
      const int64_t b = t / Hkv, g = t % Hkv;
      const float* kb = kp + b * k.stride(0) + g * k.stride(1);
      const float* vb = vp + b * v.stride(0) + g * v.stride(1);
      transpose_rows(kb, Lk, D, k.stride(2), Lp, kt.data());
      const float* qb = qp + b * q.stride(0) + g * G * q.stride(1);
      gather_rows(qb, q.stride(1), q.stride(2), G, Lq, D, sc, qs.data());
      for (int64_t h = g * G; h < (g + 1) * G; ++h) {
        for (int64_t i0 = 0; i0 < Lq; i0 += kRows) {
          const Block blk = block_of(vis, b, i0, Lq);
          const float* qa[kRows];
          float *sr[kRows], *orow[kRows], top[kRows], total[kRows];
          for (int r = 0; r < kRows; ++r) {
            const int64_t i = i0 + std::min<int64_t>(r, blk.n - 1);
            qa[r] = qs.data() + ((h - g * G) * Lq + i) * D;
            sr[r] = s.data() + r * Lp;
            orow[r] = r < blk.n ? op + ((b * Lq + i0 + r) * H + h) * D : scratch.data() + r * D;
          }
          rows_by_matrix(qa, D, kt.data(), Lp, blk.lo, blk.hi, sr);
          mask_scores(blk, sr);
          for (int r = 0; r < kRows; ++r) {
            const float* row = sr[r];
            float m = kBlocked;  // (a local: a running value in top[r] would not vectorise)
            for (int64_t j = blk.lo; j < blk.hi; ++j) m = std::max(m, row[j]);
            top[r] = m;
          }
          exponentiate(blk, sr, top, sr);
          weights_by_matrix(sr, blk.lo, std::min(blk.hi, Lk), vb, v.stride(2), D, orow);
          for (int r = 0; r < blk.n; ++r) {
            const float* row = sr[r];
            float sum = 0.f;
            for (int64_t j = blk.lo; j < blk.hi; ++j) sum += row[j];
            total[r] = sum;
            float* lse_i = lp + (b * H + h) * Lq + i0 + r;
            if (total[r] == 0.f) {  // sees no key: zeros, as torch's kernel gives
              std::fill(orow[r], orow[r] + D, 0.f);
              *lse_i = -kBlocked;
              continue;
            }
            const float inv = 1.f / total[r];
            for (int64_t d = 0; d < D; ++d) orow[r][d] *= inv;
            *lse_i = top[r] + std::log(total[r]);
          }
        }
      }
    }
  });
  return {out, lse};
}

// dq (B, Lq, H, D), dk and dv (B, Hkv, Lk, D) from dout (B, Lq, H, D) and the forward's out, lse
std::tuple<at::Tensor, at::Tensor, at::Tensor> attend_backward(
    const at::Tensor& dout_in, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& allowed,
    double scale, bool causal) {
  check(q, k, v);
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Lk = k.size(2), G = H / Hkv, Lp = (Lk + 15) / 16 * 16;
  TORCH_CHECK(out.is_contiguous() && lse.is_contiguous() && out.size(1) == Lq,
              "attend_backward: out (B, Lq, H, D) and lse (B, H, Lq) as attend gave them");
  const at::Tensor dout = dout_in.contiguous();
  TORCH_CHECK(dout.sizes() == out.sizes(), "attend_backward: dout must be out's shape");
  const Visible vis = visible(allowed, q, k, causal);
  at::Tensor dq = at::empty({B, Lq, H, D}, q.options());
  at::Tensor dk = at::zeros({B, Hkv, Lk, D}, q.options());
  at::Tensor dv = at::zeros({B, Hkv, Lk, D}, q.options());
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const float *op = out.data_ptr<float>(), *lp = lse.data_ptr<float>();
  const float* gp = dout.data_ptr<float>();
  float *dqp = dq.data_ptr<float>(), *dkp = dk.data_ptr<float>(), *dvp = dv.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  at::parallel_for(0, B * Hkv, 1, [&](int64_t begin, int64_t stop) {
    std::vector<float> kt(D * Lp), vt(D * Lp), qs(G * Lq * D), go(G * Lq * D), delta(G * Lq);
    // A chunk's probabilities and scores' gradients (rows Lp apart; kRows more for a block's
    // repeated rows), for the keys' and values' gradients after the chunk.
    std::vector<float> pc((kChunk + kRows) * Lp), dsc((kChunk + kRows) * Lp), scratch(kRows * D);
    for (int64_t t = begin; t < stop; ++t) {
      const int64_t b = t / Hkv, g = t % Hkv;
      const float* kb = kp + b * k.stride(0) + g * k.stride(1);
      const float* vb = vp + b * v.stride(0) + g * v.stride(1);
      float* dkb = dkp + (b * Hkv + g) * Lk * D;
      float* dvb = dvp + (b * Hkv + g) * Lk * D;
      transpose_rows(kb, Lk, D, k.stride(2), Lp, kt.data());
      transpose_rows(vb, Lk, D, v.stride(2), Lp, vt.data());
      // The task's rows copied together (their cache misses overlap): q scaled, dout, and
      // dout . out, the softmax's backward.
      gather_rows(qp + b * q.stride(0) + g * G * q.stride(1), q.stride(1), q.stride(2), G, Lq, D,
                  sc, qs.data());
      const int64_t first = b * Lq * H + g * G;  // row (b, 0, g G) of dout and out
      gather_rows(gp + first * D, D, H * D, G, Lq, D, 1.f, go.data());
      for (int64_t hh = 0; hh < G; ++hh) {
        for (int64_t i = 0; i < Lq; ++i) {
          const float *o = op + (first + i * H + hh) * D, *gr = go.data() + (hh * Lq + i) * D;
          float sum = 0.f;
          for (int64_t d = 0; d < D; ++d) sum += gr[d] * o[d];
          delta[hh * Lq + i] = sum;
        }
      }
      for (int64_t h = g * G; h < (g + 1) * G; ++h) {
        const int64_t hh = h - g * G;
        for (int64_t c0 = 0; c0 < Lq; c0 += kChunk) {
          const int64_t n = std::min(kChunk, Lq - c0);
          Block blocks[kChunk / kRows];
          int64_t clo = Lk, chi = 0;  // the chunk's columns: every block's together
          int64_t ends[kChunk];       // each row's end of visible keys (0: it sees none)
          bool rising = true;
          for (int64_t i0 = c0; i0 < c0 + n; i0 += kRows) {
            const Block& blk = blocks[(i0 - c0) / kRows] = block_of(vis, b, i0, Lq);
            if (blk.lo < blk.hi) clo = std::min(clo, blk.lo), chi = std::max(chi, blk.hi);
            for (int r = 0; r < blk.n; ++r) {
              const int64_t e = blk.start[r] < blk.end[r] ? blk.end[r] : 0, at = i0 - c0 + r;
              rising = rising && (at == 0 || ends[at - 1] <= e);
              ends[at] = e;
            }
          }
          if (clo >= chi) {  // no query of the chunk sees a key
            for (int64_t i = c0; i < c0 + n; ++i) {
              float* dqi = dqp + ((b * Lq + i) * H + h) * D;
              std::fill(dqi, dqi + D, 0.f);
            }
            continue;
          }
          for (int64_t i0 = c0; i0 < c0 + n; i0 += kRows) {
            const Block& blk = blocks[(i0 - c0) / kRows];
            const float *qa[kRows], *ga[kRows];
            float *sr[kRows], *dpr[kRows], *dqr[kRows], shift[kRows];
            for (int r = 0; r < kRows; ++r) {
              const int64_t i = i0 + std::min<int64_t>(r, blk.n - 1);
              qa[r] = qs.data() + (hh * Lq + i) * D;
              ga[r] = go.data() + (hh * Lq + i) * D;
              sr[r] = pc.data() + (i0 - c0 + r) * Lp;
              dpr[r] = dsc.data() + (i0 - c0 + r) * Lp;
              dqr[r] = r < blk.n ? dqp + ((b * Lq + i) * H + h) * D : scratch.data() + r * D;
              shift[r] = lp[(b * H + h) * Lq + i];
            }
            rows_by_matrix(qa, D, kt.data(), Lp, blk.lo, blk.hi, sr);  // the scores again
            mask_scores(blk, sr);
            exponentiate(blk, sr, shift, sr);                          // the probabilities
            rows_by_matrix(ga, D, vt.data(), Lp, blk.lo, blk.hi, dpr); // dout . v_j
            for (int r = 0; r < kRows; ++r) {  // the scores' gradients, less the scale
              const float dl = delta[hh * Lq + i0 + std::min<int64_t>(r, blk.n - 1)];
              float *p = sr[r], *ds = dpr[r];
              for (int64_t j = blk.lo; j < blk.hi; ++j) ds[j] = p[j] * (ds[j] - dl);
            }
            const int64_t hi = std::min(blk.hi, Lk);
            weights_by_matrix(dpr, blk.lo, hi, kb, k.stride(2), D, dqr);  // dq = scale ds . k
            for (int r = 0; r < blk.n; ++r)
              for (int64_t d = 0; d < D; ++d) dqr[r][d] *= sc;
            for (int r = 0; r < blk.n; ++r) {  // 0 on the chunk's columns outside the block's
              for (int64_t j = clo; j < blk.lo; ++j) sr[r][j] = dpr[r][j] = 0.f;
              for (int64_t j = std::max(blk.hi, clo); j < chi; ++j) sr[r][j] = dpr[r][j] = 0.f;
            }
          }
          const int64_t hi = std::min(chi, Lk), row0 = hh * Lq + c0;
          const int64_t* rows_end = rising ? ends : nullptr;
          keys_update(dsc.data(), Lp, qs.data() + row0 * D, n, rows_end, clo, hi, D, dkb);  // ds (scale q)
          keys_update(pc.data(), Lp, go.data() + row0 * D, n, rows_end, clo, hi, D, dvb);   // p dout
        }
      }
    }
  });
  return {dq, dk, dv};
}

#endif  // GRPO_ATTEND

}  // namespace

#if defined(GRPO_ATTEND)
TORCH_LIBRARY_FRAGMENT(grpo_desktop, m) {
  m.def("attend(Tensor q, Tensor k, Tensor v, Tensor? allowed, float scale, bool causal) -> (Tensor, Tensor)",
        &attend);
  m.def(
      "attend_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
      "Tensor? allowed, float scale, bool causal) -> (Tensor, Tensor, Tensor)",
      &attend_backward);
}
#endif
