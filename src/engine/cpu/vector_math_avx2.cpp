// The AVX2 builds (8 lanes) of the vector_math.h loops; vector_math.cpp picks them
// at run time when the CPU has AVX2. Only this file is compiled for AVX2.
#include <cstdint>
#include <cstring>
#include <vector>

// After the standard headers, so no inline function shared with other files gets AVX2 code.
#pragma GCC target("avx2")

#include "engine/cpu/vector_math.h"

namespace kiln::engine::cpu::vmath::avx2 {

// Functors, not lambdas: GCC builds a lambda's static invoker without the file's target.
struct Gelu {
  vf8 operator()(vf8 x) const { return vmath::gelu<vf8>(x); }
};
struct Sigmoid {
  vf8 operator()(vf8 x) const { return vmath::sigmoid<vf8>(x); }
};
struct Silu {
  vf8 operator()(vf8 x) const { return x / (1.f + vmath::exp<vf8>(-x)); }
};
struct Exp {
  vf8 operator()(vf8 x) const { return vmath::exp<vf8>(x); }
};
struct Tanh {
  vf8 operator()(vf8 x) const { return vmath::tanh<vf8>(x); }
};

void gelu(float* d, const float* a, int64_t n) {
  map<vf8>(d, a, n, Gelu{});
}
void sigmoid(float* d, const float* a, int64_t n) {
  map<vf8>(d, a, n, Sigmoid{});
}
void silu(float* d, const float* a, int64_t n) {
  map<vf8>(d, a, n, Silu{});
}
void exp(float* d, const float* a, int64_t n) {
  map<vf8>(d, a, n, Exp{});
}
void tanh(float* d, const float* a, int64_t n) {
  map<vf8>(d, a, n, Tanh{});
}
void axpy(float a, const float* x, float* y, int64_t n) {
  axpy_loop<vf8>(a, x, y, n);
}
void max_nan_into(float* acc, const float* v, int64_t n) {
  combine_loop<vf8>(acc, v, n, MaxNan{});
}
void add_into(float* acc, const float* v, int64_t n) {
  combine_loop<vf8>(acc, v, n, Add{});
}
void max_nan_taps(float* dst, const float* const* taps, int64_t ntaps, int64_t n) {
  max_nan_taps_loop<vf8>(dst, taps, ntaps, n);
}
double dot(const float* a, const float* b, int64_t n) {
  return dot_loop<vf8>(a, b, n);
}
double sum(const float* a, int64_t n) {
  return sum_loop<vf8>(a, n, 0.f, false);
}
void moments(const float* a, int64_t n, double eps, Mean* mean, float* rstd, bool centered) {
  moments_loop<vf8>(a, n, eps, mean, rstd, centered);
}
void normalize(float* d, const float* a, int64_t n, Mean mean, float rstd, const float* scale,
               const float* bias) {
  normalize_loop<vf8>(d, a, n, mean, rstd, scale, bias);
}
void shift_scale(float* d, const float* a, int64_t n, Mean mean, float mul, float add) {
  shift_scale_loop<vf8>(d, a, n, mean, mul, add);
}
void softmax(float* d, const float* a, int64_t n, bool log) {
  softmax_loop<vf8>(d, a, n, log);
}
bool softmax_or_zero(float* d, int64_t n) {
  return softmax_or_zero_loop<vf8>(d, n);
}

}  // namespace kiln::engine::cpu::vmath::avx2
