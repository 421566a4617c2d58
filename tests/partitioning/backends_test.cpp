// Several engine backends in priority order (seed 002's backend_support_map, backend_priority).
#include <gtest/gtest.h>

#include "partition_testing.h"
#include "partitioning/coverage.h"
#include "partitioning/partitioning.h"
#include "util/errors.h"

namespace kiln::partitioning {
namespace {

using testing::partition_ir;
using testing::with_min_block;

const TableCapability kAll = TableCapability::all_except({});
const TableCapability kAllButLgamma = TableCapability::all_except({"aten::lgamma"});

TEST(PartitionBackends, EachOpGoesToTheFirstBackendThatListsIt) {
  // gpu takes the arithmetic, cpu the lgammas; the list cat reads goes where cat goes.
  BackendCapability backends({{"gpu", {"aten::add", "aten::mul", "aten::div", "aten::cat"}, &kAll},
                              {"cpu", {"aten::lgamma"}, &kAll}});
  auto p = partition_ir(testing::read_test_data("lgamma.ir"), backends, with_min_block(1));
  const std::string text = format_segments(p);
  ASSERT_EQ(p.segments.size(), 3u) << text;
  EXPECT_EQ(p.segments[0].backend, "gpu");
  EXPECT_EQ(p.segments[1].backend, "cpu");
  EXPECT_EQ(p.segments[2].backend, "gpu");
  for (const Segment& s : p.segments) EXPECT_EQ(s.target, Target::kEngine) << text;
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "segment 0 engine[gpu]: %add=aten::add %mul=aten::mul %div=aten::div");
  EXPECT_NE(text.find("segment 1 engine[cpu]: %x_lgamma=aten::lgamma %y_lgamma=aten::lgamma "
                      "%div_lgamma=aten::lgamma\n"),
            std::string::npos)
      << text;
  const CoverageReport cov = coverage(p);
  EXPECT_EQ(cov.supported, cov.total);
  EXPECT_EQ(cov.backends.at("gpu"), 5u);  // add, mul, div, the list, cat
  EXPECT_EQ(cov.backends.at("cpu"), 3u);
  EXPECT_NE(to_text(cov).find("by backend: cpu 3, gpu 5"), std::string::npos) << to_text(cov);
}

TEST(PartitionBackends, AnOpTheFirstBackendRefusesGoesToTheNext) {
  // Both take everything; the first one's capability has no lgamma.
  BackendCapability backends({{"gpu", {}, &kAllButLgamma}, {"cpu", {}, &kAll}});
  auto p = partition_ir(testing::read_test_data("lgamma.ir"), backends, with_min_block(1));
  ASSERT_EQ(p.segments.size(), 3u) << format_segments(p);
  EXPECT_EQ(p.segments[0].backend, "gpu");
  EXPECT_EQ(p.segments[1].backend, "cpu");
  EXPECT_EQ(p.segments[1].nodes.size(), 3u);
  EXPECT_EQ(p.segments[2].backend, "gpu");
}

TEST(PartitionBackends, AnOpNoBackendListsRunsInPyTorchWithTheReason) {
  BackendCapability backends({{"gpu", {"aten::add", "aten::mul", "aten::div", "aten::cat"}, &kAll},
                              {"cpu", {"aten::cat"}, &kAll}});
  auto p = partition_ir(testing::read_test_data("lgamma.ir"), backends, with_min_block(1));
  ASSERT_EQ(p.segments.size(), 3u) << format_segments(p);
  EXPECT_EQ(p.segments[1].target, Target::kTorch);
  EXPECT_TRUE(p.segments[1].backend.empty());
  const Decision& d = p.decisions.at(p.segments[1].nodes[0]);
  EXPECT_EQ(d.reason, Reason::kNotInSupportMap);
  EXPECT_EQ(d.detail,
            "no backend of backend_priority (gpu, cpu) lists aten::lgamma in backend_support_map");
  EXPECT_STREQ(reason_name(d.reason), "not in backend_support_map");
}

TEST(PartitionBackends, AnOpTheCapabilityRefusesKeepsItsReason) {
  BackendCapability backends({{"gpu", {}, &kAllButLgamma}, {"cpu", {"aten::add"}, &kAll}});
  auto p = partition_ir(testing::read_test_data("lgamma.ir"), backends, with_min_block(1));
  ASSERT_EQ(p.segments.size(), 3u) << format_segments(p);
  const Decision& d = p.decisions.at(p.segments[1].nodes[0]);
  EXPECT_EQ(d.reason, Reason::kNoConverter);
}

TEST(PartitionBackends, NeighboursOfTwoBackendsAreNeverMerged) {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::sigmoid(%a)
  %c : Tensor = aten::tanh(%b)
  %d : Tensor = aten::neg(%c)
  return (%d))IR";
  BackendCapability backends({{"gpu", {"aten::relu", "aten::tanh"}, &kAll},
                              {"cpu", {"aten::sigmoid", "aten::neg"}, &kAll}});
  for (Strategy strategy : {Strategy::kDependencyAware, Strategy::kGlobal}) {
    PartitionSettings settings = with_min_block(1);
    settings.strategy = strategy;
    auto p = partition_ir(ir, backends, settings);
    EXPECT_EQ(format_segments(p),
              "segment 0 engine[gpu]: %a=aten::relu\n"
              "segment 1 engine[cpu]: %b=aten::sigmoid\n"
              "segment 2 engine[gpu]: %c=aten::tanh\n"
              "segment 3 engine[cpu]: %d=aten::neg\n");
  }
}

TEST(PartitionBackends, AnOpReadingAnotherBackendsOpenSegmentClosesIt) {
  // b (cpu) reads a: the gpu segment holding a is finalized, c and d open the next one.
  const std::string ir = R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::sigmoid(%a)
  %c : Tensor = aten::tanh(%a)
  %d : Tensor = aten::add(%b, %c, %one)
  return (%d))IR";
  BackendCapability backends({{"gpu", {"aten::relu", "aten::tanh", "aten::add"}, &kAll},
                              {"cpu", {"aten::sigmoid"}, &kAll}});
  auto p = partition_ir(ir, backends, with_min_block(1));
  EXPECT_EQ(format_segments(p),
            "segment 0 engine[gpu]: %a=aten::relu\n"
            "segment 1 engine[cpu]: %b=aten::sigmoid\n"
            "segment 2 engine[gpu]: %c=aten::tanh %d=aten::add\n");
}

TEST(PartitionBackends, NoBackendIsAnError) {
  try {
    BackendCapability none({});
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("backend_priority: no backend given"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln::partitioning
