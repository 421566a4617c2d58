// The float semantics of the binary, unary and activation ops (matching PyTorch), written once
// for every place that computes them: the CPU kernels compile it as inline C++, the CUDA kernels
// as __host__ __device__ functions, and the CUDA code generator (cuda/codegen.cpp) hands it to
// NVRTC with the generated kernels, which call these functions with constant ops. So it includes
// nothing NVRTC lacks: the functions of <math.h> (built into NVRTC), op_kinds.h,
// special_math.h and orthogonal_polynomials.h.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <math.h>
#endif

#include "engine/op_kinds.h"

#if defined(__CUDACC_RTC__)
#define KILN_SCALAR __device__ __forceinline__
#elif defined(__CUDACC__)
#define KILN_SCALAR __host__ __device__ __forceinline__
#else
#define KILN_SCALAR inline
#endif

#include "engine/special_math.h"
// (after special_math.h, whose KILN_SPECIAL and quiet_nan it uses)
#include "engine/orthogonal_polynomials.h"

namespace kiln::engine {

KILN_SCALAR bool is_nan(float x) {
  return x != x;
}

// min(max(x, lo), hi) that keeps NaN, as torch's clamp, hardtanh and hard{sigmoid,swish} do.
// Written as selects, not fminf/fmaxf calls, so loops over it vectorize.
KILN_SCALAR float clamp_nan(float x, float lo, float hi) {
  const float y = x < lo ? lo : x;
  return y > hi ? hi : y;
}

// The comparisons, for floats and integers alike (false for any other op).
template <class T>
KILN_SCALAR bool compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::kEq:
      return a == b;
    case BinaryOp::kNe:
      return a != b;
    case BinaryOp::kLt:
      return a < b;
    case BinaryOp::kLe:
      return a <= b;
    case BinaryOp::kGt:
      return a > b;
    case BinaryOp::kGe:
      return a >= b;
    default:
      return false;
  }
}

KILN_SCALAR float activate(ActivationKind k, float x, float alpha, float beta) {
  switch (k) {
    case ActivationKind::kNone:
      return x;
    case ActivationKind::kRelu:
      return x > 0.f ? x : (is_nan(x) ? x : 0.f);
    case ActivationKind::kSigmoid:
      return 1.f / (1.f + expf(-x));
    case ActivationKind::kTanh:
      return tanhf(x);
    case ActivationKind::kGelu:
      return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case ActivationKind::kGeluTanh: {
      const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.f + tanhf(inner));
    }
    case ActivationKind::kSilu:
      return x / (1.f + expf(-x));
    case ActivationKind::kLeakyRelu:
      return x > 0.f ? x : alpha * x;
    case ActivationKind::kElu:
      return x > 0.f ? x : alpha * (expf(x) - 1.f);
    case ActivationKind::kHardSwish:
      return x * clamp_nan(x + 3.f, 0.f, 6.f) / 6.f;
    case ActivationKind::kHardSigmoid:
      return clamp_nan(x + 3.f, 0.f, 6.f) / 6.f;
    case ActivationKind::kSoftplus: {
      return x * alpha > beta ? x : log1pf(expf(alpha * x)) / alpha;
    }
    case ActivationKind::kClamp:
      return clamp_nan(x, alpha, beta);
    case ActivationKind::kMish:
      return x * tanhf(log1pf(expf(x)));
    case ActivationKind::kSelu: {
      constexpr float kScale = 1.0507009873554804934f, kAlpha = 1.6732632423543772848f;
      return kScale * (x > 0.f ? x : kAlpha * (expf(x) - 1.f));
    }
  }
  return x;
}

KILN_SCALAR float binary_float(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
    case BinaryOp::kPow:
      return powf(a, b);
    case BinaryOp::kMax:  // NaN if either is (a + b then is)
      return (is_nan(a) || is_nan(b)) ? a + b : (a > b ? a : b);
    case BinaryOp::kMin:
      return (is_nan(a) || is_nan(b)) ? a + b : (a < b ? a : b);
    case BinaryOp::kFloorDiv:
      return floorf(a / b);
    case BinaryOp::kMod: {
      float r = fmodf(a, b);
      if (r != 0.f && ((r < 0.f) != (b < 0.f))) r += b;
      return r;
    }
    case BinaryOp::kEq:
    case BinaryOp::kNe:
    case BinaryOp::kLt:
    case BinaryOp::kLe:
    case BinaryOp::kGt:
    case BinaryOp::kGe:
      return compare(op, a, b);
    case BinaryOp::kAnd:
      return (a != 0.f) && (b != 0.f);
    case BinaryOp::kOr:
      return (a != 0.f) || (b != 0.f);
    case BinaryOp::kXor:
      return (a != 0.f) != (b != 0.f);
    case BinaryOp::kZeta:
      return static_cast<float>(special::zeta(a, b));
    case BinaryOp::kPolygamma:
      return static_cast<float>(special::polygamma(a, b));
    case BinaryOp::kIgamma:
      return static_cast<float>(special::incomplete_gamma(a, b, false));
    case BinaryOp::kIgammac:
      return static_cast<float>(special::incomplete_gamma(a, b, true));
    case BinaryOp::kChebyshevT:
      return special::chebyshev_t(a, b);
    case BinaryOp::kChebyshevU:
      return special::chebyshev_u(a, b);
    case BinaryOp::kChebyshevV:
      return special::chebyshev_v(a, b);
    case BinaryOp::kChebyshevW:
      return special::chebyshev_w(a, b);
    case BinaryOp::kShiftedChebyshevT:
      return special::shifted_chebyshev_t(a, b);
    case BinaryOp::kShiftedChebyshevU:
      return special::shifted_chebyshev_u(a, b);
    case BinaryOp::kShiftedChebyshevV:
      return special::shifted_chebyshev_v(a, b);
    case BinaryOp::kShiftedChebyshevW:
      return special::shifted_chebyshev_w(a, b);
    case BinaryOp::kHermiteH:
      return special::hermite_h(a, b);
    case BinaryOp::kHermiteHe:
      return special::hermite_he(a, b);
    case BinaryOp::kLaguerreL:
      return special::laguerre_l(a, b);
    case BinaryOp::kLegendreP:
      return special::legendre_p(a, b);
    case BinaryOp::kCopysign:
      return copysignf(a, b);
  }
  return 0.f;
}

