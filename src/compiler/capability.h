// The converter registry seen through partitioning's Capability interface (the compiler joins the
// two stages): the one question partitioning asks of conversion ("can this node become engine
// layers or a static value?").
#pragma once

#include "conversion/registry.h"
#include "partitioning/capability.h"

namespace kiln::compiler {

class RegistryCapability : public partitioning::Capability {
 public:
  explicit RegistryCapability(const conversion::Registry& registry = conversion::default_registry())
      : registry_(registry) {}

  // kNoConverter when nothing is registered for the node's schema, kValidator with the
  // validator's message when a converter refuses this node.
  partitioning::Decision query(const torch::jit::Node* node) const override;

 private:
  const conversion::Registry& registry_;
};

}  // namespace kiln::compiler
