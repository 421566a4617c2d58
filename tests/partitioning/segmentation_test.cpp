// Dependency-aware segmentation (seed 000's lgamma example), naive segmentation, block sizes.
#include <gtest/gtest.h>

#include "partition_testing.h"
#include "partitioning/partitioning.h"
#include "util/errors.h"

namespace kiln::partitioning {
namespace {

using testing::partition_ir;
using testing::segments_of;
using testing::with_min_block;

const TableCapability kAllButLgamma = TableCapability::all_except({"aten::lgamma"});

TEST(Segmentation, LgammaIsThreeSegmentsWhenDependencyAware) {
  auto p = partition_ir(testing::read_test_data("lgamma.ir"), kAllButLgamma, with_min_block(1));
  ASSERT_EQ(p.segments.size(), 3u) << format_segments(p);
  const std::string cat_list = p.segments[2].nodes[0]->output()->debugName();
  const std::string cat = p.segments[2].nodes[1]->output()->debugName();
  EXPECT_EQ(format_segments(p),
            "segment 0 engine: %add=aten::add %mul=aten::mul %div=aten::div\n"
            "segment 1 torch: %x_lgamma=aten::lgamma %y_lgamma=aten::lgamma "
            "%div_lgamma=aten::lgamma\n"
            "segment 2 engine: %" +
                cat_list + "=prim::ListConstruct %" + cat + "=aten::cat\n");
  // Engine segments take and return tensors only; the torch one reads %div from segment 0.
  ASSERT_EQ(p.segments[1].inputs.size(), 3u);
  EXPECT_EQ(p.segments[1].inputs[2]->debugName(), "div");
  EXPECT_EQ(p.segments[0].outputs.size(), 3u);
  EXPECT_EQ(p.segments[2].inputs.size(), 5u);
  ASSERT_EQ(p.segments[2].outputs.size(), 1u);
  EXPECT_EQ(p.segments[2].outputs[0], p.graph->outputs()[0]);
}

TEST(Segmentation, NaiveInOrderSegmentationOfLgammaIsSeven) {
  auto graph = kiln::testing::parse(testing::read_test_data("lgamma.ir"));
  const Decisions decisions = classify_graph(*graph, kAllButLgamma, {});
  const auto naive = segment_naive(graph->block(), decisions);
  ASSERT_EQ(naive.size(), 7u) << format_segments(naive);
  const std::string text = format_segments(naive);
  EXPECT_NE(text.find("segment 0 engine: %add=aten::add\n"), std::string::npos) << text;
  EXPECT_NE(text.find("segment 5 torch: %div_lgamma=aten::lgamma\n"), std::string::npos) << text;
}

TEST(Segmentation, LgammaWithDefaultMinBlockSizeKeepsOnlyTheArithmeticInTheEngine) {
  // [ListConstruct, cat] is one op (list packing does not count), below the default of 3.
  auto p = partition_ir(testing::read_test_data("lgamma.ir"), kAllButLgamma);
  ASSERT_EQ(p.segments.size(), 2u) << format_segments(p);
  EXPECT_EQ(p.segments[0].target, Target::kEngine);
  EXPECT_EQ(p.segments[0].nodes.size(), 3u);
  EXPECT_EQ(p.segments[1].target, Target::kTorch);
  EXPECT_EQ(p.segments[1].nodes.size(), 5u);
  const torch::jit::Node* cat = p.segments[1].nodes.back();
  EXPECT_EQ(cat->kind(), torch::jit::aten::cat);
  EXPECT_EQ(p.decisions.at(cat).reason, Reason::kBelowMinBlockSize);
  EXPECT_NE(p.decisions.at(cat).detail.find("1 op(s), fewer than min_block_size 3"),
            std::string::npos);
}

const char* kSequence = R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::sigmoid(%a)
  %c : Tensor = aten::lgamma(%b)
  %d : Tensor = aten::tanh(%c)
  %e : Tensor = aten::add(%d, %c, %one)
  %f : Tensor = aten::relu(%e)
  return (%f))IR";

TEST(Segmentation, SequenceWithMinBlockSizeOne) {
  EXPECT_EQ(segments_of(kSequence, kAllButLgamma, with_min_block(1)),
            "segment 0 engine: %a=aten::relu %b=aten::sigmoid\n"
            "segment 1 torch: %c=aten::lgamma\n"
            "segment 2 engine: %d=aten::tanh %e=aten::add %f=aten::relu\n");
}

TEST(Segmentation, SequenceWithMinBlockSizeThreeFallsBackTheShortHeadAndMerges) {
  auto p = partition_ir(kSequence, kAllButLgamma, with_min_block(3));
  EXPECT_EQ(format_segments(p),
            "segment 0 torch: %a=aten::relu %b=aten::sigmoid %c=aten::lgamma\n"
            "segment 1 engine: %d=aten::tanh %e=aten::add %f=aten::relu\n");
  EXPECT_EQ(p.decisions.at(p.segments[0].nodes[0]).reason, Reason::kBelowMinBlockSize);
  EXPECT_EQ(p.decisions.at(p.segments[0].nodes[2]).reason, Reason::kNoConverter);
}

// Two branches from %x: one needs lgamma, the other is pure engine work; they join at the end.
const char* kBranches = R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %l : Tensor = aten::lgamma(%x)
  %a : Tensor = aten::relu(%x)
  %l2 : Tensor = aten::lgamma(%l)
  %b : Tensor = aten::sigmoid(%a)
  %c : Tensor = aten::tanh(%b)
  %s : Tensor = aten::add(%l2, %c, %one)
  return (%s))IR";

TEST(Segmentation, BranchesWithMinBlockSizeOne) {
  EXPECT_EQ(segments_of(kBranches, kAllButLgamma, with_min_block(1)),
            "segment 0 torch: %l=aten::lgamma %l2=aten::lgamma\n"
            "segment 1 engine: %a=aten::relu %b=aten::sigmoid %c=aten::tanh %s=aten::add\n");
}

TEST(Segmentation, BranchesWithMinBlockSizeThree) {
  EXPECT_EQ(segments_of(kBranches, kAllButLgamma, with_min_block(3)),
            "segment 0 torch: %l=aten::lgamma %l2=aten::lgamma\n"
            "segment 1 engine: %a=aten::relu %b=aten::sigmoid %c=aten::tanh %s=aten::add\n");
  EXPECT_EQ(segments_of(kBranches, kAllButLgamma, with_min_block(5)),
            "segment 0 torch: %l=aten::lgamma %a=aten::relu %l2=aten::lgamma %b=aten::sigmoid "
            "%c=aten::tanh %s=aten::add\n");
}

TEST(Segmentation, NodesWithoutOutputsAreWrittenWithoutAnOutputPrefix) {
  const char* ir = R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu(%x)
  prim::Print(%a)
  %b : Tensor = aten::relu(%a)
  return (%b))IR";
  EXPECT_EQ(segments_of(ir, TableCapability::all_except({}), with_min_block(1)),
            "segment 0 engine: %a=aten::relu\n"
            "segment 1 torch: prim::Print\n"
            "segment 2 engine: %b=aten::relu\n");
}

TEST(Segmentation, ZeroMinBlockSizeIsRejected) {
  auto graph = kiln::testing::parse(kSequence);
  EXPECT_THROW(partition(graph, kAllButLgamma, with_min_block(0)), InvalidArgument);
}

}  // namespace
}  // namespace kiln::partitioning
