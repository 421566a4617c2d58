// Normalization converters against libtorch: batch_norm (inference), layer_norm, rms_norm,
// group_norm, instance_norm, with and without affine parameters, and validator rejections.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

// batch_norm/instance_norm(input, weight, bias, running_mean, running_var, flag, momentum, eps,
// cudnn); `params` declares which of w, b are graph inputs ("" entries become None).
std::string bn_ir(const std::string& op, bool weight, bool bias, bool flag, bool stats = true) {
  std::string ins = "%x : Tensor";
  std::string consts = "  %none : NoneType = prim::Constant()\n";
  if (weight) ins += ", %w : Tensor";
  if (bias) ins += ", %b : Tensor";
  if (stats) ins += ", %m : Tensor, %v : Tensor";
  return "graph(" + ins + "):\n" + consts +
         "  %flag : bool = prim::Constant[value=" + (flag ? "1" : "0") + "]()\n" +
         "  %mom : float = prim::Constant[value=0.1]()\n"
         "  %eps : float = prim::Constant[value=0.001]()\n"
         "  %cudnn : bool = prim::Constant[value=1]()\n"
         "  %y : Tensor = " +
         op + "(%x, " + (weight ? "%w" : "%none") + ", " + (bias ? "%b" : "%none") + ", " +
         (stats ? "%m, %v" : "%none, %none") + ", %flag, %mom, %eps, %cudnn)\n  return (%y)\n";
}

TEST(ConvertNormalization, BatchNormInference) {
  torch::manual_seed(0);
  const auto w = torch::randn({3}), b = torch::randn({3}), m = torch::randn({3}),
             v = torch::rand({3}) + 0.5;
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 3, 5, 4});
    EXPECT_TRUE(matches_torch(bn_ir("aten::batch_norm", true, true, false), {x, w, b, m, v}));
    EXPECT_TRUE(matches_torch(bn_ir("aten::batch_norm", false, false, false), {x, m, v}));
    EXPECT_TRUE(matches_torch(bn_ir("aten::batch_norm", true, false, false), {x, w, m, v}));
    EXPECT_TRUE(matches_torch(bn_ir("aten::batch_norm", false, true, false), {x, b, m, v}));
  }
  // BatchNorm1d on [N, C] and [N, C, L].
  EXPECT_TRUE(matches_torch(bn_ir("aten::batch_norm", true, true, false),
                            {torch::randn({4, 3}), w, b, m, v}));
  EXPECT_TRUE(matches_torch(bn_ir("aten::batch_norm", true, true, false),
                            {torch::randn({2, 3, 7}), w, b, m, v}));
}

TEST(ConvertNormalization, BatchNormOnesForAMissingWeightNeedStaticStatistics) {
  // Only the bias given: ones of the running mean's shape stand in for the weight, which a
  // running mean of dynamic shape cannot give.
  auto g = kiln::testing::parse(bn_ir("aten::batch_norm", false, true, false));
  const InputSpec x{engine::DataType::kF32, {1, 3, 4}, {2, 3, 4}, {4, 3, 4}};
  const InputSpec dynamic{engine::DataType::kF32, {1}, {3}, {3}};
  const InputSpec fixed = InputSpec::fixed(engine::DataType::kF32, {3});
  try {
    convert_graph(*g, {x, fixed, dynamic, dynamic});
    FAIL() << "converted ones of a dynamic running_mean";
  } catch (const Error& e) {  // the converter's error, with the node named
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(e.message().find("running_mean of shape [?] needs static dims"), std::string::npos)
        << e.message();
  }
  // Static statistics with a dynamic batch convert.
  ConvertedSegment seg = convert_graph(*g, {x, fixed, fixed, fixed});
  EXPECT_EQ(seg.network.tensor(seg.network.outputs().at(0)).shape,
            (engine::Shape{engine::kDynamic, 3, 4}));
}

TEST(ConvertNormalization, BatchNormTrainingIsRejected) {
  auto g = kiln::testing::parse(bn_ir("aten::batch_norm", true, true, true));
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("training=True"), std::string::npos) << s.reason;
  auto no_stats = kiln::testing::parse(bn_ir("aten::batch_norm", true, true, false, false));
  EXPECT_FALSE(default_registry().supports(no_stats->outputs()[0]->node()).supported);
}

std::string layer_norm_ir(const std::vector<int64_t>& shape, bool weight, bool bias) {
  std::string ins = "%x : Tensor";
  if (weight) ins += ", %w : Tensor";
  if (bias) ins += ", %b : Tensor";
  std::string list;
  std::string consts;
  for (size_t i = 0; i < shape.size(); ++i) {
    consts += "  %n" + std::to_string(i) +
              " : int = prim::Constant[value=" + std::to_string(shape[i]) + "]()\n";
    list += (i ? ", %n" : "%n") + std::to_string(i);
  }
  return "graph(" + ins + "):\n  %none : NoneType = prim::Constant()\n" + consts +
         "  %shape : int[] = prim::ListConstruct(" + list + ")\n" +
         "  %eps : float = prim::Constant[value=1.0000000000000001e-05]()\n"
         "  %cudnn : bool = prim::Constant[value=1]()\n"
         "  %y : Tensor = aten::layer_norm(%x, %shape, " +
         (weight ? "%w" : "%none") + ", " + (bias ? "%b" : "%none") +
         ", %eps, %cudnn)\n  return (%y)\n";
}

