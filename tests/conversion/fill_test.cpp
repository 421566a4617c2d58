// Tensor-factory converters (arange, zeros, ones, full and their _like/new_ forms) against
// libtorch on the CPU backend, with torch's default dtypes.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

// Engine segments take tensors: factory graphs get an input %x they need not use.
std::string factory_ir(const std::string& consts, const std::string& call) {
  return "graph(%x : Tensor):\n  %none : NoneType = prim::Constant()\n" + consts +
         "  %y : Tensor = " + call + "\n  return (%y)";
}

TEST(ConvertFill, ArangeEveryOverloadAndDefaultDtypes) {
  const auto x = torch::zeros({1});
  const std::string ints =
      "  %a : int = prim::Constant[value=2]()\n  %b : int = prim::Constant[value=11]()\n"
      "  %s : int = prim::Constant[value=3]()\n";
  EXPECT_TRUE(
      matches_torch(factory_ir(ints, "aten::arange(%b, %none, %none, %none, %none)"), {x}, 0, 0));
  EXPECT_TRUE(matches_torch(factory_ir(ints, "aten::arange(%a, %b, %none, %none, %none, %none)"),
                            {x}, 0, 0));
  EXPECT_TRUE(matches_torch(
      factory_ir(ints, "aten::arange(%a, %b, %s, %none, %none, %none, %none)"), {x}, 0, 0));
  const std::string floats =
      "  %a : float = prim::Constant[value=-1.]()\n  %b : float = prim::Constant[value=2.]()\n"
      "  %s : float = prim::Constant[value=0.3]()\n  %d : int = prim::Constant[value=6]()\n";
  EXPECT_TRUE(matches_torch(
      factory_ir(floats, "aten::arange(%a, %b, %s, %none, %none, %none, %none)"), {x}, 1e-6, 0));
  EXPECT_TRUE(matches_torch(factory_ir(ints + "  %d : int = prim::Constant[value=6]()\n",
                                       "aten::arange(%b, %d, %none, %none, %none)"),
                            {x}, 0, 0));
  const std::string down =
      "  %a : int = prim::Constant[value=10]()\n  %b : int = prim::Constant[value=-3]()\n"
      "  %s : int = prim::Constant[value=-4]()\n";
  EXPECT_TRUE(matches_torch(
      factory_ir(down, "aten::arange(%a, %b, %s, %none, %none, %none, %none)"), {x}, 0, 0));
}

TEST(ConvertFill, ZerosOnesFull) {
  const auto x = torch::zeros({1});
  const std::string size =
      "  %c2 : int = prim::Constant[value=2]()\n  %c3 : int = prim::Constant[value=3]()\n"
      "  %sz : int[] = prim::ListConstruct(%c2, %c3)\n  %i64 : int = prim::Constant[value=4]()\n"
      "  %f : float = prim::Constant[value=1.5]()\n  %i : int = prim::Constant[value=-7]()\n";
  for (const char* call : {"aten::zeros(%sz, %none, %none, %none, %none)",
                           "aten::ones(%sz, %i64, %none, %none, %none)",
                           "aten::full(%sz, %f, %none, %none, %none, %none)",
                           "aten::full(%sz, %i, %none, %none, %none, %none)",
                           "aten::full(%sz, %f, %i64, %none, %none, %none)"}) {
    EXPECT_TRUE(matches_torch(factory_ir(size, call), {x}, 0, 0)) << call;
  }
}

TEST(ConvertFill, LikeAndNewFactories) {
  const std::string consts =
      "  %c2 : int = prim::Constant[value=2]()\n  %sz : int[] = prim::ListConstruct(%c2, %c2)\n"
      "  %f : float = prim::Constant[value=2.5]()\n  %i64 : int = prim::Constant[value=4]()\n";
  for (const auto& x : {torch::randn({3, 4}), torch::randint(0, 9, {3, 4}, torch::kInt)}) {
    for (const char* call : {"aten::zeros_like(%x, %none, %none, %none, %none, %none)",
                             "aten::ones_like(%x, %i64, %none, %none, %none, %none)",
                             "aten::full_like(%x, %f, %none, %none, %none, %none, %none)",
                             "aten::new_zeros(%x, %sz, %none, %none, %none, %none)",
                             "aten::new_ones(%x, %sz, %i64, %none, %none, %none)",
                             "aten::new_full(%x, %sz, %f, %none, %none, %none, %none)"}) {
      EXPECT_TRUE(matches_torch(factory_ir(consts, call), {x}, 0, 0)) << call;
    }
  }
}

// torch.arange(x.size(0)) and arange(1, 2 * x.size(0), 3): a range whose length the engine
// computes from shapes while it resolves them.
TEST(ConvertFill, ArangeToAnEndOnlyKnownAtRunTime) {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %none : NoneType = prim::Constant()
  %c0 : int = prim::Constant[value=0]()
  %n : int = aten::size(%x, %c0)
  %y : Tensor = aten::arange(%n, %none, %none, %none, %none)
  return (%y))IR";
  const std::string stepped = R"IR(
graph(%x : Tensor):
  %none : NoneType = prim::Constant()
  %c0 : int = prim::Constant[value=0]()
  %c1 : int = prim::Constant[value=1]()
  %c2 : int = prim::Constant[value=2]()
  %c3 : int = prim::Constant[value=3]()
  %n : int = aten::size(%x, %c0)
  %e : int = aten::mul(%c2, %n)
  %y : Tensor = aten::arange(%c1, %e, %c3, %none, %none, %none, %none)
  return (%y))IR";
  for (int64_t batch : {1, 2, 7}) {
    const at::Tensor x = torch::randn({batch, 3});
    EXPECT_TRUE(at::equal(testing::run_dynamic_batch(ir, x), torch::arange(batch))) << batch;
    EXPECT_TRUE(at::equal(testing::run_dynamic_batch(stepped, x), torch::arange(1, 2 * batch, 3)))
        << batch;
  }
}

TEST(ConvertFill, ValidatorRejectsEmptyLikeAndRuntimeSizes) {
  auto g = kiln::testing::parse(factory_ir("",
                                           "aten::empty_like(%x, %none, %none, %none, "
                                           "%none, %none)"));
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("undefined contents"), std::string::npos) << s.reason;

  auto g2 = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %none : NoneType = prim::Constant()
  %n : int = aten::Int(%x)
  %y : Tensor = aten::arange(%n, %none, %none, %none, %none)
  return (%y))IR");
  const Support s2 = default_registry().supports(g2->outputs()[0]->node());
  EXPECT_FALSE(s2.supported);
  EXPECT_NE(s2.reason.find("graph input"), std::string::npos) << s2.reason;
}

}  // namespace
}  // namespace kiln::conversion
