// Scalar semantics shared by both backends beyond scalar_ops.h's float ops: dtype loads and
// stores, the integer ops (with their errors), arg_best, the scans and the scatter reductions. The
// CPU kernels compile it as inline C++, the CUDA kernels as __host__ __device__ functions. Only
// what C++ and CUDA both have is used here (no std::numeric_limits or isnan macros).
#pragma once

#include <cstdint>
#include <type_traits>

#include "engine/layers.h"
#include "engine/types.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "engine/scalar_ops.h"

namespace kiln::engine {

// Errors of integer ops, recorded by the CPU kernels (inside parallel loops, thrown afterwards);
// the CUDA kernels ignore them and write 0.
enum class MathError : int { kNone = 0, kIntegerDivisionByZero };

// Element i of `base`, of dtype `t`, as the compute type C (float or int64_t), and back. The 16-bit
// floats convert with the device's intrinsics there, types.h's conversions on the host (both
// round to nearest even).
template <class C>
KILN_SCALAR C load_as(DataType t, const void* base, int64_t i) {
  switch (t) {
    case DataType::kF32:
      return static_cast<C>(static_cast<const float*>(base)[i]);
    case DataType::kF16:
#if defined(__CUDA_ARCH__)
      return static_cast<C>(__half2float(static_cast<const __half*>(base)[i]));
#else
      return static_cast<C>(half_to_float(static_cast<const uint16_t*>(base)[i]));
#endif
    case DataType::kBF16:
#if defined(__CUDA_ARCH__)
      return static_cast<C>(__bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]));
#else
      return static_cast<C>(bf16_to_float(static_cast<const uint16_t*>(base)[i]));
#endif
    case DataType::kI64:
      return static_cast<C>(static_cast<const int64_t*>(base)[i]);
    case DataType::kI32:
      return static_cast<C>(static_cast<const int32_t*>(base)[i]);
    case DataType::kI8:
      return static_cast<C>(static_cast<const int8_t*>(base)[i]);
    case DataType::kU8:
      return static_cast<C>(static_cast<const uint8_t*>(base)[i]);
    case DataType::kBool:
      return static_cast<C>(static_cast<const uint8_t*>(base)[i] != 0);
  }
  return C{};
}

template <class C>
KILN_SCALAR void store_as(DataType t, void* base, int64_t i, C v) {
  switch (t) {
    case DataType::kF32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DataType::kF16:
#if defined(__CUDA_ARCH__)
      static_cast<__half*>(base)[i] = __float2half_rn(static_cast<float>(v));
#else
      static_cast<uint16_t*>(base)[i] = float_to_half(static_cast<float>(v));
#endif
      break;
    case DataType::kBF16:
#if defined(__CUDA_ARCH__)
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(static_cast<float>(v));
#else
      static_cast<uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(v));
#endif
      break;
    case DataType::kI64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kI32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kI8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kU8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kBool:
      static_cast<uint8_t*>(base)[i] = v != C{} ? 1 : 0;
      break;
  }
}

// Integer sums and products wrap around in two's complement, as torch's integer tensors do
// (computed unsigned: no signed overflow). Narrower integer results are these modulo 2^bits.
KILN_SCALAR int64_t wrapping_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
KILN_SCALAR int64_t wrapping_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

