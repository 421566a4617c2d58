// Coverage report of the lgamma graph, as text and JSON.
#include <gtest/gtest.h>

#include "partition_testing.h"
#include "partitioning/coverage.h"

namespace kiln::partitioning {
namespace {

TEST(Coverage, LgammaCountsEveryOpWithReasons) {
  auto p = testing::partition_ir(testing::read_test_data("lgamma.ir"),
                                 TableCapability::all_except({"aten::lgamma"}));
  const CoverageReport report = coverage(p);
  // Default min_block_size 3: the one-op [ListConstruct, cat] segment falls back too.
  EXPECT_EQ(report.total, 8u);
  EXPECT_EQ(report.supported, 3u);
  const OpCoverage& lgamma = report.ops.at("aten::lgamma");
  EXPECT_EQ(lgamma.total, 3u);
  EXPECT_EQ(lgamma.supported, 0u);
  EXPECT_EQ(lgamma.reasons.at("no converter: no converter or evaluator for aten::lgamma"), 3u);
  EXPECT_EQ(report.ops.at("aten::add.Tensor").supported, 1u);
  EXPECT_EQ(report.ops.at("aten::cat").reasons.size(), 1u);

  const std::string text = to_text(report);
  EXPECT_EQ(text.substr(0, text.find('\n')), "3/8 ops supported by the engine");
  EXPECT_NE(text.find("  aten::lgamma: 0/3\n    3x no converter: no converter or evaluator for "
                      "aten::lgamma\n"),
            std::string::npos)
      << text;
  EXPECT_LT(text.find("aten::lgamma"), text.find("aten::add.Tensor")) << text;

  const nlohmann::json json = to_json(report);
  EXPECT_EQ(json["supported"], 3);
  EXPECT_EQ(json["total"], 8);
  EXPECT_EQ(json["ops"]["aten::lgamma"]["total"], 3);
  EXPECT_EQ(json["ops"]["aten::cat"]["reasons"].begin().key().rfind("below min_block_size: ", 0),
            0u);
  EXPECT_EQ(nlohmann::json::parse(json.dump()), json);
}

}  // namespace
}  // namespace kiln::partitioning
