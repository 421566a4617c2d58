// The block converter: inputs become engine inputs, nodes are converted in order (static values
// are evaluated on demand), graph outputs become engine outputs.
#include "conversion/convert.h"

#include <algorithm>
#include <optional>
#include <set>

#include "ir/verifier.h"
#include "util/errors.h"
#include "util/logging.h"

namespace kiln::conversion {
namespace {

struct DynamicInput {
  const torch::jit::Value* value;
  engine::Shape shape;
};

// The first engine tensor `node` reads that has a dynamic dim: its tensor inputs, and the tensors
// a Tensor[] input was built from (a list construct's items, a split's input). A value without an
// engine tensor yet is static (a constant, or computed by evaluators), so it is not looked at.
std::optional<DynamicInput> dynamic_input(ConversionContext& ctx, const torch::jit::Node* node) {
  std::vector<const torch::jit::Value*> read;
  for (const torch::jit::Value* v : node->inputs()) {
    const auto list = v->type()->cast<c10::ListType>();
    if (list && list->getElementType()->kind() == c10::TypeKind::TensorType) {
      for (const torch::jit::Value* item : v->node()->inputs()) read.push_back(item);
    } else {
      read.push_back(v);
    }
  }
  for (const torch::jit::Value* v : read) {
    if (!ctx.has_tensor(v)) continue;
    const engine::Shape& shape = ctx.desc(ctx.tensor(v)).shape;
    if (!engine::is_static(shape)) return DynamicInput{v, shape};
  }
  return std::nullopt;
}

}  // namespace

ConvertedSegment convert_graph(const torch::jit::Graph& graph, const std::vector<InputSpec>& inputs,
                               const Registry& registry, const ConversionSettings& settings,
                               const torch::jit::Node** failed) {
  KILN_CHECK(graph.inputs().size() == inputs.size(), InvalidArgument, "segment has ",
             graph.inputs().size(), " inputs, ", inputs.size(), " input specs given");
  ConversionContext ctx(registry, settings);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const torch::jit::Value* v = graph.inputs()[i];
    KILN_CHECK(v->type()->kind() == c10::TypeKind::TensorType, InvalidArgument, "segment input %",
               v->debugName(), " is a ", v->type()->str(), "; engine segments take tensors only");
    const InputSpec& s = inputs[i];
    engine::Shape shape = s.opt;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (s.min.size() != shape.size() || s.max.size() != shape.size()) break;
      if (s.min[d] != s.max[d]) shape[d] = engine::kDynamic;
    }
    std::optional<engine::Profile> profile;
    if (!engine::is_static(shape)) profile = engine::Profile{s.min, s.opt, s.max};
    ctx.set_tensor(v, ctx.network().add_input(v->debugName(), s.dtype, shape, profile));
  }
  for (const torch::jit::Node* node : graph.nodes()) {
    if (const ConverterEntry* e = registry.find_converter(node)) {
      if (e->requires_output_allocator && !ctx.settings().output_allocator) {
        if (failed) *failed = node;
        KILN_THROW(Unsupported, "`", ir::node_to_string(node),
                   "`: its output shape depends on the input's values, and the target backend "
                   "has no output allocator for data-dependent shapes");
      }
      if (e->validator) {
        if (auto reason = e->validator(node)) {
          if (failed) *failed = node;
          KILN_THROW(Unsupported, "`", ir::node_to_string(node), "`: ", *reason);
        }
      }
      // After the validator, so that a node it refuses keeps that reason; before converting, so
      // that a converter never sees a dynamic dim it was not written for.
      if (!e->supports_dynamic_shapes && !ctx.settings().assume_dynamic_shape_support) {
        if (auto dynamic = dynamic_input(ctx, node)) {
          if (failed) *failed = node;
          KILN_THROW(Unsupported, "`", ir::node_to_string(node), "`: its input %",
                     dynamic->value->debugName(), " has dynamic dims ",
                     engine::shape_to_string(dynamic->shape),
                     " and its converter does not declare support for dynamic shapes "
                     "(assume_dynamic_shape_support skips this check)");
        }
      }
      try {
        e->convert(ctx, node);
      } catch (const Error& err) {
        if (err.kind() == ErrorKind::kInternal) throw;
        if (failed) *failed = node;
        // Name the node in every conversion error; keep the error's kind.
        throw Error(err.kind(), "converting `" + ir::node_to_string(node) + "`: " + err.message());
      }
      for (const torch::jit::Value* out : node->outputs()) {
        KILN_CHECK(ctx.has_tensor(out) || ctx.try_ivalue(out), InternalError, "converter for `",
                   ir::node_to_string(node), "` left output %", out->debugName(), " unset");
      }
      continue;
    }
    KILN_CHECK(registry.find_evaluator(node) != nullptr, InternalError, "node `",
               ir::node_to_string(node),
               "` inside an engine segment has neither a converter nor an evaluator");
    // Static values are evaluated when a consumer asks for them.
  }
  std::set<engine::TensorId> marked;
  for (const torch::jit::Value* out : graph.outputs()) {
    engine::TensorId id = ctx.tensor(out);
    // An output that is also an input, or a second output of the same tensor, gets its own copy
    // so that every engine output names a distinct tensor.
    const auto& ins = ctx.network().inputs();
    if (marked.count(id) || std::find(ins.begin(), ins.end(), id) != ins.end()) {
      id = ctx.network().add_layer(out->debugName() + ".copy", engine::ShuffleParams{}, {id}).at(0);
    }
    ctx.network().mark_output(id, out->debugName());
    marked.insert(id);
  }
  KILN_LOG(kDebug, "converted segment: ", ctx.network().layers().size(), " layers");
  return {std::move(ctx.network())};
}

}  // namespace kiln::conversion
