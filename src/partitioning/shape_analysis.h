// Shape analysis: every segment's input and output shapes and dtypes at min, opt and max.
#pragma once

#include <torch/script.h>

#include <optional>
#include <vector>

#include "partitioning/segment.h"
#include "util/errors.h"

namespace kiln::partitioning {

// One graph input as the user describes it: a shape range and a dtype, or, for a non-tensor
// input, the value to use.
struct InputProfile {
  std::vector<int64_t> min, opt, max;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::optional<c10::IValue> value;
  // Per dim, the torch.export symbol it is ("s0"; "" for a static dim), when the input comes from
  // an exported program: sizes the program records in those symbols are then known at each
  // profile without a run (shapes_from_profiles).
  std::vector<std::string> dim_symbols;

  static InputProfile fixed(std::vector<int64_t> shape,
                            c10::ScalarType dtype = c10::ScalarType::Float);
  static InputProfile range(std::vector<int64_t> min, std::vector<int64_t> opt,
                            std::vector<int64_t> max,
                            c10::ScalarType dtype = c10::ScalarType::Float);
  static InputProfile of_value(c10::IValue value);
};

// The inputs shape analysis runs the graph on for one profile. Floating inputs are random;
// integer inputs are indices when the graph uses them as such (index_select, gather, embedding,
// index): uniform in [0, size) of the dimension they index when that size is known from the
// profiles or a constant, else zeros, so index ops never fail; other integer inputs are uniform
// in [1, 5], so that dividing by them or taking a remainder does not fail either, or zeros with
// `zero_integers` (what analyze_shapes tries when the graph fails on the first).
std::vector<c10::IValue> generate_inputs(const torch::jit::Graph& graph,
                                         const std::vector<InputProfile>& profiles, Profile profile,
                                         uint64_t seed = 0, bool zero_integers = false);

// How analyze_shapes found the shapes.
enum class ShapeSource {
  kMetaTensors,      // the graph run on meta tensors: sizes and dtypes from PyTorch's shape
                     // functions, no data
  kGeneratedInputs,  // the graph run on generated data (an op without a meta kernel, a size
                     // read from data: nonzero, item)
};

// Runs the segments in order in the TorchScript interpreter, once per profile, and fills each
// segment's `shapes` (nested If branches too; a branch that fails while not taken keeps
// has_shapes = false): on meta tensors where every op needed runs on them, else on generated
// inputs. Throws InvalidArgument for a profile count or shape that does not fit the graph, and
// ShapeMismatch naming the segment when a segment fails on the generated inputs
// (EngineSegmentFailed, with its nodes, for an engine segment).
ShapeSource analyze_shapes(PartitionedGraph& partitioned,
                           const std::vector<InputProfile>& profiles);

// Shapes without running the graph: where every engine segment reads graph inputs that are
// tensors (a model that converts whole, whatever PyTorch does around it), its input shapes are
// the profiles'; a value another segment computes is known too where the node making it carries
// torch.export's sizes for it (ir/export_sizes.h) in symbols the inputs' `dim_symbols` name, and
// a dtype other than f64, provided every tensor input has its `dim_symbols` (the profiles are the
// export's own, not shapes given by hand that its static sizes may not assume). The engines'
// outputs stay undescribed, which is safe because none can be f64 (the one output dtype stitching
// needs): no input is, no constant is and no node asks for f64 (a dtype argument, a float scalar
// made a tensor), and the default dtype is f32. Fills those segments' input shapes and returns
// true; returns false with nothing changed where that does not hold (nested blocks with engines, an
// engine reading another segment's value whose sizes are not recorded, a possible f64), and
// analyze_shapes must run.
bool shapes_from_profiles(PartitionedGraph& partitioned, const std::vector<InputProfile>& profiles);

// What analyze_shapes throws when an engine segment fails on the generated inputs (a ShapeMismatch
// naming the segment and PyTorch's error): the segment's nodes, which can run in PyTorch instead.
class EngineSegmentFailed : public ShapeMismatch {
 public:
  EngineSegmentFailed(const std::string& message, std::vector<const torch::jit::Node*> nodes)
      : ShapeMismatch(message), nodes(std::move(nodes)) {}
  std::vector<const torch::jit::Node*> nodes;
};

}  // namespace kiln::partitioning
