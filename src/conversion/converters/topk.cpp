// Converters of topk, sort/argsort (a top-k over the whole dim), the scans (cumsum, cumprod,
// cummax, cummin, logcumsumexp) to engine top-k and scan layers, and unique (a sort, then the
// nonzeros of where sorted values change: a data-dependent count).
#include "conversion/converters/operands.h"
#include "conversion/converters/shuffle_helpers.h"
#include "conversion/dtypes.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::TensorId;
using torch::jit::Node;

void convert_topk(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  engine::TopKParams p;
  p.k = static_int(ctx, n->input(1));
  p.axis = axis_of(static_int(ctx, n->input(2)), ctx.desc(x).shape.size(), n);
  p.largest = ctx.ivalue(n->input(3)).toBool();
  p.sorted = ctx.ivalue(n->input(4)).toBool();
  const auto outs = ctx.add_layer(n, p, {x});
  ctx.set_tensor(n->output(0), outs.at(0));
  ctx.set_tensor(n->output(1), outs.at(1));
}

// sort(self, dim, descending) and argsort: a sorted top-k of the whole dim, which must be static.
void convert_sort(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const engine::Shape shape = ctx.desc(x).shape;
  engine::TopKParams p;
  p.axis = axis_of(static_int(ctx, n->input(1)), shape.size(), n);
  p.k = shape[static_cast<size_t>(p.axis)];
  KILN_CHECK(p.k != engine::kDynamic, Unsupported, "sorting dim ", p.axis, " of ",
             engine::shape_to_string(shape), ", which is dynamic");
  p.largest = ctx.ivalue(n->input(2)).toBool();
  p.sorted = true;
  const auto outs = ctx.add_layer(n, p, {x});
  if (n->outputs().size() == 2) {
    ctx.set_tensor(n->output(0), outs.at(0));
    ctx.set_tensor(n->output(1), outs.at(1));
  } else {
    ctx.set_tensor(n->output(0), outs.at(1));  // argsort: the indices
  }
}

// cumsum/cumprod(self, dim, dtype?) (with a dtype the input is cast first, as torch does),
// cummax/cummin(self, dim) -> (values, indices), logcumsumexp(self, dim). A 0-d input is scanned
// as one element.
ConvertFn scan(engine::ScanOp op) {
  return [op](ConversionContext& ctx, const Node* n) {
    TensorId x = ctx.tensor(n->input(0));
    if (n->inputs().size() > 2) {
      if (const auto dtype = static_dtype(ctx, n->input(2))) x = ctx.cast(n, x, *dtype);
    }
    const size_t rank = ctx.desc(x).shape.size();
    engine::ScanParams p;
    p.op = op;
    if (rank == 0) {
      x = insert_dim(ctx, n, x, 0, "1d");  // torch allows dim 0 / -1 on 0-d tensors
      axis_of(static_int(ctx, n->input(1)), 1, n);
    } else {
      p.axis = axis_of(static_int(ctx, n->input(1)), rank, n);
    }
    const auto outs = ctx.add_layer(n, p, {x});
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      const TensorId y = outs.at(i);
      ctx.set_tensor(n->output(i), rank == 0 ? drop_dim(ctx, n, y, 0, "0d") : y);
    }
  };
}

