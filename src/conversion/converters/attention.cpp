// Converter of scaled_dot_product_attention (torch 2.x) to the engine's fused attention layer.
#include <torch/csrc/jit/runtime/operator.h>

#include "conversion/converters/convolution_params.h"
#include "conversion/converters/operands.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using torch::jit::Node;

constexpr const char* kSdpa = "aten::scaled_dot_product_attention";

// scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
// is_causal=False, *, scale=None [2.1+], enable_gqa=False [2.5+])
void convert_sdpa(ConversionContext& ctx, const Node* n) {
  const engine::TensorId q = ctx.tensor(n->input(0));
  const engine::DataType dtype = ctx.desc(q).dtype;
  engine::AttentionParams p;
  std::vector<engine::TensorId> inputs = {q, ctx.cast(n, ctx.tensor(n->input(1)), dtype),
                                          ctx.cast(n, ctx.tensor(n->input(2)), dtype)};
  if (!is_none(n->input(3))) {
    p.has_mask = true;
    inputs.push_back(ctx.tensor(n->input(3)));
  }
  p.causal = ctx.ivalue(n->input(5)).toBool();
  if (n->inputs().size() > 6 && !is_none(n->input(6))) p.scale = static_number(ctx, n->input(6));
  ctx.set_tensor(n->output(), ctx.add(n, p, inputs));
}

std::optional<std::string> sdpa_validator(const Node* n) {
  if (auto r = require_static_from(n, 4)) return r;
  if (torch::jit::toIValue(n->input(4))->toScalar().toDouble() != 0.0) {
    return std::string("dropout_p must be 0 (inference)");
  }
  if (const auto scale = constant_input(n, 6); scale && !scale->isNone()) {
    // The engine reads a zero scale as "the default 1/sqrt(E)".
    if (scale->toScalar().toDouble() == 0.0) return std::string("scale = 0 is not supported");
  }
  if (const auto gqa = constant_input(n, 7); gqa && gqa->isBool() && gqa->toBool()) {
    return std::string("enable_gqa=True (grouped-query attention) is not supported");
  }
  return std::nullopt;
}

}  // namespace

void register_attention_converters(Registry& r) {
  // Attention layers take dynamic batch and sequence dims.
  // The operator exists from torch 2.0 on; on older libtorch nothing can produce the node.
  if (torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(kSdpa)).empty()) return;
  r.add_converter(with_dynamic_shapes({{kSdpa}, convert_sdpa, sdpa_validator}));
}

}  // namespace kiln::conversion
