// Concat-family converters (cat, stack, split, chunk, unbind with their list consumers) against
// libtorch on the CPU backend.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

TEST(ConvertConcat, CatAndStackOnEveryDim) {
  const auto a = torch::randn({2, 3, 4}), b = torch::randn({2, 3, 4});
  for (int d : {0, 1, 2, -1, -3}) {
    for (const char* op : {"aten::cat", "aten::stack"}) {
      const std::string ir = R"IR(
graph(%a : Tensor, %b : Tensor):
  %d : int = prim::Constant[value=)IR" +
                             std::to_string(d) +
                             R"IR(]()
  %l : Tensor[] = prim::ListConstruct(%a, %b, %a)
  %y : Tensor = )IR" + op + "(%l, %d)\n  return (%y)";
      EXPECT_TRUE(matches_torch(ir, {a, b}, 0, 0)) << op << " " << d;
    }
  }
  const std::string stack_last = R"IR(
graph(%a : Tensor, %b : Tensor):
  %d : int = prim::Constant[value=3]()
  %l : Tensor[] = prim::ListConstruct(%a, %b)
  %y : Tensor = aten::stack(%l, %d)
  return (%y))IR";
  EXPECT_TRUE(matches_torch(stack_last, {a, b}, 0, 0));
}

TEST(ConvertConcat, CatPromotesAndKeepsInt64) {
  const std::string ir = R"IR(
graph(%a : Tensor, %b : Tensor):
  %d : int = prim::Constant[value=1]()
  %l : Tensor[] = prim::ListConstruct(%a, %b)
  %y : Tensor = aten::cat(%l, %d)
  return (%y))IR";
  const auto big = torch::tensor({{int64_t{1} << 60}, {int64_t{-3}}});
  EXPECT_TRUE(matches_torch(ir, {big, torch::randint(0, 5, {2, 3}, torch::kLong)}, 0, 0));
  EXPECT_TRUE(
      matches_torch(ir, {torch::randn({2, 2}), torch::randint(0, 5, {2, 3}, torch::kInt)}, 0, 0));
}

// Splits unpacked by prim::ListUnpack, indexed by __getitem__ and re-concatenated.
TEST(ConvertConcat, SplitChunkUnbindIntoTheirConsumers) {
  const auto x = torch::randn({4, 7, 3});
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %c3 : int = prim::Constant[value=3]()
  %c1 : int = prim::Constant[value=1]()
  %l : Tensor[] = aten::split(%x, %c3, %c1)
  %p : Tensor, %q : Tensor, %r : Tensor = prim::ListUnpack(%l)
  return (%p, %q, %r))IR",
                            {x}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %c2 : int = prim::Constant[value=2]()
  %c4 : int = prim::Constant[value=4]()
  %c1 : int = prim::Constant[value=1]()
  %m1 : int = prim::Constant[value=-2]()
  %s : int[] = prim::ListConstruct(%c1, %c2, %c4)
  %l : Tensor[] = aten::split_with_sizes(%x, %s, %m1)
  %p : Tensor, %q : Tensor, %r : Tensor = prim::ListUnpack(%l)
  %l2 : Tensor[] = aten::split(%x, %s, %c1)
  %z : Tensor = aten::__getitem__(%l2, %m1)
  return (%p, %q, %r, %z))IR",
                            {x}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %c3 : int = prim::Constant[value=3]()
  %c1 : int = prim::Constant[value=1]()
  %l : Tensor[] = aten::chunk(%x, %c3, %c1)
  %p : Tensor, %q : Tensor, %r : Tensor = prim::ListUnpack(%l)
  %y : Tensor = aten::cat(%l, %c1)
  return (%p, %q, %r, %y))IR",
                            {x}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %c0 : int = prim::Constant[value=0]()
  %m1 : int = prim::Constant[value=-1]()
  %l : Tensor[] = aten::unbind(%x, %m1)
  %p : Tensor, %q : Tensor, %r : Tensor = prim::ListUnpack(%l)
  %y : Tensor = aten::stack(%l, %c0)
  return (%p, %q, %r, %y))IR",
                            {x}, 0, 0));
}

// tensor_split by sections (uneven: the first ones longer) and by indices (clamped, one past the
// end, repeated), and vsplit/hsplit/dsplit with their implied dims.
TEST(ConvertConcat, TensorSplitAndDirectionalSplits) {
  const auto x = torch::randn({6, 7, 4});
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %c3 : int = prim::Constant[value=3]()
  %c1 : int = prim::Constant[value=1]()
  %idx : int[] = prim::Constant[value=[2, -2, 9, 9]]()
  %l : Tensor[] = aten::tensor_split(%x, %c3, %c1)
  %p : Tensor, %q : Tensor, %r : Tensor = prim::ListUnpack(%l)
  %l2 : Tensor[] = aten::tensor_split(%x, %idx, %c1)
  %a : Tensor, %b : Tensor, %c : Tensor, %d : Tensor, %e : Tensor = prim::ListUnpack(%l2)
  return (%p, %q, %r, %a, %b, %c, %d, %e))IR",
                            {x}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %v : Tensor):
  %c2 : int = prim::Constant[value=2]()
  %idx : int[] = prim::Constant[value=[1, 3]]()
  %l : Tensor[] = aten::vsplit(%x, %c2)
  %p : Tensor, %q : Tensor = prim::ListUnpack(%l)
  %l2 : Tensor[] = aten::hsplit(%x, %idx)
  %a : Tensor, %b : Tensor, %c : Tensor = prim::ListUnpack(%l2)
  %l3 : Tensor[] = aten::dsplit(%x, %c2)
  %m1 : int = prim::Constant[value=-1]()
  %d : Tensor = aten::__getitem__(%l3, %m1)
  %l4 : Tensor[] = aten::hsplit(%v, %c2)
  %e : Tensor, %f : Tensor = prim::ListUnpack(%l4)
  return (%p, %q, %a, %b, %c, %d, %e, %f))IR",
                            {x, torch::randn({6})}, 0, 0));
}

TEST(ConvertConcat, StaticListUnpackStillEvaluates) {
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %s : int[] = aten::size(%x)
  %a : int, %b : int = prim::ListUnpack(%s)
  %l : int[] = prim::ListConstruct(%b, %a)
  %y : Tensor = aten::reshape(%x, %l)
  return (%y))IR",
                            {torch::randn({2, 3})}, 0, 0));
}

TEST(ConvertConcat, ValidatorRejectsRuntimeSplitSizesAndUnknownLists) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %t : Tensor):
  %c1 : int = prim::Constant[value=1]()
  %n : int = aten::Int(%t)
  %l : Tensor[] = aten::split(%x, %n, %c1)
  %p : Tensor, %q : Tensor = prim::ListUnpack(%l)
  return (%p, %q))IR");
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("known at compile time"), std::string::npos) << s.reason;

  auto g2 = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %l : Tensor[] = aten::where(%x)
  %p : Tensor = prim::ListUnpack(%l)
  return (%p))IR");
  const Support s2 = default_registry().supports(g2->outputs()[0]->node());
  EXPECT_FALSE(s2.supported);
  EXPECT_NE(s2.reason.find("no converter"), std::string::npos) << s2.reason;
}

}  // namespace
}  // namespace kiln::conversion
