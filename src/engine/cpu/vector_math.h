// Float exp/erfc/gelu/sigmoid on GCC vector types (4 lanes: SSE2, 8: AVX2):
// explicit SIMD, since GCC will not if-convert the clamps and selects of scalar forms under its
// default -ftrapping-math.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln::engine::cpu::vmath {

typedef float vf4 __attribute__((vector_size(16)));
typedef int32_t vi4 __attribute__((vector_size(16)));
typedef float vf8 __attribute__((vector_size(32)));  // AVX2 code only (see vector_math.cpp)
typedef int32_t vi8 __attribute__((vector_size(32)));

template <class V>
struct IntVector;
template <>
struct IntVector<vf4> {
  using type = vi4;
};
template <>
struct IntVector<vf8> {
  using type = vi8;
};

// Everything here is always inlined, so it compiles for the ISA of the function using it.
#define KILN_VMATH inline __attribute__((always_inline))

template <class V>
KILN_VMATH V splat(float v) {
  return V{} + v;
}
template <class V, class M>
KILN_VMATH V select(M mask, V a, V b) {
  return mask ? a : b;
}

// e^x: x = n*ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial (truncation
// error < 6e-9 relative), 2^n built in the exponent bits. Measured: < 1e-7 relative.
template <class V>
KILN_VMATH V exp(V x) {
  using I = typename IntVector<V>::type;
  const V hi = splat<V>(88.7228391f), lo = splat<V>(-86.6f);  // ln(FLT_MAX); 2^n stays normal
  const auto nan = x != x;
  V xc = select(x > hi, hi, select(x < lo, lo, x));
  xc = select(nan, splat<V>(0.f), xc);
  // Adding and subtracting 1.5*2^23 rounds to the nearest integer without a floor().
  const V round = splat<V>(12582912.f);
  const V n = (xc * 1.44269504088896341f + round) - round;
  const V r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  V p = splat<V>(1.f / 5040.f);
  p = p * r + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  // 2^(n-1) * 2p: n = 128 (just below ln(FLT_MAX)) still has a finite exponent field.
  // A vector cast reinterprets the bits (GCC vector semantics).
  const I bits = (__builtin_convertvector(n, I) + 126) << 23;
  const V y = (2.f * p) * (V)bits;
  // Below lo the true value is tiny (< 2.3e-38); above hi, infinite.
  return select(nan, x,
                select(x < lo, splat<V>(0.f), select(x > hi, splat<V>(__builtin_inff()), y)));
}

// tanh(x): an odd polynomial in x where |x| < 0.625 (no cancellation near 0; relative error
// about 1e-7), else 1 - 2 / (exp(2|x|) + 1) with x's sign (1 where exp overflows). NaN stays NaN.
template <class V>
KILN_VMATH V tanh(V x) {
  const V zero = splat<V>(0.f);
  const V ax = select(x < zero, -x, x);
  const V z = x * x;
  V p = splat<V>(-5.70498872745e-3f);
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const V small = p * z * x + x;
  const V big = 1.f - 2.f / (vmath::exp<V>(2.f * ax) + 1.f);
  return select(ax < splat<V>(0.625f), small, select(x < zero, -big, big));
}

// erfc(x) by the Chebyshev-fitted form t*exp(-z^2 + P(t)), t = 1/(1 + z/2), z = |x|
// (Numerical Recipes' erfcc: fractional error < 1.2e-7 everywhere, so the far tail, and with
// it gelu of negative inputs, keeps its relative accuracy).
template <class V>
KILN_VMATH V erfc(V x) {
  const auto neg = x < 0.f;
  const V z = select(neg, -x, x);
  const V t = 1.f / (1.f + 0.5f * z);
  V p = splat<V>(0.17087277f);
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const V r = t * vmath::exp<V>(p - z * z);
  return select(neg, 2.f - r, r);
}

// gelu(x) = x/2 * (1 + erf(x/sqrt2)) = x/2 * erfc(-x/sqrt2): no cancellation for x < 0.
template <class V>
KILN_VMATH V gelu(V x) {
  return 0.5f * x * vmath::erfc<V>(-0.70710678118654752f * x);
}

template <class V>
KILN_VMATH V sigmoid(V x) {
  return 1.f / (1.f + vmath::exp<V>(-x));
}

// d[i] = f(a[i]) for i < n; two vectors per step so their long dependency chains overlap; the
// tail goes through a padded vector.
template <class V, class F>
KILN_VMATH void map(float* d, const float* a, int64_t n, F f) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float);
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    V x0, x1;
    std::memcpy(&x0, a + i, sizeof(x0));
    std::memcpy(&x1, a + i + kLanes, sizeof(x1));
    const V y0 = f(x0), y1 = f(x1);
    std::memcpy(d + i, &y0, sizeof(y0));
    std::memcpy(d + i + kLanes, &y1, sizeof(y1));
  }
  for (; i + kLanes <= n; i += kLanes) {
    V x;
    std::memcpy(&x, a + i, sizeof(x));
    const V y = f(x);
    std::memcpy(d + i, &y, sizeof(y));
  }
  if (i < n) {
    V x = splat<V>(0.f);
    std::memcpy(&x, a + i, static_cast<size_t>(n - i) * sizeof(float));
    const V y = f(x);
    std::memcpy(d + i, &y, static_cast<size_t>(n - i) * sizeof(float));
  }
}

// The activations block kernels use, on the widest vectors this CPU has (AVX2 when present).
// Lane width changes no result: every lane computes the same float operations.
void gelu(float* d, const float* a, int64_t n);
void sigmoid(float* d, const float* a, int64_t n);
void silu(float* d, const float* a, int64_t n);
void exp(float* d, const float* a, int64_t n);
void tanh(float* d, const float* a, int64_t n);
// y[i] += a * x[i] for i < n (a multiply, then an add: no fused multiply-add, on either ISA).
void axpy(float a, const float* x, float* y, int64_t n);

// The loop axpy runs, on vectors of type V.
template <class V>
KILN_VMATH void axpy_loop(float a, const float* x, float* y, int64_t n) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float);
  const V va = splat<V>(a);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    V vx, vy;
    std::memcpy(&vx, x + i, sizeof(vx));
    std::memcpy(&vy, y + i, sizeof(vy));
    vy += va * vx;
    std::memcpy(y + i, &vy, sizeof(vy));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

}  // namespace kiln::engine::cpu::vmath
