// The converter and evaluator registry. Each entry declares, next to its code, the schemas it
// handles, a capability validator, a priority, and what shapes it takes.
// Partitioning asks this same registry whether a node can go to the engine.
#pragma once

#include <torch/script.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::conversion {

class ConversionContext;

// Returns a reason when this node cannot be converted (e.g. "alpha must be a constant").
using CapabilityValidator = std::function<std::optional<std::string>(const torch::jit::Node*)>;
using ConvertFn = std::function<void(ConversionContext&, const torch::jit::Node*)>;
using EvaluateFn =
    std::function<std::optional<c10::IValue>(ConversionContext&, const torch::jit::Node*)>;

struct ConverterEntry {
  std::vector<std::string> schemas;  // full schema strings, or "prim::Kind" for schemaless nodes
  ConvertFn convert;
  CapabilityValidator validator;  // may be empty: always capable
  int priority = 0;               // higher wins when several entries match
  // Its output shape depends on input values (nonzero, masked_select): only for backends with an
  // output allocator (ConversionSettings::output_allocator); elsewhere the node is refused.
  bool requires_output_allocator = false;
  // It is right for inputs whose engine shapes have dynamic dims (engine::kDynamic): its layers
  // compute the right thing for every size in the profile, or it refuses with Unsupported naming
  // the dim it cannot take. Without it a node with a dynamic input dim is refused, and runs in
  // PyTorch, unless ConversionSettings::assume_dynamic_shape_support (seed 002's rule). Declared
  // with with_dynamic_shapes().
  bool supports_dynamic_shapes = false;
};

// `entry` declared dynamic-shape capable (ConverterEntry::supports_dynamic_shapes), so that a
// registration says it in place: r.add_converter(with_dynamic_shapes({schemas, convert})).
inline ConverterEntry with_dynamic_shapes(ConverterEntry entry) {
  entry.supports_dynamic_shapes = true;
  return entry;
}

struct EvaluatorEntry {
  std::vector<std::string> schemas;
  EvaluateFn evaluate;  // nullopt: not static for this node
};

struct Support {
  bool supported = false;
  std::string reason;  // why not, when unsupported
};

class Registry {
 public:
  void add_converter(ConverterEntry entry);
  void add_evaluator(EvaluatorEntry entry);

  const ConverterEntry* find_converter(const torch::jit::Node* node) const;
  const EvaluatorEntry* find_evaluator(const torch::jit::Node* node) const;
  // Capability of one node: a converter or evaluator exists and its validator accepts the node.
  Support supports(const torch::jit::Node* node) const;

  std::vector<std::string> converter_schemas() const;
  // Every converter entry under the key it is registered by ("aten::add.Tensor"), highest
  // priority first within a key; an entry of several schemas appears once per key.
  std::vector<std::pair<std::string, const ConverterEntry*>> converter_entries() const;

 private:
  std::map<std::string, std::vector<ConverterEntry>> converters_;  // by operator or kind name
  std::map<std::string, EvaluatorEntry> evaluators_;
};

// The registry with every family registered (one explicit list in registry.cpp).
const Registry& default_registry();

// The key of a node: "name.overload" from its schema, or its kind for schemaless nodes.
std::string node_key(const torch::jit::Node* node);

// Families; each is defined in its own file.
void register_prim_evaluators(Registry& r);
void register_aten_evaluators(Registry& r);
void register_activation_converters(Registry& r);
void register_elementwise_converters(Registry& r);
void register_convolution_converters(Registry& r);
void register_linear_converters(Registry& r);
void register_einsum_converters(Registry& r);
void register_normalization_converters(Registry& r);
void register_pooling_converters(Registry& r);
void register_reduce_converters(Registry& r);
void register_softmax_converters(Registry& r);
void register_attention_converters(Registry& r);
void register_shuffle_converters(Registry& r);
void register_concat_converters(Registry& r);
void register_indexing_converters(Registry& r);
void register_select_converters(Registry& r);
void register_pad_converters(Registry& r);
void register_resize_converters(Registry& r);
void register_cast_converters(Registry& r);
void register_fill_converters(Registry& r);
void register_topk_converters(Registry& r);

}  // namespace kiln::conversion
