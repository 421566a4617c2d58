// Lowering entry points: freeze a module, mark module fallback, then run the pass pipeline.
#include "lowering/lower.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/freeze_module.h>

#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/pipeline.h"
#include "util/errors.h"

namespace kiln::lowering {

c10::Symbol torch_executed_attr() {
  return c10::Symbol::attr(ir::kTorchExecutedAttr);
}

bool is_torch_executed(const torch::jit::Node* node) {
  const auto attr = torch_executed_attr();
  return node->hasAttribute(attr) && node->i(attr) != 0;
}

namespace {

// A module traced or scripted on a GPU freezes into constants on it, tensors and devices; the
// compile's device, not the module's, decides where things run: constants move to the CPU here
// (shape analysis runs the graph there; conversion reads weights there), and a cuda compile moves
// what stays in PyTorch to its device when stitching.
void constants_to_cpu(torch::jit::Block* block) {
  for (torch::jit::Node* n : block->nodes()) {
    for (torch::jit::Block* b : n->blocks()) constants_to_cpu(b);
    if (n->kind() != c10::prim::Constant) continue;
    // Devices the trace recorded (`torch.arange(n, device=x.device)`) too.
    if (n->output()->type()->kind() == c10::TypeKind::DeviceObjType) {
      const auto value = torch::jit::toIValue(n->output());
      if (value && value->isDevice() && !value->toDevice().is_cpu()) n->s_(c10::attr::value, "cpu");
      continue;
    }
    if (!n->output()->type()->cast<c10::TensorType>()) continue;
    const auto value = torch::jit::toIValue(n->output());
    if (!value || !value->isTensor()) continue;
    const at::Tensor t = value->toTensor();
    if (!t.defined() || t.device().is_cpu()) continue;
    at::Tensor on_cpu = t.detach().cpu();
    on_cpu.set_requires_grad(t.requires_grad());
    n->t_(c10::attr::value, on_cpu);
    n->output()->inferTypeFrom(n->t(c10::attr::value));
  }
}

}  // namespace

std::shared_ptr<torch::jit::Graph> lower_module(const torch::jit::Module& module,
                                                const LoweringOptions& options) {
  KILN_CHECK(module.find_method("forward").has_value(), InvalidArgument, "lower_module: module `",
             module.type()->name()->qualifiedName(), "` has no forward method");
  // Freezing refuses modules in training mode, and dropout/batch-norm flags must read eval.
  torch::jit::Module eval_copy = module.clone();
  eval_copy.eval();
  std::shared_ptr<torch::jit::Graph> graph;
  try {
    torch::jit::Module frozen = torch::jit::freeze_module(eval_copy);
    graph = frozen.get_method("forward").graph()->copy();
  } catch (const c10::Error& e) {
    KILN_THROW(Unsupported, "lower_module: cannot freeze module `",
               module.type()->name()->qualifiedName(), "`: ", e.msg());
  }
  constants_to_cpu(graph->block());
  // Marks must be placed while the inlined call stacks still name every node's module.
  mark_module_fallback(graph, options.torch_executed_modules);
  std::vector<torch::jit::Value*> typed;
  for (size_t i = 0; i < options.input_types.size() && i + 1 < graph->inputs().size(); ++i) {
    torch::jit::Value* v = graph->inputs()[i + 1];
    if (!options.input_types[i] || v->type()->kind() != c10::TypeKind::TensorType) continue;
    const auto& [dtype, rank] = *options.input_types[i];
    v->setType(c10::TensorType::get()->withScalarType(dtype)->withDim(static_cast<size_t>(rank)));
    typed.push_back(v);
  }
  fold_static_sizes(graph, options.input_sizes);
  lowering_pipeline().run(graph, options.passes);
  for (torch::jit::Value* v : typed) v->setType(c10::TensorType::get());
  return graph;
}

std::shared_ptr<torch::jit::Graph> lower_graph(const torch::jit::Graph& graph,
                                               const LoweringOptions& options) {
  auto copy = ir::copy_graph(graph);
  mark_module_fallback(copy, options.torch_executed_modules);
  lowering_pipeline().run(copy, options.passes);
  return copy;
}

}  // namespace kiln::lowering
