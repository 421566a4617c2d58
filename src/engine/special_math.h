// PyTorch's special functions (lgamma, digamma, polygamma, zeta, erfinv, ndtri, the incomplete
// gamma, the Bessel and Airy functions) for scalar_ops.h. They compute in double, so that float
// results are right to their last bit or two, and keep PyTorch's values at poles, infinities and
// outside their domains. Like scalar_ops.h (which includes this file after defining KILN_SCALAR)
// this is compiled as C++, as CUDA and by NVRTC: it calls only the double functions of <math.h>
// that all three have, and keeps its tables inside functions (device code cannot read host arrays).
#pragma once

// Not inlined on the device: the generic kernels' other ops would pay for these functions'
// registers, and NVRTC would compile a copy per call site and entry point (a program with every
// op takes 4x longer to compile inlined).
#if defined(__CUDACC_RTC__)
#define KILN_SPECIAL __device__ __noinline__
#elif defined(__CUDACC__)
#define KILN_SPECIAL inline __host__ __device__ __noinline__
#else
#define KILN_SPECIAL inline
#endif

namespace kiln::engine::special {

constexpr double kPi = 3.14159265358979323846;
constexpr double kEulerGamma = 0.57721566490153286061;
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kSqrtPi = 1.77245385090551602730;
constexpr double kEps = 1.1102230246251565e-16;  // 2^-53

KILN_SCALAR double infinity() {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(0x7ff0000000000000LL);
#else
  return __builtin_huge_val();
#endif
}

KILN_SCALAR double quiet_nan() {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(0x7ff8000000000000LL);
#else
  return __builtin_nan("");
#endif
}

// ---- gamma family ----

// ψ(x): reflection below 0, the recurrence ψ(x) = ψ(x + 1) - 1/x up to 10, then the asymptotic
// series. ψ(±0) = ∓inf and NaN at the negative integers and -inf, as torch.digamma.
KILN_SPECIAL double digamma(double x) {
  if (x == 0) return copysign(infinity(), -x);
  double result = 0;
  if (x < 0) {
    if (x == floor(x)) return quiet_nan();
    // ψ(x) = ψ(1 - x) - π / tan(πx); tan has period 1 in x, so its argument is reduced exactly.
    result = -kPi / tan(kPi * (x - trunc(x)));
    x = 1 - x;
  }
  while (x < 10) {
    result -= 1 / x;
    x += 1;
  }
  const double z = 1 / (x * x);  // Σ B_2k / (2k x^2k), to k = 7
  const double tail =
      z * (1.0 / 12 - z * (1.0 / 120 -
                           z * (1.0 / 252 -
                                z * (1.0 / 240 - z * (1.0 / 132 - z * (691.0 / 32760 - z / 12))))));
  return result + log(x) - 0.5 / x - tail;
}

// The Hurwitz zeta function ζ(x, q) = Σ_k (q + k)^-x by Euler–Maclaurin summation: the first
// terms (at least 9, until q + k > 9) summed, then the integral of the rest, half its first term
// and Bernoulli corrections. torch.special.zeta's domain: inf at x = 1 and at the poles q = 0,
// -1, ...; NaN for x < 1 and for a negative q with a fractional x. The tests of the sums divide
// (t / sum), so that infinite or zero sums give NaN where torch's do.
KILN_SPECIAL double zeta(double x, double q) {
  if (x == 1) return infinity();
  if (x < 1) return quiet_nan();
  if (q <= 0) {
    if (q == floor(q)) return infinity();
    if (x != floor(x)) return quiet_nan();
  }
  double sum = pow(q, -x), w = q, t = 0;
  for (int k = 1; k <= 9 || w <= 9; ++k) {
    w += 1;
    t = pow(w, -x);
    sum += t;
    if (fabs(t / sum) < kEps) return sum;
  }
  // sum holds the terms through w; the remainder Σ_{k>0} (w + k)^-x is
  // w^(1-x) / (x - 1) - w^-x / 2 + Σ_j B_2j / (2j)! x (x+1) ... (x+2j-2) w^(-x-2j+1).
  sum += t * w / (x - 1) - 0.5 * t;
  const double bernoulli[] = {
      8.3333333333333333333e-2,   -1.3888888888888888889e-3,  3.3068783068783068783e-5,
      -8.2671957671957671958e-7,  2.0876756987868098979e-8,   -5.2841901386874931848e-10,
      1.3382536530684678833e-11,  -3.3896802963225828668e-13, 8.5860620562778445641e-15,
      -2.1748686985580618730e-16, 5.5090028283602295152e-18,  -1.3954464685812523341e-19};
  double rising = x, power = t / w;
  for (int j = 0; j < 12; ++j) {
    const double c = bernoulli[j] * rising * power;
    sum += c;
    if (fabs(c / sum) < kEps) break;
    rising *= (x + 2 * j + 1) * (x + 2 * j + 2);
    power /= w * w;
  }
  return sum;
}

// ψ^(n)(x): ψ for n = 0, else (-1)^(n+1) n! ζ(n + 1, x), as torch.polygamma computes it for
// n >= 2. For n = 1 torch has its own trigamma, whose values at ±inf (0, NaN) are kept; at the
// poles it is finite (float rounding of sin(πx)) where this gives inf.
KILN_SPECIAL double polygamma(double n, double x) {
  if (n == 0) return digamma(x);
  if (n == 1 && fabs(x) == infinity()) return x > 0 ? 0.0 : quiet_nan();
  const double sign = fmod(n, 2.0) == 1 ? 1.0 : -1.0;
  return sign * exp(lgamma(n + 1)) * zeta(n + 1, x);
}

// The regularized incomplete gamma functions P(a, x) (upper = false) and Q(a, x) = 1 - P: the
// series of P below x = a + 1, the continued fraction of Q (modified Lentz) above, each giving
// the other as 1 - itself where it is not small. Edge values as torch.igamma/igammac.
KILN_SPECIAL double incomplete_gamma(double a, double x, bool upper) {
  if (x < 0 || a < 0) return quiet_nan();
  if (a == 0) return x > 0 ? (upper ? 0.0 : 1.0) : quiet_nan();
  if (x == 0) return upper ? 1.0 : 0.0;
  if (a == infinity()) return x == infinity() ? quiet_nan() : (upper ? 1.0 : 0.0);
  if (x == infinity()) return upper ? 0.0 : 1.0;
  if (a != a || x != x) return quiet_nan();  // after torch's tests, which some NaNs pass
  if (x < a + 1) {
    // P = x^a e^-x / Γ(a + 1) Σ_k x^k / ((a + 1) ... (a + k)).
    double term = 1, sum = 1;
    for (int k = 1; k < 100000; ++k) {
      term *= x / (a + k);
      sum += term;
      if (term < kEps * sum) break;
    }
    const double p = sum * exp(a * log(x) - x - lgamma(a + 1));
    return upper ? 1 - p : p;
  }
  // Q = x^a e^-x / Γ(a) / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...))).
  constexpr double kTiny = 1e-300;
  double b = x + 1 - a, c = 1 / kTiny, d = 1 / b, f = d;
  for (int k = 1; k < 100000; ++k) {
    const double an = -k * (k - a);
    b += 2;
    d = an * d + b;
    if (fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double delta = d * c;
    f *= delta;
    if (fabs(delta - 1) < kEps) break;
  }
  const double q = f * exp(a * log(x) - x - lgamma(a));
  return upper ? q : 1 - q;
}

// ---- error function family ----

// erfcx(x) = e^(x^2) erfc(x): directly below 8 (where neither factor over- or underflows), and
// by its asymptotic series 1 / (x √π) Σ_k (-1)^k (2k - 1)!! / (2x^2)^k above.
KILN_SPECIAL double erfcx(double x) {
  if (x < 8) return exp(x * x) * erfc(x);
  const double z = 1 / (2 * x * x);
  double term = 1, sum = 1;
  for (int k = 1; k < 20; ++k) {
    term *= -(2 * k - 1) * z;
    sum += term;
    if (fabs(term) < kEps) break;
  }
  return sum / (x * kSqrtPi);
}

// log Φ(x): through erfcx in the left tail, where Φ itself underflows.
KILN_SPECIAL double log_ndtr(double x) {
  if (x < -1) return log(0.5 * erfcx(-x / kSqrt2)) - 0.5 * x * x;
  return log1p(-0.5 * erfc(x / kSqrt2));
}

// The x with erf(x) = y (|y| <= 1/2; upper = false) or erfc(x) = y (0 < y <= 1/2; upper = true),
// x >= 0 for the latter: Winitzki's closed-form approximation (2e-3 relative) polished by Halley
// steps, with f''/f' = -2x for erf and erfc alike. Residuals in erfc keep the tail's relative
// accuracy (1 - y would round it away).
KILN_SPECIAL double inverse_erf_or_erfc(double y, bool upper) {
  constexpr double a = 0.147;  // Winitzki's constant
  // L = log(1 - e^2) for the e with erf(x) = e: e = y, or 1 - y for the upper branch.
  const double L = upper ? log(y * (2 - y)) : log1p(-y * y);
  const double t = 2 / (kPi * a) + 0.5 * L;
  double x = sqrt((-L / a) / (sqrt(t * t - L / a) + t));  // sqrt(sqrt(t^2 - L/a) - t)
  if (!upper && y < 0) x = -x;
  for (int i = 0; i < 4; ++i) {
    const double slope = 2 / kSqrtPi * exp(-x * x);
    const double step = upper ? (y - erfc(x)) / slope : (erf(x) - y) / slope;
    x -= step / (1 + x * step);
  }
  return x;
}

// erfinv(y): NaN outside [-1, 1], ±inf at ±1.
KILN_SPECIAL double erfinv(double y) {
  if (!(fabs(y) <= 1)) return quiet_nan();
  if (fabs(y) == 1) return copysign(infinity(), y);
  if (y == 0) return y;
  if (fabs(y) <= 0.5) return inverse_erf_or_erfc(y, false);
  return copysign(inverse_erf_or_erfc(1 - fabs(y), true), y);
}

// Φ^-1(p) = -√2 erfcinv(2p) = √2 erfinv(2p - 1): NaN outside [0, 1], -inf at 0, inf at 1. Both
// tails go through erfc, 1 - p being exact for p >= 1/2.
KILN_SPECIAL double ndtri(double p) {
  if (!(p >= 0 && p <= 1)) return quiet_nan();
  if (p == 0) return -infinity();
  if (p == 1) return infinity();
  if (p >= 0.25 && p <= 0.75) return kSqrt2 * inverse_erf_or_erfc(2 * p - 1, false);
  if (p < 0.5) return -kSqrt2 * inverse_erf_or_erfc(2 * p, true);
  return kSqrt2 * inverse_erf_or_erfc(2 * (1 - p), true);
}

// ---- Bessel functions ----

// e^-x I_n(x), n = 0 or 1, x >= 0: the power series Σ_k (x/2)^(2k+n) / (k! (k+n)!) (positive
// terms, no cancellation) up to 30, the asymptotic series
// e^-x I_n(x) ~ Σ_k (-1)^k a_k(n) / x^k / √(2πx), a_k = Π_{j<=k} (4n² - (2j-1)²) / (8j), above.
KILN_SPECIAL double bessel_i_scaled(int n, double x) {
  if (x <= 30) {
    const double y = 0.25 * x * x;
    double term = n == 0 ? 1.0 : 0.5 * x, sum = term;
    for (int k = 1; k < 200; ++k) {
      term *= y / (k * (k + n));
      sum += term;
      if (term < kEps * sum) break;
    }
    return sum * exp(-x);
  }
  const double mu = 4.0 * n * n;
  double term = 1, sum = 1;
  for (int k = 1; k < 40; ++k) {
    term *= -(mu - (2 * k - 1) * (2 * k - 1)) / (8 * k * x);
    sum += term;
    if (fabs(term) < kEps) break;
  }
  return sum / sqrt(2 * kPi * x);
}

// I_n(x) and e^-|x| I_n(x) for any x (I_1 is odd). As torch.i0 and special.i1: NaN at ±inf, and
// inf from |x| = 88.72... on, where torch's float exp(x) overflows (I_n itself does so at 91.9).
KILN_SPECIAL double bessel_i(int n, double x, bool scaled) {
  const double ax = fabs(x);
  if (ax == infinity() && !scaled) return quiet_nan();
  double r = 0;
  if (ax == infinity()) {
    r = 0;
  } else if (scaled) {
    r = bessel_i_scaled(n, ax);
  } else {
    r = ax > 88.7228391116729996 ? infinity() : bessel_i_scaled(n, ax) * exp(ax);
  }
  return n == 1 && x < 0 ? -r : r;
}

// e^x K_ν(x) = ∫_0^∞ exp(-x (cosh t - 1)) cosh(νt) dt for x > 0, by the trapezoidal rule, which
// converges geometrically for this even, analytic integrand: steps of 1/4, or finer for large x
// where the integrand narrows to a width of 1/√x, until exp(-x (cosh t - 1)) < e^-50.
KILN_SPECIAL double bessel_k_scaled_integral(double nu, double x) {
  const double h = fmin(0.25, 0.7 / sqrt(x));
  double sum = 0.5;
  for (int k = 1; k < 400; ++k) {
    const double t = k * h, s = sinh(0.5 * t);
    const double e = x * 2 * s * s;  // x (cosh t - 1)
    if (e > 50) break;
    sum += exp(-e) * cosh(nu * t);
  }
  return sum * h;
}

// K_n(x) (n = 0 or 1), or e^x K_n(x): NaN below 0, inf at 0, 0 at inf. Up to 2 by the series
//   K_0 = -(log(x/2) + γ) I_0 + Σ_{k>=1} H_k y^k / k!²,
//   K_1 = 1/x + (log(x/2) + γ) I_1 - x/4 Σ_{k>=0} (2 H_k + 1/(k+1)) y^k / (k! (k+1)!),
// with y = x²/4 and H_k the harmonic numbers; above, by the integral.
KILN_SPECIAL double bessel_k(int n, double x, bool scaled) {
  if (x < 0) return quiet_nan();
  if (x == 0) return infinity();
  if (x == infinity()) return 0;
  if (x > 2) {
    const double k = bessel_k_scaled_integral(n, x);
    return scaled ? k : k * exp(-x);
  }
  const double y = 0.25 * x * x, lead = log(0.5 * x) + kEulerGamma;
  double term = n == 0 ? 1.0 : 0.5 * x;  // (x/2)^(2k+n) / (k! (k+n)!)
  double i = term, harmonic = 0, sum = n == 0 ? 0.0 : term;
  for (int k = 1; k < 60; ++k) {
    harmonic += 1.0 / k;
    term *= y / (k * (k + n));
    i += term;
    sum += n == 0 ? harmonic * term : (2 * harmonic + 1.0 / (k + 1)) * term;
    if (term < kEps * i) break;
  }
  const double r = n == 0 ? sum - lead * i : 1 / x + lead * i - 0.5 * sum;
  return scaled ? r * exp(x) : r;
}

// The sums of Hankel's asymptotic expansion for x >= 12:
//   P ~ Σ_k (-1)^k a_2k / x^2k, Q ~ Σ_k (-1)^k a_2k+1 / x^(2k+1), a_k = Π_{j<=k} (4n² - (2j-1)²) /
//   (8j),
// stopping at the smallest term.
KILN_SCALAR void hankel_sums(int n, double x, double& p, double& q) {
  const double mu = 4.0 * n * n;
  double term = 1;
  p = 1;
  q = 0;
  for (int k = 1; k < 60; ++k) {
    const double next = term * (mu - (2 * k - 1) * (2 * k - 1)) / (8 * k * x);
    if (fabs(next) >= fabs(term) || fabs(next) < 1e-20) break;
    term = next;
    if (k % 4 == 1) q += term;
    if (k % 4 == 2) p -= term;
    if (k % 4 == 3) q -= term;
    if (k % 4 == 0) p += term;
  }
}

// J_n(x) (second = false) or Y_n(x) (second = true), n = 0 or 1. J by its power series below 12
// and Y by the series
//   Y_0 = 2/π ((log(x/2) + γ) J_0 - Σ_{k>=1} H_k (-y)^k / k!²),
//   Y_1 = -2/(πx) + 2/π (log(x/2) + γ) J_1 - x/(2π) Σ_{k>=0} (2 H_k + 1/(k+1)) (-y)^k / (k!
//   (k+1)!),
// Hankel's expansion above, with cos/sin(x - (2n+1)π/4) from cos x and sin x (no rounding of a
// shifted argument). J_0 is even, J_1 odd; Y is NaN below 0 and -inf at 0, as in torch.
KILN_SPECIAL double bessel_jy(int n, double x, bool second) {
  if (second && x < 0) return quiet_nan();
  if (second && x == 0) return -infinity();
  const double ax = fabs(x);
  double r = 0;
  if (ax < 12) {
    const double y = 0.25 * ax * ax;
    double term = n == 0 ? 1.0 : 0.5 * ax;
    double j = term, harmonic = 0, sum = n == 0 ? 0.0 : term;
    for (int k = 1; k < 80; ++k) {
      harmonic += 1.0 / k;
      term *= -y / (k * (k + n));
      j += term;
      sum += n == 0 ? harmonic * term : (2 * harmonic + 1.0 / (k + 1)) * term;
      if (fabs(term) < 1e-20 * (1 + fabs(j))) break;
    }
    if (!second) {
      r = j;
    } else {
      const double lead = log(0.5 * ax) + kEulerGamma;
      r = n == 0 ? 2 / kPi * (lead * j - sum) : -2 / (kPi * ax) + 2 / kPi * lead * j - sum / kPi;
    }
  } else {
    double p = 0, q = 0;
    hankel_sums(n, ax, p, q);
    const double c = cos(ax), s = sin(ax);
    // cos χ, sin χ times √2: χ = x - π/4 (n = 0) or x - 3π/4 (n = 1).
    const double cos_chi = n == 0 ? c + s : s - c, sin_chi = n == 0 ? s - c : -(s + c);
    r = (second ? p * sin_chi + q * cos_chi : p * cos_chi - q * sin_chi) / sqrt(kPi * ax);
  }
  return n == 1 && x < 0 ? -r : r;
}

// Ai(x): its Maclaurin series Ai(0) f(x) + Ai'(0) g(x) on [-8, 1]; above, Ai(x) =
// √(x/3)/π K_1/3(ζ) with ζ = 2/3 x^(3/2) (by the integral); below, the asymptotic expansion
// Ai(-z) ~ (cos(ζ - π/4) P + sin(ζ - π/4) Q) / (√π z^(1/4)) with P, Q sums of (-1)^k u_k / ζ^k,
// u_k = u_{k-1} (6k-5)(6k-3)(6k-1) / ((2k-1) 216 k). NaN at ±inf, as torch.special.airy_ai.
KILN_SPECIAL double airy_ai(double x) {
  if (x == infinity()) return quiet_nan();
  if (x > 1) {
    const double zeta = 2.0 / 3 * x * sqrt(x);
    return sqrt(x / 3) / kPi * bessel_k_scaled_integral(1.0 / 3, zeta) * exp(-zeta);
  }
  if (x >= -8) {
    const double x3 = x * x * x;
    double f = 1, g = x, tf = 1, tg = x;
    for (int k = 1; k < 60; ++k) {
      tf *= x3 / ((3 * k - 1) * (3 * k));
      tg *= x3 / ((3 * k) * (3 * k + 1));
      f += tf;
      g += tg;
      if (fabs(tf) + fabs(tg) < 1e-20) break;
    }
    return 0.35502805388781723926 * f - 0.25881940379280679841 * g;
  }
  const double z = -x, zeta = 2.0 / 3 * z * sqrt(z);
  double term = 1, p = 1, q = 0;
  for (int k = 1; k < 60; ++k) {
    const double next =
        term * (6 * k - 5) * (6 * k - 3) * (6 * k - 1) / ((2 * k - 1) * 216.0 * k * zeta);
    if (fabs(next) >= fabs(term) || fabs(next) < 1e-20) break;
    term = next;
    if (k % 4 == 1) q += term;
    if (k % 4 == 2) p -= term;
    if (k % 4 == 3) q -= term;
    if (k % 4 == 0) p += term;
  }
  const double c = cos(zeta), s = sin(zeta);  // cos/sin(ζ - π/4) times √2
  return (p * (c + s) + q * (s - c)) / (kSqrt2 * kSqrtPi * sqrt(sqrt(z)));
}

// j_0(x) = sin(x) / x, 1 at 0 and 0 at ±inf.
KILN_SCALAR double spherical_bessel_j0(double x) {
  if (fabs(x) == infinity()) return 0;
  return x == 0 ? 1.0 : sin(x) / x;
}

}  // namespace kiln::engine::special
