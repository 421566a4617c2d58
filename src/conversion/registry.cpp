// Registry lookups by schema, capability checks, and the one list of registered families.
#include "conversion/registry.h"

#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <algorithm>

#include "util/errors.h"

namespace kiln::conversion {
namespace {

std::string key_of_schema_text(const std::string& text) {
  if (text.find('(') == std::string::npos) return text;  // a schemaless kind, e.g. prim::Constant
  const c10::FunctionSchema schema = torch::jit::parseSchema(text);
  return schema.overload_name().empty() ? schema.name()
                                        : schema.name() + "." + schema.overload_name();
}

}  // namespace

std::string node_key(const torch::jit::Node* node) {
  if (const c10::FunctionSchema* schema = node->maybeSchema()) {
    return schema->overload_name().empty() ? schema->name()
                                           : schema->name() + "." + schema->overload_name();
  }
  return node->kind().toQualString();
}

void Registry::add_converter(ConverterEntry entry) {
  KILN_CHECK(entry.convert != nullptr, InternalError, "converter without a function");
  for (const auto& s : entry.schemas) {
    auto& list = converters_[key_of_schema_text(s)];
    list.push_back(entry);
    std::stable_sort(
        list.begin(), list.end(),
        [](const ConverterEntry& a, const ConverterEntry& b) { return a.priority > b.priority; });
  }
}

void Registry::add_evaluator(EvaluatorEntry entry) {
  KILN_CHECK(entry.evaluate != nullptr, InternalError, "evaluator without a function");
  for (const auto& s : entry.schemas) evaluators_[key_of_schema_text(s)] = entry;
}

const ConverterEntry* Registry::find_converter(const torch::jit::Node* node) const {
  auto it = converters_.find(node_key(node));
  if (it == converters_.end()) return nullptr;
  for (const ConverterEntry& e : it->second) {
    if (!e.validator || !e.validator(node)) return &e;
  }
  return &it->second.front();  // all validators refuse: report the highest priority's reason
}

const EvaluatorEntry* Registry::find_evaluator(const torch::jit::Node* node) const {
  auto it = evaluators_.find(node_key(node));
  return it == evaluators_.end() ? nullptr : &it->second;
}

Support Registry::supports(const torch::jit::Node* node) const {
  if (const ConverterEntry* e = find_converter(node)) {
    if (e->validator) {
      if (auto reason = e->validator(node)) return {false, *reason};
    }
    return {true, ""};
  }
  if (find_evaluator(node)) return {true, ""};
  return {false, "no converter for " + node_key(node)};
}

std::vector<std::string> Registry::converter_schemas() const {
  std::vector<std::string> keys;
  for (const auto& [k, v] : converters_) keys.push_back(k);
  for (const auto& [k, v] : evaluators_) keys.push_back(k);
  return keys;
}

std::vector<std::pair<std::string, const ConverterEntry*>> Registry::converter_entries() const {
  std::vector<std::pair<std::string, const ConverterEntry*>> out;
  for (const auto& [key, entries] : converters_) {
    for (const ConverterEntry& e : entries) out.emplace_back(key, &e);
  }
  return out;
}

const Registry& default_registry() {
  static const Registry registry = [] {
    Registry r;
    register_prim_evaluators(r);
    register_aten_evaluators(r);
    register_activation_converters(r);
    register_elementwise_converters(r);
    register_convolution_converters(r);
    register_linear_converters(r);
    register_einsum_converters(r);
    register_normalization_converters(r);
    register_pooling_converters(r);
    register_reduce_converters(r);
    register_softmax_converters(r);
    register_attention_converters(r);
    register_shuffle_converters(r);
    register_concat_converters(r);
    register_indexing_converters(r);
    register_select_converters(r);
    register_pad_converters(r);
    register_resize_converters(r);
    register_cast_converters(r);
    register_fill_converters(r);
    register_topk_converters(r);
    return r;
  }();
  return registry;
}

}  // namespace kiln::conversion
