// Keeps non-tensor values from crossing engine boundaries: recompute them inside, or fall back.
#include "partitioning/dependency.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <unordered_set>

namespace kiln::partitioning {
namespace {

using torch::jit::Node;
using torch::jit::Value;

std::string describe(const Value* v) {
  return "%" + v->debugName() + " (" + v->type()->str() + ")";
}

// The nodes to copy into a segment so that it computes `value` itself, producers first;
// nullopt with `why` set when some producer cannot run in the engine.
std::optional<std::vector<Node*>> evaluable_chain(Value* value,
                                                  const std::unordered_set<const Node*>& members,
                                                  const Decisions& base, std::string& why) {
  std::vector<Node*> chain;
  std::unordered_set<const Node*> visited;
  std::function<bool(Value*)> need = [&](Value* v) {
    Node* p = v->node();
    if (is_constant(p) || members.count(p) || visited.count(p)) return true;
    if (p->kind() == torch::jit::prim::Param) {
      why = describe(v) + " is an input of the graph or block";
      return false;
    }
    auto it = base.find(p);
    if (!p->blocks().empty() || it == base.end() || !it->second.supported) {
      why = describe(v) + " comes from " + p->kind().toQualString() + ", which runs in PyTorch";
      if (it != base.end() && !it->second.detail.empty()) why += " (" + it->second.detail + ")";
      return false;
    }
    for (Value* in : p->inputs())
      if (!is_tensor(in) && !need(in)) return false;
    visited.insert(p);
    chain.push_back(p);
    return true;
  };
  if (!need(value)) return std::nullopt;
  return chain;
}

// Copies the producers of non-tensor inputs in; returns true when a node fell back.
bool pull_in_non_tensor_inputs(Segment& s, const Decisions& base, Decisions& decisions,
                               const NodeOrder& order, bool& copied_any) {
  bool changed = false;
  std::unordered_set<const Node*> members(s.nodes.begin(), s.nodes.end());
  for (Value* v : s.inputs) {
    if (is_tensor(v)) continue;
    std::string why;
    if (auto chain = evaluable_chain(v, members, base, why)) {
      for (Node* n : *chain) {
        s.nodes.push_back(n);
        s.copied.insert(n);
        members.insert(n);
      }
      copied_any = copied_any || !chain->empty();
      continue;
    }
    for (Node* n : s.nodes) {
      if (s.copied.count(n)) continue;
      const auto& ins = n->inputs();
      if (std::find(ins.begin(), ins.end(), v) == ins.end()) continue;
      decisions[n] =
          Decision::no(Reason::kNonTensorBoundary,
                       "reads " + describe(v) + ", which the engine cannot compute: " + why);
      changed = true;
    }
  }
  if (copied_any) {
    std::sort(s.nodes.begin(), s.nodes.end(),
              [&](const Node* a, const Node* b) { return order.at(a) < order.at(b); });
  }
  return changed;
}

}  // namespace

bool resolve_non_tensor_boundaries(std::vector<Segment>& segments, const torch::jit::Block* block,
                                   const Decisions& base, Decisions& decisions,
                                   const NodeOrder& order) {
  bool changed = false;
  bool copied_any = false;
  for (Segment& s : segments) {
    if (s.target != Target::kEngine) continue;
    changed = pull_in_non_tensor_inputs(s, base, decisions, order, copied_any) || changed;
  }
  if (copied_any) compute_boundaries(segments, block);
  if (changed) return true;

  for (Segment& s : segments) {
    if (s.target != Target::kEngine) continue;
    for (Value* v : s.outputs) {
      if (is_tensor(v)) continue;
      decisions[v->node()] =
          Decision::no(Reason::kNonTensorBoundary,
                       "its output " + describe(v) + " is used outside its engine segment");
      changed = true;
    }
  }
  return changed;
}

}  // namespace kiln::partitioning
