// Partitioning's capability query answered by the converter and evaluator registry.
#include "compiler/capability.h"

namespace kiln::compiler {

partitioning::Decision RegistryCapability::query(const torch::jit::Node* node) const {
  using partitioning::Decision;
  using partitioning::Reason;
  if (auto it = refused_.find(node); it != refused_.end()) return it->second;
  if (const conversion::ConverterEntry* entry = registry_.find_converter(node)) {
    if (entry->validator) {
      if (auto reason = entry->validator(node)) return Decision::no(Reason::kValidator, *reason);
    }
    return Decision::yes();
  }
  if (registry_.find_evaluator(node)) return Decision::yes();
  return Decision::no(Reason::kNoConverter, "no converter for " + conversion::node_key(node));
}

}  // namespace kiln::compiler
