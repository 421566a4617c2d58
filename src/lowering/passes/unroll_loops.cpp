// Loop unrolling: a prim::Loop with a short constant trip count and no early exit becomes its
// body repeated in place, so conversion sees straight-line code instead of a loop.
#include <torch/csrc/jit/ir/constants.h>

#include <unordered_map>

#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// Bounds that keep the unrolled graph small: trips times body nodes.
constexpr int64_t kMaxTrips = 8;
constexpr size_t kMaxUnrolledNodes = 256;

std::optional<int64_t> unrollable_trips(Node* loop) {
  if (loop->kind() != torch::jit::prim::Loop) return std::nullopt;
  auto trips = constant_value(loop->input(0));
  if (!trips || !trips->isInt() || trips->toInt() < 0 || trips->toInt() > kMaxTrips) {
    return std::nullopt;
  }
  torch::jit::Block* body = loop->blocks()[0];
  // A for loop: it starts, and keeps going, unconditionally (a while or break would not).
  if (!is_constant_bool(loop->input(1), true) || !is_constant_bool(body->outputs()[0], true)) {
    return std::nullopt;
  }
  if (ir::count_nodes(*body) * static_cast<size_t>(trips->toInt()) > kMaxUnrolledNodes) {
    return std::nullopt;
  }
  return trips->toInt();
}

}  // namespace

bool unroll_loops(GraphPtr& graph) {
  bool changed = false;
  ir::for_each_node(graph->block(), [&](Node* loop) {
    auto trips = unrollable_trips(loop);
    if (!trips) return;
    torch::jit::Block* body = loop->blocks()[0];
    std::vector<Value*> carried(loop->inputs().begin() + 2, loop->inputs().end());
    torch::jit::WithInsertPoint guard(loop);
    for (int64_t i = 0; i < *trips; ++i) {
      std::unordered_map<Value*, Value*> env;
      env[body->inputs()[0]] = graph->insertConstant(i);
      for (size_t k = 0; k < carried.size(); ++k) env[body->inputs()[k + 1]] = carried[k];
      auto lookup = [&](Value* v) {
        auto it = env.find(v);
        return it == env.end() ? v : it->second;
      };
      for (Node* node : body->nodes()) {
        Node* clone = graph->createClone(node, lookup);
        clone->insertBefore(loop);
        for (size_t o = 0; o < node->outputs().size(); ++o) env[node->output(o)] = clone->output(o);
      }
      for (size_t k = 0; k < carried.size(); ++k) carried[k] = lookup(body->outputs()[k + 1]);
    }
    for (size_t k = 0; k < carried.size(); ++k) loop->output(k)->replaceAllUsesWith(carried[k]);
    loop->destroy();
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
