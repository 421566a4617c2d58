// Partitioning entry point: a lowered graph in, engine and torch segments out.
#pragma once

#include <torch/script.h>

#include <memory>
#include <unordered_map>

#include "partitioning/capability.h"
#include "partitioning/segment.h"
#include "partitioning/segmentation.h"
#include "partitioning/settings.h"

namespace kiln::partitioning {

// classify() for every non-constant node of the graph, nested blocks included.
Decisions classify_graph(const torch::jit::Graph& graph, const Capability& capability,
                         const PartitionSettings& settings);

// Splits `graph` into segments (see README.md for the steps and invariants). The graph is not
// modified; segments point into it. With require_full_compilation, throws Unsupported naming
// every node that cannot run in the engine and why.
PartitionedGraph partition(std::shared_ptr<torch::jit::Graph> graph, const Capability& capability,
                           const PartitionSettings& settings = {});

// One line per segment: "segment <i> <engine|torch>: %out=kind ..." (kiln-opt --partition).
// Segments of a prim::If's blocks follow their If as "segment <i>.<block>.<j> ...".
std::string format_segments(const PartitionedGraph& partitioned);

// A non-control-flow segment as a graph of its own: its inputs (in order), its nodes with the
// constants they use recreated, its outputs. What the interpreter runs in shape analysis and
// what conversion turns into an engine.
// `origin` (when given) maps each node of the new graph made from one of the segment's nodes to
// that node.
std::shared_ptr<torch::jit::Graph> segment_graph(
    const Segment& segment,
    std::unordered_map<const torch::jit::Node*, torch::jit::Node*>* origin = nullptr);

// The same line format for a flat list, e.g. the naive segmentation.
std::string format_segments(const std::vector<Segment>& segments);

}  // namespace kiln::partitioning
