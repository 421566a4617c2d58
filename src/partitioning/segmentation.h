// Segmentation of one block into engine and torch segments, and the segment bookkeeping
// (inputs, outputs, merging) that every later step relies on.
#pragma once

#include <torch/script.h>

#include <unordered_map>
#include <vector>

#include "partitioning/segment.h"

namespace kiln::partitioning {

using Decisions = std::unordered_map<const torch::jit::Node*, Decision>;

// Position of every node of the graph in a pre-order walk (nested blocks included): a
// topological order for data dependencies, used to keep segment nodes in execution order.
using NodeOrder = std::unordered_map<const torch::jit::Node*, size_t>;
NodeOrder number_nodes(const torch::jit::Graph& graph);

// The node of `block` that is `node` or contains it in a sub-block; nullptr when `node` lies
// outside `block` (a graph input's prim::Param of an enclosing block included).
torch::jit::Node* ancestor_in(torch::jit::Node* node, const torch::jit::Block* block);

// The nodes of `block` that produce what `node` reads, its sub-blocks' free values included.
// Constants and values from outside `block` are left out.
std::vector<torch::jit::Node*> producers_in(torch::jit::Node* node, const torch::jit::Block* block);

// In-order greedy segmentation: a new segment at every change of target (the 7 of seed 000).
std::vector<Segment> segment_naive(torch::jit::Block* block, const Decisions& decisions);

// Seed 000: one open engine and one open torch segment; an open segment is finalized only when
// a node of the other target depends on it. Nodes with blocks get a do_not_merge segment each;
// impure nodes are barriers that nothing is moved across.
std::vector<Segment> segment_dependency_aware(torch::jit::Block* block, const Decisions& decisions);

// Merges neighbouring segments of one target unless one of them is do_not_merge.
std::vector<Segment> merge_adjacent(std::vector<Segment> segments, const NodeOrder& order);

// Joins `from` into `into`: the union of their nodes in execution order; a node owned by one of
// them is no longer a copy.
void absorb(Segment& into, const Segment& from, const NodeOrder& order);

// Recomputes inputs and outputs of every segment of `block` from their nodes.
void compute_boundaries(std::vector<Segment>& segments, const torch::jit::Block* block);

// Number of ops toward min_block_size: owned nodes that are not bookkeeping.
size_t count_ops(const Segment& segment);

bool is_tensor(const torch::jit::Value* value);

// Nodes with blocks and impure nodes: nothing may be reordered across them, and a control-flow
// node is stitched on its own.
bool is_barrier(const torch::jit::Node* node);

}  // namespace kiln::partitioning
