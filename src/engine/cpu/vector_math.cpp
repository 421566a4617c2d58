// Runtime ISA dispatch for the vector_math.h loops: the AVX2 loops of
// vector_math_avx2.cpp when the CPU has AVX2, else the SSE2 baseline (4 lanes) built here.
#include "engine/cpu/vector_math.h"

namespace kiln::engine::cpu::vmath {

namespace avx2 {
void gelu(float* d, const float* a, int64_t n);
void sigmoid(float* d, const float* a, int64_t n);
void silu(float* d, const float* a, int64_t n);
void exp(float* d, const float* a, int64_t n);
void tanh(float* d, const float* a, int64_t n);
void axpy(float a, const float* x, float* y, int64_t n);
void moments(const float* a, int64_t n, double eps, Mean* mean, float* rstd, bool centered);
void normalize(float* d, const float* a, int64_t n, Mean mean, float rstd, const float* scale,
               const float* bias);
void shift_scale(float* d, const float* a, int64_t n, Mean mean, float mul, float add);
void softmax(float* d, const float* a, int64_t n, bool log);
bool softmax_or_zero(float* d, int64_t n);
void max_nan_into(float* acc, const float* v, int64_t n);
void add_into(float* acc, const float* v, int64_t n);
void max_nan_taps(float* dst, const float* const* taps, int64_t ntaps, int64_t n);
double dot(const float* a, const float* b, int64_t n);
double sum(const float* a, int64_t n);
}  // namespace avx2

namespace {
bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
}  // namespace

void gelu(float* d, const float* a, int64_t n) {
  if (has_avx2()) return avx2::gelu(d, a, n);
  map<vf4>(d, a, n, [](vf4 x) { return vmath::gelu<vf4>(x); });
}
void sigmoid(float* d, const float* a, int64_t n) {
  if (has_avx2()) return avx2::sigmoid(d, a, n);
  map<vf4>(d, a, n, [](vf4 x) { return vmath::sigmoid<vf4>(x); });
}
void silu(float* d, const float* a, int64_t n) {
  if (has_avx2()) return avx2::silu(d, a, n);
  map<vf4>(d, a, n, [](vf4 x) { return x / (1.f + vmath::exp<vf4>(-x)); });
}
void exp(float* d, const float* a, int64_t n) {
  if (has_avx2()) return avx2::exp(d, a, n);
  map<vf4>(d, a, n, [](vf4 x) { return vmath::exp<vf4>(x); });
}
void tanh(float* d, const float* a, int64_t n) {
  if (has_avx2()) return avx2::tanh(d, a, n);
  map<vf4>(d, a, n, [](vf4 x) { return vmath::tanh<vf4>(x); });
}
void axpy(float a, const float* x, float* y, int64_t n) {
  if (has_avx2()) return avx2::axpy(a, x, y, n);
  axpy_loop<vf4>(a, x, y, n);
}
void moments(const float* a, int64_t n, double eps, Mean* mean, float* rstd, bool centered) {
  if (has_avx2()) return avx2::moments(a, n, eps, mean, rstd, centered);
  moments_loop<vf4>(a, n, eps, mean, rstd, centered);
}
void normalize(float* d, const float* a, int64_t n, Mean mean, float rstd, const float* scale,
               const float* bias) {
  if (has_avx2()) return avx2::normalize(d, a, n, mean, rstd, scale, bias);
  normalize_loop<vf4>(d, a, n, mean, rstd, scale, bias);
}
void shift_scale(float* d, const float* a, int64_t n, Mean mean, float mul, float add) {
  if (has_avx2()) return avx2::shift_scale(d, a, n, mean, mul, add);
  shift_scale_loop<vf4>(d, a, n, mean, mul, add);
}
void softmax(float* d, const float* a, int64_t n, bool log) {
  if (has_avx2()) return avx2::softmax(d, a, n, log);
  softmax_loop<vf4>(d, a, n, log);
}
bool softmax_or_zero(float* d, int64_t n) {
  if (has_avx2()) return avx2::softmax_or_zero(d, n);
  return softmax_or_zero_loop<vf4>(d, n);
}
void max_nan_into(float* acc, const float* v, int64_t n) {
  if (has_avx2()) return avx2::max_nan_into(acc, v, n);
  combine_loop<vf4>(acc, v, n, MaxNan{});
}
void add_into(float* acc, const float* v, int64_t n) {
  if (has_avx2()) return avx2::add_into(acc, v, n);
  combine_loop<vf4>(acc, v, n, Add{});
}
void max_nan_taps(float* dst, const float* const* taps, int64_t ntaps, int64_t n) {
  if (has_avx2()) return avx2::max_nan_taps(dst, taps, ntaps, n);
  max_nan_taps_loop<vf4>(dst, taps, ntaps, n);
}
double dot(const float* a, const float* b, int64_t n) {
  if (has_avx2()) return avx2::dot(a, b, n);
  return dot_loop<vf4>(a, b, n);
}
double sum(const float* a, int64_t n) {
  if (has_avx2()) return avx2::sum(a, n);
  return sum_loop<vf4>(a, n, 0.f, false);
}

}  // namespace kiln::engine::cpu::vmath
