// Module fallback: marks the nodes inlined from torch_executed_modules types to stay in PyTorch.
//
// Torch-TensorRT brackets such module calls with delimiter nodes before freezing and marks what
// lies between them afterwards. Inlining already records, on every node, the call stack of module
// instances (and their class types) it came from, so one walk after freezing finds the same nodes
// without extra nodes that every pass in between would have to step around.
#include <string>

#include "ir/graph_utils.h"
#include "lowering/lower.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

// Cloning a module (freezing does) gives its types mangled names such as
// `__torch__.torch.nn.modules.conv.___torch_mangle_3.Conv2d`; users name the unmangled class.
std::string demangled(const c10::QualifiedName& name) {
  std::string out;
  for (const auto& atom : name.atoms()) {
    if (atom.rfind("___torch_mangle_", 0) == 0) continue;
    out += (out.empty() ? "" : ".") + atom;
  }
  return out;
}

bool type_matches(const c10::ClassTypePtr& type, const std::vector<std::string>& names) {
  if (!type || !type->name()) return false;
  const std::string qualified = demangled(*type->name());
  const std::string base = type->name()->name();
  const std::string kTorchPrefix = "__torch__.";
  for (const auto& name : names) {
    if (name == qualified || name == base || kTorchPrefix + name == qualified) return true;
  }
  return false;
}

bool from_fallback_module(const torch::jit::Node* node, const std::vector<std::string>& names) {
  auto stack = node->callstack();
  if (!stack) return false;
  for (auto frame = *stack; frame;) {
    const auto& instance = frame->module_instance();
    if (instance && type_matches(instance->class_type(), names)) return true;
    auto callee = frame->callee();
    if (!callee) break;
    frame = *callee;
  }
  return false;
}

}  // namespace

bool mark_module_fallback(GraphPtr& graph, const std::vector<std::string>& module_types) {
  if (module_types.empty()) return false;
  bool changed = false;
  ir::for_each_node(graph->block(), [&](torch::jit::Node* node) {
    // Constants are not partitioned; they follow their users.
    if (node->kind() == torch::jit::prim::Constant || is_torch_executed(node)) return;
    if (from_fallback_module(node, module_types)) {
      node->i_(torch_executed_attr(), 1);
      changed = true;
    }
  });
  return changed;
}

}  // namespace kiln::lowering
