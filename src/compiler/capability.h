// The converter registry seen through partitioning's Capability interface (the compiler joins the
// two stages): the one question partitioning asks of conversion ("can this node become engine
// layers or a static value?").
#pragma once

#include <map>
#include <string>

#include "conversion/registry.h"
#include "partitioning/capability.h"

namespace kiln::compiler {

class RegistryCapability : public partitioning::Capability {
 public:
  explicit RegistryCapability(const conversion::Registry& registry = conversion::default_registry())
      : registry_(registry) {}

  // What refuse() said of a node, kNoConverter when nothing is registered for the
  // node's schema, kValidator with the validator's message when a converter refuses this node.
  partitioning::Decision query(const torch::jit::Node* node) const override;

  // `node` runs in PyTorch from now on, for `reason` (kConversionFailed, kRunFailed): `why`.
  void refuse(const torch::jit::Node* node, partitioning::Reason reason, std::string why) {
    refused_[node] = partitioning::Decision::no(reason, std::move(why));
  }
  bool refused(const torch::jit::Node* node) const { return refused_.count(node) != 0; }

 private:
  const conversion::Registry& registry_;
  std::map<const torch::jit::Node*, partitioning::Decision> refused_;
};

}  // namespace kiln::compiler
