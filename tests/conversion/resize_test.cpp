// Upsampling converters (nearest, linear, bilinear, trilinear, bicubic; sizes or scales;
// align_corners) against libtorch on the CPU backend.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

std::string ints(const std::string& name, const std::vector<int>& v) {
  std::string s, names;
  for (size_t i = 0; i < v.size(); ++i) {
    s += "  %" + name + std::to_string(i) +
         " : int = prim::Constant[value=" + std::to_string(v[i]) + "]()\n";
    names += (i ? ", %" : "%") + name + std::to_string(i);
  }
  return s + "  %" + name + " : int[] = prim::ListConstruct(" + names + ")\n";
}

std::string floats(const std::string& name, const std::vector<double>& v) {
  std::string s, names;
  for (size_t i = 0; i < v.size(); ++i) {
    s += "  %" + name + std::to_string(i) +
         " : float = prim::Constant[value=" + std::to_string(v[i]) + "]()\n";
    names += (i ? ", %" : "%") + name + std::to_string(i);
  }
  return s + "  %" + name + " : float[] = prim::ListConstruct(" + names + ")\n";
}

const char* kHead =
    "graph(%x : Tensor):\n  %none : NoneType = prim::Constant()\n"
    "  %t : bool = prim::Constant[value=1]()\n"
    "  %f : bool = prim::Constant[value=0]()\n";

TEST(ConvertResize, NearestVecBySizeAndScale) {
  const auto x1 = torch::randn({2, 3, 5}), x2 = torch::randn({1, 2, 4, 5}),
             x3 = torch::randn({1, 2, 3, 4, 2});
  const std::vector<std::tuple<const char*, at::Tensor, std::vector<int>, std::vector<double>>>
      cases = {{"aten::upsample_nearest1d", x1, {9}, {2.0}},
               {"aten::upsample_nearest2d", x2, {7, 3}, {2.0, 1.5}},
               {"aten::upsample_nearest3d", x3, {4, 5, 6}, {2.0, 0.5, 3.0}}};
  for (const auto& [op, x, size, scales] : cases) {
    EXPECT_TRUE(matches_torch(std::string(kHead) + ints("s", size) + "  %y : Tensor = " + op +
                                  "(%x, %s, %none)\n  return (%y)",
                              {x}, 0, 0))
        << op << " size";
    EXPECT_TRUE(matches_torch(std::string(kHead) + floats("s", scales) + "  %y : Tensor = " + op +
                                  "(%x, %none, %s)\n  return (%y)",
                              {x}, 0, 0))
        << op << " scales";
  }
}

TEST(ConvertResize, LinearFamiliesWithAlignCorners) {
  const auto x1 = torch::randn({2, 3, 5}), x2 = torch::randn({1, 2, 4, 5}),
             x3 = torch::randn({1, 2, 3, 4, 2});
  const std::vector<std::tuple<const char*, at::Tensor, std::vector<int>, std::vector<double>>>
      cases = {{"aten::upsample_linear1d", x1, {9}, {2.5}},
               {"aten::upsample_bilinear2d", x2, {7, 3}, {2.0, 1.5}},
               {"aten::upsample_trilinear3d", x3, {4, 5, 6}, {2.0, 0.5, 3.0}},
               {"aten::upsample_bicubic2d", x2, {9, 11}, {2.0, 1.7}}};
  for (const auto& [op, x, size, scales] : cases) {
    for (const char* align : {"%t", "%f"}) {
      EXPECT_TRUE(matches_torch(std::string(kHead) + ints("s", size) + "  %y : Tensor = " + op +
                                    "(%x, %s, " + align + ", %none)\n  return (%y)",
                                {x}, 1e-5, 1e-5))
          << op << " size " << align;
      EXPECT_TRUE(matches_torch(std::string(kHead) + floats("s", scales) + "  %y : Tensor = " + op +
                                    "(%x, %none, " + align + ", %s)\n  return (%y)",
                                {x}, 1e-5, 1e-5))
          << op << " scales " << align;
    }
  }
}

TEST(ConvertResize, PerDimScaleOverloads) {
  const auto x = torch::randn({1, 2, 4, 5});
  EXPECT_TRUE(matches_torch(std::string(kHead) + ints("s", {8, 10}) +
                                "  %h : float = prim::Constant[value=2.]()\n"
                                "  %y : Tensor = aten::upsample_nearest2d(%x, %s, %h, %none)\n"
                                "  return (%y)",
                            {x}, 0, 0));
  EXPECT_TRUE(matches_torch(
      std::string(kHead) + ints("s", {6, 7}) +
          "  %y : Tensor = aten::upsample_bilinear2d(%x, %s, %f, %none, %none)\n  return (%y)",
      {x}, 1e-5, 1e-5));
  EXPECT_TRUE(matches_torch(std::string(kHead) + ints("s", {10, 12}) +
                                "  %h : float = prim::Constant[value=2.5]()\n"
                                "  %w : float = prim::Constant[value=2.5]()\n"
                                "  %y : Tensor = aten::upsample_bilinear2d(%x, %s, %f, %h, %w)\n"
                                "  return (%y)",
                            {x}, 1e-5, 1e-5));
}

TEST(ConvertResize, ValidatorRejectsRuntimeSizes) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %t : Tensor):
  %none : NoneType = prim::Constant()
  %n : int = aten::Int(%t)
  %s : int[] = prim::ListConstruct(%n, %n)
  %y : Tensor = aten::upsample_nearest2d(%x, %s, %none)
  return (%y))IR");
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("graph input"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
