// The log-prob and update passes' small layers on the CPU, forward and backward, for
// engine/ops/fused_layers.py; compiled with native_decode.cpp into one library
// (engine/ops/native_build.py). Why: between a pass's matrix products, transformers runs RMSNorm
// as six tensor operations, the rotary embedding as ten and SwiGLU's gate as two, each a pass
// over a (tokens, width) tensor, and autograd runs about twice as many for their backward;
// on bench/vs_trl.py --quick's step, taking them away entirely saved 43 of the passes' ~355 ms.
// Here each is one pass over its rows forward and one backward (the passes x1.06: bench/README.md,
// session 29).
//
//   norm_forward(x (M, E), weight (E), eps) -> (y (M, E), rstd (M)):
//       y = weight * (x * rstd), rstd = 1 / sqrt(mean(x^2) + eps), as transformers' RMSNorm
//   norm_backward(dy, x, weight, rstd) -> dx (M, E)
//   rope_forward(x (B, H, L, D), cos (1 or B, L, D), sin) -> x * cos + rotate_half(x) * sin
//   rope_backward(dy (B, H, L, D), cos, sin) -> dx (its transpose: rotate_half's reversed)
//   swiglu_forward(g (M, F), u (M, F)) -> silu(g) * u
//   swiglu_backward(dy, g, u) -> (dg, du)
//
// Rows have contiguous elements (stride 1 in the last dimension); anything else is refused with
// a message (fused_layers.py only calls with such tensors). Results equal torch's operations up
// to float rounding; the rotary embedding's forward is torch's bits (the same products and sum,
// no fused multiply-add: -ffp-contract=off). Tests: tests/engine/ops/test_fused_layers.py.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <tuple>

namespace {

// Rows per parallel task: at least ~16k elements, so a short tensor stays on one thread.
inline int64_t grain_rows(int64_t width) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(width, 1)); }

void check_rows(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.dim() == 2 && t.stride(1) == 1 && t.scalar_type() == at::kFloat && t.device().is_cpu(),
              what, " must be a (rows, width) float32 CPU tensor with contiguous rows");
}

std::tuple<at::Tensor, at::Tensor> norm_forward(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rows(x, "norm_forward: x");
  const int64_t M = x.size(0), E = x.size(1), sx = x.stride(0);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == E && weight.is_contiguous() &&
                  weight.scalar_type() == at::kFloat,
              "norm_forward: weight must be (E) float32");
  auto y = at::empty({M, E}, x.options());
  auto rstd = at::empty({M}, x.options());
  const float *xp = x.data_ptr<float>(), *w = weight.data_ptr<float>();
  float *yp = y.data_ptr<float>(), *rp = rstd.data_ptr<float>();
  at::parallel_for(0, M, grain_rows(E), [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const float* a = xp + m * sx;
      float* out = yp + m * E;
      float squares = 0.f;
#pragma omp simd reduction(+ : squares)
      for (int64_t j = 0; j < E; ++j) squares += a[j] * a[j];
      // In double: -ffast-math would make 1/sqrtf an approximate reciprocal square root.
      const float r = static_cast<float>(1.0 / std::sqrt(static_cast<double>(squares / E + static_cast<float>(eps))));
      rp[m] = r;
#pragma omp simd
      for (int64_t j = 0; j < E; ++j) out[j] = w[j] * (a[j] * r);
    }
  });
  return {y, rstd};
}

// dx = rstd * (g - xhat * mean(g * xhat)), g = dy * weight, xhat = x * rstd.
at::Tensor norm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                         const at::Tensor& rstd) {
  check_rows(dy, "norm_backward: dy");
  check_rows(x, "norm_backward: x");
  const int64_t M = x.size(0), E = x.size(1), sx = x.stride(0), sd = dy.stride(0);
  TORCH_CHECK(dy.size(0) == M && dy.size(1) == E, "norm_backward: dy must be shaped like x");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == E && weight.is_contiguous() &&
                  weight.scalar_type() == at::kFloat,
              "norm_backward: weight must be (E) float32");
  TORCH_CHECK(rstd.dim() == 1 && rstd.size(0) == M && rstd.is_contiguous() && rstd.scalar_type() == at::kFloat,
              "norm_backward: rstd must be (M) float32");
  auto dx = at::empty({M, E}, x.options());
  const float *xp = x.data_ptr<float>(), *dp = dy.data_ptr<float>(), *w = weight.data_ptr<float>();
  const float* rp = rstd.data_ptr<float>();
  float* op = dx.data_ptr<float>();
  at::parallel_for(0, M, grain_rows(E), [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const float *a = xp + m * sx, *d = dp + m * sd;
      float* out = op + m * E;
      const float r = rp[m];
      float dot = 0.f;  // sum of g * x (xhat's rstd applied once, below)
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < E; ++j) dot += d[j] * w[j] * a[j];
      const float c = dot * r * r / static_cast<float>(E);  // mean(g * xhat) * rstd
#pragma omp simd
      for (int64_t j = 0; j < E; ++j) out[j] = r * (d[j] * w[j] - a[j] * c);
    }
  });
  return dx;
}

void check_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const char* what) {
  TORCH_CHECK(x.dim() == 4 && x.stride(3) == 1 && x.scalar_type() == at::kFloat && x.device().is_cpu() &&
                  x.size(3) % 2 == 0,
              what, ": x must be (B, H, L, D) float32 on the CPU, D even, its last dimension contiguous");
  for (const at::Tensor* t : {&cos, &sin}) {
    TORCH_CHECK(t->dim() == 3 && t->stride(2) == 1 && t->scalar_type() == at::kFloat &&
                    (t->size(0) == 1 || t->size(0) == x.size(0)) && t->size(1) == x.size(2) &&
                    t->size(2) == x.size(3),
                what, ": cos and sin must be (1 or B, L, D) float32, their last dimension contiguous");
  }
}

