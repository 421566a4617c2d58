// The global strategy: contraction of the segment graph toward the fewest segments.
#include "partitioning/strategies.h"

#include <algorithm>
#include <queue>
#include <unordered_set>

namespace kiln::partitioning {
namespace {

using torch::jit::Node;

bool has_barrier(const Segment& s) {
  return std::any_of(s.nodes.begin(), s.nodes.end(), [](const Node* n) { return is_barrier(n); });
}

// succ[i]: segments that must run after segment i (data, or a barrier's fixed place).
std::vector<std::vector<size_t>> successors(std::vector<Segment>& segments,
                                            const torch::jit::Block* block) {
  compute_boundaries(segments, block);
  std::unordered_map<const torch::jit::Value*, size_t> producer;
  for (size_t i = 0; i < segments.size(); ++i)
    for (const torch::jit::Value* v : segments[i].outputs) producer[v] = i;
  std::vector<std::unordered_set<size_t>> edges(segments.size());
  for (size_t j = 0; j < segments.size(); ++j) {
    for (const torch::jit::Value* v : segments[j].inputs) {
      auto it = producer.find(v);
      if (it != producer.end() && it->second != j) edges[it->second].insert(j);
    }
    if (has_barrier(segments[j])) {
      for (size_t i = 0; i < segments.size(); ++i) {
        if (i < j) edges[i].insert(j);
        if (i > j) edges[j].insert(i);
      }
    }
  }
  std::vector<std::vector<size_t>> succ(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) succ[i].assign(edges[i].begin(), edges[i].end());
  return succ;
}

// True when some path from `from` to `to` passes through another segment.
bool reaches_through_other(const std::vector<std::vector<size_t>>& succ, size_t from, size_t to) {
  std::vector<bool> seen(succ.size(), false);
  std::vector<size_t> stack;
  for (size_t k : succ[from])
    if (k != to) stack.push_back(k);
  while (!stack.empty()) {
    const size_t k = stack.back();
    stack.pop_back();
    if (k == to) return true;
    if (seen[k]) continue;
    seen[k] = true;
    for (size_t next : succ[k]) stack.push_back(next);
  }
  return false;
}

// Kahn's algorithm, taking the ready segment whose first node comes first in the source.
std::vector<Segment> topological(std::vector<Segment> segments, const torch::jit::Block* block,
                                 const NodeOrder& order) {
  const auto succ = successors(segments, block);
  std::vector<size_t> indegree(segments.size(), 0);
  for (const auto& s : succ)
    for (size_t j : s) ++indegree[j];
  using Item = std::pair<size_t, size_t>;  // (first node's position, segment)
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (size_t i = 0; i < segments.size(); ++i)
    if (indegree[i] == 0) ready.emplace(order.at(segments[i].nodes.front()), i);
  std::vector<Segment> sorted;
  while (!ready.empty()) {
    const size_t i = ready.top().second;
    ready.pop();
    sorted.push_back(std::move(segments[i]));
    for (size_t j : succ[i])
      if (--indegree[j] == 0) ready.emplace(order.at(segments[j].nodes.front()), j);
  }
  return sorted;
}

}  // namespace

std::vector<Segment> merge_global(std::vector<Segment> segments, const torch::jit::Block* block,
                                  const NodeOrder& order) {
  segments = merge_adjacent(std::move(segments), order);
  if (segments.size() > kMaxGlobalSegments) return segments;
  for (bool merged = true; merged;) {
    merged = false;
    const auto succ = successors(segments, block);
    for (size_t i = 0; i < segments.size() && !merged; ++i) {
      for (size_t j = i + 1; j < segments.size() && !merged; ++j) {
        const Segment& a = segments[i];
        const Segment& b = segments[j];
        if (a.target != b.target || a.backend != b.backend || a.do_not_merge || b.do_not_merge ||
            has_barrier(a) || has_barrier(b)) {
          continue;
        }
        if (reaches_through_other(succ, i, j) || reaches_through_other(succ, j, i)) continue;
        absorb(segments[i], segments[j], order);
        segments.erase(segments.begin() + static_cast<std::ptrdiff_t>(j));
        segments = topological(std::move(segments), block, order);
        merged = true;
      }
    }
  }
  return segments;
}

}  // namespace kiln::partitioning