// torch.unique of x flattened (`sort`: _unique2, _unique) or of runs of equal neighbours
// (unique_consecutive with dim=None), with the inverse and counts when asked for:
//   sorted, perm = sort(flat)               (unique only)
//   first[i]     = i == 0 or sorted[i] != sorted[i - 1]   (NaNs each their own value, as torch)
//   starts       = nonzero(first)           [U], U counted while the engine runs
//   values       = sorted[starts]
//   inverse      = (cumsum(first) - 1), put back in x's order through perm, in x's shape
//   counts       = [starts[1:], numel] - starts
// An output not asked for is the empty i64 tensor torch returns there.
void convert_unique(ConversionContext& ctx, const Node* n, bool sort, int inverse_arg,
                    int counts_arg) {
  const TensorId x = ctx.tensor(n->input(0));
  const engine::TensorDesc xd = ctx.desc(x);
  const bool want_inverse = inverse_arg >= 0 && ctx.ivalue(n->input(inverse_arg)).toBool();
  const bool want_counts = counts_arg >= 0 && ctx.ivalue(n->input(counts_arg)).toBool();
  const auto empty = [&](engine::DataType dtype) {
    return ctx.constant(at::empty({0}, to_scalar_type(dtype)), "empty");
  };
  if (engine::is_static(xd.shape) && engine::volume(xd.shape) == 0) {  // nothing to count
    ctx.set_tensor(n->output(0), empty(xd.dtype));
    if (n->outputs().size() > 1) {
      ctx.set_tensor(n->output(1), want_inverse
                                       ? ctx.constant(at::empty(xd.shape, at::kLong), "inverse")
                                       : empty(engine::DataType::kI64));
    }
    if (n->outputs().size() > 2) ctx.set_tensor(n->output(2), empty(engine::DataType::kI64));
    return;
  }
  std::vector<TargetDim> flat_dims = {{engine::kDynamic, -1}};
  if (engine::is_static(xd.shape)) flat_dims = {{engine::volume(xd.shape), -1}};
  TensorId sorted = reshape_dims(ctx, n, x, flat_dims, "flat");
  const bool is_bool = xd.dtype == engine::DataType::kBool;
  if (is_bool) sorted = ctx.cast(n, sorted, engine::DataType::kI64);  // top-k orders numbers
  TensorId perm = -1;
  if (sort) {
    engine::TopKParams p;
    p.k = flat_dims[0].size;
    KILN_CHECK(p.k != engine::kDynamic, Unsupported, "unique of ",
               engine::shape_to_string(xd.shape),
               ", whose size is dynamic: sorting needs a static number of elements");
    p.largest = false;
    p.sorted = true;
    const auto outs = ctx.add_layer(n, p, {sorted}, "sort");
    sorted = outs.at(0), perm = outs.at(1);
  }
  const auto binary = [&](engine::BinaryOp op, TensorId a, TensorId b, const char* suffix) {
    return ctx.add(n, engine::ElementwiseParams{op}, {a, b}, suffix);
  };
  const auto i64 = [&](int64_t v) { return ctx.constant(at::tensor({v}, at::kLong), "k"); };
  engine::PadParams shift;  // prev[i] = sorted[i - 1]; prev[0] = 0, masked by i == 0 below
  shift.begin = {1}, shift.end = {-1};
  const TensorId prev = ctx.add(n, shift, {sorted}, "prev");
  const TensorId numel = ctx.add(n, engine::ShapeParams{}, {sorted}, "numel");
  const TensorId position = run_time_range(ctx, n, 0, numel, 1, engine::DataType::kI64);
  const TensorId first =
      binary(engine::BinaryOp::kOr, binary(engine::BinaryOp::kNe, sorted, prev, "change"),
             binary(engine::BinaryOp::kEq, position, i64(0), "at_0"), "first");
  const auto nz = ctx.add_layer(n, engine::NonZeroParams{}, {first}, "nonzero");
  const TensorId starts = reshape_dims(ctx, n, nz[0], {{engine::kDynamic, 0}}, "starts");
  TensorId values =
      ctx.add(n, engine::GatherParams{engine::GatherMode::kDefault, 0}, {sorted, starts}, "values");
  if (is_bool) values = ctx.cast(n, values, engine::DataType::kBool);
  ctx.set_tensor(n->output(0), values);
  if (n->outputs().size() > 1) {
    TensorId inverse = empty(engine::DataType::kI64);
    if (want_inverse) {
      engine::ScanParams cumsum;
      cumsum.op = engine::ScanOp::kSum;
      inverse = ctx.add(n, cumsum, {ctx.cast(n, first, engine::DataType::kI64)}, "group");
      inverse = binary(engine::BinaryOp::kSub, inverse, i64(1), "group");
      if (sort) {  // inverse[perm[i]] = group[i]: every position is written
        inverse = ctx.add(n, engine::ScatterParams{0, engine::ScatterReduce::kNone},
                          {inverse, perm, inverse}, "inverse");
      }
      std::vector<TargetDim> dims;
      for (int64_t d : xd.shape) dims.push_back({d, -1});
      inverse = reshape_dims(ctx, n, inverse, dims, "inverse");
    }
    ctx.set_tensor(n->output(1), inverse);
  }
  if (n->outputs().size() > 2) {
    TensorId counts = empty(engine::DataType::kI64);
    if (want_counts) {
      const TensorId next =
          ctx.add(n, engine::SliceParams{{0}, {1}, {INT64_MAX}, {1}}, {starts}, "next");
      const TensorId ends = ctx.add(n, engine::ConcatParams{0, false}, {next, numel}, "ends");
      counts = binary(engine::BinaryOp::kSub, ends, starts, "counts");
    }
    ctx.set_tensor(n->output(2), counts);
  }
}

std::optional<std::string> unique_consecutive_capable(const Node* n) {
  if (auto r = static_inputs({1, 2, 3})(n)) return r;
  if (!is_none(n->input(3))) return std::string("unique_consecutive along a dim");
  return std::nullopt;
}

}  // namespace

void register_topk_converters(Registry& r) {
  // Top-k and scans take dynamic dims; sort and unique with sort refuse a dynamic sorted dim.
  r.add_converter(
      with_dynamic_shapes({{"aten::topk"}, convert_topk, static_inputs({1, 2, 3, 4}), 0}));
  r.add_converter(with_dynamic_shapes({{"aten::sort"}, convert_sort, static_inputs({1, 2}), 0}));
  r.add_converter(with_dynamic_shapes(
      {existing_schemas({"aten::argsort"}), convert_sort, static_inputs({1, 2})}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::cumsum"}, scan(engine::ScanOp::kSum), static_inputs({1, 2}), 0}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::cumprod"}, scan(engine::ScanOp::kProd), static_inputs({1, 2}), 0}));
  r.add_converter(
      with_dynamic_shapes({{"aten::cummax"}, scan(engine::ScanOp::kMax), static_inputs({1}), 0}));
  r.add_converter(
      with_dynamic_shapes({{"aten::cummin"}, scan(engine::ScanOp::kMin), static_inputs({1}), 0}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::logcumsumexp"}, scan(engine::ScanOp::kLogSumExp), static_inputs({1}), 0}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::_unique2"},
       [](ConversionContext& ctx, const Node* n) { convert_unique(ctx, n, true, 2, 3); },
       static_inputs({1, 2, 3}),
       0,
       /*requires_output_allocator=*/true}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::_unique"},
       [](ConversionContext& ctx, const Node* n) { convert_unique(ctx, n, true, 2, -1); },
       static_inputs({1, 2}),
       0,
       /*requires_output_allocator=*/true}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::unique_consecutive"},
       [](ConversionContext& ctx, const Node* n) { convert_unique(ctx, n, false, 1, 2); },
       unique_consecutive_capable,
       0,
       /*requires_output_allocator=*/true}));
}

}  // namespace kiln::conversion
