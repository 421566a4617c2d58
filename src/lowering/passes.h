// Declarations of the lowering passes, one per file in passes/.
#pragma once

#include <torch/script.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::lowering {

using GraphPtr = std::shared_ptr<torch::jit::Graph>;

// Each pass rewrites the graph in place, in every block, and returns whether it changed it.
// A node a pass cannot handle (unknown overload, non-constant argument) is left as it is.

// Marks nodes inlined from modules of the given types (see lower.h); run right after freezing.
bool mark_module_fallback(GraphPtr& graph, const std::vector<std::string>& module_types);

// The dims of a forward argument known at compile time (nullopt where dynamic); nullopt when the
// argument's rank is unknown.
using StaticDims = std::optional<std::vector<std::optional<int64_t>>>;
// aten::size, aten::dim and aten::numel of the forward arguments (inputs[i] is graph input i + 1)
// become constants where the dims they read are known.
bool fold_static_sizes(GraphPtr& graph, const std::vector<StaticDims>& inputs);

// Removes nodes whose outputs are unused and that have no side effects, in every block.
bool eliminate_dead_code(GraphPtr& graph);
// Folds nodes whose inputs are all constants (torch's ConstantPropagation).
bool propagate_constants(GraphPtr& graph);
// Replaces an If whose one branch only raises by its other branch.
bool remove_exceptions(GraphPtr& graph);
// Removes assert ops (aten::_assert_async, ...) that only check.
bool eliminate_guards(GraphPtr& graph);
// Folds inference batch_norm into the convolution before it (constant weights, one use).
bool fold_conv_batch_norm(GraphPtr& graph);
// Removes dropout, feature_dropout, alpha_dropout and their in-place forms when train=False.
bool remove_dropout(GraphPtr& graph);
// In-place tensor and list ops become functional where no alias observes the write.
bool remove_mutation(GraphPtr& graph);
// fill_/copy_ through slice and select views of a tensor the graph creates -> slice_scatter and
// select_scatter into a new value of it, where no alias observes the difference.
bool functionalize_view_writes(GraphPtr& graph);
// Traced size arithmetic on 0-d tensors (NumToTensor -> mul/floor_divide/... -> Int) -> int ops.
bool scalarize_size_arithmetic(GraphPtr& graph);
// Removes detach, alias, x.t().t(), x.*_as(x) and expand(x, x.size()).
bool remove_noops(GraphPtr& graph);
// Removes aten::contiguous where no in-place write or view depends on its copy.
bool remove_contiguous(GraphPtr& graph);
// Unrolls prim::Loop with a short constant trip count and no early exit.
bool unroll_loops(GraphPtr& graph);
// Removes tuples: matched construct/unpack pairs, then all tuples if the signature allows.
bool lower_tuples(GraphPtr& graph);
// Replaces If(addmm | matmul + add) on the same operands by matmul + add.
bool fuse_addmm_branches(GraphPtr& graph);
// Fuses addmm(b, x, W.t()) and matmul(x, W.t()) [+ b] into aten::linear(x, W, b).
bool fuse_linear(GraphPtr& graph);
// Removes a shape-preserving aten::flatten whose only users are aten::linear.
bool remove_flatten_before_linear(GraphPtr& graph);
// Unpacks aten::addmm(b, x, w, 1, 1) into matmul + add.
bool unpack_addmm(GraphPtr& graph);
// Unpacks aten::log_softmax into log(softmax).
bool unpack_log_softmax(GraphPtr& graph);
// Rewrites core ATen forms (torch.export run_decompositions) whose extra results are unused into
// the ops the other passes and converters take (batch_norm, layer_norm, max_pool, attention, ...).
bool lower_core_aten(GraphPtr& graph);
// Rewrites the fused fast paths of nn.TransformerEncoderLayer and nn.MultiheadAttention
// (aten::_transformer_encoder_layer_fwd, aten::_native_multi_head_attention) without a mask into
// linear, attention, layer_norm and activation ops.
bool decompose_transformer_fast_paths(GraphPtr& graph);
// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3)))) -> aten::gelu(x, "tanh").
bool fuse_gelu_tanh(GraphPtr& graph);
// Rewrites composite ops (var, std, type_as, square, hardtanh, relu6) into engine ops.
bool decompose_ops(GraphPtr& graph);
// Removes aten::to that changes neither dtype nor device (casts that change them stay).
bool remove_noop_to(GraphPtr& graph);
// Merges identical pure nodes (torch's alias-aware CSE).
bool eliminate_common_subexpressions(GraphPtr& graph);
// One prim::Constant per value, at the top of the graph (torch's ConstantPooling).
bool pool_constants(GraphPtr& graph);

}  // namespace kiln::lowering
