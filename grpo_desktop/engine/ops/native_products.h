// The decode's matrix products for a few rows (`linear` and `decode_step` in native_decode.cpp,
// the only file that includes it, so that both run the one compiled copy of these loops).

#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <vector>

namespace {

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

// x (M, K) with rows `sx` floats apart, transposed chunk by chunk of 32 rows into xt and padded
// with zero rows to chunk_width: chunk c is (K, 32), the last one (K, 16) or (K, 8) when it has
// that few rows. xt holds K * 32 floats per chunk; every float of a chunk's width is written.
// Returns the rows in each chunk.
std::vector<int64_t> transposed(const float* xp, int64_t sx, int64_t M, int64_t K, float* to) {
  std::vector<int64_t> chunk_rows;
  for (int64_t m = 0; m < M; m += 32) chunk_rows.push_back(std::min<int64_t>(32, M - m));
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
  return chunk_rows;
}

#endif  // AVX2 and FMA

}  // namespace
