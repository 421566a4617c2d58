// Scalar semantics of binary, unary and activation ops on the device, matching
// cpu/elementwise_math.h (and so PyTorch). Integer errors (division by zero) give 0 on the device.
#pragma once

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/layers.h"

namespace kiln::engine::cuda {

// min(max(x, lo), hi) keeping NaN, as torch's clamp, hardtanh and hard{sigmoid,swish} do.
__device__ __forceinline__ float clamp_nan(float x, float lo, float hi) {
  const float y = x < lo ? lo : x;
  return y > hi ? hi : y;
}

__device__ __forceinline__ float activate(ActivationKind k, float x, float alpha, float beta) {
  switch (k) {
    case ActivationKind::kNone:
      return x;
    case ActivationKind::kRelu:
      return x > 0.f ? x : (isnan(x) ? x : 0.f);
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
    case ActivationKind::kSoftplus:
      return x * alpha > beta ? x : log1pf(expf(alpha * x)) / alpha;
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

// activate() with the kind fixed at compile time where A >= 0 (the switch folds away), the
// runtime kind where A is -1.
template <int A>
__device__ __forceinline__ float activate_as(ActivationKind runtime, float x, float alpha,
                                             float beta) {
  return activate(A >= 0 ? static_cast<ActivationKind>(A) : runtime, x, alpha, beta);
}

// activate() over an array with the switch taken once for all of it (the common kinds; the rest
// per element), for kernels where a compile-time kind per launch would multiply instantiations.
template <int A, int N>
__device__ __forceinline__ void activate_each(float (&v)[N], float alpha, float beta) {
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = activate(static_cast<ActivationKind>(A), v[i], alpha, beta);
}
template <int N>
__device__ __forceinline__ void activate_all(ActivationKind k, float (&v)[N], float alpha,
                                             float beta) {
  using K = ActivationKind;
  switch (k) {
    case K::kNone:
      return;
    case K::kRelu:
      return activate_each<static_cast<int>(K::kRelu)>(v, alpha, beta);
    case K::kSilu:
      return activate_each<static_cast<int>(K::kSilu)>(v, alpha, beta);
    case K::kClamp:
      return activate_each<static_cast<int>(K::kClamp)>(v, alpha, beta);
    default:  // one copy of the full switch, not N
#pragma unroll 1
      for (int i = 0; i < N; ++i) v[i] = activate(k, v[i], alpha, beta);
  }
}

// Host side: calls f(std::integral_constant<int, A>{}) with A the activation where it is one of
// the common ones, so that the kernel f launches has no per-element switch, and -1 otherwise.
template <class F>
void dispatch_activation(ActivationKind a, F&& f) {
  using K = ActivationKind;
  switch (a) {
    case K::kNone:
      return f(std::integral_constant<int, static_cast<int>(K::kNone)>{});
    case K::kRelu:
      return f(std::integral_constant<int, static_cast<int>(K::kRelu)>{});
    case K::kGelu:
      return f(std::integral_constant<int, static_cast<int>(K::kGelu)>{});
    case K::kGeluTanh:
      return f(std::integral_constant<int, static_cast<int>(K::kGeluTanh)>{});
    case K::kSilu:
      return f(std::integral_constant<int, static_cast<int>(K::kSilu)>{});
    case K::kSigmoid:
      return f(std::integral_constant<int, static_cast<int>(K::kSigmoid)>{});
    case K::kClamp:
      return f(std::integral_constant<int, static_cast<int>(K::kClamp)>{});
    case K::kHardSwish:
      return f(std::integral_constant<int, static_cast<int>(K::kHardSwish)>{});
    default:
      return f(std::integral_constant<int, -1>{});
  }
}

__device__ __forceinline__ float binary_float(BinaryOp op, float a, float b) {
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
    case BinaryOp::kMax:
      return (isnan(a) || isnan(b)) ? __int_as_float(0x7fc00000) : (a > b ? a : b);
    case BinaryOp::kMin:
      return (isnan(a) || isnan(b)) ? __int_as_float(0x7fc00000) : (a < b ? a : b);
    case BinaryOp::kFloorDiv:
      return floorf(a / b);
    case BinaryOp::kMod: {
      float r = fmodf(a, b);
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

__device__ __forceinline__ int64_t binary_int(BinaryOp op, int64_t a, int64_t b) {
  const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (op) {
    case BinaryOp::kAdd:
      return static_cast<int64_t>(ua + ub);
    case BinaryOp::kSub:
      return static_cast<int64_t>(ua - ub);
    case BinaryOp::kMul:
      return static_cast<int64_t>(ua * ub);
    case BinaryOp::kDiv:
    case BinaryOp::kFloorDiv: {
      if (b == 0) return 0;
      if (b == -1) return static_cast<int64_t>(0 - ua);
      int64_t q = a / b;
      if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
      return q;
    }
    case BinaryOp::kMod: {
      if (b == 0 || b == -1) return 0;
      int64_t r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    }
    case BinaryOp::kPow: {
      if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b % 2 == 0) ? 1 : -1) : 0);
      uint64_t result = 1, base = ua;
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

__device__ __forceinline__ float unary_float(UnaryOp op, float x) {
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
      return isnan(x) ? x : static_cast<float>((x > 0.f) - (x < 0.f));
    case UnaryOp::kNot:
      return x == 0.f;
    case UnaryOp::kLog2:
      return log2f(x);
    case UnaryOp::kLog1p:
      return log1pf(x);
    case UnaryOp::kExpm1:
      return expm1f(x);
    case UnaryOp::kIsNan:
      return isnan(x);
  }
  return x;
}

__device__ __forceinline__ int64_t unary_int(UnaryOp op, int64_t x) {
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

// Rounds a float to the precision of `t`, as an unfused cast would.
__device__ __forceinline__ float round_to(DataType t, float x) {
  switch (t) {
    case DataType::kF16:
      return __half2float(__float2half_rn(x));
    case DataType::kBF16:
      return __bfloat162float(__float2bfloat16_rn(x));
    case DataType::kBool:
      return x != 0.f;
    case DataType::kF32:
      return x;
    default:
      return truncf(x);
  }
}

}  // namespace kiln::engine::cuda
