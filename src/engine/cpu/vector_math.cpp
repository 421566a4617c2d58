// Runtime ISA dispatch for the vector_math.h activations: the AVX2 loops of
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

}  // namespace kiln::engine::cpu::vmath