// out[j] = x[j] * cos[j] + rot[j] * sin[j], rot = (-x[D/2:], x[:D/2]) (forward), or
// dx[j] = dy[j] * cos[j] + (dy[j + D/2] * sin[j + D/2] | -dy[j - D/2] * sin[j - D/2]) (backward).
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool backward) {
  check_rope(x, cos, sin, backward ? "rope_backward" : "rope_forward");
  const int64_t B = x.size(0), H = x.size(1), L = x.size(2), D = x.size(3), half = D / 2;
  auto out = at::empty_like(x);  // x's layout (a transposed projection stays one)
  const int64_t xs0 = x.stride(0), xs1 = x.stride(1), xs2 = x.stride(2);
  const int64_t os0 = out.stride(0), os1 = out.stride(1), os2 = out.stride(2);
  const int64_t cs0 = cos.size(0) == 1 ? 0 : cos.stride(0), cs1 = cos.stride(1);
  const int64_t ss0 = sin.size(0) == 1 ? 0 : sin.stride(0), ss1 = sin.stride(1);
  const float *xp = x.data_ptr<float>(), *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, B * L, grain_rows(H * D), [&](int64_t begin, int64_t end) {
    for (int64_t bl = begin; bl < end; ++bl) {
      const int64_t b = bl / L, l = bl % L;
      const float *c = cp + b * cs0 + l * cs1, *s = sp + b * ss0 + l * ss1;
      for (int64_t h = 0; h < H; ++h) {
        const float* a = xp + b * xs0 + h * xs1 + l * xs2;
        float* y = op + b * os0 + h * os1 + l * os2;
        if (!backward) {
#pragma omp simd
          for (int64_t j = 0; j < half; ++j) y[j] = a[j] * c[j] + (-a[j + half]) * s[j];
#pragma omp simd
          for (int64_t j = half; j < D; ++j) y[j] = a[j] * c[j] + a[j - half] * s[j];
        } else {
#pragma omp simd
          for (int64_t j = 0; j < half; ++j) y[j] = a[j] * c[j] + a[j + half] * s[j + half];
#pragma omp simd
          for (int64_t j = half; j < D; ++j) y[j] = a[j] * c[j] - a[j - half] * s[j - half];
        }
      }
    }
  });
  return out;
}

at::Tensor rope_forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return rope(x, cos, sin, false);
}

at::Tensor rope_backward(const at::Tensor& dy, const at::Tensor& cos, const at::Tensor& sin) {
  return rope(dy, cos, sin, true);
}

void check_pair(const at::Tensor& a, const at::Tensor& b, const char* what) {
  check_rows(a, what);
  check_rows(b, what);
  TORCH_CHECK(a.sizes() == b.sizes(), what, ": both tensors must have one shape");
}

// silu(g) * u = g / (1 + exp(-g)) * u, torch's SiLU formula.
at::Tensor swiglu_forward(const at::Tensor& g, const at::Tensor& u) {
  check_pair(g, u, "swiglu_forward: g and u");
  const int64_t M = g.size(0), F = g.size(1), sg = g.stride(0), su = u.stride(0);
  auto out = at::empty({M, F}, g.options());
  const float *gp = g.data_ptr<float>(), *up = u.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, M, grain_rows(F), [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const float *a = gp + m * sg, *v = up + m * su;
      float* y = op + m * F;
#pragma omp simd
      for (int64_t j = 0; j < F; ++j) y[j] = a[j] / (1.0f + std::exp(-a[j])) * v[j];
    }
  });
  return out;
}

// dg = dy * u * s * (1 + g * (1 - s)) (torch's silu_backward), du = dy * silu(g), s = sigmoid(g).
std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dy, const at::Tensor& g,
                                                   const at::Tensor& u) {
  check_pair(g, u, "swiglu_backward: g and u");
  check_pair(dy, g, "swiglu_backward: dy and g");
  const int64_t M = g.size(0), F = g.size(1), sg = g.stride(0), su = u.stride(0), sd = dy.stride(0);
  auto dg = at::empty({M, F}, g.options());
  auto du = at::empty({M, F}, g.options());
  const float *gp = g.data_ptr<float>(), *up = u.data_ptr<float>(), *dp = dy.data_ptr<float>();
  float *gop = dg.data_ptr<float>(), *uop = du.data_ptr<float>();
  at::parallel_for(0, M, grain_rows(F), [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      const float *a = gp + m * sg, *v = up + m * su, *d = dp + m * sd;
      float *ga = gop + m * F, *ua = uop + m * F;
#pragma omp simd
      for (int64_t j = 0; j < F; ++j) {
        const float e = 1.0f + std::exp(-a[j]), s = 1.0f / e;
        ga[j] = d[j] * v[j] * s * (1.0f + a[j] * (1.0f - s));
        ua[j] = d[j] * (a[j] / e);
      }
    }
  });
  return {dg, du};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(grpo_desktop, m) {
  m.def("norm_forward(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)", &norm_forward);
  m.def("norm_backward(Tensor dy, Tensor x, Tensor weight, Tensor rstd) -> Tensor", &norm_backward);
  m.def("rope_forward(Tensor x, Tensor cos, Tensor sin) -> Tensor", &rope_forward);
  m.def("rope_backward(Tensor dy, Tensor cos, Tensor sin) -> Tensor", &rope_backward);
  m.def("swiglu_forward(Tensor g, Tensor u) -> Tensor", &swiglu_forward);
  m.def("swiglu_backward(Tensor dy, Tensor g, Tensor u) -> (Tensor, Tensor)", &swiglu_backward);
}
