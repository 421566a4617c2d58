// Naive and dependency-aware segmentation, merging, and segment inputs/outputs.
#include "partitioning/segmentation.h"

#include <algorithm>
#include <functional>
#include <unordered_set>
#include <utility>

namespace kiln::partitioning {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

Target target_of(const Node* node, const Decisions& decisions) {
  auto it = decisions.find(node);
  return it != decisions.end() && it->second.supported ? Target::kEngine : Target::kTorch;
}

std::string backend_of(const Node* node, const Decisions& decisions) {
  auto it = decisions.find(node);
  return it != decisions.end() && it->second.supported ? it->second.backend : "";
}

// Calls `fn` on every value `node` reads, including those read inside its sub-blocks (and the
// values its sub-blocks return), since stitching must pass all of them in.
void for_each_used_value(Node* node, const std::function<void(Value*)>& fn) {
  for (Value* v : node->inputs()) fn(v);
  for (Block* sub : node->blocks()) {
    for (Node* inner : sub->nodes()) for_each_used_value(inner, fn);
    for (Value* v : sub->outputs()) fn(v);
  }
}

}  // namespace

bool is_barrier(const Node* node) {
  return !node->blocks().empty() || is_impure(node);
}

bool is_tensor(const Value* value) {
  return value->type()->kind() == c10::TypeKind::TensorType;
}

const char* target_name(Target target) {
  return target == Target::kEngine ? "engine" : "torch";
}

NodeOrder number_nodes(const torch::jit::Graph& graph) {
  NodeOrder order;
  std::function<void(const Block*)> walk = [&](const Block* block) {
    for (const Node* node : block->nodes()) {
      order.emplace(node, order.size());
      for (const Block* sub : node->blocks()) walk(sub);
    }
  };
  walk(graph.block());
  return order;
}

Node* ancestor_in(Node* node, const Block* block) {
  while (node != nullptr) {
    if (node->owningBlock() == block) return node;
    Block* owner = node->owningBlock();
    if (owner == nullptr) return nullptr;
    node = owner->owningNode();
  }
  return nullptr;
}

std::vector<Node*> producers_in(Node* node, const Block* block) {
  std::vector<Node*> producers;
  for_each_used_value(node, [&](Value* v) {
    if (is_constant(v->node())) return;
    Node* p = ancestor_in(v->node(), block);
    if (p == nullptr || p == node || p->kind() == torch::jit::prim::Param) return;
    if (std::find(producers.begin(), producers.end(), p) == producers.end()) producers.push_back(p);
  });
  return producers;
}

std::vector<Segment> segment_naive(Block* block, const Decisions& decisions) {
  std::vector<Segment> segments;
  for (Node* node : block->nodes()) {
    if (is_constant(node)) continue;
    const Target target = target_of(node, decisions);
    const std::string backend = backend_of(node, decisions);
    const bool alone = !node->blocks().empty();
    if (segments.empty() || alone || segments.back().do_not_merge ||
        segments.back().target != target || segments.back().backend != backend) {
      segments.emplace_back();
      segments.back().target = target;
      segments.back().backend = backend;
      segments.back().do_not_merge = alone;
    }
    segments.back().nodes.push_back(node);
  }
  return segments;
}

