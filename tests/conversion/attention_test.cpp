// scaled_dot_product_attention against libtorch: masks (bool, float), causal, explicit scale,
// batch shapes.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

// Every argument explicit, as the IR reader needs; `scale` "" means None.
std::string sdpa_ir(bool mask, bool causal, const std::string& scale = "") {
  std::string s = std::string("graph(%q : Tensor, %k : Tensor, %v : Tensor") +
                  (mask ? ", %m : Tensor" : "") +
                  "):\n  %none : NoneType = prim::Constant()\n"
                  "  %drop : float = prim::Constant[value=0.]()\n"
                  "  %causal : bool = prim::Constant[value=" +
                  (causal ? "1" : "0") + "]()\n  %gqa : bool = prim::Constant[value=0]()\n";
  if (!scale.empty()) s += "  %scale : float = prim::Constant[value=" + scale + "]()\n";
  s += std::string("  %y : Tensor = aten::scaled_dot_product_attention(%q, %k, %v, ") +
       (mask ? "%m" : "%none") + ", %drop, %causal";
  s += scale.empty() ? ", %none" : ", %scale";
  return s + ", %gqa)\n  return (%y)\n";
}

TEST(ConvertAttention, PlainAndCausal) {
  torch::manual_seed(0);
  for (int64_t batch : {1, 4}) {
    const auto q = torch::randn({batch, 2, 5, 8}), k = torch::randn({batch, 2, 7, 8}),
               v = torch::randn({batch, 2, 7, 6});
    EXPECT_TRUE(matches_torch(sdpa_ir(false, false), {q, k, v}));
    EXPECT_TRUE(matches_torch(sdpa_ir(false, true), {q, k, v}));
  }
  // Rank 3 and broadcast batch dims.
  EXPECT_TRUE(
      matches_torch(sdpa_ir(false, false),
                    {torch::randn({3, 4, 8}), torch::randn({3, 6, 8}), torch::randn({3, 6, 8})}));
}

TEST(ConvertAttention, BoolAndFloatMasks) {
  torch::manual_seed(1);
  const auto q = torch::randn({2, 2, 5, 8}), k = torch::randn({2, 2, 7, 8}),
             v = torch::randn({2, 2, 7, 8});
  auto keep = torch::rand({2, 1, 5, 7}) > 0.3;
  keep.select(3, 0).fill_(true);  // no fully masked rows: torch's result there differs by version
  EXPECT_TRUE(matches_torch(sdpa_ir(true, false), {q, k, v, keep}));
  EXPECT_TRUE(matches_torch(sdpa_ir(true, false), {q, k, v, torch::randn({5, 7})}));
}

TEST(ConvertAttention, ExplicitScale) {
  torch::manual_seed(2);
  EXPECT_TRUE(matches_torch(
      sdpa_ir(false, false, "0.3"),
      {torch::randn({2, 3, 4, 8}), torch::randn({2, 3, 4, 8}), torch::randn({2, 3, 4, 8})}));
}

TEST(ConvertAttention, DropoutIsRejected) {
  std::string ir = sdpa_ir(false, false);
  ir.replace(ir.find("value=0.]"), 9, "value=0.1]");
  auto g = kiln::testing::parse(ir);
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("dropout_p"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
