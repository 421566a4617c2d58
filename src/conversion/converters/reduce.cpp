// Converters of reductions (sum, mean, prod, amax/amin, max/min with indices, any/all,
// argmax/argmin, var/std, norms) to engine reduce and arg-max layers, with torch's dtypes.
#include "conversion/converters/convolution_params.h"
#include "conversion/converters/operands.h"
#include "conversion/converters/reduce_stats.h"
#include "conversion/dtypes.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::DataType;
using engine::ReduceOp;
using torch::jit::Node;

// The optional `dtype` argument at input i (i < 0: the overload has none); false when None.
// An out-parameter rather than std::optional: gcc 12 misreports optional<enum> as uninitialized.
bool dtype_arg(ConversionContext& ctx, const Node* n, int i, DataType* out) {
  if (i < 0 || static_cast<size_t>(i) >= n->inputs().size() || is_none(n->input(i))) return false;
  *out = to_engine_dtype(static_cast<at::ScalarType>(ctx.ivalue(n->input(i)).toInt()),
                         arg_name(n, static_cast<size_t>(i)));
  return true;
}

bool keepdim_arg(ConversionContext& ctx, const Node* n, size_t i) {
  return i < n->inputs().size() && ctx.ivalue(n->input(i)).toBool();
}

// Where a reduction's dim, keepdim and dtype sit (-1: absent from this overload).
struct ReduceArgs {
  int dim = -1, keepdim = -1, dtype = -1;
};

// sum/prod: integers and bools accumulate in int64 unless a dtype is given; with a dtype the
// input is cast first and the result has that dtype (the engine's integer sum is i64: cast).
// mean: a dtype casts the input first; integer inputs without one are a torch error too.
// amax/amin/max/min keep the input dtype.
// torch takes dim 0 (or -1) of a 0-d tensor as its one element: a reduce over no axes.
void scalar_axes(ConversionContext& ctx, engine::TensorId x, std::vector<int64_t>& axes) {
  if (!ctx.desc(x).shape.empty()) return;
  for (int64_t a : axes) {
    KILN_CHECK(a == 0 || a == -1, InvalidArgument, "dim ", a, " out of range for a 0-d tensor");
  }
  axes.clear();
}

ConvertFn reduce(ReduceOp op, ReduceArgs a) {
  return [op, a](ConversionContext& ctx, const Node* n) {
    engine::TensorId x = ctx.tensor(n->input(0));
    DataType dtype = DataType::kF32;
    const bool has_dtype = dtype_arg(ctx, n, a.dtype, &dtype);
    if (has_dtype) x = ctx.cast(n, x, dtype);
    if (op == ReduceOp::kMean) {
      KILN_CHECK(engine::is_floating(ctx.desc(x).dtype), InvalidArgument, "mean of a ",
                 engine::dtype_name(ctx.desc(x).dtype),
                 " input needs a floating dtype argument, as in torch");
    }
    engine::ReduceParams p;
    p.op = op;
    if (a.dim >= 0) p.axes = dim_list(ctx, n->input(a.dim));
    scalar_axes(ctx, x, p.axes);
    p.keep_dims = a.keepdim >= 0 && keepdim_arg(ctx, n, a.keepdim);
    engine::TensorId y = ctx.add(n, p, {x});
    if (has_dtype) y = ctx.cast(n, y, dtype);
    ctx.set_tensor(n->output(), y);
  };
}

// any/all give bool, except uint8 inputs which keep uint8 as in torch.
ConvertFn any_all(ReduceOp op, ReduceArgs a) {
  return [op, a](ConversionContext& ctx, const Node* n) {
    const engine::TensorId x = ctx.tensor(n->input(0));
    engine::ReduceParams p;
    p.op = op;
    if (a.dim >= 0) p.axes = dim_list(ctx, n->input(a.dim));
    scalar_axes(ctx, x, p.axes);
    p.keep_dims = a.keepdim >= 0 && keepdim_arg(ctx, n, a.keepdim);
    engine::TensorId y = ctx.add(n, p, {x});
    if (ctx.desc(x).dtype == DataType::kU8) y = ctx.cast(n, y, DataType::kU8);
    ctx.set_tensor(n->output(), y);
  };
}

