// The partitioning driver: segment, resolve boundaries and block sizes to a fixpoint, recurse.
#include "partitioning/partitioning.h"

#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <unordered_set>

#include "ir/verifier.h"
#include "partitioning/atomic.h"
#include "partitioning/dependency.h"
#include "partitioning/strategies.h"
#include "util/errors.h"

namespace kiln::partitioning {
namespace {

using torch::jit::Block;
using torch::jit::Node;

struct Context {
  const PartitionSettings& settings;
  const std::vector<AtomicPattern>& patterns;
  size_t min_block_size;
  const Decisions& base;  // static decisions; what non-tensor analysis may copy
  Decisions& decisions;   // final decisions, only ever moved toward PyTorch
  const NodeOrder& order;
};

// Engine segments with too few ops fall back whole, and with them every atomic pattern they
// hold part of (its other part may lie in another engine segment); returns true when any did.
bool apply_min_block_size(const std::vector<Segment>& segments, const Context& ctx) {
  std::vector<Node*> engine_nodes;
  for (const Segment& s : segments) {
    if (s.target != Target::kEngine) continue;
    for (Node* n : s.nodes)
      if (!s.copied.count(n)) engine_nodes.push_back(n);
  }
  const auto groups = atomic_groups(engine_nodes, ctx.patterns);
  std::set<size_t> falling_groups;
  bool changed = false;
  for (const Segment& s : segments) {
    if (s.target != Target::kEngine) continue;
    const size_t ops = count_ops(s);
    if (ops >= ctx.min_block_size) continue;
    for (const Node* n : s.nodes) {
      if (s.copied.count(n)) continue;
      ctx.decisions[n] =
          Decision::no(Reason::kBelowMinBlockSize, "its engine segment has " + std::to_string(ops) +
                                                       " op(s), fewer than min_block_size " +
                                                       std::to_string(ctx.min_block_size));
      if (auto g = groups.find(n); g != groups.end()) falling_groups.insert(g->second);
      changed = true;
    }
  }
  for (const auto& [n, g] : groups) {
    if (!falling_groups.count(g) || !ctx.decisions.at(n).supported) continue;
    ctx.decisions[n] = Decision::no(
        Reason::kBelowMinBlockSize,
        "fused with ops whose engine segment has fewer ops than min_block_size (an atomic "
        "pattern is never split)");
  }
  return changed;
}

// The bytes of the tensor constants `node` reads that `seen` does not hold yet (added to it).
uint64_t new_weight_bytes(const Node* node, std::unordered_set<const torch::jit::Value*>& seen) {
  uint64_t bytes = 0;
  for (const torch::jit::Value* v : node->inputs()) {
    if (!is_constant(v->node()) || v->type()->kind() != c10::TypeKind::TensorType) continue;
    if (!seen.insert(v).second) continue;
    if (auto value = torch::jit::toIValue(v); value && value->isTensor()) {
      bytes += value->toTensor().nbytes();
    }
  }
  return bytes;
}

// Resource partitioning: splits each engine segment whose weights exceed
// max_engine_weight_bytes into consecutive pieces (execution order, so every piece reads only
// what earlier ones or other segments make). A cut never falls inside an atomic pattern: where
// the budget runs out inside one, the cut moves to the pattern's side holding most of its nodes.
// The pieces hold owned nodes only; the caller recomputes copies. Returns true when any split.
bool split_oversized(std::vector<Segment>& segments, const Context& ctx) {
  const uint64_t max_bytes = ctx.settings.max_engine_weight_bytes;
  std::vector<Segment> out;
  bool split = false;
  for (Segment& s : segments) {
    if (s.target != Target::kEngine || s.do_not_merge) {
      out.push_back(std::move(s));
      continue;
    }
    std::vector<Node*> nodes;
    for (Node* n : s.nodes)
      if (!s.copied.count(n)) nodes.push_back(n);
    std::unordered_set<const torch::jit::Value*> all;
    uint64_t total = 0;
    for (const Node* n : nodes) total += new_weight_bytes(n, all);
    if (total <= max_bytes) {
      out.push_back(std::move(s));
      continue;
    }
    // cut_ok[i]: a cut just before nodes[i] splits no atomic pattern.
    const auto groups = atomic_groups(nodes, ctx.patterns);
    std::map<size_t, std::pair<size_t, size_t>> span;  // group -> first, last index
    for (size_t i = 0; i < nodes.size(); ++i) {
      auto g = groups.find(nodes[i]);
      if (g == groups.end()) continue;
      auto [it, fresh] = span.emplace(g->second, std::make_pair(i, i));
      if (!fresh) it->second.second = i;
    }
    std::vector<bool> cut_ok(nodes.size() + 1, true);
    for (const auto& [g, range] : span) {
      for (size_t i = range.first + 1; i <= range.second; ++i) cut_ok[i] = false;
    }
    std::vector<size_t> cuts;  // piece starts after the first
    size_t start = 0;
    std::unordered_set<const torch::jit::Value*> seen;
    uint64_t bytes = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      const uint64_t more = new_weight_bytes(nodes[i], seen);
      if (more == 0 || bytes + more <= max_bytes || i == start) {
        bytes += more;
        continue;
      }
      // Cut before nodes[i], or where the pattern holding it lets.
      size_t cut = i;
      if (!cut_ok[i]) {
        size_t back = i, fwd = i;
        while (back > start && !cut_ok[back]) --back;
        while (fwd < nodes.size() && !cut_ok[fwd]) ++fwd;
        size_t before = 0, after = 0;  // of the pattern whose span holds nodes[i]
        for (const auto& [g, range] : span) {
          if (range.first >= i || i > range.second) continue;
          for (size_t k = range.first; k <= range.second; ++k) {
            auto m = groups.find(nodes[k]);
            if (m != groups.end() && m->second == g) ++(k < i ? before : after);
          }
        }
        // Most of it before the cut (or nothing fits before it): the cut moves after it.
        const bool forward = (before > after && fwd < nodes.size()) || back == start;
        cut = forward ? fwd : back;
      }
      if (cut >= nodes.size() || cut == start) {
        bytes += more;
        continue;
      }
      cuts.push_back(cut);
      start = cut;
      seen.clear();
      bytes = 0;
      for (size_t k = start; k <= i; ++k) bytes += new_weight_bytes(nodes[k], seen);
      if (cut > i) i = cut - 1;  // the pattern went to the earlier piece
    }
    if (cuts.empty()) {
      out.push_back(std::move(s));
      continue;
    }
    split = true;
    cuts.push_back(nodes.size());
    size_t from = 0;
    for (size_t to : cuts) {
      Segment piece;
      piece.target = s.target;
      piece.backend = s.backend;
      piece.nodes.assign(nodes.begin() + static_cast<std::ptrdiff_t>(from),
                         nodes.begin() + static_cast<std::ptrdiff_t>(to));
      out.push_back(std::move(piece));
      from = to;
    }
  }
  segments = std::move(out);
  return split;
}

void mark_loop_body(Node* loop, Decisions& decisions) {
  for (Block* body : loop->blocks()) {
    for (Node* n : body->nodes()) {
      if (is_constant(n)) continue;
      decisions[n] =
          Decision::no(Reason::kControlFlow, "inside a prim::Loop, which runs in PyTorch whole");
      mark_loop_body(n, decisions);
    }
  }
}

std::vector<Segment> partition_block(Block* block, const Context& ctx) {
  std::vector<Segment> segments;
  // Every round moves at least one node to PyTorch, so this ends.
  for (;;) {
    segments = segment_dependency_aware(block, ctx.decisions);
    segments = ctx.settings.strategy == Strategy::kGlobal
                   ? merge_global(std::move(segments), block, ctx.order)
                   : merge_adjacent(std::move(segments), ctx.order);
    compute_boundaries(segments, block);
    if (resolve_non_tensor_boundaries(segments, block, ctx.base, ctx.decisions, ctx.order))
      continue;
    if (apply_min_block_size(segments, ctx)) continue;
    if (ctx.settings.max_engine_weight_bytes > 0 && split_oversized(segments, ctx)) {
      compute_boundaries(segments, block);
      if (resolve_non_tensor_boundaries(segments, block, ctx.base, ctx.decisions, ctx.order))
        continue;
    }
    break;
  }
  for (Segment& s : segments) {
    if (!s.do_not_merge) continue;
    Node* node = s.nodes.front();
    if (node->kind() == torch::jit::prim::If) {
      for (Block* branch : node->blocks())
        s.blocks.push_back({branch, partition_block(branch, ctx)});
    } else {
      mark_loop_body(node, ctx.decisions);
    }
  }
  return segments;
}

void format_into(std::ostream& os, const std::vector<Segment>& segments,
                 const std::string& prefix) {
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    const std::string id = prefix + std::to_string(i);
    os << "segment " << id << ' ' << target_name(s.target);
    if (!s.backend.empty()) os << '[' << s.backend << ']';
    os << ':';
    for (const Node* n : s.nodes) {
      if (is_constant(n)) continue;
      os << ' ';
      for (size_t k = 0; k < n->outputs().size(); ++k) {
        os << (k == 0 ? "%" : ",%") << n->outputs()[k]->debugName();
      }
      if (!n->outputs().empty()) os << '=';
      os << n->kind().toQualString();
    }
    os << '\n';
    for (size_t b = 0; b < s.blocks.size(); ++b) {
      format_into(os, s.blocks[b].segments, id + "." + std::to_string(b) + ".");
    }
  }
}

