// Atomic subgraphs (seed 002): op chains the engine fuses into one kernel, which partitioning
// never splits across a segment boundary (resource partitioning, min_block_size).
#pragma once

#include <torch/script.h>

#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::partitioning {

// A chain of ops, each step one of a set of names ("aten::relu" for every overload or
// "aten::relu.default"-style overload names), where each step's tensor output is read only by
// the next step.
struct AtomicPattern {
  std::string name;
  std::vector<std::set<std::string>> steps;
};

// The built-in patterns: conv -> batch norm -> {relu, silu, gelu, sigmoid}, conv -> {relu, silu,
// gelu, sigmoid}, mul -> add, mul -> mul.
const std::vector<AtomicPattern>& builtin_atomic_patterns();

// Registers a pattern for every later partition of this process (CompileSpec-independent, as
// the seed's decorator). Throws InvalidArgument for a chain of fewer than two steps, an empty
// step or a name that is not an op name ("ns::op" or "ns::op.overload"); registering a name
// again replaces its pattern.
void register_atomic_pattern(AtomicPattern pattern);

// Removes a registered pattern; false when none has that name.
bool unregister_atomic_pattern(const std::string& name);

// The built-in patterns and the registered ones.
std::vector<AtomicPattern> atomic_patterns();

// Groups of `nodes` matching a pattern, all of whose nodes are in `nodes`: the group index of
// each node in one (a node belongs to at most one group, the first match in node order).
std::unordered_map<const torch::jit::Node*, size_t> atomic_groups(
    const std::vector<torch::jit::Node*>& nodes, const std::vector<AtomicPattern>& patterns);

}  // namespace kiln::partitioning
