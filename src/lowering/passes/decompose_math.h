// decompose_ops' math identities (decompose_math.cpp), tensor algebra (decompose_linalg.cpp) and
// losses (decompose_losses.cpp), apart from the pass's own rewrites.
#pragma once

#include "lowering/passes.h"

namespace kiln::lowering {

// The value replacing `node`'s one output, computed by nodes inserted at the current insert
// point from ops the engine has layers for; nullptr when the overload, its constant arguments
// or what the graph knows of its inputs' rank and dtype are not the ones handled.
torch::jit::Value* decompose_math(GraphPtr& graph, torch::jit::Node* node);

// The same for tensor algebra (decompose_linalg.cpp): diagonals, products, distances, renorm,
// the trapezoid rules.
torch::jit::Value* decompose_linalg(GraphPtr& graph, torch::jit::Node* node);

// The same for the losses of torch.nn.functional (decompose_losses.cpp).
torch::jit::Value* decompose_loss(GraphPtr& graph, torch::jit::Node* node);

// The same for indexed writes (decompose_scatter.cpp): index_add/copy/fill/reduce, put,
// masked_scatter, scatter_reduce.
torch::jit::Value* decompose_scatter(GraphPtr& graph, torch::jit::Node* node);

// embedding_bag (decompose_scatter.cpp): its result, the bags' sums, means or maxima of embedding
// rows, as the first of its four outputs; empty when the other three are used (they serve the
// backward) or the arguments are not handled.
std::vector<torch::jit::Value*> decompose_embedding_bag(GraphPtr& graph, torch::jit::Node* node);

// The same for arrangements (decompose_arrange.cpp): meshgrid, cartesian_prod, block_diag,
// linspace/logspace of tensor ends, fftshift, diagonal_scatter, gradient, the norms of
// linalg_norm and linalg_matrix_norm that reductions compute, folded index lists.
torch::jit::Value* decompose_arrange(GraphPtr& graph, torch::jit::Node* node);

// The same for the spectral transforms of real output (decompose_spectral.cpp): irfft, irfft2,
// irfftn, hfft, hfft2, hfftn of real tensors, by DFT matrices.
torch::jit::Value* decompose_spectral(GraphPtr& graph, torch::jit::Node* node);

}  // namespace kiln::lowering
