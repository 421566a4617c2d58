// PyTorch's orthogonal polynomials (torch.special's chebyshev_polynomial_t/u/v/w, their shifted
// forms, hermite_polynomial_h/he, laguerre_polynomial_l, legendre_polynomial_p) for
// scalar_ops.h, which includes this file after special_math.h. torch computes them in the
// tensors' float type, with trig forms for large degrees inside (-1, 1), the three-term
// recurrences elsewhere and its own values at the interval's ends; these functions take the same
// steps in float, in the same order, so that they round as torch's float kernels do. Those are
// compiled for AVX2 and AVX-512, where the compiler fuses each recurrence's a * b - c into one FMA
// (a * b - c * d into fma(a, b, -(c * d))): fmaf here rounds the same on every machine and device.
// Compiled as C++, as CUDA and by NVRTC: only float functions of <math.h>.
#pragma once

namespace kiln::engine::special {

// The degree torch takes from a float n: truncated to int64. Where that conversion is undefined
// (NaN, infinities, |n| >= 2^63) torch's CPU kernels get INT64_MIN from x86, a negative degree;
// so do these. Every degree below 0 gives the polynomial 0.
KILN_SCALAR long long polynomial_degree(float n) {
  return n > -1.f && n < 9.22337203685477580800e18f ? static_cast<long long>(n) : -1;
}

// 2n + 1 of a degree, wrapping as torch's int64 arithmetic does for degrees past 2^62.
KILN_SCALAR float odd_degree(long long n) {
  return static_cast<float>(static_cast<long long>(2ull * static_cast<unsigned long long>(n) + 1));
}

// (-1)^n v.
KILN_SCALAR float alternate(long long n, float v) {
  return n % 2 == 0 ? v : -v;
}

// The recurrence p_{k+1} = 2y p_k - p_{k-1} of the Chebyshev kinds (y = x, or 2x - 1 shifted)
// from p_0 = 1 and p_1 = q, up to p_n (n >= 2). It stops at a NaN; where q is NaN from the start
// (x is), torch returns a variable its loop never set, and this returns NaN.
KILN_SCALAR float chebyshev_recurrence(float two_y, float q, long long n) {
  float p = 1.f;
  for (long long k = 2; k <= n && q == q; ++k) {
    const float r = fmaf(two_y, q, -p);
    p = q;
    q = r;
  }
  return q;
}

// T_n(x): cos(n acos x) inside (-1, 1) from n = 7.
KILN_SPECIAL float chebyshev_t(float x, float degree) {
  const long long n = polynomial_degree(degree);
  if (n < 0) return 0.f;
  if (fabsf(x) == 1.f) return x > 0.f || n % 2 == 0 ? 1.f : -1.f;
  if (n > 6 && fabsf(x) < 1.f) return cosf(static_cast<float>(n) * acosf(x));
  if (n == 0) return 1.f;
  if (n == 1) return x;
  return chebyshev_recurrence(x + x, x, n);
}

// U_n(x): sin((n + 1) θ) / sin θ (θ = acos x) inside (-1, 1) from n = 9.
KILN_SPECIAL float chebyshev_u(float x, float degree) {
  const long long n = polynomial_degree(degree);
  if (n < 0) return 0.f;
  const float n1 = static_cast<float>(n + 1);
  if (fabsf(x) == 1.f) return x > 0.f ? n1 : alternate(n, n1);
  if (n > 8 && fabsf(x) < 1.f) {
    if (sinf(acosf(x)) != 0.f) return sinf(n1 * acosf(x)) / sinf(acosf(x));
    return n1 * cosf(n1 * acosf(x)) / x;
  }
  if (n == 0) return 1.f;
  if (n == 1) return x + x;
  return chebyshev_recurrence(x + x, x + x, n);
}

// V_n(x): cos((n + 1/2) θ) / cos(θ / 2) inside (-1, 1) from n = 9.
KILN_SPECIAL float chebyshev_v(float x, float degree) {
  const long long n = polynomial_degree(degree);
  if (n < 0) return 0.f;
  if (fabsf(x) == 1.f) return x > 0.f ? 1.f : alternate(n, odd_degree(n));
  if (n > 8 && fabsf(x) < 1.f) {
    if (sinf(acosf(x) / 2.f) != 1.f) {
      return cosf((static_cast<float>(n) + 0.5f) * acosf(x)) / cosf(acosf(x) / 2.f);
    }
    return alternate(n, odd_degree(n));
  }
  if (n == 0) return 1.f;
  if (n == 1) return x + x - 1.f;
  return chebyshev_recurrence(x + x, x + x - 1.f, n);
}

// W_n(x): sin((n + 1/2) θ) / sin(θ / 2) inside (-1, 1) from n = 9.
KILN_SPECIAL float chebyshev_w(float x, float degree) {
  const long long n = polynomial_degree(degree);
  if (n < 0) return 0.f;
  if (fabsf(x) == 1.f) return x > 0.f ? odd_degree(n) : alternate(n, 1.f);
  if (n > 8 && fabsf(x) < 1.f) {
    if (cosf(acosf(x) / 2.f) != 1.f) {
      return sinf((static_cast<float>(n) + 0.5f) * acosf(x)) / sinf(acosf(x) / 2.f);
    }
    return x > 0.f ? odd_degree(n) : alternate(n, 1.f);
  }
  if (n == 0) return 1.f;
  if (n == 1) return x + x + 1.f;
  return chebyshev_recurrence(x + x, x + x + 1.f, n);
}

// The shifted kinds T*_n(x) = T_n(2x - 1), ...: torch's own branches at x = 1 and x = 0 (the
// ends of [0, 1]), its trig forms from n = 7 (n = 5 for W*), in y = 2x - 1 recomputed as torch
// does.
KILN_SPECIAL float shifted_chebyshev_t(float x, float degree) {
  const long long n = polynomial_degree(degree);
  if (n < 0) return 0.f;
  if (x == 1.f) return 1.f;
  if (x == 0.f) return alternate(n, 1.f);
  const float y = x + x - 1.f;
  if (n > 6 && fabsf(y) < 1.f) return cosf(static_cast<float>(n) * acosf(y));
  if (n == 0) return 1.f;
  if (n == 1) return y;
  return chebyshev_recurrence(y + y, y, n);
}

KILN_SPECIAL float shifted_chebyshev_u(float x, float degree) {
  const long long n = polynomial_degree(degree);
  if (n < 0) return 0.f;
  const float n1 = static_cast<float>(n + 1);
  if (x == 1.f) return n1;
  if (x == 0.f) return alternate(n, n1);
  const float y = x + x - 1.f;
  if (n > 6 && fabsf(y) < 1.f) {
    if (sinf(acosf(y)) != 0.f) return sinf(n1 * acosf(y)) / sinf(acosf(y));
    return n1 * cosf(n1 * acosf(y)) / y;
  }
  if (n == 0) return 1.f;
  if (n == 1) return y + y;
  return chebyshev_recurrence(y + y, y + y, n);
}

KILN_SPECIAL float shifted_chebyshev_v(float x, float degree) {
  const long long n = polynomial_degree(degree);
  if (n < 0) return 0.f;
  if (x == 1.f) return 1.f;
  if (x == 0.f) return alternate(n, odd_degree(n));
  const float y = x + x - 1.f;
  if (n > 6 && fabsf(y) < 1.f) {
    if (sinf(acosf(y) / 2.f) != 1.f) {
      return cosf((static_cast<float>(n) + 0.5f) * acosf(y)) / cosf(acosf(y) / 2.f);
    }
    return alternate(n, odd_degree(n));
  }
  if (n == 0) return 1.f;
  if (n == 1) return y + y - 1.f;
  return chebyshev_recurrence(y + y, y + y - 1.f, n);
}

KILN_SPECIAL float shifted_chebyshev_w(float x, float degree) {
  const long long n = polynomial_degree(degree);
  if (n < 0) return 0.f;
  if (x == 1.f) return odd_degree(n);
  if (x == 0.f) return alternate(n, 1.f);
  const float y = x + x - 1.f;
  if (n > 4 && fabsf(y) < 1.f) {
    if (cosf(acosf(y) / 2.f) != 1.f) {
      return sinf((static_cast<float>(n) + 0.5f) * acosf(y)) / sinf(acosf(y) / 2.f);
    }
    return alternate(n, 1.f);
  }
  if (n == 0) return 1.f;
  if (n == 1) return y + y + 1.f;
  return chebyshev_recurrence(y + y, y + y + 1.f, n);
}

// The Hermite polynomials, physicists' H_n (H_{k+1} = 2x H_k - 2k H_{k-1}) and probabilists'
// He_n (He_{k+1} = x He_k - k He_{k-1}); NaN above degree 128, torch's limit for float (past it
// float's range is spent).
KILN_SPECIAL float hermite_h(float x, float degree) {
  const long long n = polynomial_degree(degree);
  if (n < 0) return 0.f;
  if (n == 0) return 1.f;
  if (n == 1) return x + x;
  if (n > 128) return static_cast<float>(quiet_nan());
  float p = 1.f, q = x + x;
  for (long long k = 2; k < n + n; k += 2) {
    const float r = fmaf(x + x, q, -(static_cast<float>(k) * p));
    p = q;
    q = r;
  }
  return q;
}

KILN_SPECIAL float hermite_he(float x, float degree) {
  const long long n = polynomial_degree(degree);
  if (n < 0) return 0.f;
  if (n == 0) return 1.f;
  if (n == 1) return x;
  if (n > 128) return static_cast<float>(quiet_nan());
  float p = 1.f, q = x;
  for (long long k = 1; k < n; ++k) {
    const float r = fmaf(x, q, -(static_cast<float>(k) * p));
    p = q;
    q = r;
  }
  return q;
}

// L_n(x): (k + 1) L_{k+1} = (2k + 1 - x) L_k - k L_{k-1}; 1 at x = 0 for every n >= 0. Stops at
// a NaN.
KILN_SPECIAL float laguerre_l(float x, float degree) {
  const long long n = polynomial_degree(degree);
  if (n < 0) return 0.f;
  if (x == 0.f) return 1.f;
  if (n == 0) return 1.f;
  if (n == 1) return 1.f - x;
  float p = 1.f, q = 1.f - x;
  for (long long k = 1; k < n && q == q; ++k) {
    const float r = fmaf(static_cast<float>(k + k) + (1.f - x), q, -(static_cast<float>(k) * p)) /
                    static_cast<float>(k + 1);
    p = q;
    q = r;
  }
  return q;
}

// P_n(x): (k + 1) P_{k+1} = (2k + 1) x P_k - k P_{k-1}, ±1 at x = ±1. Stops at a NaN.
KILN_SPECIAL float legendre_p(float x, float degree) {
  const long long n = polynomial_degree(degree);
  if (n < 0) return 0.f;
  if (fabsf(x) == 1.f) return x > 0.f || n % 2 == 0 ? 1.f : -1.f;
  if (n == 0) return 1.f;
  if (n == 1) return x;
  float p = 1.f, q = x;
  for (long long k = 1; k < n && q == q; ++k) {
    const float r = fmaf(static_cast<float>(k + k + 1) * x, q, -(static_cast<float>(k) * p)) /
                    static_cast<float>(k + 1);
    p = q;
    q = r;
  }
  return q;
}

}  // namespace kiln::engine::special
