// The sampler's token draw for a vocabulary of one block (engine/ops/draw.py's
// `_invert_one_block`: the demo's 107 tokens, the benchmarks' 3M model), in one call instead of
// about twenty small torch operations a token (each a Python call: the draw cost more than the
// rest of the sampler's loop on those models, bench/README.md "session 30"). The same arithmetic
// in the same order, so the same token for the same random number: the row's mass is torch's
// float32 sum (at::sum, its own order), then in float64 u scaled to the mass, the cumulative sum
// in order (as torch's CPU cumsum adds), and the first position whose sum exceeds the point.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

// probs (N, V) float32 with contiguous rows, non-negative; u (N, 1) float64 in [0, 1).
// Returns (N,) int64: each row's token, or -1 where the row's total is not a positive finite
// number (a diverged model: the caller says so).
at::Tensor draw_block(const at::Tensor& probs, const at::Tensor& u) {
  TORCH_CHECK(probs.dim() == 2 && probs.stride(1) == 1 && probs.scalar_type() == at::kFloat,
              "draw_block: probs must be (N, V) float32 with contiguous rows");
  TORCH_CHECK(u.dim() == 2 && u.size(0) == probs.size(0) && u.size(1) == 1 &&
                  u.scalar_type() == at::kDouble,
              "draw_block: u must be (N, 1) float64");
  const int64_t N = probs.size(0), V = probs.size(1), sp = probs.stride(0), su = u.stride(0);
  TORCH_CHECK(V > 0, "draw_block: an empty vocabulary");
  const at::Tensor mass = at::sum(probs, {1}, /*keepdim=*/true).contiguous();  // (N, 1) float32
  auto out = at::empty({N}, probs.options().dtype(at::kLong));
  const float* pp = probs.data_ptr<float>();
  const float* mp = mass.data_ptr<float>();
  const double* up = u.data_ptr<double>();
  int64_t* op = out.data_ptr<int64_t>();
  at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
    std::vector<double> inner(V);
    for (int64_t n = begin; n < end; ++n) {
      const double m = static_cast<double>(mp[n]);
      if (!std::isfinite(m) || !(m > 0.0)) {
        op[n] = -1;
        continue;
      }
      const double point = std::min(up[n * su] * m, std::nextafter(m, 0.0));  // [0, mass)
      const double frac = (point - 0.0) / m;
      const float* p = pp + n * sp;
      double acc = 0.0;
      for (int64_t i = 0; i < V; ++i) {
        acc += static_cast<double>(p[i]);
        inner[i] = acc;
      }
      const double last = inner[V - 1];
      const double r = std::min(frac * last, std::nextafter(last, 0.0));
      // the first position whose cumulative sum exceeds r (searchsorted, right=True)
      op[n] = std::upper_bound(inner.begin(), inner.end(), r) - inner.begin();
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(grpo_desktop, m) {
  m.def("draw_block(Tensor probs, Tensor u) -> Tensor", &draw_block);
}
