// Converters of topk, sort/argsort (a top-k over the whole dim) and the scans (cumsum, cumprod,
// cummax, cummin, logcumsumexp) to engine top-k and scan layers.
#include "conversion/converters/operands.h"
#include "conversion/converters/shuffle_helpers.h"
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

}  // namespace

void register_topk_converters(Registry& r) {
  r.add_converter({{"aten::topk"}, convert_topk, static_inputs({1, 2, 3, 4}), 0});
  r.add_converter({{"aten::sort"}, convert_sort, static_inputs({1, 2}), 0});
  r.add_converter({existing_schemas({"aten::argsort"}), convert_sort, static_inputs({1, 2})});
  r.add_converter({{"aten::cumsum"}, scan(engine::ScanOp::kSum), static_inputs({1, 2}), 0});
  r.add_converter({{"aten::cumprod"}, scan(engine::ScanOp::kProd), static_inputs({1, 2}), 0});
  r.add_converter({{"aten::cummax"}, scan(engine::ScanOp::kMax), static_inputs({1}), 0});
  r.add_converter({{"aten::cummin"}, scan(engine::ScanOp::kMin), static_inputs({1}), 0});
  r.add_converter(
      {{"aten::logcumsumexp"}, scan(engine::ScanOp::kLogSumExp), static_inputs({1}), 0});
}

}  // namespace kiln::conversion
