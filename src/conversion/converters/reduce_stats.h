// Reductions built from several engine layers: variance/standard deviation and p-norms.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "conversion/context.h"
#include "conversion/dtypes.h"
#include "util/errors.h"

namespace kiln::conversion {

namespace reduce_detail {

inline engine::TensorId scalar_like(ConversionContext& ctx, const torch::jit::Node* n,
                                    engine::TensorId like, double value, const std::string& name) {
  return ctx.constant(at::scalar_tensor(value).to(to_scalar_type(ctx.desc(like).dtype)),
                      ctx.unique_name(n, name));
}

inline engine::TensorId binary(ConversionContext& ctx, const torch::jit::Node* n,
                               engine::BinaryOp op, engine::TensorId a, engine::TensorId b,
                               const std::string& suffix) {
  return ctx.add(n, engine::ElementwiseParams{op}, {a, b}, suffix);
}

inline engine::TensorId reduce(ConversionContext& ctx, const torch::jit::Node* n,
                               engine::ReduceOp op, engine::TensorId x,
                               const std::vector<int64_t>& axes, bool keep,
                               const std::string& suffix) {
  return ctx.add(n, engine::ReduceParams{op, axes, keep}, {x}, suffix);
}

inline void require_floating(ConversionContext& ctx, engine::TensorId x, const char* what) {
  KILN_CHECK(engine::is_floating(ctx.desc(x).dtype), Unsupported, what, " of a ",
             engine::dtype_name(ctx.desc(x).dtype), " input (torch needs floating inputs too)");
}

}  // namespace reduce_detail

// torch.var/std: sum((x - mean)^2) / max(0, N - correction) over `axes` (empty: all). N is a
// constant for static reduced dims and is counted at run time otherwise.
inline engine::TensorId variance(ConversionContext& ctx, const torch::jit::Node* n,
                                 engine::TensorId x, const std::vector<int64_t>& axes,
                                 double correction, bool keep, bool is_std) {
  using namespace reduce_detail;
  using engine::BinaryOp;
  require_floating(ctx, x, is_std ? "std" : "var");
  const engine::Shape shape = ctx.desc(x).shape;
  std::vector<bool> reduced(shape.size(), axes.empty());
  for (int64_t a : axes) {
    reduced[static_cast<size_t>(engine::normalize_axis(a, shape.size(), "var/std dim"))] = true;
  }
  bool static_count = true;
  double count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) continue;
    if (shape[d] == engine::kDynamic) static_count = false;
    count *= static_cast<double>(shape[d]);
  }
  const auto mean = reduce(ctx, n, engine::ReduceOp::kMean, x, axes, true, "mean");
  const auto centered = binary(ctx, n, BinaryOp::kSub, x, mean, "centered");
  const auto squares = binary(ctx, n, BinaryOp::kMul, centered, centered, "squares");
  const auto sum = reduce(ctx, n, engine::ReduceOp::kSum, squares, axes, keep, "sum");
  engine::TensorId divisor;
  if (static_count) {
    divisor = scalar_like(ctx, n, x, std::max(0.0, count - correction), "divisor");
  } else {
    const auto dims = ctx.add(n, engine::ShapeParams{}, {x}, "shape");
    engine::FillParams ones;
    ones.dtype = ctx.desc(x).dtype;
    ones.value = 1;
    ones.shape = shape;
    const auto filled = ctx.add(n, ones, {dims}, "ones");
    const auto counted = reduce(ctx, n, engine::ReduceOp::kSum, filled, axes, keep, "count");
    const auto less = binary(ctx, n, BinaryOp::kSub, counted,
                             scalar_like(ctx, n, x, correction, "correction"), "corrected");
    divisor = binary(ctx, n, BinaryOp::kMax, less, scalar_like(ctx, n, x, 0, "zero"), "divisor");
  }
  const auto var = binary(ctx, n, BinaryOp::kDiv, sum, divisor, is_std ? "var" : "");
  if (!is_std) return var;
  return ctx.add(n, engine::UnaryParams{engine::UnaryOp::kSqrt}, {var});
}

// The p-norm over `axes` (empty: all): max/min |x| for +-inf, else (sum |x|^p)^(1/p).
inline engine::TensorId p_norm(ConversionContext& ctx, const torch::jit::Node* n,
                               engine::TensorId x, double p, const std::vector<int64_t>& axes,
                               bool keep) {
  using namespace reduce_detail;
  using engine::BinaryOp;
  require_floating(ctx, x, "norm");
  KILN_CHECK(p > 0 || std::isinf(p), Unsupported, "norm with p = ", p, " (only p > 0 and +-inf)");
  const auto a = ctx.add(n, engine::UnaryParams{engine::UnaryOp::kAbs}, {x}, "abs");
  if (std::isinf(p)) {
    return reduce(ctx, n, p > 0 ? engine::ReduceOp::kMax : engine::ReduceOp::kMin, a, axes, keep,
                  "");
  }
  if (p == 1) return reduce(ctx, n, engine::ReduceOp::kSum, a, axes, keep, "");
  if (p == 2) {
    const auto sq = binary(ctx, n, BinaryOp::kMul, a, a, "squares");
    const auto sum = reduce(ctx, n, engine::ReduceOp::kSum, sq, axes, keep, "sum");
    return ctx.add(n, engine::UnaryParams{engine::UnaryOp::kSqrt}, {sum});
  }
  const auto powed = binary(ctx, n, BinaryOp::kPow, a, scalar_like(ctx, n, x, p, "p"), "pow");
  const auto sum = reduce(ctx, n, engine::ReduceOp::kSum, powed, axes, keep, "sum");
  return binary(ctx, n, BinaryOp::kPow, sum, scalar_like(ctx, n, x, 1.0 / p, "inv_p"), "");
}

}  // namespace kiln::conversion
