// lower_module on every test model: no attributes, raises or dropout left, same outputs.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "harness/test_models.h"
#include "ir/graph_utils.h"
#include "kiln_test_paths.h"
#include "lowering/lower.h"
#include "util/errors.h"

namespace kiln::lowering {
namespace {

using kiln::testing::TestModel;

size_t count_kind(torch::jit::Graph& graph, const std::string& prefix) {
  size_t n = 0;
  ir::for_each_node(graph.block(), [&](torch::jit::Node* node) {
    if (std::string(node->kind().toQualString()).rfind(prefix, 0) == 0) ++n;
  });
  return n;
}

class LowerModel : public ::testing::TestWithParam<std::string> {};

TEST_P(LowerModel, LowersToAFrozenGraphWithTheSameOutputs) {
  TestModel m = kiln::testing::load_test_model(GetParam());
  auto graph = lower_module(m.module);
  EXPECT_EQ(count_kind(*graph, "prim::GetAttr"), 0u) << *graph;
  EXPECT_EQ(count_kind(*graph, "prim::CallMethod"), 0u) << *graph;
  EXPECT_EQ(count_kind(*graph, "prim::RaiseException"), 0u) << *graph;
  EXPECT_EQ(count_kind(*graph, "aten::dropout"), 0u) << *graph;
  EXPECT_EQ(count_kind(*graph, "aten::feature_dropout"), 0u) << *graph;
  EXPECT_EQ(count_kind(*graph, "aten::alpha_dropout"), 0u) << *graph;
  // Freezing keeps the module as the first input, unused: the graph runs with any object there.
  ASSERT_FALSE(graph->inputs().empty());
  EXPECT_FALSE(graph->inputs()[0]->hasUses());
  std::vector<torch::jit::IValue> inputs{m.module._ivalue()};
  inputs.insert(inputs.end(), m.args.begin(), m.args.end());
  torch::NoGradGuard no_grad;
  auto outputs = testing::run_graph(*graph, inputs);
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_TRUE(testing::all_close(outputs[0], m.expected, 1e-4, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Models, LowerModel,
                         ::testing::Values("resnet18", "mobilenet_v2", "vit_tiny", "text_encoder",
                                           "lgamma", "control_flow", "tuple_list",
                                           "transformer_fast_path", "vit_tiny_fast_path"));

TEST(LowerModule, MarksTorchExecutedModulesOnly) {
  TestModel m = kiln::testing::load_test_model("resnet18");
  LoweringOptions options;
  options.torch_executed_modules = {"torchvision.models.resnet.BasicBlock"};
  auto graph = lower_module(m.module, options);
  size_t marked = 0, convs = 0, marked_convs = 0;
  ir::for_each_node(graph->block(), [&](torch::jit::Node* node) {
    marked += is_torch_executed(node);
    if (node->kind() == c10::aten::_convolution || node->kind() == c10::aten::conv2d) {
      ++convs;
      marked_convs += is_torch_executed(node);
    }
  });
  // resnet18: the stem conv and fc are outside the 8 BasicBlocks; 16 + 3 downsample convs inside.
  EXPECT_GT(marked, 0u);
  EXPECT_EQ(convs, 20u);
  EXPECT_EQ(marked_convs, 19u);
  // Marked graphs still compute the same values.
  std::vector<torch::jit::IValue> inputs{m.module._ivalue()};
  inputs.insert(inputs.end(), m.args.begin(), m.args.end());
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(testing::all_close(testing::run_graph(*graph, inputs)[0], m.expected, 1e-4, 1e-5));

  auto unmarked = lower_module(m.module);
  size_t none = 0;
  ir::for_each_node(unmarked->block(), [&](torch::jit::Node* n) { none += is_torch_executed(n); });
  EXPECT_EQ(none, 0u);
}

TEST(LowerModule, ModuleWithoutForwardIsAnError) {
  torch::jit::Module empty("__torch__.Empty");
  EXPECT_THROW(lower_module(empty), InvalidArgument);
}

TEST(LowerGraph, RunsThePipelineOnACopy) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %p : float = prim::Constant[value=0.5]()
  %f : bool = prim::Constant[value=0]()
  %d : Tensor = aten::dropout(%x, %p, %f)
  %y : Tensor = aten::relu(%d)
  return (%y))IR");
  auto lowered = lower_graph(*g);
  EXPECT_TRUE(testing::file_check("CHECK: aten::dropout", *g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::dropout\nCHECK: aten::relu(%x)", *lowered));
}

}  // namespace
}  // namespace kiln::lowering
