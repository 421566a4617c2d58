// RegistryCapability: partitioning's capability question answered by the converter registry.
#include "compiler/capability.h"

#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "partitioning/settings.h"

namespace kiln::conversion {
namespace {

using compiler::RegistryCapability;
using partitioning::Decision;
using partitioning::Reason;

// The node that produces the graph's first output.
const torch::jit::Node* output_node(const kiln::testing::GraphPtr& graph) {
  return graph->outputs()[0]->node();
}

TEST(RegistryCapability, NodeWithoutConverterNamesItsOp) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::lgamma(%x)
  return (%y))IR");
  const Decision d = RegistryCapability(default_registry()).query(output_node(g));
  EXPECT_FALSE(d.supported);
  EXPECT_EQ(d.reason, Reason::kNoConverter);
  EXPECT_EQ(d.detail, "no converter for aten::lgamma");
  EXPECT_STREQ(partitioning::reason_name(d.reason), "no converter");
}

TEST(RegistryCapability, ValidatorRefusalCarriesItsMessage) {
  // aten::add's converter needs alpha at build time; here it is a graph input.
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %y : Tensor, %alpha : int):
  %z : Tensor = aten::add(%x, %y, %alpha)
  return (%z))IR");
  const RegistryCapability capability;
  ASSERT_NE(default_registry().find_converter(output_node(g)), nullptr);
  const Decision d = capability.query(output_node(g));
  EXPECT_FALSE(d.supported);
  EXPECT_EQ(d.reason, Reason::kValidator);
  EXPECT_EQ(d.detail, "alpha must be a constant");

  // The same op with a constant alpha is accepted.
  auto constant_alpha = kiln::testing::parse(R"IR(
graph(%x : Tensor, %y : Tensor):
  %alpha : int = prim::Constant[value=2]()
  %z : Tensor = aten::add(%x, %y, %alpha)
  return (%z))IR");
  const Decision yes = capability.query(output_node(constant_alpha));
  EXPECT_TRUE(yes.supported);
  EXPECT_EQ(yes.reason, Reason::kNone);
  EXPECT_EQ(yes.detail, "");
}

TEST(RegistryCapability, EvaluatedNodesAreSupported) {
  // No converter adds layers for these: evaluators compute them at build time.
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %n : int = aten::size(%x, %zero)
  %shape : int[] = prim::ListConstruct(%n, %one)
  %pair : (int, int) = prim::TupleConstruct(%n, %one)
  return (%shape, %pair))IR");
  const RegistryCapability capability;
  for (const torch::jit::Node* n : g->nodes()) {
    if (n->kind() == torch::jit::prim::Constant) continue;
    EXPECT_EQ(default_registry().find_converter(n), nullptr) << *n;
    ASSERT_NE(default_registry().find_evaluator(n), nullptr) << *n;
    const Decision d = capability.query(n);
    EXPECT_TRUE(d.supported) << *n << d.detail;
    EXPECT_EQ(d.reason, Reason::kNone) << *n;
  }
}

TEST(RegistryCapability, HigherPriorityRefusalFallsToAnAcceptingConverter) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::relu(%x)
  return (%y))IR");
  const auto noop = [](ConversionContext&, const torch::jit::Node*) {};
  const auto refuse = [](const torch::jit::Node*) -> std::optional<std::string> {
    return std::string("refused by the fast path");
  };
  Registry only_refusing;
  only_refusing.add_converter({{"aten::relu"}, noop, refuse, 2});
  const Decision refused = RegistryCapability(only_refusing).query(output_node(g));
  EXPECT_EQ(refused.reason, Reason::kValidator);
  EXPECT_EQ(refused.detail, "refused by the fast path");

  Registry with_fallback = only_refusing;
  with_fallback.add_converter({{"aten::relu"}, noop, {}, 0});
  EXPECT_TRUE(RegistryCapability(with_fallback).query(output_node(g)).supported);

  const Decision empty = RegistryCapability(Registry{}).query(output_node(g));
  EXPECT_EQ(empty.reason, Reason::kNoConverter);
  EXPECT_EQ(empty.detail, "no converter for aten::relu");
}

TEST(RegistryCapability, ClassifyPutsUserSettingsBeforeTheRegistry) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %y : Tensor):
  %z : Tensor = aten::mul(%x, %y)
  return (%z))IR");
  const RegistryCapability capability;
  partitioning::PartitionSettings settings;
  EXPECT_TRUE(partitioning::classify(output_node(g), capability, settings).supported);
  settings.torch_executed_ops = {"aten::mul"};
  const Decision forced = partitioning::classify(output_node(g), capability, settings);
  EXPECT_EQ(forced.reason, Reason::kForcedOp);
  EXPECT_EQ(forced.detail, "aten::mul.Tensor is in torch_executed_ops");
}

}  // namespace
}  // namespace kiln::conversion
