// Why nodes stay in PyTorch: forced ops and modules, validators, impurity, no support at all,
// and require_full_compilation's error.
#include <gtest/gtest.h>

#include "ir/graph_utils.h"
#include "partition_testing.h"
#include "util/errors.h"

namespace kiln::partitioning {
namespace {

using testing::partition_ir;
using testing::segments_of;
using testing::with_min_block;

const TableCapability kAllButLgamma = TableCapability::all_except({"aten::lgamma"});

const torch::jit::Node* find_node(const PartitionedGraph& p, const std::string& output) {
  for (const torch::jit::Node* n : p.graph->nodes())
    if (n->outputs().size() == 1 && n->output()->debugName() == output) return n;
  ADD_FAILURE() << "no node defines %" << output;
  return nullptr;
}

TEST(PartitionFallback, ForcedOpStaysInTorchAndJoinsTheTorchSegment) {
  for (const char* name : {"aten::mul", "aten::mul.Tensor"}) {
    PartitionSettings settings = with_min_block(1);
    settings.torch_executed_ops = {name};
    auto p = partition_ir(testing::read_test_data("lgamma.ir"), kAllButLgamma, settings);
    const std::string text = format_segments(p);
    EXPECT_EQ(p.segments.size(), 3u) << text;
    EXPECT_EQ(text.substr(0, text.find('\n')), "segment 0 engine: %add=aten::add %div=aten::div");
    EXPECT_NE(text.find("segment 1 torch: %x_lgamma=aten::lgamma %mul=aten::mul"),
              std::string::npos)
        << text;
    const Decision& d = p.decisions.at(find_node(p, "mul"));
    EXPECT_EQ(d.reason, Reason::kForcedOp);
    EXPECT_EQ(d.detail, "aten::mul.Tensor is in torch_executed_ops");
  }
}

const char* kMarkedModule = R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::sigmoid[kiln_torch_executed=1](%a)
  %c : Tensor = aten::tanh[kiln_torch_executed=1](%b)
  %d : Tensor = aten::relu(%c)
  return (%d))IR";

TEST(PartitionFallback, NodesMarkedByModuleFallbackStayInTorch) {
  PartitionSettings settings = with_min_block(1);
  settings.torch_executed_modules = {"model.Head"};
  auto p = partition_ir(kMarkedModule, TableCapability::all_except({}), settings);
  EXPECT_EQ(format_segments(p),
            "segment 0 engine: %a=aten::relu\n"
            "segment 1 torch: %b=aten::sigmoid %c=aten::tanh\n"
            "segment 2 engine: %d=aten::relu\n");
  const Decision& d = p.decisions.at(find_node(p, "b"));
  EXPECT_EQ(d.reason, Reason::kForcedModule);
  EXPECT_NE(d.detail.find("model.Head"), std::string::npos) << d.detail;
  EXPECT_STREQ(ir::kTorchExecutedAttr, "kiln_torch_executed");
}

TEST(PartitionFallback, ValidatorRefusalCarriesItsMessage) {
  const char* ir = R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %a : Tensor = aten::add(%x, %x, %one)
  %b : Tensor = aten::add(%a, %x, %two)
  return (%b))IR";
  TableCapability table;
  table.add("aten::add.Tensor", [](const torch::jit::Node* n) -> std::optional<std::string> {
    if (torch::jit::toIValue(n->input(2))->toInt() != 1) return "alpha must be 1";
    return std::nullopt;
  });
  auto p = partition_ir(ir, table, with_min_block(1));
  EXPECT_EQ(format_segments(p), "segment 0 engine: %a=aten::add\nsegment 1 torch: %b=aten::add\n");
  const Decision& d = p.decisions.at(find_node(p, "b"));
  EXPECT_EQ(d.reason, Reason::kValidator);
  EXPECT_EQ(d.detail, "alpha must be 1");
}

TEST(PartitionFallback, InPlaceOpsAreImpure) {
  const char* ir = R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::add_(%a, %x, %one)
  %c : Tensor = aten::relu(%a)
  return (%c))IR";
  auto p = partition_ir(ir, TableCapability::all_except({}), with_min_block(1));
  // The write to %a is a barrier: the relu that reads %a afterwards must not move before it.
  EXPECT_EQ(format_segments(p),
            "segment 0 engine: %a=aten::relu\n"
            "segment 1 torch: %b=aten::add_\n"
            "segment 2 engine: %c=aten::relu\n");
  EXPECT_EQ(p.decisions.at(find_node(p, "b")).reason, Reason::kImpure);
}

TEST(PartitionFallback, GraphWithNoSupportedNodeIsOneTorchSegment) {
  auto p = partition_ir(testing::read_test_data("lgamma.ir"), TableCapability{}, with_min_block(1));
  ASSERT_EQ(p.segments.size(), 1u);
  EXPECT_EQ(p.segments[0].target, Target::kTorch);
  EXPECT_EQ(p.segments[0].nodes.size(), 8u);
  EXPECT_EQ(p.segments[0].inputs.size(), 2u);
  EXPECT_EQ(p.segments[0].outputs.size(), 1u);
  const Decision& d = p.decisions.at(find_node(p, "add"));
  EXPECT_EQ(d.reason, Reason::kNoConverter);
  EXPECT_EQ(d.detail, "no converter or evaluator for aten::add.Tensor");
}

TEST(PartitionFallback, RequireFullCompilationListsEveryNodeAndWhy) {
  PartitionSettings settings;
  settings.require_full_compilation = true;
  settings.torch_executed_ops = {"aten::mul"};
  try {
    partition_ir(testing::read_test_data("lgamma.ir"), kAllButLgamma, settings);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("4 node(s) cannot run in the engine"), std::string::npos) << m;
    EXPECT_NE(m.find("%x_lgamma : Tensor = aten::lgamma(%x)  [no converter: no converter or "
                     "evaluator for aten::lgamma]"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("aten::lgamma(%div)"), std::string::npos) << m;
    EXPECT_NE(m.find("aten::mul(%x, %y)  [forced op: aten::mul.Tensor is in torch_executed_ops]"),
              std::string::npos)
        << m;
  }
}

TEST(PartitionFallback, RequireFullCompilationIgnoresMinBlockSize) {
  PartitionSettings settings;
  settings.require_full_compilation = true;
  settings.min_block_size = 100;
  auto p =
      partition_ir(testing::read_test_data("lgamma.ir"), TableCapability::all_except({}), settings);
  ASSERT_EQ(p.segments.size(), 1u);
  EXPECT_EQ(p.segments[0].target, Target::kEngine);
}

}  // namespace
}  // namespace kiln::partitioning
