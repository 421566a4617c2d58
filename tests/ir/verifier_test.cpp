// Verifier: accepts well-formed graphs, names the node when an invariant breaks.
#include "ir/verifier.h"

#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::ir {
namespace {

TEST(Verifier, AcceptsWellFormedGraphWithBlocks) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %c : bool):
  %r : Tensor = prim::If(%c)
    block0():
      %a : Tensor = aten::relu(%x)
      -> (%a)
    block1():
      -> (%x)
  return (%r))IR");
  EXPECT_NO_THROW(verify_graph(*g));
}

TEST(Verifier, RejectsNodeWhoseInputsMatchNoSchemaInsideABlock) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %c : bool):
  %r : Tensor = prim::If(%c)
    block0():
      %a : Tensor = aten::relu(%x)
      -> (%a)
    block1():
      -> (%x)
  return (%r))IR");
  // Break the graph the way a buggy pass could: give relu a bool input.
  torch::jit::Node* relu = *g->nodes().begin()->blocks()[0]->nodes().begin();
  relu->replaceInput(0, g->inputs()[1]);
  try {
    verify_graph(*g, "after pass `broken`");
    FAIL() << "verifier accepted a mistyped node";
  } catch (const InternalError& e) {
    EXPECT_NE(e.message().find("after pass `broken`: node `%a : Tensor = aten::relu(%c)`"),
              std::string::npos)
        << e.message();
  }
}

TEST(Verifier, RejectsUseBeforeDefinition) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::neg(%a)
  return (%b))IR");
  // Move the producer after its consumer.
  auto it = g->nodes().begin();
  torch::jit::Node* relu = *it;
  torch::jit::Node* neg = *(++it);
  relu->moveAfter(neg);
  EXPECT_THROW(verify_graph(*g), InternalError);
}

}  // namespace
}  // namespace kiln::ir
