// The partitioning driver: segment, resolve boundaries and block sizes to a fixpoint, recurse.
#include "partitioning/partitioning.h"

#include <functional>
#include <sstream>

#include "ir/verifier.h"
#include "partitioning/dependency.h"
#include "partitioning/strategies.h"
#include "util/errors.h"

namespace kiln::partitioning {
namespace {

using torch::jit::Block;
using torch::jit::Node;

struct Context {
  const PartitionSettings& settings;
  size_t min_block_size;
  const Decisions& base;  // static decisions; what non-tensor analysis may copy
  Decisions& decisions;   // final decisions, only ever moved toward PyTorch
  const NodeOrder& order;
};

// Engine segments with too few ops fall back whole; returns true when any did.
bool apply_min_block_size(const std::vector<Segment>& segments, const Context& ctx) {
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
      changed = true;
    }
  }
  return changed;
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
  const Context ctx{settings, settings.require_full_compilation ? 1 : settings.min_block_size, base,
                    result.decisions, order};
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
