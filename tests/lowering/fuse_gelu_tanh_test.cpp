// fuse_gelu_tanh: the tanh GELU written out (GPT-2's gelu_new, constants as 0-d tensors or
// numbers, operands in either order) becomes aten::gelu(x, "tanh") with the same values; other
// constants or another x stay as they are.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

// As transformers traces it: 0-d tensor constants, x * 0.5 first.
const char* kGeluNew = R"IR(
graph(%x : Tensor, %half : Tensor, %k : Tensor, %s : Tensor, %one_t : Tensor):
  %one : int = prim::Constant[value=1]()
  %three : float = prim::Constant[value=3.]()
  %a : Tensor = aten::mul(%x, %half)
  %p : Tensor = aten::pow(%x, %three)
  %b : Tensor = aten::mul(%p, %k)
  %c : Tensor = aten::add(%x, %b, %one)
  %d : Tensor = aten::mul(%c, %s)
  %t : Tensor = aten::tanh(%d)
  %e : Tensor = aten::add(%t, %one_t, %one)
  %y : Tensor = aten::mul(%a, %e)
  return (%y))IR";

TEST(FuseGeluTanh, GeluNewBecomesOneOp) {
  // The constants are graph inputs here (the IR parser takes no tensor constants); they become
  // constants by substitution, as freezing makes them.
  auto g = testing::parse(kGeluNew);
  const double s = std::sqrt(2.0 / M_PI);
  const std::vector<double> values = {0.5, 0.044715, s, 1.0};
  for (size_t i = 0; i < values.size(); ++i) {
    torch::jit::WithInsertPoint guard(g->block()->nodes().front());
    g->inputs()[i + 1]->replaceAllUsesWith(
        g->insertConstant(torch::tensor(values[i], torch::kDouble)));
  }
  for (size_t i = values.size(); i > 0; --i) g->eraseInput(i);
  auto before = g->copy();
  EXPECT_TRUE(fuse_gelu_tanh(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::gelu\nCHECK-NOT: aten::tanh", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({4, 64}) * 3}, 1e-6, 1e-6));
}

// Scalar constants, the factors and every commutative operand the other way round.
TEST(FuseGeluTanh, EitherOperandOrderAndScalarConstants) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %one_f : float = prim::Constant[value=1.]()
  %three : int = prim::Constant[value=3]()
  %half : float = prim::Constant[value=0.5]()
  %k : float = prim::Constant[value=0.044715]()
  %s : float = prim::Constant[value=0.79788456080286541]()
  %p : Tensor = aten::pow(%x, %three)
  %b : Tensor = aten::mul(%p, %k)
  %c : Tensor = aten::add(%b, %x, %one)
  %d : Tensor = aten::mul(%c, %s)
  %t : Tensor = aten::tanh(%d)
  %e : Tensor = aten::add(%t, %one_f, %one)
  %a : Tensor = aten::mul(%x, %half)
  %y : Tensor = aten::mul(%e, %a)
  return (%y))IR");
  auto before = g->copy();
  EXPECT_TRUE(fuse_gelu_tanh(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::gelu", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({3, 5}) * 3}, 1e-6, 1e-6));
}

// gelu_new with scalar constants, its cubic coefficient `k` and the tensor `half_of` whose half
// multiplies the tanh factor given.
std::string gelu_new_with(const std::string& k, const std::string& half_of) {
  return R"IR(
graph(%x : Tensor, %z : Tensor):
  %one : int = prim::Constant[value=1]()
  %three : int = prim::Constant[value=3]()
  %half : float = prim::Constant[value=0.5]()
  %k : float = prim::Constant[value=)IR" +
         k + R"IR(]()
  %s : float = prim::Constant[value=0.79788456080286541]()
  %p : Tensor = aten::pow(%x, %three)
  %b : Tensor = aten::mul(%p, %k)
  %c : Tensor = aten::add(%x, %b, %one)
  %d : Tensor = aten::mul(%c, %s)
  %t : Tensor = aten::tanh(%d)
  %e : Tensor = aten::add(%t, %one, %one)
  %a : Tensor = aten::mul()IR" +
         half_of + R"IR(, %half)
  %y : Tensor = aten::mul(%a, %e)
  return (%y))IR";
}

TEST(FuseGeluTanh, KeepsOtherConstantsAndOtherInputs) {
  auto same = testing::parse(gelu_new_with("0.044715", "%x"));
  EXPECT_TRUE(fuse_gelu_tanh(same));  // the template itself is gelu_new
  // 0.05 instead of 0.044715.
  auto other_constant = testing::parse(gelu_new_with("0.05", "%x"));
  EXPECT_FALSE(fuse_gelu_tanh(other_constant));
  // The half taken of another tensor than the one in the tanh.
  auto other_input = testing::parse(gelu_new_with("0.044715", "%z"));
  EXPECT_FALSE(fuse_gelu_tanh(other_input));
}

}  // namespace
}  // namespace kiln::lowering
