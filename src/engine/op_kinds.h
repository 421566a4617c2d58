// The ops of the elementwise layers (binary, unary, activation), apart from the rest of
// layers.h: scalar_ops.h computes them, and the CUDA code generator hands both files to NVRTC,
// which has no standard headers. Nothing is included here.
#pragma once

namespace kiln::engine {

enum class BinaryOp : unsigned char {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMax,
  kMin,
  kFloorDiv,
  kMod,  // arithmetic (kMod: Python remainder)
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,  // comparisons -> bool
  kAnd,
  kOr,
  kXor,  // logical (bool) / bitwise (int)
  // Special functions of floats (special_math.h): ζ(a, b) (Hurwitz), ψ^(a)(b) (a the order), the
  // regularized incomplete gammas P(a, b) and Q(a, b).
  kZeta,
  kPolygamma,
  kIgamma,
  kIgammac,
  // The orthogonal polynomials of x = a with degree n = b (orthogonal_polynomials.h): Chebyshev's
  // four kinds, shifted to [0, 1] too, Hermite's H and He, Laguerre's L and Legendre's P.
  kChebyshevT,
  kChebyshevU,
  kChebyshevV,
  kChebyshevW,
  kShiftedChebyshevT,
  kShiftedChebyshevU,
  kShiftedChebyshevV,
  kShiftedChebyshevW,
  kHermiteH,
  kHermiteHe,
  kLaguerreL,
  kLegendreP,
  // a's magnitude with b's sign bit (-0 and NaNs of either sign too), of floats.
  kCopysign,
};
constexpr int kNumBinaryOps = static_cast<int>(BinaryOp::kCopysign) + 1;

enum class UnaryOp : unsigned char {
  kNeg,
  kAbs,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kReciprocal,
  kSin,
  kCos,
  kTan,
  kAsin,
  kAcos,
  kAtan,
  kSinh,
  kCosh,
  kErf,
  kFloor,
  kCeil,
  kRound,
  kTrunc,
  kSign,
  kNot,
  kLog2,
  kLog1p,
  kExpm1,
  kIsNan,
  // Special functions (special_math.h).
  kLgamma,
  kDigamma,
  kErfinv,
  kErfcx,
  kNdtr,
  kNdtri,
  kLogNdtr,
  kI0,
  kI0e,
  kI1,
  kI1e,
  kK0,
  kK0e,
  kK1,
  kK1e,
  kBesselJ0,
  kBesselJ1,
  kBesselY0,
  kBesselY1,
  kSphericalBesselJ0,
  kAiryAi,
};
constexpr int kNumUnaryOps = static_cast<int>(UnaryOp::kAiryAi) + 1;

enum class ActivationKind : unsigned char {
  kNone,
  kRelu,
  kSigmoid,
  kTanh,
  kGelu,
  kGeluTanh,
  kSilu,
  kLeakyRelu /*alpha*/,
  kElu /*alpha*/,
  kHardSwish,
  kHardSigmoid,
  kSoftplus /*alpha=beta, beta=threshold*/,
  kClamp /*alpha=min,beta=max*/,
  kMish,
  kSelu,
};
constexpr int kNumActivationKinds = static_cast<int>(ActivationKind::kSelu) + 1;

}  // namespace kiln::engine
