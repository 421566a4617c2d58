// Float elementwise ops over whole blocks: the op is dispatched once per block, then a loop with
// the op fixed at compile time runs (so it vectorizes). Same scalar semantics as
// engine/scalar_math.h, except exp/sigmoid/silu/gelu use vector_math.h's SIMD-friendly forms.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/cpu/vector_math.h"
#include "engine/scalar_math.h"

namespace kiln::engine::cpu {

template <class F>
inline void map_block(float* d, const float* a, int64_t n, F f) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = f(a[i]);
}

template <class F>
inline void map_block(float* d, const float* a, const float* b, int64_t n, F f) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
}

template <BinaryOp kOp>
void binary_block_op(float* d, const float* a, const float* b, int64_t n) {
  // binary_float's switch folds away: kOp is a constant here.
  map_block(d, a, b, n, [](float x, float y) { return binary_float(kOp, x, y); });
}

// x^y for a block whose exponents are all one value: the small exponents torch's CPU kernels
// special-case (x*x, x*x*x, sqrt, 1/x, 1/(x*x)) as torch computes them, so they vectorize and round
// as torch's do; false when the exponents differ or are another value.
inline bool pow_by_constant_block(float* d, const float* a, const float* b, int64_t n) {
  const float e = b[0];
  for (int64_t i = 1; i < n; ++i) {
    if (b[i] != e) return false;
  }
  if (e == 2.f) {
    map_block(d, a, n, [](float x) { return x * x; });
  } else if (e == 3.f) {
    map_block(d, a, n, [](float x) { return x * x * x; });
  } else if (e == 0.5f) {
    for (int64_t i = 0; i < n; ++i) d[i] = std::sqrt(a[i]);
  } else if (e == -1.f) {
    map_block(d, a, n, [](float x) { return 1.f / x; });
  } else if (e == -2.f) {
    map_block(d, a, n, [](float x) { return 1.f / (x * x); });
  } else {
    return false;
  }
  return true;
}

inline void binary_block(BinaryOp op, float* d, const float* a, const float* b, int64_t n) {
  using B = BinaryOp;
  if (op == B::kPow && n > 0 && pow_by_constant_block(d, a, b, n)) return;
  switch (op) {
#define KILN_BINARY_CASE(name) \
  case B::name:                \
    return binary_block_op<B::name>(d, a, b, n);
    KILN_BINARY_CASE(kAdd)
    KILN_BINARY_CASE(kSub)
    KILN_BINARY_CASE(kMul)
    KILN_BINARY_CASE(kDiv)
    KILN_BINARY_CASE(kPow)
    KILN_BINARY_CASE(kMax)
    KILN_BINARY_CASE(kMin)
    KILN_BINARY_CASE(kFloorDiv)
    KILN_BINARY_CASE(kMod)
    KILN_BINARY_CASE(kEq)
    KILN_BINARY_CASE(kNe)
    KILN_BINARY_CASE(kLt)
    KILN_BINARY_CASE(kLe)
    KILN_BINARY_CASE(kGt)
    KILN_BINARY_CASE(kGe)
    KILN_BINARY_CASE(kAnd)
    KILN_BINARY_CASE(kOr)
    KILN_BINARY_CASE(kXor)
    KILN_BINARY_CASE(kZeta)
    KILN_BINARY_CASE(kPolygamma)
    KILN_BINARY_CASE(kIgamma)
    KILN_BINARY_CASE(kIgammac)
    KILN_BINARY_CASE(kChebyshevT)
    KILN_BINARY_CASE(kChebyshevU)
    KILN_BINARY_CASE(kChebyshevV)
    KILN_BINARY_CASE(kChebyshevW)
    KILN_BINARY_CASE(kShiftedChebyshevT)
    KILN_BINARY_CASE(kShiftedChebyshevU)
    KILN_BINARY_CASE(kShiftedChebyshevV)
    KILN_BINARY_CASE(kShiftedChebyshevW)
    KILN_BINARY_CASE(kHermiteH)
    KILN_BINARY_CASE(kHermiteHe)
    KILN_BINARY_CASE(kLaguerreL)
    KILN_BINARY_CASE(kLegendreP)
    KILN_BINARY_CASE(kCopysign)
#undef KILN_BINARY_CASE
  }
}

inline void unary_block(UnaryOp op, float* d, const float* a, int64_t n) {
  if (op == UnaryOp::kExp) return vmath::exp(d, a, n);
  if (op == UnaryOp::kNeg) return map_block(d, a, n, [](float x) { return -x; });
  if (op == UnaryOp::kAbs) return map_block(d, a, n, [](float x) { return x < 0.f ? -x : x; });
  if (op == UnaryOp::kReciprocal) return map_block(d, a, n, [](float x) { return 1.f / x; });
  // The rest call libm per element; vectorizing them would need vector libm forms.
  for (int64_t i = 0; i < n; ++i) d[i] = unary_float(op, a[i]);
}

template <ActivationKind kAct>
void activation_block_op(float* d, const float* a, int64_t n, double alpha, double beta) {
  map_block(d, a, n, [alpha, beta](float x) { return activate(kAct, x, alpha, beta); });
}

// In-place use (d == a) is allowed: each element is read before it is written.
inline void activation_block(ActivationKind k, double alpha, double beta, float* d, const float* a,
                             int64_t n) {
  using A = ActivationKind;
  switch (k) {
    case A::kGelu:
      return vmath::gelu(d, a, n);
    case A::kSigmoid:
      return vmath::sigmoid(d, a, n);
    case A::kSilu:
      return vmath::silu(d, a, n);
    case A::kTanh:
      return vmath::tanh(d, a, n);
    case A::kNone:
      return activation_block_op<A::kNone>(d, a, n, alpha, beta);
    case A::kRelu:
      return activation_block_op<A::kRelu>(d, a, n, alpha, beta);
    case A::kLeakyRelu:
      return activation_block_op<A::kLeakyRelu>(d, a, n, alpha, beta);
    case A::kClamp:
      return activation_block_op<A::kClamp>(d, a, n, alpha, beta);
    case A::kHardSwish:
      return activation_block_op<A::kHardSwish>(d, a, n, alpha, beta);
    case A::kHardSigmoid:
      return activation_block_op<A::kHardSigmoid>(d, a, n, alpha, beta);
    default:  // gelu_tanh, elu, softplus, mish, selu: libm per element
      for (int64_t i = 0; i < n; ++i) d[i] = activate(k, a[i], alpha, beta);
  }
}

}  // namespace kiln::engine::cpu
