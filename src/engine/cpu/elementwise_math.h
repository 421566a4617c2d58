// Scalar semantics of binary, unary and activation ops (matching PyTorch), shared by kernels.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/layers.h"

namespace kiln::engine::cpu {

// Errors found inside parallel loops are recorded here and thrown afterwards.
enum class MathError : int { kNone = 0, kIntegerDivisionByZero, kNegativeIntegerPower };

// min(max(x, lo), hi) that keeps NaN, as torch's clamp, hardtanh and hard{sigmoid,swish} do.
// Written as selects, not fminf/fmaxf calls, so loops over it vectorize.
inline float clamp_nan(float x, float lo, float hi) {
  const float y = x < lo ? lo : x;
  return y > hi ? hi : y;
}

inline float activate(ActivationKind k, float x, double alpha, double beta) {
  switch (k) {
    case ActivationKind::kNone:
      return x;
    case ActivationKind::kRelu:
      return x > 0.f ? x : (std::isnan(x) ? x : 0.f);
    case ActivationKind::kSigmoid:
      return 1.f / (1.f + std::exp(-x));
    case ActivationKind::kTanh:
      return std::tanh(x);
    case ActivationKind::kGelu:
      return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
    case ActivationKind::kGeluTanh: {
      const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.f + std::tanh(inner));
    }
    case ActivationKind::kSilu:
      return x / (1.f + std::exp(-x));
    case ActivationKind::kLeakyRelu:
      return x > 0.f ? x : static_cast<float>(alpha) * x;
    case ActivationKind::kElu:
      return x > 0.f ? x : static_cast<float>(alpha) * (std::exp(x) - 1.f);
    case ActivationKind::kHardSwish:
      return x * clamp_nan(x + 3.f, 0.f, 6.f) / 6.f;
    case ActivationKind::kHardSigmoid:
      return clamp_nan(x + 3.f, 0.f, 6.f) / 6.f;
    case ActivationKind::kSoftplus: {
      const float b = static_cast<float>(alpha), threshold = static_cast<float>(beta);
      return x * b > threshold ? x : std::log1p(std::exp(b * x)) / b;
    }
    case ActivationKind::kClamp:
      return clamp_nan(x, static_cast<float>(alpha), static_cast<float>(beta));
    case ActivationKind::kMish:
      return x * std::tanh(std::log1p(std::exp(x)));
    case ActivationKind::kSelu: {
      constexpr float kScale = 1.0507009873554804934f, kAlpha = 1.6732632423543772848f;
      return kScale * (x > 0.f ? x : kAlpha * (std::exp(x) - 1.f));
    }
  }
  return x;
}

inline float binary_float(BinaryOp op, float a, float b) {
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
      return std::pow(a, b);
    case BinaryOp::kMax:
      return (std::isnan(a) || std::isnan(b)) ? NAN : (a > b ? a : b);
    case BinaryOp::kMin:
      return (std::isnan(a) || std::isnan(b)) ? NAN : (a < b ? a : b);
    case BinaryOp::kFloorDiv:
      return std::floor(a / b);
    case BinaryOp::kMod: {
      float r = std::fmod(a, b);
      if (r != 0.f && ((r < 0.f) != (b < 0.f))) r += b;
      return r;
    }
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
    case BinaryOp::kAnd:
      return (a != 0.f) && (b != 0.f);
    case BinaryOp::kOr:
      return (a != 0.f) || (b != 0.f);
    case BinaryOp::kXor:
      return (a != 0.f) != (b != 0.f);
  }
  return 0.f;
}

inline int64_t binary_int(BinaryOp op, int64_t a, int64_t b, MathError& err) {
  switch (op) {
    case BinaryOp::kAdd:
      return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    case BinaryOp::kSub:
      return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
    case BinaryOp::kMul:
      return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    case BinaryOp::kDiv:  // rejected by inference for integers; kept total
    case BinaryOp::kFloorDiv: {
      if (b == 0) {
        err = MathError::kIntegerDivisionByZero;
        return 0;
      }
      if (b == -1) return static_cast<int64_t>(0 - static_cast<uint64_t>(a));
      int64_t q = a / b;
      if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
      return q;
    }
    case BinaryOp::kMod: {
      if (b == 0) {
        err = MathError::kIntegerDivisionByZero;
        return 0;
      }
      if (b == -1) return 0;
      int64_t r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    }
    case BinaryOp::kPow: {
      if (b < 0) {
        if (a == 1) return 1;
        if (a == -1) return (b % 2 == 0) ? 1 : -1;
        err = MathError::kNegativeIntegerPower;
        return 0;
      }
      uint64_t result = 1, base = static_cast<uint64_t>(a);
      for (int64_t e = b; e > 0; e >>= 1) {
        if (e & 1) result *= base;
        base *= base;
      }
      return static_cast<int64_t>(result);
    }
    case BinaryOp::kMax:
      return a > b ? a : b;
    case BinaryOp::kMin:
      return a < b ? a : b;
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
    case BinaryOp::kAnd:
      return a & b;
    case BinaryOp::kOr:
      return a | b;
    case BinaryOp::kXor:
      return a ^ b;
  }
  return 0;
}

inline float unary_float(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kAbs:
      return std::fabs(x);
    case UnaryOp::kExp:
      return std::exp(x);
    case UnaryOp::kLog:
      return std::log(x);
    case UnaryOp::kSqrt:
      return std::sqrt(x);
    case UnaryOp::kRsqrt:
      return 1.f / std::sqrt(x);
    case UnaryOp::kReciprocal:
      return 1.f / x;
    case UnaryOp::kSin:
      return std::sin(x);
    case UnaryOp::kCos:
      return std::cos(x);
    case UnaryOp::kTan:
      return std::tan(x);
    case UnaryOp::kAsin:
      return std::asin(x);
    case UnaryOp::kAcos:
      return std::acos(x);
    case UnaryOp::kAtan:
      return std::atan(x);
    case UnaryOp::kSinh:
      return std::sinh(x);
    case UnaryOp::kCosh:
      return std::cosh(x);
    case UnaryOp::kErf:
      return std::erf(x);
    case UnaryOp::kFloor:
      return std::floor(x);
    case UnaryOp::kCeil:
      return std::ceil(x);
    case UnaryOp::kRound:
      return std::nearbyint(x);  // half to even, as torch.round
    case UnaryOp::kTrunc:
      return std::trunc(x);
    case UnaryOp::kSign:
      return std::isnan(x) ? x : static_cast<float>((x > 0.f) - (x < 0.f));
    case UnaryOp::kNot:
      return x == 0.f;
    case UnaryOp::kLog2:
      return std::log2(x);
    case UnaryOp::kLog1p:
      return std::log1p(x);
    case UnaryOp::kExpm1:
      return std::expm1(x);
    case UnaryOp::kIsNan:
      return std::isnan(x);
  }
  return x;
}

inline int64_t unary_int(UnaryOp op, int64_t x) {
  switch (op) {
    case UnaryOp::kNeg:
      return static_cast<int64_t>(0 - static_cast<uint64_t>(x));
    case UnaryOp::kAbs:
      return x < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x)) : x;
    case UnaryOp::kSign:
      return (x > 0) - (x < 0);
    case UnaryOp::kNot:
      return x == 0;
    default:
      return x;  // floor/ceil/round/trunc of integers
  }
}

}  // namespace kiln::engine::cpu