// max.dim/min.dim(self, dim, keepdim) -> (values, indices).
ConvertFn max_min_dim(bool is_min) {
  return [is_min](ConversionContext& ctx, const Node* n) {
    const engine::TensorId x = ctx.tensor(n->input(0));
    const int64_t dim = ctx.ivalue(n->input(1)).toInt();
    const bool keep = keepdim_arg(ctx, n, 2);
    engine::ReduceParams p;
    p.op = is_min ? ReduceOp::kMin : ReduceOp::kMax;
    p.axes = {dim};
    p.keep_dims = keep;
    ctx.set_tensor(n->output(0), ctx.add(n, p, {x}, "values"));
    ctx.set_tensor(n->output(1),
                   ctx.add(n, engine::ArgMaxParams{dim, keep, is_min}, {x}, "indices"));
  };
}

// argmax/argmin(self, dim?, keepdim). With dim None torch flattens; keepdim then gives all-ones
// dims of the input's rank.
ConvertFn arg_max_min(bool is_min) {
  return [is_min](ConversionContext& ctx, const Node* n) {
    engine::TensorId x = ctx.tensor(n->input(0));
    const bool keep = keepdim_arg(ctx, n, 2);
    if (!is_none(n->input(1))) {
      const int64_t dim = ctx.ivalue(n->input(1)).toInt();
      ctx.set_tensor(n->output(), ctx.add(n, engine::ArgMaxParams{dim, keep, is_min}, {x}));
      return;
    }
    const size_t rank = ctx.desc(x).shape.size();
    engine::ShuffleParams flat;
    flat.has_reshape = true;
    flat.reshape = {-1};
    x = ctx.add(n, flat, {x}, "flat");
    // keepdim on the flat [N] gives [1], reshaped to the all-ones dims torch returns.
    engine::TensorId y = ctx.add(n, engine::ArgMaxParams{0, keep, is_min}, {x});
    if (keep && rank != 1) {
      engine::ShuffleParams ones;
      ones.has_reshape = true;
      ones.reshape.assign(rank, 1);
      y = ctx.add(n, ones, {y}, "keepdim");
    }
    ctx.set_tensor(n->output(), y);
  };
}

// Where var/std overloads keep dim, the correction (or unbiased flag), and keepdim.
struct VarArgs {
  int dim = -1, unbiased = -1, correction = -1, keepdim = -1;
};

ConvertFn var_std(bool is_std, VarArgs a) {
  return [is_std, a](ConversionContext& ctx, const Node* n) {
    const engine::TensorId x = ctx.tensor(n->input(0));
    double correction = 1;
    if (a.unbiased >= 0) correction = ctx.ivalue(n->input(a.unbiased)).toBool() ? 1 : 0;
    if (a.correction >= 0 && !is_none(n->input(a.correction))) {
      correction = static_number(ctx, n->input(a.correction));
    }
    const std::vector<int64_t> axes =
        a.dim >= 0 ? dim_list(ctx, n->input(a.dim)) : std::vector<int64_t>{};
    const bool keep = a.keepdim >= 0 && keepdim_arg(ctx, n, a.keepdim);
    ctx.set_tensor(n->output(), variance(ctx, n, x, axes, correction, keep, is_std));
  };
}

// norm(self, p, dim, keepdim) and linalg_vector_norm(self, ord, dim?, keepdim, dtype?): p-norms
// for p > 0 and +-inf.
struct NormArgs {
  int p = 1, dim = -1, keepdim = -1, dtype = -1;
};

ConvertFn norm(NormArgs a) {
  return [a](ConversionContext& ctx, const Node* n) {
    engine::TensorId x = ctx.tensor(n->input(0));
    DataType dtype = DataType::kF32;
    if (dtype_arg(ctx, n, a.dtype, &dtype)) x = ctx.cast(n, x, dtype);
    const double p = is_none(n->input(a.p)) ? 2.0 : static_number(ctx, n->input(a.p));
    const std::vector<int64_t> axes =
        a.dim >= 0 ? dim_list(ctx, n->input(a.dim)) : std::vector<int64_t>{};
    const bool keep = a.keepdim >= 0 && keepdim_arg(ctx, n, a.keepdim);
    ctx.set_tensor(n->output(), p_norm(ctx, n, x, p, axes, keep));
  };
}

