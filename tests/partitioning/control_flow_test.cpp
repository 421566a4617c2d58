// prim::If branches are partitioned on their own; loops stay in PyTorch whole.
#include <gtest/gtest.h>

#include "partition_testing.h"

namespace kiln::partitioning {
namespace {

using testing::partition_ir;
using testing::segments_of;
using testing::with_min_block;

const TableCapability kAllButLgamma = TableCapability::all_except({"aten::lgamma"});

const char* kIf = R"IR(
graph(%x : Tensor, %c : bool):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::relu(%a)
  %r : Tensor = prim::If(%c)
    block0():
      %t1 : Tensor = aten::sigmoid(%a)
      %t2 : Tensor = aten::tanh(%t1)
      -> (%t2)
    block1():
      %l : Tensor = aten::lgamma(%a)
      %d : Tensor = aten::relu(%l)
      -> (%d)
  %s : Tensor = aten::add(%r, %b, %one)
  %s2 : Tensor = aten::relu(%s)
  return (%s2))IR";

TEST(PartitionControlFlow, IfBranchesGetTheirOwnEngineSegments) {
  auto p = partition_ir(kIf, kAllButLgamma, with_min_block(1));
  EXPECT_EQ(format_segments(p),
            "segment 0 engine: %a=aten::relu %b=aten::relu\n"
            "segment 1 torch: %r=prim::If\n"
            "segment 1.0.0 engine: %t1=aten::sigmoid %t2=aten::tanh\n"
            "segment 1.1.0 torch: %l=aten::lgamma\n"
            "segment 1.1.1 engine: %d=aten::relu\n"
            "segment 2 engine: %s=aten::add %s2=aten::relu\n");
  ASSERT_EQ(p.segments.size(), 3u);
  const Segment& if_segment = p.segments[1];
  EXPECT_TRUE(if_segment.do_not_merge);
  // The If reads %c and, inside its branches, %a.
  ASSERT_EQ(if_segment.inputs.size(), 2u);
  EXPECT_EQ(if_segment.inputs[0]->debugName(), "c");
  EXPECT_EQ(if_segment.inputs[1]->debugName(), "a");
  // A branch segment reads %a from the enclosing block.
  ASSERT_EQ(if_segment.blocks.size(), 2u);
  ASSERT_EQ(if_segment.blocks[0].segments.size(), 1u);
  EXPECT_EQ(if_segment.blocks[0].segments[0].inputs.at(0)->debugName(), "a");
  EXPECT_EQ(if_segment.blocks[0].segments[0].outputs.at(0)->debugName(), "t2");
  EXPECT_EQ(p.decisions.at(if_segment.nodes[0]).reason, Reason::kControlFlow);
}

TEST(PartitionControlFlow, ShortBranchSegmentsFallBackWithMinBlockSize) {
  const std::string text = segments_of(kIf, kAllButLgamma, with_min_block(2));
  EXPECT_EQ(text,
            "segment 0 engine: %a=aten::relu %b=aten::relu\n"
            "segment 1 torch: %r=prim::If\n"
            "segment 1.0.0 engine: %t1=aten::sigmoid %t2=aten::tanh\n"
            "segment 1.1.0 torch: %l=aten::lgamma %d=aten::relu\n"
            "segment 2 engine: %s=aten::add %s2=aten::relu\n");
}

TEST(PartitionControlFlow, SegmentsAroundAnIfAreNeverMergedIntoIt) {
  const char* ir = R"IR(
graph(%x : Tensor, %c : bool):
  %a : Tensor = aten::lgamma(%x)
  %r : Tensor = prim::If(%c)
    block0():
      -> (%a)
    block1():
      %l : Tensor = aten::lgamma(%a)
      -> (%l)
  %b : Tensor = aten::lgamma(%r)
  return (%b))IR";
  auto p = partition_ir(ir, kAllButLgamma, with_min_block(1));
  EXPECT_EQ(format_segments(p),
            "segment 0 torch: %a=aten::lgamma\n"
            "segment 1 torch: %r=prim::If\n"
            "segment 1.1.0 torch: %l=aten::lgamma\n"
            "segment 2 torch: %b=aten::lgamma\n");
}

TEST(PartitionControlFlow, LoopStaysInTorchWhole) {
  const char* ir = R"IR(
graph(%x : Tensor, %n : int):
  %true : bool = prim::Constant[value=1]()
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::relu(%x)
  %y : Tensor = prim::Loop(%n, %true, %a)
    block0(%i : int, %acc : Tensor):
      %next : Tensor = aten::add(%acc, %a, %one)
      -> (%true, %next)
  %b : Tensor = aten::sigmoid(%y)
  return (%b))IR";
  auto p = partition_ir(ir, kAllButLgamma, with_min_block(1));
  EXPECT_EQ(format_segments(p),
            "segment 0 engine: %a=aten::relu\n"
            "segment 1 torch: %y=prim::Loop\n"
            "segment 2 engine: %b=aten::sigmoid\n");
  ASSERT_EQ(p.segments.size(), 3u);
  EXPECT_TRUE(p.segments[1].blocks.empty());
  ASSERT_EQ(p.segments[1].inputs.size(), 2u);
  EXPECT_EQ(p.segments[1].inputs[0]->debugName(), "n");
  EXPECT_EQ(p.segments[1].inputs[1]->debugName(), "a");
  const torch::jit::Node* add = p.segments[1].nodes[0]->blocks()[0]->nodes().front();
  EXPECT_EQ(p.decisions.at(add).reason, Reason::kControlFlow);
}

}  // namespace
}  // namespace kiln::partitioning
