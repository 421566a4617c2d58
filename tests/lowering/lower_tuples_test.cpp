// lower_tuples: construct/unpack pairs and inner tuples go; tuple inputs/outputs stay.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

TEST(LowerTuples, RemovesTuplesInsideTheGraph) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %y : Tensor, %c : bool):
  %zero : int = prim::Constant[value=0]()
  %p : (Tensor, Tensor) = prim::TupleConstruct(%x, %y)
  %a : Tensor, %b : Tensor = prim::TupleUnpack(%p)
  %q : (Tensor, Tensor) = prim::If(%c)
    block0():
      -> (%p)
    block1():
      %r : (Tensor, Tensor) = prim::TupleConstruct(%b, %a)
      -> (%r)
  %first : Tensor = prim::TupleIndex(%q, %zero)
  %s : Tensor = aten::mul(%first, %a)
  return (%s))IR");
  auto before = g->copy();
  EXPECT_TRUE(lower_tuples(g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: prim::Tuple", *g));
  for (bool c : {true, false}) {
    auto in = testing::random_inputs({{2}, {2}});
    in.emplace_back(c);
    EXPECT_TRUE(testing::same_values(*before, *g, in));
  }
}

TEST(LowerTuples, KeepsTupleSignature) {
  auto g = testing::parse(R"IR(
graph(%p : (Tensor, Tensor)):
  %a : Tensor, %b : Tensor = prim::TupleUnpack(%p)
  %s : Tensor = aten::mul(%a, %b)
  %r : (Tensor, Tensor) = prim::TupleConstruct(%s, %a)
  return (%r))IR");
  EXPECT_FALSE(lower_tuples(g));
  EXPECT_TRUE(testing::file_check("CHECK: prim::TupleUnpack\nCHECK: prim::TupleConstruct", *g));
  auto before = g->copy();
  auto tuple = c10::ivalue::Tuple::create({torch::randn({2}), torch::randn({2})});
  EXPECT_TRUE(testing::same_values(*before, *g, {tuple}));
}

}  // namespace
}  // namespace kiln::lowering
