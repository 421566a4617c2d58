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
};
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
};
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

}  // namespace kiln::engine
