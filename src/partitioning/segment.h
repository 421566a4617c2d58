// The result of partitioning: ordered engine and torch segments, nested for prim::If blocks.
#pragma once

#include <torch/script.h>

#include <array>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "partitioning/capability.h"

namespace kiln::partitioning {

enum class Target { kEngine, kTorch };

const char* target_name(Target target);  // "engine" or "torch"

// Shape and dtype of one segment input or output on one profile.
struct ValueDesc {
  bool is_tensor = false;
  std::vector<int64_t> sizes;                          // tensors only
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // tensors only
  std::string type;                                    // the TorchScript type, e.g. "int[]"
};

struct SegmentShapes {
  std::vector<ValueDesc> inputs;   // parallel to Segment::inputs
  std::vector<ValueDesc> outputs;  // parallel to Segment::outputs
};

enum Profile { kMin = 0, kOpt = 1, kMax = 2 };

struct PartitionedBlock;

struct Segment {
  Target target = Target::kTorch;
  // Engine segments: the backend of their nodes (Decision::backend; empty when there is one).
  std::string backend;
  // In execution order. Includes the nodes in `copied`: non-tensor values this engine segment
  // recomputes itself (constants excluded: every segment recreates the constants it uses).
  std::vector<torch::jit::Node*> nodes;
  std::unordered_set<const torch::jit::Node*> copied;
  std::vector<torch::jit::Value*> inputs;   // used here, produced by another segment or the graph
  std::vector<torch::jit::Value*> outputs;  // produced here, used by another segment or returned
  bool do_not_merge = false;                // control flow: stitched on its own
  std::vector<PartitionedBlock> blocks;     // a prim::If segment: each branch, partitioned
  bool has_shapes = false;
  std::array<SegmentShapes, 3> shapes;  // by Profile, after analyze_shapes
};

struct PartitionedBlock {
  torch::jit::Block* block = nullptr;
  std::vector<Segment> segments;
};

struct PartitionedGraph {
  std::shared_ptr<torch::jit::Graph> graph;
  std::vector<Segment> segments;  // of graph->block(), in an order that respects dependencies
  // The final decision of every non-constant node, nested blocks included.
  std::unordered_map<const torch::jit::Node*, Decision> decisions;
};

}  // namespace kiln::partitioning
