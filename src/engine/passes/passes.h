// The builder's passes that need no header of their own (layout.h, precision.h,
// attention_heads.h (with row_shuffles.cpp) and scale_shift.h have theirs), one file each. Each
// takes the network and what it needs to decide (a backend's answer as a function, a list for the
// lines it reports) and returns how many rewrites it made; pipeline.cpp adapts them to PassContext.
// Each leaves the network valid (verify.h), which the pipeline checks after every pass.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "engine/layers/elementwise_rules.h"
#include "engine/network.h"
#include "engine/passes/network_index.h"

namespace kiln::engine {

// Layers whose inputs are all constants run once on the CPU backend and become constants (a
// refit runs them again on the new weights); so do shape tensors whose values are known.
int fold_constants(Network& net);
// Constant attention masks that keep every key go; causal-triangle ones become the causal flag;
// a bool mask that is such a constant and'ed with another mask becomes the other (with the flag).
// Masks that are one of `keep` (a refittable plan's weights) stay as they are.
int simplify_attention_masks(Network& net, const std::set<std::string>& keep = {});
// The bool masks of f16/bf16 attention layers become additive biases of their dtype (0 kept, -inf
// not), one for all the layers reading a mask (attention_mask_biases.cpp).
int attention_mask_biases(Network& net);
// A head-split permute ([B, L, H, E] -> [B, H, L, E]) whose tensor is computed on (rotary
// embeddings: slices, concats, elementwise ops with constants) before only attention operands
// read it moves below those layers, onto the operands, where attention_heads takes it as a view.
int sink_head_permutes(Network& net);
// x * rsqrt(mean(x^2 over the last dims, keepdim) + eps) [* constant w] becomes one RMS
// normalization layer (NormalizationKind::kRms).
int fuse_rms_norms(Network& net);
// A concat along an axis of slices (some negated) of one tensor along that axis becomes a gather
// by constant indices (times constant signs): rotate_half of rotary embeddings, rolls.
int gather_concat_slices(Network& net);
// A chain of gathers by constant indices and shuffles (each result read by the next alone) that
// moves whole rows alike in each of a few outer blocks is one gather of rows by constant indices
// between two views: swin's roll and window partition, and its window merge and roll back
// (gather_chains.cpp); one that leaves every element in place (a gather by 0, 1, ..., n - 1) is a
// view. Gathers by one of `keep` (a refittable plan's weights) stay as they are. With
// `element_gathers`, slices are links too, a chain may end in each of several slices of one
// shuffle's result (each then a gather of its own), and single elements are rows: shufflenet's
// channel shuffle (transpose, then two channel slices) as two gathers of channels.
int fold_gather_chains(Network& net, const std::set<std::string>& keep = {},
                       bool element_gathers = false);
// Constants of finite values added to a matmul's result on its way to a softmax over the last
// axis (through views that keep it) become the softmax's additive mask, their sum
// (softmax_biases.cpp): swin's relative position bias and shifted-window mask.
int fold_softmax_biases(Network& net);
// A product by constant per-output-channel values right after a matmul or convolution with
// constant weights (a layer scale) becomes its weights and bias scaled, where in f16/bf16 every
// scaled value stays a normal number (scale_into_weights.cpp). Weights in `keep` (a refittable
// plan's) stay as they are.
int fold_scales_into_weights(Network& net, const std::set<std::string>& keep = {});
// An activation after a reshape (each the other's only link) runs before it, and so does the add
// of a tensor of the reshape's static shape (a residual), on that tensor viewed as the reshape's
// input: both then follow a GEMM directly, for post_ops.
int activations_before_reshapes(Network& net);
// A last-two-dims transpose feeding a matmul becomes the matmul's transpose flag.
int fold_matmul_transposes(Network& net);
// Slices that keep every element, zero pads and one-input concats become reshapes (views).
int reshape_identity_layers(Network& net);
// A concat of strided slices of one tensor that take every element once (swin's patch merging,
// YOLOv5's Focus) is one space-to-depth shuffle: a view, a permute and a view
// (strided_concats.cpp).
int shuffle_strided_concats(Network& net);
// A chain of shuffles is one reshape where it keeps every element where it was, and one copy
// (and a view) where more than one of its shuffles moved elements (shuffle_chains.cpp).
int fold_shuffle_chains(Network& net);
// Layers no network output depends on go, with the weights only they used.
int remove_dead_layers(Network& net);
// Attention (not packed heads) that `fused(q, k, v, dtype)` says the fused kernel does not take
// becomes matmul(q * scale, k^T) -> softmax (masked and/or causal as the attention) -> matmul(.,
// v).
int decompose_attention(
    Network& net,
    const std::function<bool(const Shape&, const Shape&, const Shape&, DataType)>& fused);
// Attention written out: matmul(q, k^T) (k's transpose a permute of its last two dims or the
// matmul's flag; q and k possibly multiplied by scalar constants), times or over scalar constants,
// plus additive terms (position biases, masks), through reshapes of the leading dims, softmax over
// the last dim, matmul(., v), each tensor read by the next alone: one attention layer, its scale
// the product of the scalars and its mask the sum of the terms, in the frame (the leading dims)
// of whichever reshape of the scores has the most, with reshapes (views) of q, k, v, the terms
// and the result. Where `fused(q, k, v, dtype)` says the fused kernel takes it.
int fold_written_attention(
    Network& net,
    const std::function<bool(const Shape&, const Shape&, const Shape&, DataType)>& fused);
// f32 convolutions, matmuls and attention may use TF32 tensor-core math (their params' tf32).
int allow_tf32(Network& net);
// f16/bf16 matmuls whose fused activation is the erf GELU take its tanh form.
int gelu_tanh_epilogues(Network& net);

// The fusions: several layers become one whose kernel does their work in fewer passes over
// memory. Each records a line per fusion in `fusions` ("conv1 + relu1 -> conv1").
// Convolution/matmul followed by (a matmul's bias,) activation, residual add, activation: one
// layer with post-ops.
int fuse_post_ops(Network& net, std::vector<std::string>& fusions);
// Squeeze-excitation in torch's form becomes one SqueezeExcitation layer where
// applies(channels, squeeze width, channels_last) says the backend takes it.
int fuse_squeeze_excitation(Network& net,
                            const std::function<bool(int64_t, int64_t, bool)>& applies,
                            std::vector<std::string>& fusions);
// A squeeze-excitation layer takes the 1x1 convolution after it where applies(samples, pixels,
// channels, out channels) says it pays (SqueezeExcitationParams::project).
int fold_excitation_into_projection(
    Network& net, const std::function<bool(int64_t, int64_t, int64_t, int64_t)>& applies,
    std::vector<std::string>& fusions);
// Projections of one input (matmul(x, constant w [, constant bias]), static shapes), each result
// read by one chain of fusible elementwise layers, the chains of two or more layers in all ending
// in one layer (the group fuse_elementwise makes of them): one matmul with the weights side by
// side, and a gather of each part's columns, which the fused kernel then reads in place
// (fold_gathers_into_elementwise). SwiGLU's gate and up projections, silu(x Wg) * (x Wu): one GEMM
// of twice the columns where there were two. For backends whose fused kernels read gathered
// inputs.
int merge_elementwise_projections(Network& net, std::vector<std::string>& fusions);
// Groups of concats along one axis whose inputs are runs of one concat's inputs (a dense block's)
// become in place (ConcatParams::in_place): each input is written once into that concat's output,
// by its own concat, by a layer `backend_writes` takes (null: none) or by a copy, and the others'
// outputs are views of those bytes, where that moves fewer bytes (concat_in_place.cpp).
int place_concat_inputs(Network& net, const WritesPlacedFn& backend_writes,
                        std::vector<std::string>& lines);
// A float cast whose result only feeds a shuffle becomes part of it (ShuffleParams::cast).
int fuse_cast_into_shuffle(Network& net, std::vector<std::string>& fusions);
// Layer `l` (fusible_elementwise) as an operation of a fused layer's program: its kind, op and
// constants (registers a and b left 0).
FusedOp fused_op(const Layer& l);
// Whether fuse_elementwise takes layer l: a float elementwise layer (or float cast) of one
// result.
bool fusible_elementwise(const Network& net, const Layer& l);
// Chains (and trees) of float elementwise layers become one FusedElementwise layer.
// A group grows only while it has at most `max_inputs` distinct inputs and `max_ops` layers
// (0: no limit; BackendRules::max_fused_inputs/max_fused_ops).
int fuse_elementwise(Network& net, std::vector<std::string>& fusions, int max_inputs = 0,
                     int max_ops = 0);
// A shuffle that moves whole rows: it permutes and regroups the leading dims and keeps the last
// dim last and whole (permutations that leave it in place, a reshape that keeps its size), with
// static shapes and no cast.
bool moves_rows(const Layer& l, const Network& net);
// A gather by constant 1-D indices read only by a fused elementwise layer becomes one of its
// gathered inputs (FusedElementwiseParams::gathers), while the layer has fewer than `max_inputs`
// inputs (0: no limit). So does a shuffle that moves whole rows (moves_rows): a gather of rows.
// A lone elementwise layer takes one in as a fused layer of one operation; between them may be
// views, where the reader's tensors have one shape (it then runs at the gathered shape).
int fold_gathers_into_elementwise(Network& net, int max_inputs = 0);

}  // namespace kiln::engine