void throw_if_not_fully_supported(const torch::jit::Graph& graph, const Decisions& decisions) {
  std::ostringstream os;
  size_t count = 0;
  std::function<void(const Block*)> walk = [&](const Block* block) {
    for (const Node* n : block->nodes()) {
      if (is_constant(n)) continue;
      const Decision& d = decisions.at(n);
      if (!d.supported) {
        ++count;
        os << "\n  " << ir::node_to_string(n) << "  [" << reason_name(d.reason) << ": " << d.detail
           << "]";
      }
      for (const Block* sub : n->blocks()) walk(sub);
    }
  };
  walk(graph.block());
  if (count > 0) {
    KILN_THROW(Unsupported, "require_full_compilation is set, but ", count,
               " node(s) cannot run in the engine:", os.str());
  }
}

}  // namespace

Decisions classify_graph(const torch::jit::Graph& graph, const Capability& capability,
                         const PartitionSettings& settings) {
  Decisions decisions;
  std::function<void(const Block*)> walk = [&](const Block* block) {
    for (const Node* n : block->nodes()) {
      if (!is_constant(n)) decisions.emplace(n, classify(n, capability, settings));
      for (const Block* sub : n->blocks()) walk(sub);
    }
  };
  walk(graph.block());
  return decisions;
}

PartitionedGraph partition(std::shared_ptr<torch::jit::Graph> graph, const Capability& capability,
                           const PartitionSettings& settings) {
  KILN_CHECK(graph != nullptr, InvalidArgument, "partition: no graph given");
  KILN_CHECK(settings.min_block_size > 0 || settings.require_full_compilation, InvalidArgument,
             "partition: min_block_size must be at least 1");
  PartitionedGraph result;
  result.graph = graph;
  const Decisions base = classify_graph(*graph, capability, settings);
  result.decisions = base;
  const NodeOrder order = number_nodes(*graph);
  const std::vector<AtomicPattern> patterns = atomic_patterns();
  const Context ctx{
      settings, patterns,         settings.require_full_compilation ? 1 : settings.min_block_size,
      base,     result.decisions, order};
  result.segments = partition_block(graph->block(), ctx);
  if (settings.require_full_compilation) throw_if_not_fully_supported(*graph, result.decisions);
  return result;
}

std::string format_segments(const std::vector<Segment>& segments) {
  std::ostringstream os;
  format_into(os, segments, "");
  return os.str();
}

std::string format_segments(const PartitionedGraph& partitioned) {
  return format_segments(partitioned.segments);
}

}  // namespace kiln::partitioning
