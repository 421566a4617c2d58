// Padding converters (constant_pad_nd, pad with modes, reflection/replication pads) against
// libtorch on the CPU backend.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

// `pads` as int constants %p0.. and a list %pads.
std::string pad_list(const std::vector<int>& pads) {
  std::string s, names;
  for (size_t i = 0; i < pads.size(); ++i) {
    s += "  %p" + std::to_string(i) + " : int = prim::Constant[value=" + std::to_string(pads[i]) +
         "]()\n";
    names += (i ? ", %p" : "%p") + std::to_string(i);
  }
  return s + "  %pads : int[] = prim::ListConstruct(" + names + ")\n";
}

TEST(ConvertPad, ConstantPadLastDimsFirst) {
  const auto x = torch::randn({2, 3, 4, 5});
  for (const auto& pads :
       std::vector<std::vector<int>>{{1, 2}, {0, 1, 2, 0}, {1, 1, 1, 1, 1, 1}, {-1, 2, 1, -2}}) {
    const std::string ir = "graph(%x : Tensor):\n" + pad_list(pads) +
                           "  %v : float = prim::Constant[value=1.5]()\n"
                           "  %y : Tensor = aten::constant_pad_nd(%x, %pads, %v)\n  return (%y)";
    EXPECT_TRUE(matches_torch(ir, {x}, 0, 0)) << pads.size();
  }
  const std::string ints = "graph(%x : Tensor):\n" + pad_list({2, 1}) +
                           "  %v : int = prim::Constant[value=-4]()\n"
                           "  %y : Tensor = aten::constant_pad_nd(%x, %pads, %v)\n  return (%y)";
  EXPECT_TRUE(matches_torch(ints, {torch::randint(0, 9, {3, 3}, torch::kLong)}, 0, 0));
}

TEST(ConvertPad, PadWithModes) {
  const auto x = torch::randn({2, 3, 5, 6});
  for (const char* mode : {"constant", "reflect", "replicate"}) {
    // Non-constant modes pad exactly the dims after the first two.
    for (const auto& [pads, input] :
         std::vector<std::pair<std::vector<int>, at::Tensor>>{{{1, 2}, x[0]}, {{2, 1, 0, 3}, x}}) {
      const std::string ir = "graph(%x : Tensor):\n" + pad_list(pads) +
                             "  %m : str = prim::Constant[value=\"" + mode +
                             "\"]()\n  %none : NoneType = prim::Constant()\n"
                             "  %y : Tensor = aten::pad(%x, %pads, %m, %none)\n  return (%y)";
      EXPECT_TRUE(matches_torch(ir, {input}, 0, 0)) << mode << " " << pads.size();
    }
  }
  const std::string valued = "graph(%x : Tensor):\n" + pad_list({1, 1}) +
                             "  %m : str = prim::Constant[value=\"constant\"]()\n"
                             "  %v : float = prim::Constant[value=-3.]()\n"
                             "  %y : Tensor = aten::pad(%x, %pads, %m, %v)\n  return (%y)";
  EXPECT_TRUE(matches_torch(valued, {x}, 0, 0));
}

TEST(ConvertPad, ReflectionAndReplicationOps) {
  const auto x1 = torch::randn({2, 3, 7}), x2 = torch::randn({2, 3, 5, 6});
  EXPECT_TRUE(matches_torch("graph(%x : Tensor):\n" + pad_list({3, 2}) +
                                "  %y : Tensor = aten::reflection_pad1d(%x, %pads)\n  return (%y)",
                            {x1}, 0, 0));
  EXPECT_TRUE(matches_torch("graph(%x : Tensor):\n" + pad_list({1, 2, 3, 4}) +
                                "  %y : Tensor = aten::reflection_pad2d(%x, %pads)\n  return (%y)",
                            {x2}, 0, 0));
  EXPECT_TRUE(matches_torch("graph(%x : Tensor):\n" + pad_list({4, 0}) +
                                "  %y : Tensor = aten::replication_pad1d(%x, %pads)\n  return (%y)",
                            {x1}, 0, 0));
  EXPECT_TRUE(matches_torch("graph(%x : Tensor):\n" + pad_list({2, 2, 0, 1}) +
                                "  %y : Tensor = aten::replication_pad2d(%x, %pads)\n  return (%y)",
                            {x2}, 0, 0));
}

TEST(ConvertPad, ValidatorRejectsCircularMode) {
  auto g = kiln::testing::parse("graph(%x : Tensor):\n" + pad_list({1, 1}) +
                                "  %m : str = prim::Constant[value=\"circular\"]()\n"
                                "  %none : NoneType = prim::Constant()\n"
                                "  %y : Tensor = aten::pad(%x, %pads, %m, %none)\n  return (%y)");
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("circular"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
