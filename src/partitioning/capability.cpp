// Capability table and the static (per-node) classification of engine capability.
#include "partitioning/capability.h"

#include "ir/graph_utils.h"

#include "partitioning/settings.h"

namespace kiln::partitioning {

const char* reason_name(Reason reason) {
  switch (reason) {
    case Reason::kNone:
      return "supported";
    case Reason::kNoConverter:
      return "no converter";
    case Reason::kValidator:
      return "validator";
    case Reason::kForcedOp:
      return "forced op";
    case Reason::kForcedModule:
      return "forced module";
    case Reason::kImpure:
      return "impure";
    case Reason::kControlFlow:
      return "control flow";
    case Reason::kNonTensorBoundary:
      return "non-tensor boundary";
    case Reason::kBelowMinBlockSize:
      return "below min_block_size";
    case Reason::kConversionFailed:
      return "conversion failed";
    case Reason::kRunFailed:
      return "failed on generated inputs";
  }
  return "unknown";
}

std::string overload_name(const torch::jit::Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (schema == nullptr || schema->overload_name().empty()) return node->kind().toQualString();
  return schema->name() + "." + schema->overload_name();
}

TableCapability& TableCapability::add(const std::string& name, CapabilityValidator validator) {
  entries_[name] = std::move(validator);
  return *this;
}

TableCapability TableCapability::all_except(std::set<std::string> unsupported) {
  TableCapability table;
  table.support_all_ = true;
  table.unsupported_ = std::move(unsupported);
  return table;
}

Decision TableCapability::query(const torch::jit::Node* node) const {
  const std::string kind = node->kind().toQualString();
  const std::string overload = overload_name(node);
  if (support_all_) {
    if (unsupported_.count(kind) || unsupported_.count(overload)) {
      return Decision::no(Reason::kNoConverter, "no converter or evaluator for " + overload);
    }
    return Decision::yes();
  }
  auto it = entries_.find(overload);
  if (it == entries_.end()) it = entries_.find(kind);
  if (it == entries_.end()) {
    return Decision::no(Reason::kNoConverter, "no converter or evaluator for " + overload);
  }
  if (it->second) {
    if (auto refusal = it->second(node)) return Decision::no(Reason::kValidator, *refusal);
  }
  return Decision::yes();
}

bool is_constant(const torch::jit::Node* node) {
  return node->kind() == torch::jit::prim::Constant;
}

bool is_bookkeeping(const torch::jit::Node* node) {
  switch (node->kind()) {
    case torch::jit::prim::Constant:
    case torch::jit::prim::ListConstruct:
    case torch::jit::prim::ListUnpack:
    case torch::jit::prim::TupleConstruct:
    case torch::jit::prim::TupleUnpack:
      return true;
    default:
      return false;
  }
}

bool is_impure(const torch::jit::Node* node) {
  // hasSideEffects() asserts on a non-prim node without an operator; such a node has no
  // converter anyway, so the capability query gives its reason.
  if (node->maybeOperator() == nullptr && !node->kind().is_prim()) return false;
  if (node->hasSideEffects()) return true;
  if (const c10::FunctionSchema* schema = node->maybeSchema()) {
    for (const c10::Argument& arg : schema->arguments()) {
      if (arg.alias_info() != nullptr && arg.alias_info()->isWrite()) return true;
    }
  }
  return false;
}

Decision classify(const torch::jit::Node* node, const Capability& capability,
                  const PartitionSettings& settings) {
  const std::string kind = node->kind().toQualString();
  if (!node->blocks().empty()) {
    return Decision::no(Reason::kControlFlow,
                        kind + " runs in PyTorch (its blocks are partitioned on their own)");
  }
  const c10::Symbol fallback_attr = c10::Symbol::attr(ir::kTorchExecutedAttr);
  if (node->hasAttribute(fallback_attr) &&
      node->kindOf(fallback_attr) == torch::jit::AttributeKind::i && node->i(fallback_attr) != 0) {
    std::string modules;
    for (const std::string& m : settings.torch_executed_modules) {
      modules += (modules.empty() ? "" : ", ") + m;
    }
    return Decision::no(Reason::kForcedModule,
                        "inside a module of torch_executed_modules" +
                            (modules.empty() ? std::string() : " (" + modules + ")"));
  }
  const std::string overload = overload_name(node);
  if (settings.torch_executed_ops.count(kind) || settings.torch_executed_ops.count(overload)) {
    return Decision::no(Reason::kForcedOp, overload + " is in torch_executed_ops");
  }
  if (is_impure(node)) {
    return Decision::no(Reason::kImpure, overload + " has side effects or writes to an input");
  }
  return capability.query(node);
}

}  // namespace kiln::partitioning
