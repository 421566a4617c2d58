// Constant queries and node replacement shared by the lowering passes.
#include "lowering/rewrite_utils.h"

#include <torch/csrc/jit/ir/constants.h>

#include "lowering/lower.h"

namespace kiln::lowering {

std::optional<c10::IValue> constant_value(const torch::jit::Value* v) {
  if (v->node()->kind() != torch::jit::prim::Constant) return std::nullopt;
  auto iv = torch::jit::toIValue(v);
  if (!iv) return std::nullopt;
  return *iv;
}

std::optional<double> constant_number(const torch::jit::Value* v) {
  auto c = constant_value(v);
  if (!c || !(c->isDouble() || c->isInt())) return std::nullopt;
  return c->toScalar().toDouble();
}

bool is_constant_bool(const torch::jit::Value* v, bool expected) {
  auto iv = constant_value(v);
  return iv && iv->isBool() && iv->toBool() == expected;
}

bool is_constant_int(const torch::jit::Value* v, int64_t expected) {
  auto iv = constant_value(v);
  return iv && iv->isInt() && iv->toInt() == expected;
}

bool is_constant_none(const torch::jit::Value* v) {
  auto iv = constant_value(v);
  return iv && iv->isNone();
}

bool is_constant_one(const torch::jit::Value* v) {
  auto iv = constant_value(v);
  if (!iv) return false;
  if (iv->isInt()) return iv->toInt() == 1;
  if (iv->isDouble()) return iv->toDouble() == 1.0;
  return false;
}

std::optional<int64_t> normalized_dim(int64_t d, int64_t rank) {
  if (d < -rank || d >= rank) return std::nullopt;
  return d < 0 ? d + rank : d;
}

std::optional<int64_t> known_rank(const torch::jit::Value* v) {
  if (auto iv = constant_value(v); iv && iv->isTensor()) return iv->toTensor().dim();
  if (auto t = v->type()->cast<c10::TensorType>()) {
    if (auto dim = t->dim()) return static_cast<int64_t>(*dim);
  }
  // Through the ops whose rank follows from their input's: unsqueeze adds a dim, a cast, clone or
  // contiguous keeps them.
  const torch::jit::Node* n = v->node();
  const auto k = n->kind();
  if (n->inputs().empty() || n->outputs().size() != 1) return std::nullopt;
  if (k == c10::aten::unsqueeze) {
    auto r = known_rank(n->input(0));
    return r ? std::optional<int64_t>(*r + 1) : std::nullopt;
  }
  if (k == c10::aten::to || k == c10::aten::clone || k == c10::aten::contiguous) {
    return known_rank(n->input(0));
  }
  return std::nullopt;
}

std::optional<c10::ScalarType> known_dtype(const torch::jit::Value* v) {
  if (auto iv = constant_value(v); iv && iv->isTensor()) return iv->toTensor().scalar_type();
  if (auto t = v->type()->cast<c10::TensorType>()) {
    if (auto st = t->scalarType()) return *st;
  }
  // A cast's result has the dtype it casts to, whatever its input was.
  const torch::jit::Node* n = v->node();
  if (n->kind() == c10::aten::to && n->inputs().size() >= 2) {
    auto dtype = constant_value(n->input(1));
    if (dtype && dtype->isInt()) return static_cast<c10::ScalarType>(dtype->toInt());
  }
  return std::nullopt;
}

std::optional<c10::Device> known_device(const torch::jit::Value* v) {
  if (auto iv = constant_value(v); iv && iv->isTensor()) return iv->toTensor().device();
  if (auto t = v->type()->cast<c10::TensorType>()) {
    if (auto d = t->device()) return *d;
  }
  return std::nullopt;
}

void inherit_fallback_mark(const torch::jit::Node* from, torch::jit::Node* to) {
  if (is_torch_executed(from)) to->i_(torch_executed_attr(), 1);
}

void replace_and_destroy(torch::jit::Node* node, torch::jit::Value* replacement) {
  node->output()->replaceAllUsesWith(replacement);
  node->destroy();
}

}  // namespace kiln::lowering