KILN_SCALAR int64_t binary_int(BinaryOp op, int64_t a, int64_t b, MathError& err) {
  switch (op) {
    case BinaryOp::kAdd:
      return wrapping_add(a, b);
    case BinaryOp::kSub:
      return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
    case BinaryOp::kMul:
      return wrapping_mul(a, b);
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
      if (b < 0) {  // as PyTorch's integer tensors: 1 / a^-b truncated
        if (a == 1) return 1;
        if (a == -1) return (b % 2 == 0) ? 1 : -1;
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
    case BinaryOp::kNe:
    case BinaryOp::kLt:
    case BinaryOp::kLe:
    case BinaryOp::kGt:
    case BinaryOp::kGe:
      return compare(op, a, b);
    case BinaryOp::kAnd:
      return a & b;
    case BinaryOp::kOr:
      return a | b;
    case BinaryOp::kXor:
      return a ^ b;
    case BinaryOp::kZeta:  // special functions and copysign: rejected by inference for integers
    case BinaryOp::kPolygamma:
    case BinaryOp::kIgamma:
    case BinaryOp::kIgammac:
    case BinaryOp::kChebyshevT:
    case BinaryOp::kChebyshevU:
    case BinaryOp::kChebyshevV:
    case BinaryOp::kChebyshevW:
    case BinaryOp::kShiftedChebyshevT:
    case BinaryOp::kShiftedChebyshevU:
    case BinaryOp::kShiftedChebyshevV:
    case BinaryOp::kShiftedChebyshevW:
    case BinaryOp::kHermiteH:
    case BinaryOp::kHermiteHe:
    case BinaryOp::kLaguerreL:
    case BinaryOp::kLegendreP:
    case BinaryOp::kCopysign:
      return 0;
  }
  return 0;
}

KILN_SCALAR int64_t unary_int(UnaryOp op, int64_t x) {
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

// Index of the largest (smallest, for is_min) of the n elements at base, base + step, ... of `x`
// read as C, the first of equals; for floats the first NaN wins, as torch.argmax/argmin.
template <class C>
KILN_SCALAR int64_t arg_best(DataType t, const void* x, int64_t base, int64_t n, int64_t step,
                             bool is_min) {
  C best = load_as<C>(t, x, base);
  int64_t best_i = 0;
  for (int64_t i = 1; i < n; ++i) {
    const C v = load_as<C>(t, x, base + i * step);
    if constexpr (std::is_same_v<C, float>) {
      if (is_nan(best)) break;
      if (is_nan(v)) {
        best = v;
        best_i = i;
        continue;
      }
    }
    if (is_min ? v < best : v > best) {
      best = v;
      best_i = i;
    }
  }
  return best_i;
}

// Whether x is NaN, for a compute type C (false for integers).
template <class C>
KILN_SCALAR bool is_nan_of(C x) {
  if constexpr (std::is_same_v<C, double> || std::is_same_v<C, float>) {
    return x != x;
  } else {
    return false;
  }
}

// log(exp(a) + exp(b)) as torch's logcumsumexp step: NaN stays NaN, two equal infinities are
// themselves (their difference would be NaN).
KILN_SCALAR double log_add_exp(double a, double b) {
  if (is_nan_of(a) || is_nan_of(b)) return a + b;
  const double lo = a < b ? a : b, hi = a < b ? b : a;
  if (lo == hi && lo - lo != 0) return lo;
  return log1p(exp(lo - hi)) + hi;
}

// The scan `op` of the n elements at base, base + step, ... of `x` (dtype xt) into `y` (dtype yt)
// at the same positions, from the end when `reverse`; for max/min also the index along the axis of
// each running extreme into `index`. C is the compute type: double for floating data (rounded to
// yt once per element), int64_t for the rest, with wrap-around. Sums, products and logsumexp
// start from their identity, as torch's. Max/min take a new element when it is NaN or, unless the
// running value is NaN, when it is >= (<=) it: the last of equals and the last NaN, as torch's
// cummax/cummin.
template <class C>
KILN_SCALAR void scan_row(ScanOp op, bool exclusive, bool reverse, DataType xt, const void* x,
                          DataType yt, void* y, int64_t* index, int64_t base, int64_t n,
                          int64_t step) {
  C acc = op == ScanOp::kProd ? C(1) : C(0);
  if constexpr (std::is_same_v<C, double>) {
    if (op == ScanOp::kLogSumExp) acc = -HUGE_VAL;
  }
  int64_t best = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t k = reverse ? n - 1 - j : j, at = base + k * step;
    const C v = load_as<C>(xt, x, at);
    if (exclusive) store_as<C>(yt, y, at, acc);
    switch (op) {
      case ScanOp::kSum:
        if constexpr (std::is_same_v<C, double>) {
          acc += v;
        } else {
          acc = static_cast<int64_t>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(v));
        }
        break;
      case ScanOp::kProd:
        if constexpr (std::is_same_v<C, double>) {
          acc *= v;
        } else {
          acc = static_cast<int64_t>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(v));
        }
        break;
      case ScanOp::kMax:
      case ScanOp::kMin:
        if (j == 0 || is_nan_of(v) ||
            (!is_nan_of(acc) && (op == ScanOp::kMax ? v >= acc : v <= acc))) {
          acc = v;
          best = k;
        }
        index[at] = best;
        break;
      case ScanOp::kLogSumExp:  // floating only (inference)
        if constexpr (std::is_same_v<C, double>) acc = log_add_exp(acc, v);
        break;
    }
    if (!exclusive) store_as<C>(yt, y, at, acc);
  }
}

// What a scatter with `reduce` leaves at a position holding `a` when update `b` lands there, in the
// compute type C (float or int64_t; integers wrap around): max/min take NaN from either side and
// keep `a` among equals, as torch's scatter_reduce amax/amin.
template <class C>
KILN_SCALAR C scatter_combine(ScatterReduce reduce, C a, C b) {
  switch (reduce) {
    case ScatterReduce::kNone:
      return b;
    case ScatterReduce::kAdd:
      if constexpr (std::is_same_v<C, int64_t>) {
        return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      } else {
        return a + b;
      }
    case ScatterReduce::kMul:
      if constexpr (std::is_same_v<C, int64_t>) {
        return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      } else {
        return a * b;
      }
    case ScatterReduce::kMax:
      return is_nan_of(b) || b > a ? b : a;
    case ScatterReduce::kMin:
      return is_nan_of(b) || b < a ? b : a;
  }
  return b;
}

}  // namespace kiln::engine
