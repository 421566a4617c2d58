// The engine's layer set: one parameter struct per layer kind. Each struct lists its fields once,
// in fields(visitor), which gives plan serialization, JSON inspection and hashing for free.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "engine/op_kinds.h"
#include "engine/types.h"

namespace kiln::engine {

enum class PoolingKind : uint8_t { kMax, kAverage };
enum class ReduceOp : uint8_t { kSum, kMean, kMax, kMin, kProd, kAny, kAll };
enum class NormalizationKind : uint8_t { kBatch, kLayer, kGroup, kInstance, kRms };
enum class GatherMode : uint8_t { kDefault /*index_select/embedding*/, kElements /*torch.gather*/ };
// How scattered updates meet what a position holds: written over it, or combined (max/min keep
// NaN, as torch's scatter_reduce amax/amin).
enum class ScatterReduce : uint8_t { kNone, kAdd, kMul, kMax, kMin };
// The running op of a scan: torch's cumsum, cumprod, cummax, cummin, logcumsumexp.
enum class ScanOp : uint8_t { kSum, kProd, kMax, kMin, kLogSumExp };
enum class PadMode : uint8_t { kConstant, kReflect, kReplicate };
enum class ResizeMode : uint8_t { kNearest, kLinear, kCubic };
enum class FillMode : uint8_t { kConstant /*value*/, kRange /*start + i*delta*/ };

const char* binary_op_name(BinaryOp op);
const char* unary_op_name(UnaryOp op);
const char* activation_name(ActivationKind k);

// Post-operations a fused convolution/matmul applies to its result, in this order:
// y = act(y + bias) [+ residual, then act2]. Filled by the builder's fusion passes.
struct PostOps {
  bool has_bias = false;  // an extra input: bias, broadcast over the channel/last dim
  ActivationKind activation = ActivationKind::kNone;
  double alpha = 0, beta = 0;                          // activation parameters
  bool has_residual = false;                           // an extra input added after the activation
  ActivationKind activation2 = ActivationKind::kNone;  // applied after the residual add
  double alpha2 = 0, beta2 = 0;
  template <class V>
  void fields(V& v) {
    v("has_bias", has_bias);
    v("activation", activation);
    v("alpha", alpha);
    v("beta", beta);
    v("has_residual", has_residual);
    v("activation2", activation2);
    v("alpha2", alpha2);
    v("beta2", beta2);
  }
};

// Inputs: data [N, C, spatial...], weights [O, C/groups, k...] ([C, O/groups, k...] transposed),
// then post-op inputs (bias [O], residual).
// channels_last (set by the builder's layout pass, never transposed): data, output and residual
// are [N, spatial..., C] and weights [O, k..., C/groups]; the parameters still count spatial dims.
// tf32 (set by the builder for f32 cuda layers unless disabled): f32 products may round their
// operands to TF32 (10-bit mantissa) on tensor cores, accumulating in f32, as PyTorch's cuDNN
// convolutions do by default and TensorRT's kTF32. Backends without TF32 math ignore it.
struct ConvolutionParams {
  std::vector<int64_t> strides, padding_begin, padding_end, dilations;
  int64_t groups = 1;
  bool transposed = false;
  std::vector<int64_t> output_padding;  // transposed only
  PostOps post;
  bool channels_last = false;
  bool tf32 = false;
  template <class V>
  void fields(V& v) {
    v("strides", strides);
    v("padding_begin", padding_begin);
    v("padding_end", padding_end);
    v("dilations", dilations);
    v("groups", groups);
    v("transposed", transposed);
    v("output_padding", output_padding);
    post.fields(v);
    v("channels_last", channels_last);
    v("tf32", tf32);
  }
};

// Inputs: a [..., M, K], b [..., K, N] (batched, broadcasting batch dims; rank-1 operands are
// promoted as torch.matmul does), then post-op inputs (bias [N], residual). tf32: as for
// convolutions.
struct MatMulParams {
  bool transpose_a = false, transpose_b = false;
  PostOps post;
  bool tf32 = false;
  template <class V>
  void fields(V& v) {
    v("transpose_a", transpose_a);
    v("transpose_b", transpose_b);
    post.fields(v);
    v("tf32", tf32);
  }
};

struct ElementwiseParams {  // inputs: a, b (broadcasting)
  BinaryOp op = BinaryOp::kAdd;
  template <class V>
  void fields(V& v) {
    v("op", op);
  }
};
struct UnaryParams {
  UnaryOp op = UnaryOp::kNeg;
  template <class V>
  void fields(V& v) {
    v("op", op);
  }
};
struct ActivationParams {
  ActivationKind kind = ActivationKind::kRelu;
  double alpha = 0, beta = 0;
  template <class V>
  void fields(V& v) {
    v("kind", kind);
    v("alpha", alpha);
    v("beta", beta);
  }
};

// Input [N, C, spatial...]. Adaptive pooling computes windows from output_size, as torch does.
// channels_last (set by the builder's layout pass): input and output are [N, spatial..., C].
struct PoolingParams {
  PoolingKind kind = PoolingKind::kMax;
  std::vector<int64_t> kernel, strides, padding_begin, padding_end, dilations;
  bool ceil_mode = false, count_include_pad = true;
  bool adaptive = false;
  std::vector<int64_t> output_size;  // adaptive only
  bool channels_last = false;
  template <class V>
  void fields(V& v) {
    v("kind", kind);
    v("kernel", kernel);
    v("strides", strides);
    v("padding_begin", padding_begin);
    v("padding_end", padding_end);
    v("dilations", dilations);
    v("ceil_mode", ceil_mode);
    v("count_include_pad", count_include_pad);
    v("adaptive", adaptive);
    v("output_size", output_size);
    v("channels_last", channels_last);
  }
};

struct ReduceParams {
  ReduceOp op = ReduceOp::kSum;
  std::vector<int64_t> axes;  // empty: all axes
  bool keep_dims = false;
  template <class V>
  void fields(V& v) {
    v("op", op);
    v("axes", axes);
    v("keep_dims", keep_dims);
  }
};

// Inputs: x, and optionally a mask over the last axis (bool: keep where true; floating: added to
// x) broadcast to x's shape. `causal` keeps element (i, j) of x's last two dims only where
// j <= i (torch's is_causal, top-left aligned). A masked or causal softmax is over the last axis,
// not log, and rows with nothing kept come out zero (attention's safe softmax) instead of NaN.
struct SoftmaxParams {
  int64_t axis = -1;
  bool log = false;
  bool causal = false;
  template <class V>
  void fields(V& v) {
    v("axis", axis);
    v("log", log);
    v("causal", causal);
  }
};

// kBatch: inputs x, scale, bias, mean, var (per channel, axis 1).
// kLayer: inputs x, scale, bias over the last `normalized_dims` dims (scale/bias may be absent:
//   has_affine=false). kGroup: x, scale, bias (per channel) with num_groups. kInstance: per (N, C).
// kRms: x / sqrt(mean(x^2) + epsilon) over the last `normalized_dims` dims, times a scale over
//   them when has_affine (no bias).
struct NormalizationParams {
  NormalizationKind kind = NormalizationKind::kLayer;
  double epsilon = 1e-5;
  int64_t normalized_dims = 1;  // kLayer, kRms
  int64_t num_groups = 1;       // kGroup
  bool has_affine = true;
  template <class V>
  void fields(V& v) {
    v("kind", kind);
    v("epsilon", epsilon);
    v("normalized_dims", normalized_dims);
    v("num_groups", num_groups);
    v("has_affine", has_affine);
  }
};

struct ConcatParams {
  int64_t axis = 0;
  bool stack = false;  // torch.stack: inserts a new axis
  // Set by the builder's concat_in_place pass: the inputs are written where they sit in the
  // output (each a strided view of it, TensorRef::row and pitch), or in the output of the
  // in-place concat whose inputs include all of these in order (a dense block's growing concats
  // share the bytes of its last one), so the layer moves nothing.
  bool in_place = false;
  template <class V>
  void fields(V& v) {
    v("axis", axis);
    v("stack", stack);
    v("in_place", in_place);
  }
};

// Shuffle = transpose(first_perm), reshape, transpose(second_perm). In `reshape`, 0 copies the
// input dim at that position and -1 is inferred. With a second input (an i64 shape tensor),
// the reshape dims come from its values at run time, and `reshape` is empty or the result's dims
// as far as they are known while building (kDynamic for the rest), checked at run time.
// cast (set by the builder's fuse_cast_into_shuffle for cuda plans): the float elements are
// converted to `to`, a float dtype, as they move (one pass where a cast and a shuffle took two:
// the input's f32 -> f16 cast and NCHW -> NHWC transpose of a channels-last network).
struct ShuffleParams {
  std::vector<int64_t> first_perm;
  bool has_reshape = false;
  std::vector<int64_t> reshape;
  std::vector<int64_t> second_perm;
  bool cast = false;
  DataType to = DataType::kF32;
  template <class V>
  void fields(V& v) {
    v("first_perm", first_perm);
    v("has_reshape", has_reshape);
    v("reshape", reshape);
    v("second_perm", second_perm);
    v("cast", cast);
    v("to", to);
  }
};

// Python slicing per listed axis: start/end clamped like torch (end may be kSliceEnd), step > 0.
constexpr int64_t kSliceEnd = std::numeric_limits<int64_t>::max();
struct SliceParams {
  std::vector<int64_t> axes, starts, ends, steps;
  template <class V>
  void fields(V& v) {
    v("axes", axes);
    v("starts", starts);
    v("ends", ends);
    v("steps", steps);
  }
};

struct GatherParams {  // inputs: data, indices (i64/i32, negative indices wrap)
  GatherMode mode = GatherMode::kDefault;
  int64_t axis = 0;
  template <class V>
  void fields(V& v) {
    v("mode", mode);
    v("axis", axis);
  }
};
struct ScatterParams {  // inputs: data, indices, updates (torch.scatter elements semantics)
  int64_t axis = 0;
  ScatterReduce reduce = ScatterReduce::kNone;
  template <class V>
  void fields(V& v) {
    v("axis", axis);
    v("reduce", reduce);
  }
};
struct SelectParams {  // inputs: condition (bool), a, b; broadcasting (torch.where)
  template <class V>
  void fields(V&) {}
};
struct CastParams {
  DataType to = DataType::kF32;
  template <class V>
  void fields(V& v) {
    v("to", to);
  }
};
struct ConstantParams {  // no inputs; the output's data is the network weight `weight`
  std::string weight;
  template <class V>
  void fields(V& v) {
    v("weight", weight);
  }
};
struct PadParams {  // pads for every dim, begin then end
  std::vector<int64_t> begin, end;
  PadMode mode = PadMode::kConstant;
  double value = 0;
  template <class V>
  void fields(V& v) {
    v("begin", begin);
    v("end", end);
    v("mode", mode);
    v("value", value);
  }
};
// Resize of the trailing spatial dims (all dims after the first two), by output size or scales.
struct ResizeParams {
  ResizeMode mode = ResizeMode::kNearest;
  std::vector<int64_t> output_size;  // empty: use scales
  std::vector<double> scales;
  bool align_corners = false;
  template <class V>
  void fields(V& v) {
    v("mode", mode);
    v("output_size", output_size);
    v("scales", scales);
    v("align_corners", align_corners);
  }
};
struct TopKParams {  // outputs: values, indices (i64)
  int64_t k = 1, axis = -1;
  bool largest = true, sorted = true;
  template <class V>
  void fields(V& v) {
    v("k", k);
    v("axis", axis);
    v("largest", largest);
    v("sorted", sorted);
  }
};
struct ArgMaxParams {  // output i64 indices of the first max (or min)
  int64_t axis = -1;
  bool keep_dims = false, min = false;
  template <class V>
  void fields(V& v) {
    v("axis", axis);
    v("keep_dims", keep_dims);
    v("min", min);
  }
};
// A running `op` along `axis` (in reverse: from the end). Integer and bool sums and products are
// int64 (as torch); max and min keep the input's dtype and have a second output, the i64 index of
// the element each running extreme came from (the last of equals, the last NaN, as torch's
// cummax/cummin); logsumexp takes floating data. exclusive (sum, prod, logsumexp): each output
// leaves out its own element.
struct ScanParams {
  ScanOp op = ScanOp::kSum;
  int64_t axis = 0;
  bool exclusive = false, reverse = false;
  template <class V>
  void fields(V& v) {
    v("op", op);
    v("axis", axis);
    v("exclusive", exclusive);
    v("reverse", reverse);
  }
};
struct ShapeParams {  // output: i64 [rank] holding the input's shape
  template <class V>
  void fields(V&) {}
};
// Output of `shape` (static) or of the shape given by an i64 shape-tensor input; with that input,
// `shape` is empty or the dims known while building (kDynamic for the rest), checked at run time.
struct FillParams {
  FillMode mode = FillMode::kConstant;
  DataType dtype = DataType::kF32;
  Shape shape;
  double value = 0, start = 0, delta = 1;
  template <class V>
  void fields(V& v) {
    v("mode", mode);
    v("dtype", dtype);
    v("shape", shape);
    v("value", value);
    v("start", start);
    v("delta", delta);
  }
};
// Scaled dot-product attention. Inputs q [..., L, E], k [..., S, E], v [..., S, Ev] and an
// optional mask (bool: true keeps; float: added) broadcast to [..., L, S].
struct AttentionParams {
  bool causal = false;
  bool has_mask = false;
  double scale = 0;  // 0: 1/sqrt(E)
  // Heads packed in the rows (the builder folds the head split and merge around an attention
  // into it): with heads > 0, q, k and v are [B, rows, width] tensors, head h of q
  // is the columns [columns[0] + h * head_size, + head_size) of q's rows (k: columns[1], v:
  // columns[2]; one tensor may serve all three), and the output is [B, L, heads * head_size]
  // with head h at columns h * head_size: torch's [B, heads, L, head_size] attention, with its
  // operands' and result's transposes folded away. A mask broadcasts to [B, heads, L, S].
  // kv_heads > 0 (grouped-query attention): k and v hold kv_heads heads (a divisor of heads) and
  // query head h reads key/value head h / (heads / kv_heads); 0: as many as q.
  int64_t heads = 0, head_size = 0, kv_heads = 0;
  std::vector<int64_t> columns;
  // As for convolutions: f32 q k^T and p v may round their operands to TF32 (the cuda flash
  // kernel's f32 form; without it f32 attention is decomposed or runs the simple kernel).
  bool tf32 = false;
  template <class V>
  void fields(V& v) {
    v("causal", causal);
    v("has_mask", has_mask);
    v("scale", scale);
    v("heads", heads);
    v("head_size", head_size);
    v("kv_heads", kv_heads);
    v("columns", columns);
    v("tf32", tf32);
  }
};
// Built by the builder from chains of elementwise/unary/activation/cast layers: a small program
// over registers. Registers 0..inputs-1 hold the inputs (broadcast to the output shape); op i
// writes register inputs+i; the last register is the output. `program` holds four ints per op:
// kind (0 binary, 1 unary, 2 activation, 3 cast), op (BinaryOp/UnaryOp/ActivationKind/DataType),
// and the registers a, b it reads; `constants` holds alpha, beta per op.
// `gathers` (three ints each: register, axis, run) makes an input a gather by constant indices
// (the builder's gathered_inputs pass folds a gather layer into the layer it feeds): register
// input r is read at index idx[i] along its `axis` where the output is at i, idx being the
// k-th gather's index list, a 1-D i32 constant layer input of at least 2 after the registers (the
// layer's inputs: registers..., then one index list per gather). Along `axis` the input is
// idx.size() long for broadcasting. `run` (1, 2, 4, 8 or 16) says the indices come in aligned
// runs: idx[c * run + e] == idx[c * run] + e with idx[c * run] and the axis size multiples of
// run, so that kernels may read `run` consecutive elements as one vector (verify.h checks it).
struct FusedElementwiseParams {
  std::vector<int64_t> program;           // FusedOp list flattened: kind, op, a, b per op
  std::vector<double> constants;          // alpha, beta per op
  std::vector<std::string> fused_layers;  // names of the layers it replaced (for inspection)
  std::vector<int64_t> gathers;           // register, axis, run per gathered input
  template <class V>
  void fields(V& v) {
    v("program", program);
    v("constants", constants);
    v("fused_layers", fused_layers);
    v("gathers", gathers);
  }
};

// Squeeze-excitation, built by the builder from its torch form (global average pool -> 1x1
// convolution -> activation -> 1x1 convolution -> activation -> multiply by the pool's input):
// y = x * activation2(w2 . activation1(w1 . mean(x) + b1) + b2), the mean taken per sample and
// channel over every spatial position. Inputs: x [N, C, spatial...] ([N, spatial..., C] with
// channels_last), w1 [S, ...] of S * C elements ([S, C] in memory, as a 1x1 convolution's
// weights in either layout), b1 [S] if has_bias1, w2 [C, ...] of C * S elements, b2 [C] if
// has_bias2. The output has x's shape and dtype.
// project (cuda plans, channels-last only; the builder's fold_excitation_into_projection): the
// 1x1 convolution that consumed y is part of the layer, which then computes
// projection(y) = y . wp^T + post-ops = x . (wp * scale[n])^T + post-ops per sample, scaling the
// weights instead of x. Further inputs: wp [O, 1..., C] (the convolution's channels-last
// weights), then the projection's post-op inputs (bias [O], residual of the output's shape). The
// output is [N, spatial..., O]. tf32 as for convolutions (the projection's f32 product).
struct SqueezeExcitationParams {
  ActivationKind activation1 = ActivationKind::kRelu;
  double alpha1 = 0, beta1 = 0;
  ActivationKind activation2 = ActivationKind::kSigmoid;
  double alpha2 = 0, beta2 = 0;
  bool has_bias1 = false, has_bias2 = false;
  bool channels_last = false;
  bool project = false;
  PostOps projection;
  bool tf32 = false;
  // Inputs before the projection's: x, w1, b1?, w2, b2?.
  size_t excitation_inputs() const { return 3 + (has_bias1 ? 1 : 0) + (has_bias2 ? 1 : 0); }
  template <class V>
  void fields(V& v) {
    v("activation1", activation1);
    v("alpha1", alpha1);
    v("beta1", beta1);
    v("activation2", activation2);
    v("alpha2", alpha2);
    v("beta2", beta2);
    v("has_bias1", has_bias1);
    v("has_bias2", has_bias2);
    v("channels_last", channels_last);
    v("project", project);
    // The projection's post-ops, named apart from the excitation's own activation fields.
    v("projection_has_bias", projection.has_bias);
    v("projection_activation", projection.activation);
    v("projection_alpha", projection.alpha);
    v("projection_beta", projection.beta);
    v("projection_has_residual", projection.has_residual);
    v("projection_activation2", projection.activation2);
    v("projection_alpha2", projection.alpha2);
    v("projection_beta2", projection.beta2);
    v("tf32", tf32);
  }
};

// torch.nonzero: the indices of x's nonzero elements (true, or != 0; NaN counts), row-major, as
// output 0, i64 [count, rank of x]; output 1, i64 [], holds count. count is a data-dependent dim:
// known only once the layer has run. The runtime plans memory for count = numel(x), reads output
// 1 after the layer runs and sizes what follows by it (ExecutionContext).
struct NonZeroParams {
  template <class V>
  void fields(V&) {}
};

using LayerParams =
    std::variant<ConvolutionParams, MatMulParams, ElementwiseParams, UnaryParams, ActivationParams,
                 PoolingParams, ReduceParams, SoftmaxParams, NormalizationParams, ConcatParams,
                 ShuffleParams, SliceParams, GatherParams, ScatterParams, SelectParams, CastParams,
                 ConstantParams, PadParams, ResizeParams, TopKParams, ArgMaxParams, ScanParams,
                 ShapeParams, FillParams, AttentionParams, FusedElementwiseParams,
                 SqueezeExcitationParams, NonZeroParams>;

// The name of a layer kind ("convolution", "matmul", ...), by variant index.
const char* layer_kind_name(const LayerParams& params);
const char* layer_kind_name(size_t variant_index);
constexpr size_t kNumLayerKinds = std::variant_size_v<LayerParams>;

// Whether a shuffle moves elements (a permutation or a cast); one that only reshapes dense data
// is a view, which the runtime never runs.
bool shuffle_moves_data(const ShuffleParams& params);

}  // namespace kiln::engine
