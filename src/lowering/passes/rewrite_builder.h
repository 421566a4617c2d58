// The rewrite builder of the decompose_* passes (decompose_ops.cpp and its files): ops inserted at
// the graph's insert point by name, with the lists and norms their rewrites share.
#pragma once

#include <vector>

#include "lowering/passes.h"

namespace kiln::lowering {

class RewriteBuilder {
 public:
  using Value = torch::jit::Value;

  explicit RewriteBuilder(GraphPtr& graph) : graph_(graph) {}

  Value* operator()(const char* op, std::vector<torch::jit::NamedValue> args) {
    return graph_->insert(c10::Symbol::fromQualString(op), args);
  }
  // With keyword-only arguments (which insert() does not take by position).
  Value* call(const char* op, std::vector<torch::jit::NamedValue> args,
              std::vector<torch::jit::NamedValue> kwargs) {
    return graph_->insert(c10::Symbol::fromQualString(op), args, kwargs);
  }
  Value* none() { return graph_->insertConstant(c10::IValue()); }
  Value* size(Value* x, int64_t dim) { return (*this)("aten::size", {x, dim}); }
  // An int[] of values known at run time.
  Value* list(const std::vector<Value*>& values) {
    return graph_->insertNode(graph_->createList(c10::IntType::get(), values))->output();
  }
  Value* product(const std::vector<Value*>& sizes) {
    Value* p = constant(1);
    for (Value* s : sizes) p = (*this)("aten::mul", {p, s});
    return p;
  }
  Value* cast(Value* x, c10::ScalarType t) {
    return (*this)("aten::to", {x, static_cast<int64_t>(t), false, false, none()});
  }
  // An op of several tensor outputs (sort, topk, ...), which insert() would pack into a tuple;
  // throws when no overload of `op` takes these inputs.
  std::vector<Value*> outputs(const char* op, const std::vector<Value*>& inputs, size_t count) {
    torch::jit::Node* n =
        graph_->insertNode(graph_->create(c10::Symbol::fromQualString(op), inputs, count));
    if (!n->maybeSchema()) throw std::runtime_error(std::string("no overload of ") + op);
    for (Value* v : n->outputs()) v->setType(c10::TensorType::get());
    return {n->outputs().begin(), n->outputs().end()};
  }
  Value* constant(const c10::IValue& v) { return graph_->insertConstant(v); }
  // x's p-norm over `dims` (all of them when empty): p > 0 and inf by the engine's norm, p = 0
  // (the count of nonzeros) as a sum in x's dtype.
  Value* norm(Value* x, double p, const std::vector<int64_t>& dims, bool keep,
              c10::ScalarType type) {
    if (p == 0) {
      Value* nonzero = cast((*this)("aten::ne", {x, 0}), type);
      if (dims.empty()) return (*this)("aten::sum", {nonzero});
      return (*this)("aten::sum", {nonzero, dims, keep});
    }
    if (dims.empty()) return (*this)("aten::linalg_vector_norm", {x, p, none(), false});
    return (*this)("aten::linalg_vector_norm", {x, p, dims, keep});
  }

 private:
  GraphPtr& graph_;
};

}  // namespace kiln::lowering
