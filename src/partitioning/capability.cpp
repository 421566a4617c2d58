// Capability table and the static (per-node) classification of engine capability.
#include "partitioning/capability.h"

#include "ir/graph_utils.h"

#include "partitioning/settings.h"
#include "util/errors.h"

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
    case Reason::kNotInSupportMap:
      return "not in backend_support_map";
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

BackendCapability::BackendCapability(std::vector<BackendSupport> backends)
    : backends_(std::move(backends)) {
  KILN_CHECK(!backends_.empty(), InvalidArgument, "backend_priority: no backend given");
  for (const BackendSupport& b : backends_) {
    KILN_CHECK(b.capability != nullptr, InternalError, "backend `", b.name, "` has no capability");
  }
}

Decision BackendCapability::query(const torch::jit::Node* node) const {
  const std::string kind = node->kind().toQualString();
  const std::string overload = overload_name(node);
  // A node that makes no tensor (a size, integer arithmetic, a list of tensors) is no op of a
  // backend's list: it goes where its first user goes, when that backend takes it.
  bool makes_tensor = false;
  for (const torch::jit::Value* v : node->outputs()) {
    makes_tensor = makes_tensor || v->type()->kind() == c10::TypeKind::TensorType;
  }
  if (!makes_tensor) {
    const torch::jit::Node* first = nullptr;
    for (const torch::jit::Value* v : node->outputs()) {
      for (const torch::jit::Use& u : v->uses()) {
        if (u.user->owningBlock() != node->owningBlock()) continue;
        if (first == nullptr || u.user->isBefore(first)) first = u.user;
      }
    }
    std::string preferred;
    if (first != nullptr && first->kind() != torch::jit::prim::Return) {
      preferred = query(first).backend;
    }
    std::optional<Decision> refused;
    for (int pass = 0; pass < 2; ++pass) {
      for (const BackendSupport& b : backends_) {
        if (pass == 0 && b.name != preferred) continue;
        Decision d = b.capability->query(node);
        if (d.supported) return Decision::yes(b.name);
        if (!refused) refused = std::move(d);
      }
    }
    return *refused;
  }
  std::optional<Decision> refused;
  std::string listed_nowhere;
  for (const BackendSupport& b : backends_) {
    if (!b.ops.empty() && !b.ops.count(kind) && !b.ops.count(overload)) {
      listed_nowhere += (listed_nowhere.empty() ? "" : ", ") + b.name;
      continue;
    }
    Decision d = b.capability->query(node);
    if (d.supported) return Decision::yes(b.name);
    if (!refused) refused = std::move(d);
  }
  if (refused) return *refused;
  // Listed nowhere: an op no engine converts says so, rather than that no list names it.
  if (Decision d = backends_.front().capability->query(node); !d.supported) return d;
  return Decision::no(Reason::kNotInSupportMap, "no backend of backend_priority (" +
                                                    listed_nowhere + ") lists " + overload +
                                                    " in backend_support_map");
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
