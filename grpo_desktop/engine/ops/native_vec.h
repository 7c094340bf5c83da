// Shared by native_decode.cpp and native_attention.cpp (each includes it into its own anonymous
// namespace): a masked score's value, which both use, and the decode attention's
// vector-times-matrix (the passes' attention scores a block of queries at once instead).

#pragma once

#include <cstdint>

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

}  // namespace
