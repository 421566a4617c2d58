// Linear-algebra converters against libtorch: linear, matmul ranks, mm/bmm, addmm/baddbmm with
// beta/alpha, and t().
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

const char* kLinear = R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %y : Tensor = aten::linear(%x, %w, %b)
  return (%y))IR";
const char* kLinearNoBias = R"IR(
graph(%x : Tensor, %w : Tensor):
  %b : NoneType = prim::Constant()
  %y : Tensor = aten::linear(%x, %w, %b)
  return (%y))IR";

TEST(ConvertLinear, LinearWithAndWithoutBias) {
  torch::manual_seed(0);
  const auto w = torch::randn({6, 5}), b = torch::randn({6});
  for (int64_t batch : {1, 4}) {
    EXPECT_TRUE(matches_torch(kLinear, {torch::randn({batch, 5}), w, b}));
    EXPECT_TRUE(matches_torch(kLinear, {torch::randn({batch, 3, 5}), w, b}));
    EXPECT_TRUE(matches_torch(kLinearNoBias, {torch::randn({batch, 5}), w}));
  }
  EXPECT_TRUE(matches_torch(kLinear, {torch::randn({5}), w, b}));
}

std::string binary_ir(const std::string& op) {
  return "graph(%a : Tensor, %b : Tensor):\n  %y : Tensor = " + op + "(%a, %b)\n  return (%y)\n";
}

TEST(ConvertLinear, MatmulRanksAndBroadcasting) {
  torch::manual_seed(1);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{4}, {4}},
      {{3, 4}, {4}},
      {{4}, {4, 5}},
      {{3, 4}, {4, 5}},
      {{2, 3, 4}, {4}},
      {{2, 3, 4}, {4, 5}},
      {{3, 4}, {2, 4, 5}},
      {{2, 1, 3, 4}, {5, 4, 2}},
      {{1, 3, 4}, {4, 4, 2}}};
  for (const auto& [a, b] : shapes) {
    EXPECT_TRUE(matches_torch(binary_ir("aten::matmul"), {torch::randn(a), torch::randn(b)}))
        << c10::IntArrayRef(a) << " x " << c10::IntArrayRef(b);
  }
  EXPECT_TRUE(matches_torch(binary_ir("aten::mm"), {torch::randn({3, 4}), torch::randn({4, 2})}));
  for (int64_t batch : {1, 4}) {
    EXPECT_TRUE(matches_torch(binary_ir("aten::bmm"),
                              {torch::randn({batch, 3, 4}), torch::randn({batch, 4, 2})}));
  }
}

std::string addmm_ir(const std::string& op, const std::string& beta, const std::string& alpha) {
  return "graph(%s : Tensor, %a : Tensor, %b : Tensor):\n  %beta : " + beta +
         "\n  %alpha : " + alpha + "\n  %y : Tensor = " + op +
         "(%s, %a, %b, %beta, %alpha)\n  return (%y)\n";
}

TEST(ConvertLinear, AddmmBiasAndScaledForms) {
  torch::manual_seed(2);
  const std::string one = "int = prim::Constant[value=1]()";
  const auto a = torch::randn({4, 3}), b = torch::randn({3, 5});
  // The nn.Linear form (bias post-op), a [1] bias, and a full [M, N] self.
  EXPECT_TRUE(matches_torch(addmm_ir("aten::addmm", one, one), {torch::randn({5}), a, b}));
  EXPECT_TRUE(matches_torch(addmm_ir("aten::addmm", one, one), {torch::randn({1}), a, b}));
  EXPECT_TRUE(matches_torch(addmm_ir("aten::addmm", one, one), {torch::randn({4, 5}), a, b}));
  EXPECT_TRUE(matches_torch(addmm_ir("aten::addmm", "float = prim::Constant[value=0.5]()",
                                     "float = prim::Constant[value=-2.]()"),
                            {torch::randn({4, 1}), a, b}));
  // beta = 0 ignores self, NaNs included.
  EXPECT_TRUE(matches_torch(addmm_ir("aten::addmm", "int = prim::Constant[value=0]()", one),
                            {torch::full({4, 5}, NAN), a, b}));
  EXPECT_TRUE(
      matches_torch(addmm_ir("aten::baddbmm", "float = prim::Constant[value=2.]()",
                             "float = prim::Constant[value=0.25]()"),
                    {torch::randn({3, 1, 5}), torch::randn({3, 4, 2}), torch::randn({3, 2, 5})}));
  EXPECT_TRUE(matches_torch(addmm_ir("aten::baddbmm", one, one),
                            {torch::randn({5}), torch::randn({2, 4, 2}), torch::randn({2, 2, 5})}));
}

TEST(ConvertLinear, TransposeOfMatricesAndVectors) {
  const std::string ir = "graph(%x : Tensor):\n  %y : Tensor = aten::t(%x)\n  return (%y)\n";
  EXPECT_TRUE(matches_torch(ir, {torch::randn({3, 5})}));
  EXPECT_TRUE(matches_torch(ir, {torch::randn({4})}));
  EXPECT_TRUE(matches_torch(ir, {torch::randint(0, 9, {2, 3}, torch::kLong)}, 0, 0));
}

TEST(ConvertLinear, NonConstantAlphaIsRejected) {
  auto g = kiln::testing::parse(R"IR(
graph(%s : Tensor, %a : Tensor, %b : Tensor, %alpha : float):
  %one : int = prim::Constant[value=1]()
  %y : Tensor = aten::addmm(%s, %a, %b, %one, %alpha)
  return (%y))IR");
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("alpha"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
