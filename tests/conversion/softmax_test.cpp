// Softmax converters against libtorch: dims (negative too), dtype arguments, underscore forms.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

std::string softmax_ir(const std::string& op, int64_t dim, const std::string& third) {
  return "graph(%x : Tensor):\n  %dim : int = prim::Constant[value=" + std::to_string(dim) +
         "]()\n  %third : " + third + "\n  %y : Tensor = " + op +
         "(%x, %dim, %third)\n  return (%y)\n";
}

const char* kNone = "NoneType = prim::Constant()";

TEST(ConvertSoftmax, SoftmaxAndLogSoftmaxOverEveryDim) {
  torch::manual_seed(0);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 3, 7}) * 5;
    for (int64_t dim : {0, 1, 2, -1, -2}) {
      EXPECT_TRUE(matches_torch(softmax_ir("aten::softmax", dim, kNone), {x})) << dim;
      EXPECT_TRUE(matches_torch(softmax_ir("aten::log_softmax", dim, kNone), {x})) << dim;
    }
  }
}

TEST(ConvertSoftmax, DtypeArgumentCastsFirst) {
  torch::manual_seed(1);
  // dtype=float (6) on int64 and half inputs.
  const std::string to_float = "int = prim::Constant[value=6]()";
  EXPECT_TRUE(matches_torch(softmax_ir("aten::softmax", -1, to_float),
                            {torch::randint(-3, 3, {2, 5}, torch::kLong)}));
  EXPECT_TRUE(matches_torch(softmax_ir("aten::log_softmax", 1, to_float),
                            {torch::randn({2, 5}).to(torch::kHalf)}));
}

TEST(ConvertSoftmax, UnderscoreForms) {
  torch::manual_seed(2);
  const std::string no_half = "bool = prim::Constant[value=0]()";
  const auto x = torch::randn({4, 6});
  EXPECT_TRUE(matches_torch(softmax_ir("aten::_softmax", 1, no_half), {x}));
  EXPECT_TRUE(matches_torch(softmax_ir("aten::_log_softmax", -1, no_half), {x}));
}

TEST(ConvertSoftmax, NonConstantDimIsRejected) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %d : int):
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::softmax(%x, %d, %none)
  return (%y))IR");
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("dim"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
