// Float exp/erfc/gelu/sigmoid and the row loops of normalization and softmax on GCC vector types
// (4 lanes: SSE2, 8: AVX2): explicit SIMD, since GCC will not if-convert the clamps and selects of
// scalar forms under its default -ftrapping-math, nor reassociate a float sum.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

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

// The sum over i < n of a term in double: float lanes over blocks of 256 elements (so no lane
// adds more than 256 / lanes terms in float), each block's total added in double. `lanes(i)`
// gives the terms i.. i + lanes - 1 as a vector, `one(i)` term i alone (the block's tail).
template <class V, class Lanes, class One>
KILN_VMATH double blocked_sum_loop(int64_t n, Lanes lanes, One one) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float), kSumBlock = 256;
  double total = 0;
  for (int64_t b = 0; b < n; b += kSumBlock) {
    const int64_t e = b + kSumBlock < n ? b + kSumBlock : n;
    V acc0 = splat<V>(0.f), acc1 = splat<V>(0.f);
    int64_t i = b;
    for (; i + 2 * kLanes <= e; i += 2 * kLanes) {
      acc0 += lanes(i);
      acc1 += lanes(i + kLanes);
    }
    acc0 += acc1;
    float block = 0;
    for (int64_t l = 0; l < kLanes; ++l) block += acc0[l];
    for (; i < e; ++i) block += one(i);
    total += block;
  }
  return total;
}

// The sum of a[0..n) (each shifted by `shift`, and squared if `square`) in double.
template <class V>
KILN_VMATH double sum_loop(const float* a, int64_t n, float shift, bool square) {
  const V vs = splat<V>(shift);
  return blocked_sum_loop<V>(
      n,
      [&](int64_t i) {
        V x;
        std::memcpy(&x, a + i, sizeof(x));
        x -= vs;
        return square ? x * x : x;
      },
      [&](int64_t i) {
        const float d = a[i] - shift;
        return square ? d * d : d;
      });
}

// The sum of a[i] * b[i] for i < n in double (a multiply, then an add).
template <class V>
KILN_VMATH double dot_loop(const float* a, const float* b, int64_t n) {
  return blocked_sum_loop<V>(
      n,
      [&](int64_t i) {
        V x, y;
        std::memcpy(&x, a + i, sizeof(x));
        std::memcpy(&y, b + i, sizeof(y));
        return x * y;
      },
      [&](int64_t i) { return a[i] * b[i]; });
}

// A double as two floats, hi + lo: x - hi is exact for float x near hi (Sterbenz), so
// (x - hi) - lo centers x on a mean that far from zero with no loss from rounding the mean.
struct Mean {
  float hi, lo;
};

// Mean and 1/sqrt(variance + eps) of a[0..n), two-pass: the mean from values shifted by a[0] (so
// float lanes sum small numbers even where the data sits far from zero), the variance from
// centered squares. Not `centered` (RMS norm): mean 0 and 1/sqrt(mean of squares + eps).
template <class V>
KILN_VMATH void moments_loop(const float* a, int64_t n, double eps, Mean* mean, float* rstd,
                             bool centered) {
  if (!centered) {
    *mean = Mean{0.f, 0.f};
    *rstd = static_cast<float>(
        1.0 / __builtin_sqrt(sum_loop<V>(a, n, 0.f, true) / static_cast<double>(n) + eps));
    return;
  }
  const float pivot = n > 0 ? a[0] : 0.f;
  const double m = pivot + sum_loop<V>(a, n, pivot, false) / static_cast<double>(n);
  const double var = sum_loop<V>(a, n, static_cast<float>(m), true) / static_cast<double>(n);
  mean->hi = static_cast<float>(m);
  mean->lo = static_cast<float>(m - static_cast<double>(mean->hi));
  *rstd = static_cast<float>(1.0 / __builtin_sqrt(var + eps));
}

// d[i] = (a[i] - mean) * rstd * scale[i] + bias[i] (scale and bias both present or both null),
// else (a[i] - mean) * rstd.
template <class V>
KILN_VMATH void normalize_loop(float* d, const float* a, int64_t n, Mean mean, float rstd,
                               const float* scale, const float* bias) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float);
  const V hi = splat<V>(mean.hi), lo = splat<V>(mean.lo), vr = splat<V>(rstd);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    V x;
    std::memcpy(&x, a + i, sizeof(x));
    x = ((x - hi) - lo) * vr;
    if (scale != nullptr) {
      V s, b;
      std::memcpy(&s, scale + i, sizeof(s));
      std::memcpy(&b, bias + i, sizeof(b));
      x = x * s + b;
    }
    std::memcpy(d + i, &x, sizeof(x));
  }
  for (; i < n; ++i) {
    float x = ((a[i] - mean.hi) - mean.lo) * rstd;
    if (scale != nullptr) x = x * scale[i] + bias[i];
    d[i] = x;
  }
}

// d[i] = (a[i] - mean) * mul + add.
template <class V>
KILN_VMATH void shift_scale_loop(float* d, const float* a, int64_t n, Mean mean, float mul,
                                 float add) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float);
  const V hi = splat<V>(mean.hi), lo = splat<V>(mean.lo), vmul = splat<V>(mul),
          vadd = splat<V>(add);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    V x;
    std::memcpy(&x, a + i, sizeof(x));
    x = ((x - hi) - lo) * vmul + vadd;
    std::memcpy(d + i, &x, sizeof(x));
  }
  for (; i < n; ++i) d[i] = ((a[i] - mean.hi) - mean.lo) * mul + add;
}

