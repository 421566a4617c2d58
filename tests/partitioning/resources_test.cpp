// Resource partitioning (seed 002): engine segments split by the bytes of their weights, never
// inside an atomic pattern; atomic patterns and min_block_size.
#include <gtest/gtest.h>

#include <torch/csrc/jit/ir/ir.h>

#include "partition_testing.h"
#include "partitioning/atomic.h"
#include "partitioning/partitioning.h"
#include "util/errors.h"

namespace kiln::partitioning {
namespace {

using torch::jit::Graph;
using torch::jit::Value;

const TableCapability kAll = TableCapability::all_except({});

// x -> op(x, weight of `floats` floats) for each (op, floats), as one chain.
std::shared_ptr<Graph> chain(const std::vector<std::pair<c10::Symbol, int64_t>>& ops) {
  auto g = std::make_shared<Graph>();
  Value* x = g->addInput("x")->setType(c10::TensorType::get());
  for (const auto& [op, floats] : ops) {
    if (op == c10::aten::neg || op == c10::aten::tanh) {
      x = g->insert(op, {x});
    } else {
      Value* w = g->insertConstant(at::ones({floats}));
      x = g->insert(op, {x, w});
    }
  }
  g->registerOutput(x);
  return g;
}

// Engine segments as their op kinds, one string per segment ("aten::neg aten::sub").
std::vector<std::string> engine_ops(const PartitionedGraph& p) {
  std::vector<std::string> out;
  for (const Segment& s : p.segments) {
    if (s.target != Target::kEngine) continue;
    std::string ops;
    for (const torch::jit::Node* n : s.nodes) {
      if (!s.copied.count(n))
        ops += (ops.empty() ? "" : " ") + std::string(n->kind().toQualString());
    }
    out.push_back(ops);
  }
  return out;
}

PartitionSettings budget(uint64_t bytes) {
  PartitionSettings s;
  s.min_block_size = 1;
  s.max_engine_weight_bytes = bytes;
  return s;
}

TEST(ResourcePartitioning, SegmentsSplitWhereTheirWeightsReachTheBudget) {
  // Three subtractions of 1000 floats (4000 bytes) each.
  auto g = chain({{c10::aten::sub, 1000}, {c10::aten::sub, 1000}, {c10::aten::sub, 1000}});
  EXPECT_EQ(engine_ops(partition(g, kAll, budget(12000))).size(), 1u);
  EXPECT_EQ(engine_ops(partition(g, kAll, budget(8000))),
            (std::vector<std::string>{"aten::sub aten::sub", "aten::sub"}));
  EXPECT_EQ(engine_ops(partition(g, kAll, budget(4000))),
            (std::vector<std::string>{"aten::sub", "aten::sub", "aten::sub"}));
  // A node heavier than the budget is a piece alone.
  EXPECT_EQ(engine_ops(partition(g, kAll, budget(100))).size(), 3u);
  // Pieces take each other's outputs in order.
  auto p = partition(g, kAll, budget(4000));
  ASSERT_EQ(p.segments.size(), 3u);
  EXPECT_EQ(p.segments[1].inputs.size(), 1u);
  EXPECT_EQ(p.segments[1].inputs[0], p.segments[0].outputs[0]);
}

TEST(ResourcePartitioning, ACutNeverFallsInsideAnAtomicPattern) {
  // neg, then mul -> add (a built-in pattern) twice: a budget of 1.5 weights would cut between
  // the first mul and its add; the tie moves the pattern whole to the later piece.
  auto g = chain({{c10::aten::neg, 0},
                  {c10::aten::mul, 1000},
                  {c10::aten::add, 1000},
                  {c10::aten::mul, 1000},
                  {c10::aten::add, 1000}});
  EXPECT_EQ(engine_ops(partition(g, kAll, budget(6000))),
            (std::vector<std::string>{"aten::neg", "aten::mul aten::add", "aten::mul aten::add"}));
}

TEST(ResourcePartitioning, APatternGoesToTheSideHoldingMostOfIt) {
  register_atomic_pattern({"test_sub_chain", {{"aten::sub"}, {"aten::sub"}, {"aten::sub"}}});
  // sub(500) sub(500) sub(1000): a budget of 1.5 x 4000 bytes runs out at the third sub, with two
  // of the pattern's three nodes before the cut: the cut moves after it.
  auto g = chain({{c10::aten::neg, 0},
                  {c10::aten::sub, 500},
                  {c10::aten::sub, 500},
                  {c10::aten::sub, 1000},
                  {c10::aten::tanh, 0},
                  {c10::aten::div, 1000}});
  EXPECT_EQ(engine_ops(partition(g, kAll, budget(6000))),
            (std::vector<std::string>{"aten::neg aten::sub aten::sub aten::sub",
                                      "aten::tanh aten::div"}));
  // One of three before the cut: it moves before the pattern.
  auto h = chain({{c10::aten::neg, 0},
                  {c10::aten::sub, 1000},
                  {c10::aten::sub, 1000},
                  {c10::aten::sub, 0},
                  {c10::aten::tanh, 0}});
  EXPECT_EQ(engine_ops(partition(h, kAll, budget(6000))),
            (std::vector<std::string>{"aten::neg", "aten::sub aten::sub aten::sub aten::tanh"}));
  EXPECT_TRUE(unregister_atomic_pattern("test_sub_chain"));
  EXPECT_FALSE(unregister_atomic_pattern("test_sub_chain"));
}

TEST(ResourcePartitioning, MinBlockSizeMovesAWholePatternToPyTorch) {
  // lgamma (PyTorch) reads %b, closing the engine segment that holds mul; the add fused with the
  // mul (a built-in pattern) lands in an engine segment of its own.
  const std::string ir = R"IR(
graph(%x : Tensor, %y : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::neg(%x)
  %b : Tensor = aten::exp(%a)
  %m : Tensor = aten::mul(%b, %y)
  %l : Tensor = aten::lgamma(%b)
  %s : Tensor = aten::add(%m, %l, %one)
  return (%s))IR";
  const TableCapability all_but_lgamma = TableCapability::all_except({"aten::lgamma"});
  PartitionSettings s;
  s.min_block_size = 2;
  auto p = testing::partition_ir(ir, all_but_lgamma, s);
  // The add's segment has one op: it falls back, and the mul fused with it goes too.
  EXPECT_EQ(engine_ops(p), std::vector<std::string>{"aten::neg aten::exp"});
  bool named = false;
  for (const auto& [node, d] : p.decisions) {
    if (node->kind() == c10::aten::mul) {
      EXPECT_EQ(d.reason, Reason::kBelowMinBlockSize);
      named = d.detail.find("an atomic pattern is never split") != std::string::npos;
    }
  }
  EXPECT_TRUE(named);
}

TEST(ResourcePartitioning, BadPatternsAreRefused) {
  auto err = [](AtomicPattern p) {
    try {
      register_atomic_pattern(std::move(p));
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err({"one", {{"aten::relu"}}}).find("at least two ops, got 1"), std::string::npos);
  EXPECT_NE(err({"bad", {{"relu"}, {"aten::add"}}}).find("`relu` is not an op name"),
            std::string::npos);
  EXPECT_NE(err({"empty", {{}, {"aten::add"}}}).find("a step names no op"), std::string::npos);
  EXPECT_NE(err({"", {{"aten::mul"}, {"aten::add"}}}).find("needs a name"), std::string::npos);
}

}  // namespace
}  // namespace kiln::partitioning
