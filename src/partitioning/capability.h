// Which nodes may run in the engine: the capability interface, a table for tests, and the
// classification that adds the user's settings (forced ops and modules) and impurity on top.
#pragma once

#include <torch/script.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kiln::partitioning {

struct PartitionSettings;

// Why a node runs in PyTorch. kNone means it goes to the engine.
enum class Reason {
  kNone,
  kNoConverter,        // no converter or evaluator is registered for its schema
  kValidator,          // a converter exists but its capability validator refused this node
  kForcedOp,           // listed in torch_executed_ops
  kForcedModule,       // inside a torch_executed_modules module (ir::kTorchExecutedAttr)
  kImpure,             // has side effects or writes to an input
  kControlFlow,        // prim::If / prim::Loop (or inside a loop that stays in PyTorch)
  kNonTensorBoundary,  // would make a non-tensor value cross an engine boundary
  kBelowMinBlockSize,  // its engine segment was shorter than min_block_size
  kConversionFailed,   // its converter accepted it, then failed to convert it (a compile retry)
  kRunFailed,          // its engine segment failed on shape analysis's generated inputs (a retry)
  kNotInSupportMap,    // the engines convert it, but no backend of backend_priority lists it
};

// Stable short name used in reports and JSON ("no converter", "forced op", ...).
const char* reason_name(Reason reason);

struct Decision {
  bool supported = false;
  Reason reason = Reason::kNone;
  std::string detail;  // names what is wrong, for error messages and reports
  // Supported nodes: the engine backend that takes it (BackendCapability); empty when there is
  // only one. Segments hold nodes of one backend.
  std::string backend;

  static Decision yes(std::string backend = "") {
    return {true, Reason::kNone, "", std::move(backend)};
  }
  static Decision no(Reason reason, std::string detail) {
    return {false, reason, std::move(detail), ""};
  }
};

// The question partitioning asks of conversion: can this one node become engine layers or be
// evaluated statically? The conversion registry implements it; tests use TableCapability.
class Capability {
 public:
  virtual ~Capability() = default;
  virtual Decision query(const torch::jit::Node* node) const = 0;
};

// Returns why a node is refused, or nothing when it is accepted (the converter registry's shape).
using CapabilityValidator = std::function<std::optional<std::string>(const torch::jit::Node*)>;

// A capability from a table of names: "aten::add" (any overload) or "aten::add.Tensor".
class TableCapability : public Capability {
 public:
  TableCapability& add(const std::string& name, CapabilityValidator validator = {});
  // Every node is supported except those whose name is in `unsupported`.
  static TableCapability all_except(std::set<std::string> unsupported);

  Decision query(const torch::jit::Node* node) const override;

 private:
  std::map<std::string, CapabilityValidator> entries_;
  bool support_all_ = false;
  std::set<std::string> unsupported_;
};

// Several engine backends in priority order (seed 002's backend_support_map and
// backend_priority): a node goes to the first backend whose op list names it ("aten::add" for
// every overload, "aten::add.Tensor" for one; an empty list names every op) and whose capability
// accepts it, and the decision carries that backend's name. A node no backend lists is refused
// with kNotInSupportMap; one the capability refuses keeps the capability's reason.
struct BackendSupport {
  std::string name;
  std::set<std::string> ops;  // empty: every op the capability accepts
  const Capability* capability = nullptr;
};

class BackendCapability : public Capability {
 public:
  explicit BackendCapability(std::vector<BackendSupport> backends);
  Decision query(const torch::jit::Node* node) const override;

 private:
  std::vector<BackendSupport> backends_;
};

// "aten::add.Tensor" for a node with a schema overload, else its kind ("prim::ListConstruct").
std::string overload_name(const torch::jit::Node* node);

// True for prim::Constant: constants belong to no segment; every segment recreates the ones it
// uses, so they never create a dependency between segments.
bool is_constant(const torch::jit::Node* node);

// True for nodes that only pack or unpack values (lists, tuples); they do not count toward
// min_block_size because an engine gains nothing from running them.
bool is_bookkeeping(const torch::jit::Node* node);

// Side effects, or writes to one of its inputs (in-place and out= variants).
bool is_impure(const torch::jit::Node* node);

// The static decision for one node: control flow, module fallback, torch_executed_ops,
// impurity, then the capability. Segment-level reasons (boundaries, block size) come later.
Decision classify(const torch::jit::Node* node, const Capability& capability,
                  const PartitionSettings& settings);

}  // namespace kiln::partitioning
