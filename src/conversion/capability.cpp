// Partitioning's capability query answered by the converter and evaluator registry.
#include "conversion/capability.h"

namespace kiln::conversion {

partitioning::Decision RegistryCapability::query(const torch::jit::Node* node) const {
  using partitioning::Decision;
  using partitioning::Reason;
  if (const ConverterEntry* entry = registry_.find_converter(node)) {
    if (entry->validator) {
      if (auto reason = entry->validator(node)) return Decision::no(Reason::kValidator, *reason);
    }
    return Decision::yes();
  }
  if (registry_.find_evaluator(node)) return Decision::yes();
  return Decision::no(Reason::kNoConverter, "no converter for " + node_key(node));
}

}  // namespace kiln::conversion