// The unary special functions, in double.
KILN_SCALAR float unary_special(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::kLgamma:
      return static_cast<float>(lgamma(x));
    case UnaryOp::kDigamma:
      return static_cast<float>(special::digamma(x));
    case UnaryOp::kErfinv:
      return static_cast<float>(special::erfinv(x));
    case UnaryOp::kErfcx:
      return static_cast<float>(special::erfcx(x));
    case UnaryOp::kNdtr:
      return static_cast<float>(0.5 * erfc(-x / special::kSqrt2));
    case UnaryOp::kNdtri:
      return static_cast<float>(special::ndtri(x));
    case UnaryOp::kLogNdtr:
      return static_cast<float>(special::log_ndtr(x));
    case UnaryOp::kI0:
    case UnaryOp::kI0e:
    case UnaryOp::kI1:
    case UnaryOp::kI1e:
      return static_cast<float>(
          special::bessel_i(op >= UnaryOp::kI1, x, op == UnaryOp::kI0e || op == UnaryOp::kI1e));
    case UnaryOp::kK0:
    case UnaryOp::kK0e:
    case UnaryOp::kK1:
    case UnaryOp::kK1e:
      return static_cast<float>(
          special::bessel_k(op >= UnaryOp::kK1, x, op == UnaryOp::kK0e || op == UnaryOp::kK1e));
    case UnaryOp::kBesselJ0:
    case UnaryOp::kBesselJ1:
    case UnaryOp::kBesselY0:
    case UnaryOp::kBesselY1:
      return static_cast<float>(
          special::bessel_jy(op == UnaryOp::kBesselJ1 || op == UnaryOp::kBesselY1, x,
                             op == UnaryOp::kBesselY0 || op == UnaryOp::kBesselY1));
    case UnaryOp::kSphericalBesselJ0:
      return static_cast<float>(special::spherical_bessel_j0(x));
    case UnaryOp::kAiryAi:
      return static_cast<float>(special::airy_ai(x));
    default:
      return static_cast<float>(x);
  }
}

KILN_SCALAR float unary_float(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kAbs:
      return fabsf(x);
    case UnaryOp::kExp:
      return expf(x);
    case UnaryOp::kLog:
      return logf(x);
    case UnaryOp::kSqrt:
      return sqrtf(x);
    case UnaryOp::kRsqrt:
      return 1.f / sqrtf(x);
    case UnaryOp::kReciprocal:
      return 1.f / x;
    case UnaryOp::kSin:
      return sinf(x);
    case UnaryOp::kCos:
      return cosf(x);
    case UnaryOp::kTan:
      return tanf(x);
    case UnaryOp::kAsin:
      return asinf(x);
    case UnaryOp::kAcos:
      return acosf(x);
    case UnaryOp::kAtan:
      return atanf(x);
    case UnaryOp::kSinh:
      return sinhf(x);
    case UnaryOp::kCosh:
      return coshf(x);
    case UnaryOp::kErf:
      return erff(x);
    case UnaryOp::kFloor:
      return floorf(x);
    case UnaryOp::kCeil:
      return ceilf(x);
    case UnaryOp::kRound:
      return rintf(x);  // half to even, as torch.round
    case UnaryOp::kTrunc:
      return truncf(x);
    case UnaryOp::kSign:
      return is_nan(x) ? x : static_cast<float>((x > 0.f) - (x < 0.f));
    case UnaryOp::kNot:
      return x == 0.f;
    case UnaryOp::kLog2:
      return log2f(x);
    case UnaryOp::kLog1p:
      return log1pf(x);
    case UnaryOp::kExpm1:
      return expm1f(x);
    case UnaryOp::kIsNan:
      return is_nan(x);
    default:
      return unary_special(op, x);
  }
  return x;
}

}  // namespace kiln::engine
