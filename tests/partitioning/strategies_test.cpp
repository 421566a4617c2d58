// The global strategy against the dependency-aware default.
#include <gtest/gtest.h>

#include "partition_testing.h"

namespace kiln::partitioning {
namespace {

using testing::partition_ir;
using testing::with_min_block;

const TableCapability kAllButLgamma = TableCapability::all_except({"aten::lgamma"});

PartitionSettings global(size_t min_block_size) {
  PartitionSettings settings = with_min_block(min_block_size);
  settings.strategy = Strategy::kGlobal;
  return settings;
}

TEST(PartitionStrategy, GlobalMergesTorchSegmentsThatDependencyAwareKeepsApart) {
  // The second lgamma does not depend on the engine segment, so it can join the first one.
  const char* ir = R"IR(
graph(%x : Tensor, %y : Tensor):
  %t1 : Tensor = aten::lgamma(%x)
  %e1 : Tensor = aten::relu(%t1)
  %t2 : Tensor = aten::lgamma(%y)
  return (%e1, %t2))IR";
  EXPECT_EQ(format_segments(partition_ir(ir, kAllButLgamma, with_min_block(1))),
            "segment 0 torch: %t1=aten::lgamma\n"
            "segment 1 engine: %e1=aten::relu\n"
            "segment 2 torch: %t2=aten::lgamma\n");
  EXPECT_EQ(format_segments(partition_ir(ir, kAllButLgamma, global(1))),
            "segment 0 torch: %t1=aten::lgamma %t2=aten::lgamma\n"
            "segment 1 engine: %e1=aten::relu\n");
}

TEST(PartitionStrategy, GlobalNeverJoinsSegmentsWithAPathThroughAnother) {
  // lgamma -> relu -> lgamma: merging the two lgammas would need relu both before and after.
  const char* ir = R"IR(
graph(%x : Tensor):
  %t1 : Tensor = aten::lgamma(%x)
  %e1 : Tensor = aten::relu(%t1)
  %t2 : Tensor = aten::lgamma(%e1)
  return (%t2))IR";
  EXPECT_EQ(format_segments(partition_ir(ir, kAllButLgamma, global(1))),
            "segment 0 torch: %t1=aten::lgamma\n"
            "segment 1 engine: %e1=aten::relu\n"
            "segment 2 torch: %t2=aten::lgamma\n");
}

TEST(PartitionStrategy, GlobalGivesTheSameThreeSegmentsForLgamma) {
  auto p = partition_ir(testing::read_test_data("lgamma.ir"), kAllButLgamma, global(1));
  ASSERT_EQ(p.segments.size(), 3u) << format_segments(p);
  EXPECT_EQ(p.segments[0].target, Target::kEngine);
  EXPECT_EQ(p.segments[0].nodes.size(), 3u);
  EXPECT_EQ(p.segments[1].target, Target::kTorch);
  EXPECT_EQ(p.segments[2].target, Target::kEngine);
}

}  // namespace
}  // namespace kiln::partitioning
