// Shape and dtype inference for every layer kind: one overload per parameter struct, defined in
// the family's file in this folder. Used symbolically (dynamic dims are kDynamic) when layers are
// added, and concretely when an execution context binds input shapes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/layers.h"
#include "engine/types.h"

namespace kiln::engine {

struct InferInput {
  DataType dtype;
  Shape shape;
  const std::vector<int64_t>* values = nullptr;  // known contents (shape tensors), else null
};
struct InferOutput {
  DataType dtype;
  Shape shape;
};

// Dispatches on the parameter type; `layer` names the layer in errors.
std::vector<InferOutput> infer_layer(const std::string& layer, const LayerParams& params,
                                     const std::vector<InferInput>& inputs);

// A mask (bool: keep where true; floating: added) that broadcasts to `target` (named `target_name`
// in the error) without growing it: attention's weights, a masked softmax's input.
void check_mask(const std::string& what, const InferInput& mask, const Shape& target,
                const char* target_name);

// Throws InvalidArgument unless inputs.size() is in [min, max].
void expect_input_count(const std::string& layer, const std::vector<InferInput>& inputs, size_t min,
                        size_t max);

// A shape-tensor input (i64 of static 1-D shape): its length, the rank it gives. `known` (a
// fill's shape, a reshape's dims) is empty or what is known of the result while building, a dim
// each (kDynamic where only the shape input knows it); check_known_dims refuses another rank or
// a bad dim, and matches_known refuses a resolved shape that differs where `known` is static.
size_t shape_input_rank(const std::string& layer, const InferInput& st);
void check_known_dims(const std::string& layer, const Shape& known, size_t rank);
void matches_known(const std::string& layer, const Shape& resolved, const Shape& known);

// a * b for sizes a plan gives (kernel extents, strides, dilations, groups). Past 2^48, the bound
// on any tensor's volume, it throws InvalidArgument naming `what` instead of overflowing.
int64_t size_product(const std::string& layer, const char* what, int64_t a, int64_t b);

#define KILN_DECLARE_INFER(Params)                                          \
  std::vector<InferOutput> infer(const std::string& layer, const Params& p, \
                                 const std::vector<InferInput>& inputs);
KILN_DECLARE_INFER(ConvolutionParams)
KILN_DECLARE_INFER(MatMulParams)
KILN_DECLARE_INFER(ElementwiseParams)
KILN_DECLARE_INFER(UnaryParams)
KILN_DECLARE_INFER(ActivationParams)
KILN_DECLARE_INFER(PoolingParams)
KILN_DECLARE_INFER(ReduceParams)
KILN_DECLARE_INFER(SoftmaxParams)
KILN_DECLARE_INFER(NormalizationParams)
KILN_DECLARE_INFER(ConcatParams)
KILN_DECLARE_INFER(ShuffleParams)
KILN_DECLARE_INFER(SliceParams)
KILN_DECLARE_INFER(GatherParams)
KILN_DECLARE_INFER(ScatterParams)
KILN_DECLARE_INFER(SelectParams)
KILN_DECLARE_INFER(CastParams)
KILN_DECLARE_INFER(PadParams)
KILN_DECLARE_INFER(ResizeParams)
KILN_DECLARE_INFER(TopKParams)
KILN_DECLARE_INFER(ArgMaxParams)
KILN_DECLARE_INFER(ScanParams)
KILN_DECLARE_INFER(NonZeroParams)
KILN_DECLARE_INFER(ShapeParams)
KILN_DECLARE_INFER(FillParams)
KILN_DECLARE_INFER(AttentionParams)
KILN_DECLARE_INFER(FusedElementwiseParams)
KILN_DECLARE_INFER(SqueezeExcitationParams)
#undef KILN_DECLARE_INFER

}  // namespace kiln::engine
