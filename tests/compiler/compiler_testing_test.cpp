// The whole-model comparison of the compiler tests: PyTorch's fp32 answer first, then the fp64
// answer weighs an answer that differs from it by more than the issue's tolerance.
#include <gtest/gtest.h>

#include "compiler/compiler_testing.h"

namespace kiln {
namespace {

at::Tensor values(std::vector<double> v) {
  return at::tensor(v, at::TensorOptions().dtype(at::kDouble));
}

// Off PyTorch's fp32 answer by 6e-4 (past 1e-4 * 2 + 1e-5), but no further from the exact one
// than it: accepted; twice as far and a bit: refused; within 2x of PyTorch but past 1e-3 *
// max|exact|: refused; tuples compared element by element, of equal sizes only.
TEST(CompilerTesting, AnswersAreWeighedAgainstTheExactOne) {
  const at::Tensor exact = values({1.0, -2.0});
  const at::Tensor torch32 = exact + 3e-4;
  EXPECT_FALSE(testing::matches_reference(exact - 3e-4, torch32));
  EXPECT_TRUE(testing::closer_to_exact(exact - 3e-4, torch32, exact));
  EXPECT_TRUE(testing::closer_to_exact(exact - 6e-4, torch32, exact));
  const auto far = testing::closer_to_exact(exact - 7e-4, torch32, exact);
  EXPECT_FALSE(far);
  EXPECT_NE(std::string(far.message()).find("max error against fp64"), std::string::npos)
      << far.message();
  EXPECT_FALSE(testing::closer_to_exact(exact + 2.5e-3, exact - 2e-3, exact));
  const auto tuple = [](const at::Tensor& a, const at::Tensor& b) {
    return torch::jit::IValue(c10::ivalue::Tuple::create({a, b}));
  };
  EXPECT_TRUE(testing::closer_to_exact(tuple(exact - 3e-4, exact), tuple(torch32, exact),
                                       tuple(exact, exact)));
  EXPECT_FALSE(testing::closer_to_exact(tuple(exact - 3e-4, exact + 1e-3), tuple(torch32, exact),
                                        tuple(exact, exact)));
  EXPECT_FALSE(testing::closer_to_exact(torch::jit::IValue(c10::ivalue::Tuple::create({exact})),
                                        tuple(torch32, exact), tuple(exact, exact)));
}

// On a module: its own answer passes, a wrong one fails with both measures in the message, and a
// module that cannot run in fp64 is held to the plain tolerance, which says so.
TEST(CompilerTesting, ModelAnswersFallBackToTheExactModule) {
  torch::jit::Module m("m");
  m.register_parameter("w", at::randn({16, 16}) * 0.25, false);
  m.define(R"(
    def forward(self, x):
        y = x
        for _ in range(8):
            y = torch.tanh(torch.matmul(y, self.w))
        return y
  )");
  const at::Tensor x = at::randn({4, 16});
  const at::Tensor answer = m.forward({x}).toTensor();
  EXPECT_TRUE(testing::matches_model_reference(answer, m, {x}));
  const auto wrong = testing::matches_model_reference(answer + 0.01, m, {x});
  EXPECT_FALSE(wrong);
  EXPECT_NE(std::string(wrong.message()).find("against PyTorch's fp32 answer"), std::string::npos)
      << wrong.message();

  torch::jit::Module f32("f32");
  f32.register_parameter("w", at::randn({16, 16}), false);
  f32.define(R"(
    def forward(self, x):
        return torch.matmul(x, self.w.float())
  )");
  const auto no_fp64 = testing::matches_model_reference(x, f32, {x});
  EXPECT_FALSE(no_fp64);
  EXPECT_NE(std::string(no_fp64.message()).find("no fp64 answer"), std::string::npos)
      << no_fp64.message();
}

}  // namespace
}  // namespace kiln
