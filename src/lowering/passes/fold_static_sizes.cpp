// Sizes known at compile time (seed 002, "non-tensor inputs known at compile time"): aten::size,
// aten::dim and aten::numel of a forward argument whose dims the compile spec fixes become
// constants, so the shape arithmetic on them folds (propagate_constants) and the ops that consume
// the result (a convolution's groups, a reshape's sizes) take it as the constant they need to
// join an engine instead of falling back with it.
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>

#include "lowering/passes.h"

namespace kiln::lowering {

using torch::jit::Node;
using torch::jit::Value;

namespace {

// The constant that `node` (a size query of an argument with dims `dims`) computes, if known.
std::optional<c10::IValue> known_result(const Node* node,
                                        const std::vector<std::optional<int64_t>>& dims) {
  static const auto numel = c10::Symbol::fromQualString("aten::numel");
  const auto rank = static_cast<int64_t>(dims.size());
  const auto all_static = [&] {
    return std::all_of(dims.begin(), dims.end(), [](const auto& d) { return d.has_value(); });
  };
  if (node->kind() == c10::aten::dim && node->inputs().size() == 1) return c10::IValue(rank);
  if (node->kind() == numel && node->inputs().size() == 1 && all_static()) {
    int64_t n = 1;
    for (const auto& d : dims) n *= *d;
    return c10::IValue(n);
  }
  if (node->kind() != c10::aten::size) return std::nullopt;
  if (node->inputs().size() == 1) {
    if (!all_static()) return std::nullopt;
    std::vector<int64_t> sizes;
    for (const auto& d : dims) sizes.push_back(*d);
    return c10::IValue(sizes);
  }
  if (node->inputs().size() != 2) return std::nullopt;
  const std::optional<c10::IValue> dim = torch::jit::toIValue(node->input(1));
  if (!dim || !dim->isInt()) return std::nullopt;
  int64_t d = dim->toInt();
  if (d < 0) d += rank;
  if (d < 0 || d >= rank || !dims[static_cast<size_t>(d)]) return std::nullopt;
  return c10::IValue(*dims[static_cast<size_t>(d)]);
}

}  // namespace

bool fold_static_sizes(GraphPtr& graph, const std::vector<StaticDims>& inputs) {
  bool changed = false;
  for (size_t i = 0; i < inputs.size() && i + 1 < graph->inputs().size(); ++i) {
    if (!inputs[i]) continue;
    Value* arg = graph->inputs()[i + 1];
    if (arg->type()->kind() != c10::TypeKind::TensorType) continue;
    std::vector<Node*> queries;
    for (const torch::jit::Use& use : arg->uses()) {
      if (use.offset == 0) queries.push_back(use.user);
    }
    for (Node* node : queries) {
      const std::optional<c10::IValue> value = known_result(node, *inputs[i]);
      if (!value || node->outputs().size() != 1) continue;
      torch::jit::WithInsertPoint guard(node);
      Value* constant = graph->insertConstant(*value);
      node->output()->replaceAllUsesWith(constant);
      node->destroy();
      changed = true;
    }
  }
  return changed;
}

}  // namespace kiln::lowering
