// scaled_dot_product_attention against libtorch 2.x: masks (bool, float), causal, explicit scale,
// batch shapes; skipped where the operator does not exist (libtorch 1.13).
#include <torch/csrc/jit/runtime/operator.h>

#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

// The operator's argument count: 6 (2.0), 7 (scale, 2.1+) or 8 (enable_gqa, 2.5+); 0 if absent.
size_t sdpa_arity() {
  const auto ops = torch::jit::getAllOperatorsFor(
      c10::Symbol::fromQualString("aten::scaled_dot_product_attention"));
  return ops.empty() ? 0 : ops.front()->schema().arguments().size();
}

// Every argument explicit, as the IR reader needs; `scale` "" means None.
std::string sdpa_ir(bool mask, bool causal, const std::string& scale = "") {
  const size_t arity = sdpa_arity();
  std::string s = std::string("graph(%q : Tensor, %k : Tensor, %v : Tensor") +
                  (mask ? ", %m : Tensor" : "") +
                  "):\n  %none : NoneType = prim::Constant()\n"
                  "  %drop : float = prim::Constant[value=0.]()\n"
                  "  %causal : bool = prim::Constant[value=" +
                  (causal ? "1" : "0") + "]()\n  %gqa : bool = prim::Constant[value=0]()\n";
  if (!scale.empty()) s += "  %scale : float = prim::Constant[value=" + scale + "]()\n";
  s += std::string("  %y : Tensor = aten::scaled_dot_product_attention(%q, %k, %v, ") +
       (mask ? "%m" : "%none") + ", %drop, %causal";
  if (arity >= 7) s += scale.empty() ? ", %none" : ", %scale";
  if (arity >= 8) s += ", %gqa";
  return s + ")\n  return (%y)\n";
}

#define REQUIRE_SDPA()                                                                    \
  if (sdpa_arity() == 0) {                                                                \
    GTEST_SKIP() << "aten::scaled_dot_product_attention does not exist before torch 2.0"; \
  }

TEST(ConvertAttention, PlainAndCausal) {
  REQUIRE_SDPA();
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
  REQUIRE_SDPA();
  torch::manual_seed(1);
  const auto q = torch::randn({2, 2, 5, 8}), k = torch::randn({2, 2, 7, 8}),
             v = torch::randn({2, 2, 7, 8});
  auto keep = torch::rand({2, 1, 5, 7}) > 0.3;
  keep.select(3, 0).fill_(true);  // no fully masked rows: torch's result there differs by version
  EXPECT_TRUE(matches_torch(sdpa_ir(true, false), {q, k, v, keep}));
  EXPECT_TRUE(matches_torch(sdpa_ir(true, false), {q, k, v, torch::randn({5, 7})}));
}

TEST(ConvertAttention, ExplicitScale) {
  REQUIRE_SDPA();
  if (sdpa_arity() < 7) GTEST_SKIP() << "the scale argument exists from torch 2.1 on";
  torch::manual_seed(2);
  EXPECT_TRUE(matches_torch(
      sdpa_ir(false, false, "0.3"),
      {torch::randn({2, 3, 4, 8}), torch::randn({2, 3, 4, 8}), torch::randn({2, 3, 4, 8})}));
}

TEST(ConvertAttention, DropoutIsRejected) {
  REQUIRE_SDPA();
  std::string ir = sdpa_ir(false, false);
  ir.replace(ir.find("value=0.]"), 9, "value=0.1]");
  auto g = kiln::testing::parse(ir);
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("dropout_p"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
