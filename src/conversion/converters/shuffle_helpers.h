// Helpers shared by the data-movement converter families (shuffle, concat, indexing, select, pad,
// resize, cast, fill, topk): static argument lists, axes, reshapes with dynamic dims, broadcasts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "conversion/context.h"
#include "conversion/registry.h"

namespace kiln::conversion {

// The schema keys ("name.overload") of `keys` whose operator exists in the libtorch we build
// against, so that overloads of only one torch version are registered only there.
std::vector<std::string> existing_schemas(const std::vector<std::string>& keys);

// Validator helper: why `v` cannot be known at compile time (a graph input, a tensor's
// contents, ...), or nullopt when it is a constant or computed by evaluators from constants and
// tensor metadata. Dims that turn out dynamic are still found only during conversion.
std::optional<std::string> not_static_reason(const torch::jit::Value* v);
// A validator requiring the given inputs (by index; absent indices are skipped) to be static.
CapabilityValidator static_inputs(std::vector<size_t> indices);

// A static int list (or a single int, as a one-element list).
std::vector<int64_t> static_ints(ConversionContext& ctx, const torch::jit::Value* v);
int64_t static_int(ConversionContext& ctx, const torch::jit::Value* v);
// An optional ScalarType argument (None -> nullopt) as an engine dtype.
std::optional<engine::DataType> static_dtype(ConversionContext& ctx, const torch::jit::Value* v);
// A torch dim normalized to [0, rank).
int64_t axis_of(int64_t dim, size_t rank, const torch::jit::Node* node);

// One dim of a reshape target: `size` when static; a dynamic size (kDynamic) is either the input
// dim `from`, or (from = -1) whatever the other dims leave.
struct TargetDim {
  int64_t size = engine::kDynamic;
  int64_t from = -1;
};
// The input dim `j` of `shape` as a target dim.
inline TargetDim copy_dim(const engine::Shape& shape, size_t j) {
  return {shape[j], static_cast<int64_t>(j)};
}
// Reshapes `x` to `dims` with a shuffle layer, using the engine's 0 (copy) and -1 (infer) for
// dynamic dims; throws Unsupported when that cannot express the target (two unknown dims that
// are not copied in place). Returns `x` itself when the shape does not change.
engine::TensorId reshape_dims(ConversionContext& ctx, const torch::jit::Node* node,
                              engine::TensorId x, const std::vector<TargetDim>& dims,
                              const std::string& suffix = "");
// Removes the (size-1) dim `axis` of `x`.
engine::TensorId drop_dim(ConversionContext& ctx, const torch::jit::Node* node, engine::TensorId x,
                          int64_t axis, const std::string& suffix = "");
// Inserts a size-1 dim at `axis` (in the output's numbering).
engine::TensorId insert_dim(ConversionContext& ctx, const torch::jit::Node* node,
                            engine::TensorId x, int64_t axis, const std::string& suffix = "");
// A size known only at run time (an export's SymInt: `x.size(k)`, or +, -, *, // of such sizes
// and ints) as an i64 [1] tensor. Its layers read only tensor shapes, so the engine computes them
// on the host while it resolves shapes for each call, never on the device. Unsupported, naming
// the op, for any other int.
engine::TensorId run_time_int(ConversionContext& ctx, const torch::jit::Node* node,
                              const torch::jit::Value* v, int depth = 0);
// start, start + step, ... below `stop` (an i64 [1] run-time int), step > 0: a range fill whose
// length the engine computes from shapes on the host.
engine::TensorId run_time_range(ConversionContext& ctx, const torch::jit::Node* node, int64_t start,
                                engine::TensorId stop, int64_t step, engine::DataType dtype);
// Broadcasts `x` to at least the shape `target` (numpy alignment; a target dim of 1 keeps x's
// dim). The engine has no expand layer: a select whose condition is an all-true fill of the
// target shape and whose branches are both `x` broadcasts exactly, for every dtype.
engine::TensorId broadcast_to(ConversionContext& ctx, const torch::jit::Node* node,
                              engine::TensorId x, const engine::Shape& target,
                              const std::string& suffix = "");

}  // namespace kiln::conversion
