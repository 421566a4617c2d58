// Atomic subgraph patterns and their matches in a segment.
#include "partitioning/atomic.h"

#include <mutex>
#include <unordered_set>

#include "partitioning/capability.h"
#include "util/errors.h"

namespace kiln::partitioning {
namespace {

using torch::jit::Node;

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::vector<AtomicPattern>& registered() {
  static std::vector<AtomicPattern> patterns;
  return patterns;
}

bool step_matches(const Node* node, const std::set<std::string>& step) {
  return step.count(node->kind().toQualString()) || step.count(overload_name(node));
}

// The only user of `node`'s single tensor output, when there is exactly one.
const Node* only_user(const Node* node) {
  const Node* user = nullptr;
  for (const torch::jit::Value* v : node->outputs()) {
    if (v->type()->kind() != c10::TypeKind::TensorType) continue;
    for (const torch::jit::Use& u : v->uses()) {
      if (user != nullptr && u.user != user) return nullptr;
      user = u.user;
    }
  }
  return user;
}

}  // namespace

const std::vector<AtomicPattern>& builtin_atomic_patterns() {
  static const std::vector<AtomicPattern> patterns = [] {
    const std::set<std::string> conv = {"aten::_convolution", "aten::convolution", "aten::conv1d",
                                        "aten::conv2d", "aten::conv3d"};
    const std::set<std::string> bn = {"aten::batch_norm",
                                      "aten::_native_batch_norm_legit_no_training"};
    const std::set<std::string> act = {"aten::relu",    "aten::relu_", "aten::silu",
                                       "aten::silu_",   "aten::gelu",  "aten::sigmoid",
                                       "aten::sigmoid_"};
    return std::vector<AtomicPattern>{{"conv_bn_activation", {conv, bn, act}},
                                      {"conv_activation", {conv, act}},
                                      {"mul_add", {{"aten::mul"}, {"aten::add"}}},
                                      {"mul_mul", {{"aten::mul"}, {"aten::mul"}}}};
  }();
  return patterns;
}

void register_atomic_pattern(AtomicPattern pattern) {
  KILN_CHECK(!pattern.name.empty(), InvalidArgument, "atomic subgraph: a pattern needs a name");
  KILN_CHECK(pattern.steps.size() >= 2, InvalidArgument, "atomic subgraph `", pattern.name,
             "`: a pattern is a chain of at least two ops, got ", pattern.steps.size());
  for (const auto& step : pattern.steps) {
    KILN_CHECK(!step.empty(), InvalidArgument, "atomic subgraph `", pattern.name,
               "`: a step names no op");
    for (const std::string& op : step) {
      const size_t sep = op.find("::");
      KILN_CHECK(sep != std::string::npos && sep > 0 && sep + 2 < op.size(), InvalidArgument,
                 "atomic subgraph `", pattern.name, "`: `", op,
                 "` is not an op name like aten::relu or aten::add.Tensor");
    }
  }
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (AtomicPattern& p : registered()) {
    if (p.name == pattern.name) {
      p = std::move(pattern);
      return;
    }
  }
  registered().push_back(std::move(pattern));
}

bool unregister_atomic_pattern(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& patterns = registered();
  for (auto it = patterns.begin(); it != patterns.end(); ++it) {
    if (it->name == name) {
      patterns.erase(it);
      return true;
    }
  }
  return false;
}

std::vector<AtomicPattern> atomic_patterns() {
  std::vector<AtomicPattern> out = builtin_atomic_patterns();
  std::lock_guard<std::mutex> lock(registry_mutex());
  out.insert(out.end(), registered().begin(), registered().end());
  return out;
}

std::unordered_map<const Node*, size_t> atomic_groups(const std::vector<Node*>& nodes,
                                                      const std::vector<AtomicPattern>& patterns) {
  const std::unordered_set<const Node*> members(nodes.begin(), nodes.end());
  std::unordered_map<const Node*, size_t> group;
  size_t next = 0;
  for (const Node* start : nodes) {
    if (group.count(start)) continue;
    for (const AtomicPattern& p : patterns) {
      std::vector<const Node*> chain;
      const Node* n = start;
      for (size_t i = 0; i < p.steps.size(); ++i) {
        if (n == nullptr || !members.count(n) || group.count(n) || !step_matches(n, p.steps[i])) {
          break;
        }
        chain.push_back(n);
        if (i + 1 < p.steps.size()) n = only_user(n);
      }
      if (chain.size() != p.steps.size()) continue;
      for (const Node* c : chain) group[c] = next;
      ++next;
      break;
    }
  }
  return group;
}

}  // namespace kiln::partitioning
