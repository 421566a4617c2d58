// Linear-algebra converters against libtorch: linear, matmul ranks, mm/bmm, addmm/baddbmm with
// beta/alpha, and t(); integer products bit for bit, and the dtype mixes torch refuses.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;
using testing::run_converted;

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

// The converted engine's outputs equal torch's element for element (dtype and shape too).
::testing::AssertionResult equals_torch(const std::string& ir,
                                        const std::vector<at::Tensor>& inputs) {
  auto graph = kiln::testing::parse(ir);
  const auto expected = kiln::testing::run_graph(
      *graph, std::vector<torch::jit::IValue>(inputs.begin(), inputs.end()));
  const auto actual = run_converted(ir, inputs);
  for (size_t i = 0; i < actual.size(); ++i) {
    const at::Tensor& want = expected.at(i).toTensor();
    if (actual[i].scalar_type() != want.scalar_type() || !at::equal(actual[i], want)) {
      return ::testing::AssertionFailure()
             << "output " << i << ": got " << actual[i] << ", torch gives " << want;
    }
  }
  return ::testing::AssertionSuccess();
}

// Values spread over the dtype's range: nearly every product and sum wraps around.
at::Tensor wide_integers(std::vector<int64_t> shape, at::ScalarType t) {
  const int64_t limit = t == at::kLong ? int64_t{1} << 62 : int64_t{1} << 30;
  return torch::randint(-limit, limit, shape, torch::TensorOptions().dtype(t));
}

TEST(ConvertLinear, IntegerProductsWrapAroundAsTorchs) {
  torch::manual_seed(3);
  const std::string one = "int = prim::Constant[value=1]()";
  for (at::ScalarType t : {at::kLong, at::kInt}) {
    auto ints = [&](std::vector<int64_t> shape) { return wide_integers(std::move(shape), t); };
    SCOPED_TRACE(c10::toString(t));
    const auto w = ints({6, 5}), b = ints({6});
    EXPECT_TRUE(equals_torch(kLinear, {ints({2, 3, 5}), w, b}));
    EXPECT_TRUE(equals_torch(kLinearNoBias, {ints({4, 5}), w}));
    EXPECT_TRUE(equals_torch(binary_ir("aten::matmul"), {ints({2, 1, 3, 4}), ints({5, 4, 2})}));
    EXPECT_TRUE(equals_torch(binary_ir("aten::matmul"), {ints({4}), ints({4})}));
    EXPECT_TRUE(equals_torch(binary_ir("aten::mm"), {ints({3, 4}), ints({4, 2})}));
    EXPECT_TRUE(equals_torch(binary_ir("aten::bmm"), {ints({2, 3, 4}), ints({2, 4, 5})}));
    const auto a = ints({4, 3}), m = ints({3, 5});
    EXPECT_TRUE(equals_torch(addmm_ir("aten::addmm", one, one), {ints({5}), a, m}));
    EXPECT_TRUE(equals_torch(addmm_ir("aten::addmm", "int = prim::Constant[value=2]()",
                                      "int = prim::Constant[value=-3]()"),
                             {ints({4, 1}), a, m}));
    // torch truncates a float beta or alpha to the integers' type: alpha 0.5 is 0, beta 1.5 is 1.
    EXPECT_TRUE(equals_torch(addmm_ir("aten::addmm", "float = prim::Constant[value=1.5]()",
                                      "float = prim::Constant[value=0.5]()"),
                             {ints({4, 5}), a, m}));
    EXPECT_TRUE(equals_torch(addmm_ir("aten::baddbmm", one, "int = prim::Constant[value=2]()"),
                             {ints({3, 1, 5}), ints({3, 4, 2}), ints({3, 2, 5})}));
  }
}

// torch multiplies tensors of one dtype: a float x integer or i64 x i32 product, or an addmm whose
// self differs, is an error there and stays one here (the converter refuses it, naming why).
TEST(ConvertLinear, IntegerMixesAreRefused) {
  const auto l = torch::ones({3, 3}, torch::kLong);
  const std::vector<std::pair<std::string, std::vector<at::Tensor>>> mixes = {
      {binary_ir("aten::mm"), {torch::ones({3, 3}), l}},
      {binary_ir("aten::matmul"), {l, torch::ones({3, 3})}},
      {binary_ir("aten::mm"), {l, torch::ones({3, 3}, torch::kInt)}},
      {addmm_ir("aten::addmm", "int = prim::Constant[value=1]()",
                "int = prim::Constant[value=1]()"),
       {torch::ones({3}), l, l}}};
  for (const auto& [ir, inputs] : mixes) {
    try {
      run_converted(ir, inputs);
      ADD_FAILURE() << "converted: " << ir;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("torch multiplies one dtype"), std::string::npos)
          << e.what();
    }
  }
  try {
    run_converted(binary_ir("aten::mm"),
                  {torch::ones({2, 2}, torch::kByte), torch::ones({2, 2}, torch::kByte)});
    ADD_FAILURE() << "converted a u8 product";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("u8 operand"), std::string::npos) << e.what();
  }
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