std::optional<std::string> norm_validator(const Node* n) {
  if (auto r = require_static_from(n, 1)) return r;
  const auto p = constant_input(n, 1);
  if (p && !p->isNone()) {
    const double v = p->toScalar().toDouble();
    if (!(v > 0) && !std::isinf(v)) {
      return "norm with p = " + std::to_string(v) + " (only p > 0 and +-inf)";
    }
  }
  return std::nullopt;
}

CapabilityValidator params_static() {
  return [](const Node* n) { return require_static_from(n, 1); };
}

void add(Registry& r, std::vector<std::string> schemas, ConvertFn fn) {
  r.add_converter(with_dynamic_shapes({std::move(schemas), std::move(fn), params_static()}));
}

}  // namespace

void register_reduce_converters(Registry& r) {
  // Reductions read only axes; var/std count dynamic dims at run time.
  add(r, {"aten::sum"}, reduce(ReduceOp::kSum, {-1, -1, 1}));
  add(r, {"aten::sum.dim_IntList"}, reduce(ReduceOp::kSum, {1, 2, 3}));
  add(r, {"aten::mean"}, reduce(ReduceOp::kMean, {-1, -1, 1}));
  add(r, {"aten::mean.dim"}, reduce(ReduceOp::kMean, {1, 2, 3}));
  add(r, {"aten::prod"}, reduce(ReduceOp::kProd, {-1, -1, 1}));
  add(r, {"aten::prod.dim_int"}, reduce(ReduceOp::kProd, {1, 2, 3}));
  add(r, {"aten::amax"}, reduce(ReduceOp::kMax, {1, 2, -1}));
  add(r, {"aten::amin"}, reduce(ReduceOp::kMin, {1, 2, -1}));
  add(r, {"aten::max"}, reduce(ReduceOp::kMax, {}));
  add(r, {"aten::min"}, reduce(ReduceOp::kMin, {}));
  add(r, {"aten::max.dim"}, max_min_dim(false));
  add(r, {"aten::min.dim"}, max_min_dim(true));
  // any.dims/all.dims (int[]? dim) exist from torch 2.2 on.
  add(r, {"aten::any"}, any_all(ReduceOp::kAny, {}));
  add(r, {"aten::any.dim", "aten::any.dims"}, any_all(ReduceOp::kAny, {1, 2, -1}));
  add(r, {"aten::all"}, any_all(ReduceOp::kAll, {}));
  add(r, {"aten::all.dim", "aten::all.dims"}, any_all(ReduceOp::kAll, {1, 2, -1}));
  add(r, {"aten::argmax"}, arg_max_min(false));
  add(r, {"aten::argmin"}, arg_max_min(true));
  for (const bool is_std : {false, true}) {
    const std::string name = is_std ? "aten::std" : "aten::var";
    add(r, {name}, var_std(is_std, {-1, 1, -1, -1}));
    add(r, {name + ".dim"}, var_std(is_std, {1, 2, -1, 3}));
    add(r, {name + ".correction"}, var_std(is_std, {1, -1, 2, 3}));
  }
  r.add_converter(
      with_dynamic_shapes({{"aten::norm.Scalar"}, norm({1, -1, -1, -1}), norm_validator}));
  r.add_converter(
      with_dynamic_shapes({{"aten::norm.ScalarOpt_dim"}, norm({1, 2, 3, -1}), norm_validator}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::norm.ScalarOpt_dim_dtype"}, norm({1, 2, 3, 4}), norm_validator}));
  r.add_converter(
      with_dynamic_shapes({{"aten::linalg_vector_norm"}, norm({1, 2, 3, 4}), norm_validator}));
  add(r, {"aten::frobenius_norm.dim"}, [](ConversionContext& ctx, const Node* n) {
    ctx.set_tensor(n->output(), p_norm(ctx, n, ctx.tensor(n->input(0)), 2.0,
                                       dim_list(ctx, n->input(1)), keepdim_arg(ctx, n, 2)));
  });
}

}  // namespace kiln::conversion
