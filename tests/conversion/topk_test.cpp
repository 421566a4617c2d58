// topk, sort, argsort and the scan converters (cumsum, cumprod, cummax, cummin, logcumsumexp)
// against libtorch on the CPU backend.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

TEST(ConvertTopK, TopKBothOutputsEveryFlag) {
  // A permutation has no ties, so the indices are unique too.
  const auto x = torch::randperm(60).to(torch::kFloat).reshape({3, 4, 5});
  for (int dim : {-1, 0, 1}) {
    for (const char* largest : {"1", "0"}) {
      const std::string ir =
          "graph(%x : Tensor):\n  %k : int = prim::Constant[value=2]()\n"
          "  %d : int = prim::Constant[value=" +
          std::to_string(dim) + "]()\n  %l : bool = prim::Constant[value=" + largest +
          "]()\n  %s : bool = prim::Constant[value=1]()\n"
          "  %v : Tensor, %i : Tensor = aten::topk(%x, %k, %d, %l, %s)\n"
          "  return (%v, %i)";
      EXPECT_TRUE(matches_torch(ir, {x}, 0, 0)) << dim << " " << largest;
      EXPECT_TRUE(matches_torch(ir, {x.to(torch::kLong)}, 0, 0)) << dim << " " << largest;
    }
  }
}

TEST(ConvertTopK, SortAndArgsort) {
  const auto x = torch::randperm(24).to(torch::kFloat).reshape({4, 6});
  for (const char* desc : {"0", "1"}) {
    const std::string consts =
        "graph(%x : Tensor):\n  %d : int = prim::Constant[value=-1]()\n"
        "  %desc : bool = prim::Constant[value=" +
        std::string(desc) + "]()\n";
    EXPECT_TRUE(matches_torch(
        consts + "  %v : Tensor, %i : Tensor = aten::sort(%x, %d, %desc)\n  return (%v, %i)", {x},
        0, 0));
    EXPECT_TRUE(matches_torch(consts + "  %i : Tensor = aten::argsort(%x, %d, %desc)\n"
                                       "  return (%i)",
                              {x}, 0, 0));
  }
}

TEST(ConvertTopK, CumsumWithAndWithoutDtype) {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=-1]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::cumsum(%x, %d, %none)
  return (%y))IR";
  EXPECT_TRUE(matches_torch(ir, {torch::randn({3, 7})}, 1e-5, 1e-5));
  EXPECT_TRUE(matches_torch(ir, {torch::randint(-9, 9, {3, 7}, torch::kInt)}, 0, 0));
  EXPECT_TRUE(matches_torch(ir, {torch::rand({3, 7}) > 0.5}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=0]()
  %dt : int = prim::Constant[value=6]()
  %y : Tensor = aten::cumsum(%x, %d, %dt)
  return (%y))IR",
                            {torch::randint(-9, 9, {5, 2}, torch::kLong)}, 0, 0));
}

TEST(ConvertTopK, CumprodWithAndWithoutDtype) {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=1]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::cumprod(%x, %d, %none)
  return (%y))IR";
  EXPECT_TRUE(matches_torch(ir, {torch::rand({3, 7}) + 0.5}, 1e-5, 1e-6));
  EXPECT_TRUE(matches_torch(ir, {torch::randn({2, 6}).to(torch::kHalf)}, 1e-3, 1e-3));
  // Integers become int64 (int32 would overflow here); bools too.
  EXPECT_TRUE(matches_torch(ir, {torch::randint(-30, 30, {3, 9}, torch::kInt)}, 0, 0));
  EXPECT_TRUE(matches_torch(ir, {torch::rand({3, 7}) > 0.3}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=0]()
  %dt : int = prim::Constant[value=6]()
  %y : Tensor = aten::cumprod(%x, %d, %dt)
  return (%y))IR",
                            {torch::rand({5, 2}) + 0.5}, 1e-12, 0));
  // A 0-d tensor scans as one element.
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=-1]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::cumprod(%x, %d, %none)
  return (%y))IR",
                            {torch::tensor(2.5)}, 0, 0));
}

// cummax/cummin: values and indices, with ties (integers, f16) and NaN as torch has them.
TEST(ConvertTopK, CummaxCumminBothOutputs) {
  auto x = torch::randint(-3, 3, {4, 9}).to(torch::kFloat);
  x[1][3] = NAN;
  x[2][0] = NAN;
  x[2][5] = NAN;
  for (const char* op : {"cummax", "cummin"}) {
    for (int dim : {0, 1, -1}) {
      const std::string ir =
          "graph(%x : Tensor):\n  %d : int = prim::Constant[value=" + std::to_string(dim) +
          "]()\n  %v : Tensor, %i : Tensor = aten::" + op + "(%x, %d)\n  return (%v, %i)";
      EXPECT_TRUE(matches_torch(ir, {x}, 0, 0)) << op << dim;
      EXPECT_TRUE(matches_torch(ir, {x.to(torch::kHalf)}, 0, 0)) << op << dim;
      EXPECT_TRUE(matches_torch(ir, {torch::randint(-2, 2, {4, 9}, torch::kLong)}, 0, 0))
          << op << dim;
    }
  }
}

TEST(ConvertTopK, LogcumsumexpWithInfinitiesAndNaN) {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=1]()
  %y : Tensor = aten::logcumsumexp(%x, %d)
  return (%y))IR";
  auto x = torch::randn({4, 8}) * 30;
  x[0][0] = -INFINITY;
  x[0][1] = -INFINITY;
  x[1][2] = INFINITY;
  x[1][4] = INFINITY;
  x[2][3] = NAN;
  x[3][5] = -INFINITY;
  EXPECT_TRUE(matches_torch(ir, {x}, 1e-6, 1e-6));
  EXPECT_TRUE(matches_torch(ir, {x.to(torch::kHalf)}, 1e-3, 1e-3));
}

TEST(ConvertTopK, ValidatorRejectsRuntimeK) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %t : Tensor):
  %n : int = aten::Int(%t)
  %d : int = prim::Constant[value=-1]()
  %b : bool = prim::Constant[value=1]()
  %v : Tensor, %i : Tensor = aten::topk(%x, %n, %d, %b, %b)
  return (%v, %i))IR");
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("graph input"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
