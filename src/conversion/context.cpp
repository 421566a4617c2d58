// ConversionContext: value maps, constants for static tensors and scalars, unique layer names.
#include "conversion/context.h"

#include "conversion/dtypes.h"
#include "conversion/registry.h"
#include "ir/verifier.h"
#include "util/errors.h"

namespace kiln::conversion {

ConversionContext::ConversionContext(const Registry& registry, ConversionSettings settings)
    : registry_(registry), settings_(std::move(settings)) {}

std::string ConversionContext::unique_name(const torch::jit::Node* node,
                                           const std::string& suffix) {
  std::string base = node->outputs().empty() ? std::string(node->kind().toUnqualString())
                                             : node->output(0)->debugName();
  if (!suffix.empty()) base += "." + suffix;
  const int n = name_counts_[base]++;
  return n == 0 ? base : base + "_" + std::to_string(n);
}

void ConversionContext::set_tensor(const torch::jit::Value* value, engine::TensorId id) {
  tensors_[value] = id;
}

void ConversionContext::set_ivalue(const torch::jit::Value* value, c10::IValue v) {
  ivalues_[value] = std::move(v);
}

std::optional<c10::IValue> ConversionContext::try_ivalue(const torch::jit::Value* value) {
  if (auto it = ivalues_.find(value); it != ivalues_.end()) return it->second;
  if (tensors_.count(value)) return std::nullopt;
  const torch::jit::Node* node = value->node();
  if (node->kind() == torch::jit::prim::Param) return std::nullopt;
  const EvaluatorEntry* e = registry_.find_evaluator(node);
  if (!e) return std::nullopt;
  std::optional<c10::IValue> result = e->evaluate(*this, node);
  if (!result) return std::nullopt;
  if (node->outputs().size() == 1) {
    ivalues_[node->output()] = *result;
  } else {
    // Multi-output evaluators (unpacks) return a tuple of their outputs.
    KILN_CHECK(
        result->isTuple() && result->toTupleRef().elements().size() == node->outputs().size(),
        InternalError, "evaluator of `", ir::node_to_string(node), "` returned ", result->tagKind(),
        " for ", node->outputs().size(), " outputs");
    const auto& items = result->toTupleRef().elements();
    for (size_t i = 0; i < items.size(); ++i) ivalues_[node->output(i)] = items[i];
  }
  return ivalues_.at(value);
}

const c10::IValue& ConversionContext::ivalue(const torch::jit::Value* value) {
  if (!try_ivalue(value)) {
    KILN_THROW(Unsupported, "value %", value->debugName(), " (from `",
               ir::node_to_string(value->node()), "`) is not known at compile time");
  }
  return ivalues_.at(value);
}

engine::TensorId ConversionContext::constant(const at::Tensor& t, const std::string& name) {
  const int n = name_counts_[name]++;
  const std::string unique = n == 0 ? name : name + "_" + std::to_string(n);
  return network_.add_constant(unique, to_weights(t));
}

engine::TensorId ConversionContext::tensor(const torch::jit::Value* value,
                                           std::optional<engine::DataType> scalar_dtype) {
  if (auto it = tensors_.find(value); it != tensors_.end()) return it->second;
  std::optional<c10::IValue> v = try_ivalue(value);
  KILN_CHECK(v.has_value(), InternalError, "value %", value->debugName(), " (from `",
             ir::node_to_string(value->node()), "`) has not been converted");
  engine::TensorId id;
  if (v->isTensor()) {
    id = constant(v->toTensor(), value->debugName());
    if (settings_.refittable) return id;
  } else if (v->isInt() || v->isBool() || v->isDouble()) {
    at::Tensor t = v->isDouble() ? at::scalar_tensor(v->toDouble(), at::kFloat)
                   : v->isBool() ? at::scalar_tensor(v->toBool(), at::kBool)
                                 : at::scalar_tensor(v->toInt(), at::kLong);
    if (scalar_dtype) t = t.to(to_scalar_type(*scalar_dtype));
    return constant(t, value->debugName());  // not cached: the same scalar may need other dtypes
  } else if (v->isIntList() || v->isDoubleList() || v->isBoolList()) {
    at::Tensor t =
        v->isIntList() ? at::tensor(v->toIntVector(), at::kLong)
        : v->isDoubleList()
            ? at::tensor(v->toDoubleVector(), at::kFloat)
            : at::tensor(std::vector<int64_t>(v->toBoolList().begin(), v->toBoolList().end()))
                  .to(at::kBool);
    id = constant(t, value->debugName());
  } else {
    KILN_THROW(Unsupported, "value %", value->debugName(), " of type ", v->tagKind(),
               " cannot be an engine tensor");
  }
  tensors_[value] = id;
  return id;
}

std::vector<engine::TensorId> ConversionContext::tensor_list(const torch::jit::Value* value) {
  const torch::jit::Node* node = value->node();
  std::vector<engine::TensorId> ids;
  if (node->kind() == torch::jit::prim::ListConstruct) {
    for (const torch::jit::Value* in : node->inputs()) ids.push_back(tensor(in));
    return ids;
  }
  const c10::IValue& v = ivalue(value);
  KILN_CHECK(v.isTensorList(), Unsupported, "value %", value->debugName(),
             " is not a list of tensors");
  for (const at::Tensor& t : v.toTensorVector()) ids.push_back(constant(t, value->debugName()));
  return ids;
}

std::vector<engine::TensorId> ConversionContext::add_layer(
    const torch::jit::Node* node, engine::LayerParams params,
    const std::vector<engine::TensorId>& inputs, const std::string& suffix) {
  return network_.add_layer(unique_name(node, suffix), std::move(params), inputs);
}

engine::TensorId ConversionContext::cast(const torch::jit::Node* node, engine::TensorId id,
                                         engine::DataType dtype) {
  if (desc(id).dtype == dtype) return id;
  return add(node, engine::CastParams{dtype}, {id}, std::string("to_") + engine::dtype_name(dtype));
}

}  // namespace kiln::conversion
