// Device-only helpers around the scalar semantics of engine/scalar_math.h (which both backends
// compile): activations dispatched at compile time, rounding to a dtype as a cast would.
#pragma once

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/layers.h"
#include "engine/scalar_math.h"

namespace kiln::engine::cuda {

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
    default: {
      // One copy of the full switch, not N: a loop over a copy, so that only the copy is indexed
      // at run time and sits in local memory (an array indexed so anywhere in a kernel lives in
      // local memory throughout it, and every read and write of `v` would go there: G73).
      float t[N];
#pragma unroll
      for (int i = 0; i < N; ++i) t[i] = v[i];
#pragma unroll 1
      for (int i = 0; i < N; ++i) t[i] = activate(k, t[i], alpha, beta);
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] = t[i];
    }
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
