// Converters of padding (constant_pad_nd, pad with a mode, reflection_pad*, replication_pad*)
// to engine pad layers. torch lists pads last dim first, as (begin, end) pairs.
#include "conversion/converters/operands.h"
#include "conversion/converters/shuffle_helpers.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::PadMode;
using engine::TensorId;
using torch::jit::Node;

std::optional<PadMode> mode_of(const std::string& mode) {
  if (mode == "constant") return PadMode::kConstant;
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "replicate") return PadMode::kReplicate;
  return std::nullopt;
}

void add_pad(ConversionContext& ctx, const Node* n, PadMode mode, double value) {
  const TensorId x = ctx.tensor(n->input(0));
  const size_t rank = ctx.desc(x).shape.size();
  const std::vector<int64_t> pads = static_ints(ctx, n->input(1));
  KILN_CHECK(pads.size() % 2 == 0 && pads.size() / 2 <= rank, InvalidArgument, "pad list of ",
             pads.size(), " values for a tensor of rank ", rank);
  engine::PadParams p;
  p.begin.assign(rank, 0);
  p.end.assign(rank, 0);
  p.mode = mode;
  p.value = value;
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    p.begin[rank - 1 - i] = pads[2 * i];
    p.end[rank - 1 - i] = pads[2 * i + 1];
  }
  ctx.set_tensor(n->output(), ctx.add(n, p, {x}));
}

void convert_constant_pad(ConversionContext& ctx, const Node* n) {
  add_pad(ctx, n, PadMode::kConstant,
          n->inputs().size() > 2 ? static_number(ctx, n->input(2)) : 0.0);
}

// aten::pad(self, pad, mode, value?): value only applies to constant mode.
void convert_pad(ConversionContext& ctx, const Node* n) {
  const std::string mode = ctx.ivalue(n->input(2)).toStringRef();
  const auto m = mode_of(mode);
  KILN_CHECK(m.has_value(), Unsupported, "pad mode `", mode, "`");
  const double value = is_none(n->input(3)) ? 0.0 : static_number(ctx, n->input(3));
  add_pad(ctx, n, *m, value);
}

std::optional<std::string> pad_capable(const Node* n) {
  if (auto r = static_inputs({1, 2, 3})(n)) return r;
  if (auto mode = torch::jit::toIValue(n->input(2)); mode && mode->isString()) {
    if (!mode_of(mode->toStringRef())) return "pad mode `" + mode->toStringRef() + "`";
  }
  return std::nullopt;
}

ConvertFn padding(PadMode mode) {
  return [mode](ConversionContext& ctx, const Node* n) { add_pad(ctx, n, mode, 0.0); };
}

}  // namespace

void register_pad_converters(Registry& r) {
  // Static pads of whatever dims the input has: each takes dynamic shapes.
  r.add_converter(with_dynamic_shapes(
      {{"aten::constant_pad_nd"}, convert_constant_pad, static_inputs({1, 2}), 0}));
  r.add_converter(with_dynamic_shapes({existing_schemas({"aten::pad"}), convert_pad, pad_capable}));
  r.add_converter(
      with_dynamic_shapes({existing_schemas({"aten::reflection_pad1d", "aten::reflection_pad2d",
                                             "aten::reflection_pad3d"}),
                           padding(PadMode::kReflect), static_inputs({1})}));
  r.add_converter(
      with_dynamic_shapes({existing_schemas({"aten::replication_pad1d", "aten::replication_pad2d",
                                             "aten::replication_pad3d"}),
                           padding(PadMode::kReplicate), static_inputs({1})}));
  r.add_converter(with_dynamic_shapes(
      {existing_schemas({"aten::zero_pad2d"}), padding(PadMode::kConstant), static_inputs({1})}));
}

}  // namespace kiln::conversion