TEST(ConvertNormalization, LayerNormOverOneAndTwoDims) {
  torch::manual_seed(1);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 6, 8}) * 3 + 1;
    EXPECT_TRUE(
        matches_torch(layer_norm_ir({8}, true, true), {x, torch::randn({8}), torch::randn({8})}));
    EXPECT_TRUE(matches_torch(layer_norm_ir({6, 8}, true, true),
                              {x, torch::randn({6, 8}), torch::randn({6, 8})}));
    EXPECT_TRUE(matches_torch(layer_norm_ir({8}, false, false), {x}));
    EXPECT_TRUE(matches_torch(layer_norm_ir({8}, true, false), {x, torch::randn({8})}));
  }
}

// rms_norm(x, [shape], w?, eps?): eps None is f32's epsilon, as torch's (x small enough that it
// counts).
TEST(ConvertNormalization, RmsNormOverOneAndTwoDims) {
  torch::manual_seed(2);
  const auto ir = [](const std::string& shape, bool weight, const std::string& eps) {
    return std::string("graph(%x : Tensor") + (weight ? ", %w : Tensor" : "") +
           "):\n  %none : NoneType = prim::Constant()\n"
           "  %shape : int[] = prim::Constant[value=" +
           shape + "]()\n" +
           (eps.empty() ? "" : "  %eps : float = prim::Constant[value=" + eps + "]()\n") +
           "  %y : Tensor = aten::rms_norm(%x, %shape, " + (weight ? "%w" : "%none") + ", " +
           (eps.empty() ? "%none" : "%eps") + ")\n  return (%y)\n";
  };
  const auto x = torch::randn({3, 6, 8}) * 3 + 1;
  EXPECT_TRUE(matches_torch(ir("[8]", true, "9.9999999999999995e-07"), {x, torch::randn({8})}));
  EXPECT_TRUE(matches_torch(ir("[6, 8]", true, "0.01"), {x, torch::randn({6, 8})}));
  EXPECT_TRUE(matches_torch(ir("[8]", false, ""), {torch::randn({3, 6, 8}) * 1e-4}));
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %shape : int[]):
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::rms_norm(%x, %shape, %none, %none)
  return (%y))IR");
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("must be a constant"), std::string::npos) << s.reason;
}

std::string group_norm_ir(int64_t groups, bool affine) {
  return std::string("graph(%x : Tensor") + (affine ? ", %w : Tensor, %b : Tensor" : "") +
         "):\n  %none : NoneType = prim::Constant()\n"
         "  %g : int = prim::Constant[value=" +
         std::to_string(groups) +
         "]()\n"
         "  %eps : float = prim::Constant[value=1.0000000000000001e-05]()\n"
         "  %cudnn : bool = prim::Constant[value=1]()\n"
         "  %y : Tensor = aten::group_norm(%x, %g, " +
         (affine ? "%w, %b" : "%none, %none") + ", %eps, %cudnn)\n  return (%y)\n";
}

TEST(ConvertNormalization, GroupNorm) {
  torch::manual_seed(2);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 6, 5, 3});
    EXPECT_TRUE(matches_torch(group_norm_ir(3, true), {x, torch::randn({6}), torch::randn({6})}));
    EXPECT_TRUE(matches_torch(group_norm_ir(2, false), {x}));
    EXPECT_TRUE(matches_torch(group_norm_ir(6, true), {x, torch::randn({6}), torch::randn({6})}));
  }
}

TEST(ConvertNormalization, InstanceNormUsesInputStatistics) {
  torch::manual_seed(3);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 3, 6, 5}) * 2;
    EXPECT_TRUE(matches_torch(bn_ir("aten::instance_norm", true, true, true, false),
                              {x, torch::randn({3}), torch::randn({3})}));
    EXPECT_TRUE(matches_torch(bn_ir("aten::instance_norm", false, false, true, false), {x}));
    EXPECT_TRUE(matches_torch(bn_ir("aten::instance_norm", false, false, true, true),
                              {x, torch::randn({3}), torch::rand({3}) + 1}));
  }
  EXPECT_TRUE(matches_torch(bn_ir("aten::instance_norm", false, false, true, false),
                            {torch::randn({2, 3, 9})}));
}

TEST(ConvertNormalization, InstanceNormWithRunningStatsIsRejected) {
  auto g = kiln::testing::parse(bn_ir("aten::instance_norm", true, true, false));
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("use_input_stats=False"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
