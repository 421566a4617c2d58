// aten::to removal: a cast to the dtype and device a tensor already has is dropped; a cast that
// changes dtype or device is kept (seed 001 drops all casts; kiln's engine needs them).
#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// Reads the named arguments of whichever aten::to overload `node` is.
struct ToArguments {
  Value* dtype = nullptr;   // ScalarType or None
  Value* device = nullptr;  // Device or None
  Value* other = nullptr;   // to.other: take dtype and device from this tensor
  Value* copy = nullptr;
  Value* memory_format = nullptr;
  bool has_layout_or_pin = false;
};

std::optional<ToArguments> parse_to(Node* node) {
  if (node->kind() != c10::aten::to || node->outputs().size() != 1) return std::nullopt;
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema) return std::nullopt;
  ToArguments args;
  for (size_t i = 1; i < schema->arguments().size() && i < node->inputs().size(); ++i) {
    const std::string& name = schema->arguments()[i].name();
    Value* v = node->input(i);
    if (name == "dtype")
      args.dtype = v;
    else if (name == "device")
      args.device = v;
    else if (name == "other")
      args.other = v;
    else if (name == "copy")
      args.copy = v;
    else if (name == "memory_format")
      args.memory_format = v;
    else if ((name == "layout" || name == "pin_memory") && !is_constant_none(v)) {
      args.has_layout_or_pin = true;
    }
  }
  return args;
}

bool changes_nothing(Node* node) {
  auto args = parse_to(node);
  if (!args || args->has_layout_or_pin) return false;
  if (!args->copy || !is_constant_bool(args->copy, false)) return false;
  if (args->memory_format && !is_constant_none(args->memory_format)) {
    auto format = constant_value(args->memory_format);
    if (!format || !format->isInt() ||
        format->toInt() != static_cast<int64_t>(c10::MemoryFormat::Preserve)) {
      return false;
    }
  }
  Value* self = node->input(0);
  if (args->other) {
    if (args->other == self) return true;
    auto a = known_dtype(self), b = known_dtype(args->other);
    auto da = known_device(self), db = known_device(args->other);
    return a && b && *a == *b && da && db && *da == *db;
  }
  if (args->dtype && !is_constant_none(args->dtype)) {
    auto target = constant_value(args->dtype);
    auto current = known_dtype(self);
    if (!target || !target->isInt() || !current ||
        static_cast<c10::ScalarType>(target->toInt()) != *current) {
      return false;
    }
  }
  if (args->device && !is_constant_none(args->device)) {
    auto target = constant_value(args->device);
    auto current = known_device(self);
    if (!target || !target->isDevice() || !current || target->toDevice() != *current) return false;
  }
  return true;
}

}  // namespace

bool remove_noop_to(GraphPtr& graph) {
  bool changed = false;
  ir::for_each_node(graph->block(), [&](Node* node) {
    if (!changes_nothing(node)) return;
    replace_and_destroy(node, node->input(0));
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