// Functors, not lambdas (see vector_math_avx2.cpp): exp(x - shift), x - shift, x * factor.
template <class V>
struct ExpShifted {
  float shift;
  KILN_VMATH V operator()(V x) const { return vmath::exp<V>(x - shift); }
};
template <class V>
struct Shifted {
  float shift;
  KILN_VMATH V operator()(V x) const { return x - shift; }
};
template <class V>
struct Scaled {
  float factor;
  KILN_VMATH V operator()(V x) const { return x * factor; }
};

// The largest of a[0..n), NaN skipped: -inf where no element is above -inf (or n == 0).
template <class V>
KILN_VMATH float max_loop(const float* a, int64_t n) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float);
  float mx = -__builtin_inff();
  int64_t i = 0;
  if (n >= kLanes) {
    V vmx = splat<V>(-__builtin_inff());
    for (; i + kLanes <= n; i += kLanes) {
      V x;
      std::memcpy(&x, a + i, sizeof(x));
      vmx = select(x > vmx, x, vmx);
    }
    for (int64_t l = 0; l < kLanes; ++l) mx = vmx[l] > mx ? vmx[l] : mx;
  }
  for (; i < n; ++i) mx = a[i] > mx ? a[i] : mx;
  return mx;
}

// d = exp(a - mx) / sum(exp(a - mx)) over n elements (d may be a).
template <class V>
KILN_VMATH void exp_normalized(float* d, const float* a, int64_t n, float mx) {
  map<V>(d, a, n, ExpShifted<V>{mx});
  const float inv = static_cast<float>(1.0 / sum_loop<V>(d, n, 0.f, false));
  map<V>(d, d, n, Scaled<V>{inv});
}

// Softmax (or log-softmax) of a[0..n) into d (d may be a): the max subtracted first, so exp stays
// in range; a row of -inf gives NaN, as torch does, and so does a row with a NaN (through exp and
// the sum, since the max skips it).
template <class V>
KILN_VMATH void softmax_loop(float* d, const float* a, int64_t n, bool log) {
  const float mx = max_loop<V>(a, n);
  if (log) {
    // log_softmax = x - max - log(sum(exp(x - max))).
    // The exps go to a scratch row: d may be a, which the result reads again.
    std::vector<float> e(static_cast<size_t>(n));
    map<V>(e.data(), a, n, ExpShifted<V>{mx});
    const float lse = mx + static_cast<float>(__builtin_log(sum_loop<V>(e.data(), n, 0.f, false)));
    map<V>(d, a, n, Shifted<V>{lse});
    return;
  }
  exp_normalized<V>(d, a, n, mx);
}

// Softmax of d[0..n) in place, as attention's rows take it: false, d untouched, where no element
// is above -inf (every key masked out, or only NaN left; softmax_loop would give NaN there).
template <class V>
KILN_VMATH bool softmax_or_zero_loop(float* d, int64_t n) {
  const float mx = max_loop<V>(d, n);
  if (mx == -__builtin_inff()) return false;
  exp_normalized<V>(d, d, n, mx);
  return true;
}

// acc[i] = f(acc[i], v[i]) for i < n, vectors then the tail lane by lane (f takes V and float).
template <class V, class F>
KILN_VMATH void combine_loop(float* acc, const float* v, int64_t n, F f) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    V a, x;
    std::memcpy(&a, acc + i, sizeof(a));
    std::memcpy(&x, v + i, sizeof(x));
    a = f(a, x);
    std::memcpy(acc + i, &a, sizeof(a));
  }
  for (; i < n; ++i) acc[i] = f(acc[i], v[i]);
}
// max(a, x) with NaN winning (either's, as torch's max pooling; a NaN in a stays), and a + x: the
// combinations of pooling's loops.
struct MaxNan {
  template <class T>
  KILN_VMATH T operator()(T a, T x) const {
    return select((x > a) | (x != x), x, a);
  }
  KILN_VMATH float operator()(float a, float x) const { return (x > a || x != x) ? x : a; }
};
struct Add {
  template <class T>
  KILN_VMATH T operator()(T a, T x) const {
    return a + x;
  }
};
// dst[i] = the max over taps t < ntaps of taps[t][i], NaN winning (MaxNan, tap by tap),
// for i < n: a pooling window's taps reduced in registers, two vectors at a time.
template <class V>
KILN_VMATH void max_nan_taps_loop(float* dst, const float* const* taps, int64_t ntaps, int64_t n) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float);
  const V lowest = splat<V>(-__builtin_inff());
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    V a0 = lowest, a1 = lowest;
    for (int64_t t = 0; t < ntaps; ++t) {
      V x0, x1;
      std::memcpy(&x0, taps[t] + i, sizeof(x0));
      std::memcpy(&x1, taps[t] + i + kLanes, sizeof(x1));
      a0 = MaxNan{}(a0, x0);
      a1 = MaxNan{}(a1, x1);
    }
    std::memcpy(dst + i, &a0, sizeof(a0));
    std::memcpy(dst + i + kLanes, &a1, sizeof(a1));
  }
  for (; i + kLanes <= n; i += kLanes) {
    V a = lowest;
    for (int64_t t = 0; t < ntaps; ++t) {
      V x;
      std::memcpy(&x, taps[t] + i, sizeof(x));
      a = MaxNan{}(a, x);
    }
    std::memcpy(dst + i, &a, sizeof(a));
  }
  for (; i < n; ++i) {
    float a = -__builtin_inff();
    for (int64_t t = 0; t < ntaps; ++t) {
      a = MaxNan{}(a, taps[t][i]);
    }
    dst[i] = a;
  }
}

// The loops above on the widest vectors this CPU has.
void moments(const float* a, int64_t n, double eps, Mean* mean, float* rstd, bool centered = true);
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

}  // namespace kiln::engine::cpu::vmath
