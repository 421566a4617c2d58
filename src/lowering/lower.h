// The lowering entry points: a module (fallback marks, freeze, pipeline) or an IR graph (pipeline).
#pragma once

#include <torch/script.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/pass_pipeline.h"

namespace kiln::lowering {

struct LoweringOptions {
  // Module types whose nodes must stay in PyTorch. A name matches a submodule's class when it is
  // the class name ("BasicBlock"), its qualified name ("torchvision.models.resnet.BasicBlock") or
  // that name with TorchScript's "__torch__." prefix.
  std::vector<std::string> torch_executed_modules;
  ir::PassRunOptions passes;  // verification, --print-after-all, a subset of passes
  // The dtype and rank of each forward argument (self excluded) where the caller knows them (the
  // compile spec): tensor arguments carry them while the passes run, for rewrites that need a
  // rank (flip, repeat, movedim) or a dtype, and are plain Tensor again afterwards.
  std::vector<std::optional<std::pair<c10::ScalarType, int64_t>>> input_types;
  // The dims of each forward argument the caller fixes (the spec's min == max; nullopt where
  // dynamic): aten::size of such an argument becomes a constant before the passes, so the
  // arithmetic on it folds and its consumers (a convolution's groups) can join an engine.
  std::vector<std::optional<std::vector<std::optional<int64_t>>>> input_sizes;
};

// Clones `module`, puts the clone in eval mode, freezes it (methods inlined, parameters and
// attributes folded into constants), marks the nodes of `torch_executed_modules` (see
// is_torch_executed) and runs the lowering pipeline on its forward graph. The graph keeps the
// module as its first input (unused after freezing), so it can become a method again.
std::shared_ptr<torch::jit::Graph> lower_module(const torch::jit::Module& module,
                                                const LoweringOptions& options = {});

// Runs the lowering pipeline on a copy of `graph` (IR text input: nothing to freeze).
std::shared_ptr<torch::jit::Graph> lower_graph(const torch::jit::Graph& graph,
                                               const LoweringOptions& options = {});

// The node attribute (int, 1) that marks a node as coming from a torch_executed_modules module;
// partitioning keeps such nodes in PyTorch.
c10::Symbol torch_executed_attr();
bool is_torch_executed(const torch::jit::Node* node);

}  // namespace kiln::lowering