std::vector<Segment> segment_dependency_aware(Block* block, const Decisions& decisions) {
  std::vector<Segment> done;
  // One open segment per target and engine backend; ids tell which open segment (if any) holds a
  // node, so a finalized segment's nodes never match. Open segments never depend on each other:
  // a node that reads from another open segment finalizes that one first.
  struct Open {
    Segment segment;
    int id;
  };
  std::vector<Open> open;
  int next_id = 0;
  std::unordered_map<const Node*, int> segment_id;

  auto finalize = [&](Open& o) {
    if (!o.segment.nodes.empty()) {
      Segment fresh;
      fresh.target = o.segment.target;
      fresh.backend = o.segment.backend;
      done.push_back(std::exchange(o.segment, std::move(fresh)));
    }
    o.id = next_id++;
  };
  auto finalize_all = [&] {
    // In source order of their first nodes, for readability.
    std::vector<Open*> order;
    for (Open& o : open)
      if (!o.segment.nodes.empty()) order.push_back(&o);
    std::sort(order.begin(), order.end(), [](const Open* a, const Open* b) {
      return a->segment.nodes[0]->isBefore(b->segment.nodes[0]);
    });
    for (Open* o : order) finalize(*o);
  };
  auto open_for = [&](Target target, const std::string& backend) -> Open& {
    for (Open& o : open)
      if (o.segment.target == target && o.segment.backend == backend) return o;
    open.push_back({});
    open.back().segment.target = target;
    open.back().segment.backend = backend;
    open.back().id = next_id++;
    return open.back();
  };

  for (Node* node : block->nodes()) {
    if (is_constant(node)) continue;
    const Target target = target_of(node, decisions);
    const std::string backend = backend_of(node, decisions);
    if (is_barrier(node)) {
      finalize_all();
      Segment alone;
      alone.target = target;
      alone.backend = backend;
      alone.do_not_merge = !node->blocks().empty();
      alone.nodes.push_back(node);
      done.push_back(std::move(alone));
      continue;
    }
    const int mine = open_for(target, backend).id;
    for (Node* producer : producers_in(node, block)) {
      auto id = segment_id.find(producer);
      if (id == segment_id.end() || id->second == mine) continue;
      for (Open& o : open)
        if (o.id == id->second) finalize(o);
    }
    Open& o = open_for(target, backend);  // `open` may have grown: look it up again
    o.segment.nodes.push_back(node);
    segment_id[node] = o.id;
  }
  finalize_all();
  return done;
}

void absorb(Segment& into, const Segment& from, const NodeOrder& order) {
  std::unordered_set<const Node*> owned;
  for (Node* n : into.nodes)
    if (!into.copied.count(n)) owned.insert(n);
  for (Node* n : from.nodes)
    if (!from.copied.count(n)) owned.insert(n);
  std::unordered_set<const Node*> seen;
  std::vector<Node*> nodes;
  for (Node* n : into.nodes)
    if (seen.insert(n).second) nodes.push_back(n);
  for (Node* n : from.nodes)
    if (seen.insert(n).second) nodes.push_back(n);
  std::sort(nodes.begin(), nodes.end(),
            [&](const Node* a, const Node* b) { return order.at(a) < order.at(b); });
  std::unordered_set<const Node*> copied;
  for (Node* n : nodes)
    if (!owned.count(n)) copied.insert(n);
  into.nodes = std::move(nodes);
  into.copied = std::move(copied);
}

std::vector<Segment> merge_adjacent(std::vector<Segment> segments, const NodeOrder& order) {
  std::vector<Segment> merged;
  for (Segment& segment : segments) {
    if (!merged.empty() && merged.back().target == segment.target &&
        merged.back().backend == segment.backend && !merged.back().do_not_merge &&
        !segment.do_not_merge) {
      absorb(merged.back(), segment, order);
    } else {
      merged.push_back(std::move(segment));
    }
  }
  return merged;
}

void compute_boundaries(std::vector<Segment>& segments, const Block* block) {
  std::unordered_map<const Node*, size_t> owner;
  for (size_t i = 0; i < segments.size(); ++i) {
    for (Node* n : segments[i].nodes)
      if (!segments[i].copied.count(n)) owner[n] = i;
  }
  std::unordered_set<const Value*> needed(block->outputs().begin(), block->outputs().end());
  for (size_t i = 0; i < segments.size(); ++i) {
    Segment& s = segments[i];
    s.inputs.clear();
    std::unordered_set<const Value*> seen;
    for (Node* n : s.nodes) {
      for_each_used_value(n, [&](Value* v) {
        if (is_constant(v->node())) return;
        Node* p = ancestor_in(v->node(), block);
        if (p != nullptr && (s.copied.count(p) || (owner.count(p) && owner.at(p) == i))) return;
        if (seen.insert(v).second) {
          s.inputs.push_back(v);
          needed.insert(v);
        }
      });
    }
  }
  for (Segment& s : segments) {
    s.outputs.clear();
    for (Node* n : s.nodes) {
      if (s.copied.count(n)) continue;
      for (Value* v : n->outputs())
        if (needed.count(v)) s.outputs.push_back(v);
    }
  }
}

size_t count_ops(const Segment& segment) {
  size_t n = 0;
  for (const Node* node : segment.nodes)
    if (!segment.copied.count(node) && !is_bookkeeping(node)) ++n;
  return n;
}

}  // namespace kiln::partitioning
