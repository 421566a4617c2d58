// The conversion context (seeds 003/004): the network under construction, settings, the
// value-to-tensor map and the value-to-static-value map. Refit needs no map of names: the
// network's constants, in order, are its refit slots (engine::constant_slots), each named after
// the value it came from.
#pragma once

#include <torch/script.h>

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/network.h"

namespace kiln::conversion {

class Registry;

struct ConversionSettings {
  std::vector<engine::DataType> enabled_precisions = {engine::DataType::kF32};
  bool truncate_long_and_double = false;  // accepted for compatibility: int64 is native
  // Each use of a tensor constant gets its own weight, so that the network's structure does not
  // depend on which constants the TorchScript graph shares: freezing merges constants of equal
  // values (a fresh batch norm's weight and running variance), which new weights tell apart.
  bool refittable = false;
  // Whether the target backend runs layers with data-dependent output shapes (nonzero: rows
  // counted while running, memory planned at the bound). The CPU and CUDA backends both do; a
  // target without leaves such nodes to PyTorch.
  bool output_allocator = true;
  // Every converter is taken as right for dynamic dims (seed 002's assume_dynamic_shape_support):
  // a node with a dynamic input dim is converted even where its converter does not declare
  // ConverterEntry::supports_dynamic_shapes.
  bool assume_dynamic_shape_support = false;
};

class ConversionContext {
 public:
  ConversionContext(const Registry& registry, ConversionSettings settings);

  engine::Network& network() { return network_; }
  const ConversionSettings& settings() const { return settings_; }
  const Registry& registry() const { return registry_; }

  // The engine tensor for a value: already converted, or a static tensor / scalar turned into a
  // constant (scalars become 0-d constants of `scalar_dtype`, or of their own type when unset).
  engine::TensorId tensor(const torch::jit::Value* value,
                          std::optional<engine::DataType> scalar_dtype = std::nullopt);
  // A list of tensors (prim::ListConstruct of tensor values, or a static list).
  std::vector<engine::TensorId> tensor_list(const torch::jit::Value* value);
  bool has_tensor(const torch::jit::Value* value) const { return tensors_.count(value) > 0; }

  // The static value of `value`, evaluating its producer (recursively) if needed. Throws
  // Unsupported naming the node if it is not known at compile time.
  const c10::IValue& ivalue(const torch::jit::Value* value);
  // Like ivalue(), but returns nullopt instead of throwing.
  std::optional<c10::IValue> try_ivalue(const torch::jit::Value* value);

  void set_tensor(const torch::jit::Value* value, engine::TensorId id);
  void set_ivalue(const torch::jit::Value* value, c10::IValue v);

  // A new layer named after the node (unique), returning its outputs.
  std::vector<engine::TensorId> add_layer(const torch::jit::Node* node, engine::LayerParams params,
                                          const std::vector<engine::TensorId>& inputs,
                                          const std::string& suffix = "");
  engine::TensorId add(const torch::jit::Node* node, engine::LayerParams params,
                       const std::vector<engine::TensorId>& inputs,
                       const std::string& suffix = "") {
    return add_layer(node, std::move(params), inputs, suffix).at(0);
  }
  // A constant from a host tensor; `name` prefixes the weight name (made unique).
  engine::TensorId constant(const at::Tensor& t, const std::string& name);
  // Casts `id` to `dtype` (a no-op when it already has it).
  engine::TensorId cast(const torch::jit::Node* node, engine::TensorId id, engine::DataType dtype);

  const engine::TensorDesc& desc(engine::TensorId id) const { return network_.tensor(id); }

  // Parameter name (the frozen value's debug name) to engine weight name.

  // A name unique in this network, derived from the node's first output.
  std::string unique_name(const torch::jit::Node* node, const std::string& suffix = "");

 private:
  const Registry& registry_;
  ConversionSettings settings_;
  engine::Network network_;
  std::unordered_map<const torch::jit::Value*, engine::TensorId> tensors_;
  std::unordered_map<const torch::jit::Value*, c10::IValue> ivalues_;
  std::map<std::string, int> name_counts_;
};

}  // namespace kiln::conversion
