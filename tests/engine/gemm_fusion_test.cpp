// What joins a GEMM (a matmul or convolution) while building: transposes of its operands, its
// bias, activations and residual adds behind views, layer scales into its weights. Outputs never
// change.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/builder.h"
#include "engine/cuda/backend.h"
#include "engine/passes/passes.h"
#include "engine_testing.h"

namespace kiln::engine {
namespace {

using testing::run_engine;

// Transposes of the last two dims before a matmul become its transpose flags (either operand,
// twice over for a transposed transpose); a transpose with another reader still runs for it.
TEST(Builder, MatMulReadsItsOperandsTransposed) {
  Network net;
  auto a = net.add_input("a", DataType::kF32, {2, 3, 5, 4});
  auto b = net.add_input("b", DataType::kF32, {2, 3, 6, 5});
  ShuffleParams swap;
  swap.first_perm = {0, 1, 3, 2};
  auto at = net.add("at", swap, {a});  // [2, 3, 4, 5]
  auto bt = net.add("bt", swap, {b});  // [2, 3, 5, 6]
  MatMulParams ta;
  ta.transpose_a = true;
  auto y = net.add("y", MatMulParams{}, {at, bt});  // [2, 3, 4, 6]
  auto z = net.add("z", ta, {at, at});              // at^T @ at = a @ a^T: [2, 3, 5, 5]
  net.mark_output(y, "y");
  net.mark_output(net.add("zr", UnaryParams{UnaryOp::kNeg}, {z}), "z");
  net.mark_output(net.add("bt_out", UnaryParams{UnaryOp::kExp}, {bt}), "bt");

  BuildReport report;
  Plan plan = build(net, BuilderConfig{}, &report);
  EXPECT_EQ(report.changes("matmul_transposes"), 4) << report.to_string();
  int shuffles = 0;
  for (const Layer& l : plan.network.layers()) shuffles += l.name == "at" || l.name == "bt";
  EXPECT_EQ(shuffles, 1) << report.to_string();  // bt, for bt_out
  auto ia = testing::random_tensor(DataType::kF32, {2, 3, 5, 4}, 6);
  auto ib = testing::random_tensor(DataType::kF32, {2, 3, 6, 5}, 7);
  const auto built = run_engine(plan.network, {ia, ib});
  const auto unbuilt = run_engine(net, {ia, ib});
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(testing::near(built[i], testing::to_doubles(unbuilt[i]), 1e-5, 1e-6)) << i;
  }
}

// matmul + bias add, then a reshape, then the activation (GPT-2's MLP): the activation moves
// before the reshape and joins the matmul with its bias; values match the unbuilt network.
TEST(Builder, ActivationBehindAReshapeJoinsTheMatMul) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {6, 8});
  auto w = testing::random_constant(net, "w", {8, 10}, 3);
  auto b = testing::random_constant(net, "b", {10}, 4);
  auto mm = net.add("mm", MatMulParams{}, {x, w});
  auto biased = net.add("bias", ElementwiseParams{BinaryOp::kAdd}, {mm, b});
  ShuffleParams view;
  view.has_reshape = true;
  view.reshape = {2, 3, 10};
  auto r = net.add("view", view, {biased});
  auto g = net.add("gelu", ActivationParams{ActivationKind::kGeluTanh}, {r});
  net.mark_output(g, "y");

  BuildReport report;
  Plan plan = build(net, BuilderConfig{}, &report);
  EXPECT_EQ(report.changes("activations_before_reshapes"), 1) << report.to_string();
  int activations = 0;
  for (const Layer& l : plan.network.layers()) {
    activations += std::holds_alternative<ActivationParams>(l.params);
    if (const auto* m = std::get_if<MatMulParams>(&l.params)) {
      EXPECT_TRUE(m->post.has_bias);
      EXPECT_EQ(m->post.activation, ActivationKind::kGeluTanh);
    }
  }
  EXPECT_EQ(activations, 0) << report.to_string();
  EXPECT_EQ(plan.network.tensor(plan.network.outputs()[0]).shape, (Shape{2, 3, 10}));
  auto in = testing::random_tensor(DataType::kF32, {6, 8}, 5);
  EXPECT_TRUE(testing::near(run_engine(plan.network, {in})[0],
                            testing::to_doubles(run_engine(net, {in})[0]), 1e-5, 1e-6));
}

// matmul + bias, a reshape, then the add of a residual of the reshaped shape (GPT-2's attention
// and MLP projections), in either operand order: the add moves before the reshape, on the
// residual viewed as the matmul's result, and joins the matmul as its residual. An add that
// broadcasts its other operand, or one behind a reshape of what is no GEMM's result (a softmax's),
// stays after the reshape. Values match the unbuilt network.
TEST(Builder, ResidualAddBehindAReshapeJoinsTheMatMul) {
  for (const bool residual_first : {false, true}) {
    for (const int variant : {0, 1, 2}) {
      const bool broadcast = variant == 1, gemm = variant != 2;
      SCOPED_TRACE(std::to_string(residual_first) + std::to_string(variant));
      Network net;
      auto x = net.add_input("x", DataType::kF32, {6, 8});
      const Shape rshape = broadcast ? Shape{3, 10} : Shape{2, 3, 10};
      auto res = net.add_input("res", DataType::kF32, rshape);
      auto w = testing::random_constant(net, "w", {8, 10}, 3);
      auto b = testing::random_constant(net, "b", {10}, 4);
      auto mm = net.add("mm", MatMulParams{}, {x, w});
      auto biased = net.add("bias", ElementwiseParams{BinaryOp::kAdd}, {mm, b});
      if (!gemm) biased = net.add("softmax", SoftmaxParams{-1, false}, {biased});
      ShuffleParams view;
      view.has_reshape = true;
      view.reshape = {2, 3, 10};
      auto r = net.add("view", view, {biased});
      auto sum = net.add("residual", ElementwiseParams{BinaryOp::kAdd},
                         residual_first ? std::vector{res, r} : std::vector{r, res});
      net.mark_output(sum, "y");

      BuildReport report;
      Plan plan = build(net, BuilderConfig{}, &report);
      const bool joins = !broadcast && gemm;
      EXPECT_EQ(report.changes("activations_before_reshapes"), joins ? 1 : 0) << report.to_string();
      int adds = 0, residuals = 0;
      for (const Layer& l : plan.network.layers()) {
        adds += std::holds_alternative<ElementwiseParams>(l.params);
        if (const auto* m = std::get_if<MatMulParams>(&l.params)) residuals += m->post.has_residual;
      }
      EXPECT_EQ(residuals, joins ? 1 : 0) << report.to_string();
      EXPECT_EQ(adds, joins ? 0 : 1) << report.to_string();
      EXPECT_EQ(plan.network.tensor(plan.network.outputs()[0]).shape, (Shape{2, 3, 10}));
      auto in = testing::random_tensor(DataType::kF32, {6, 8}, 5);
      auto rin = testing::random_tensor(DataType::kF32, rshape, 6);
      EXPECT_TRUE(testing::near(run_engine(plan.network, {in, rin})[0],
                                testing::to_doubles(run_engine(net, {in, rin})[0]), 1e-5, 1e-6));
    }
  }
}

// A layer scale (`gamma * linear(x)`, ConvNeXt's and CaiT's; a convolution's per-channel [C, 1, 1]
// product alike) becomes the weights and bias scaled, and the residual add after it joins the
// GEMM; a product by a full-shape constant, or by a constant that the layer's weights do not
// carry per output channel, stays a layer. Values match the unbuilt network.
TEST(Builder, LayerScalesBecomeTheirGemmsWeights) {
  struct Case {
    const char* name;
    bool conv, transpose_b, per_channel;
  };
  for (const Case& c :
       {Case{"matmul [N, K]", false, true, true}, Case{"matmul [K, N]", false, false, true},
        Case{"conv", true, false, true}, Case{"full-shape constant", false, true, false}}) {
    SCOPED_TRACE(c.name);
    Network net;
    TensorId in, y, residual;
    Shape in_shape, out_shape;
    if (c.conv) {
      in_shape = {2, 3, 6, 6}, out_shape = {2, 4, 6, 6};
      in = net.add_input("x", DataType::kF32, in_shape);
      residual = net.add_input("r", DataType::kF32, out_shape);
      ConvolutionParams cp;
      cp.strides = {1, 1}, cp.padding_begin = cp.padding_end = {1, 1}, cp.dilations = {1, 1};
      cp.post.has_bias = true;
      y = net.add("conv", cp,
                  {in, testing::random_constant(net, "w", {4, 3, 3, 3}, 11),
                   testing::random_constant(net, "b", {4}, 12)});
    } else {
      in_shape = {2, 5, 8}, out_shape = {2, 5, 6};
      in = net.add_input("x", DataType::kF32, in_shape);
      residual = net.add_input("r", DataType::kF32, out_shape);
      MatMulParams mp;
      mp.transpose_b = c.transpose_b;
      mp.post.has_bias = true;
      const Shape w_shape = c.transpose_b ? Shape{6, 8} : Shape{8, 6};
      y = net.add("linear", mp,
                  {in, testing::random_constant(net, "w", w_shape, 11),
                   testing::random_constant(net, "b", {6}, 12)});
    }
    const Shape g_shape = !c.per_channel ? out_shape : c.conv ? Shape{4, 1, 1} : Shape{6};
    auto gamma = testing::random_constant(net, "gamma", g_shape, 13);
    auto scaled = net.add("scale", ElementwiseParams{BinaryOp::kMul}, {gamma, y});
    net.mark_output(net.add("residual", ElementwiseParams{BinaryOp::kAdd}, {scaled, residual}),
                    "out");
    BuilderConfig config;  // (channels-first: no layout transposes between the conv and the add)
    apply_switch(config, "conv_layout=channels_first");
    BuildReport report;
    Plan plan = build(net, config, &report);
    EXPECT_EQ(report.changes("scale_into_weights"), c.per_channel ? 1 : 0) << report.to_string();
    int elementwise = 0, residuals = 0;
    for (const Layer& l : plan.network.layers()) {
      elementwise += std::holds_alternative<ElementwiseParams>(l.params) ||
                     std::holds_alternative<FusedElementwiseParams>(l.params);
      if (const auto* m = std::get_if<MatMulParams>(&l.params)) residuals += m->post.has_residual;
      if (const auto* v = std::get_if<ConvolutionParams>(&l.params)) {
        residuals += v->post.has_residual;
      }
    }
    EXPECT_EQ(elementwise, c.per_channel ? 0 : 1) << report.to_string();
    EXPECT_EQ(residuals, c.per_channel ? 1 : 0) << report.to_string();
    const HostTensor x = testing::random_tensor(DataType::kF32, in_shape, 14);
    const HostTensor r = testing::random_tensor(DataType::kF32, out_shape, 15);
    EXPECT_TRUE(testing::near(run_engine(plan.network, {x, r})[0],
                              testing::to_doubles(run_engine(net, {x, r})[0]), 1e-5, 1e-6));
  }
}

// A product of two GEMMs' results of dynamic shape (SwiGLU's up and gate) is no layer scale: the
// network builds as it is (it once asked the volume of the dynamic operand's shape).
TEST(Builder, ProductsOfDynamicGemmResultsAreNoLayerScales) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 8}, Profile{{1, 8}, {4, 8}, {8, 8}});
  MatMulParams mp;
  mp.transpose_b = true;
  auto up = net.add("up", mp, {x, testing::random_constant(net, "wu", {6, 8}, 31)});
  auto gate = net.add("gate", mp, {x, testing::random_constant(net, "wg", {6, 8}, 32)});
  net.mark_output(net.add("glu", ElementwiseParams{BinaryOp::kMul}, {up, gate}), "y");
  BuildReport report;
  Plan plan = build(net, BuilderConfig{}, &report);
  EXPECT_EQ(report.changes("scale_into_weights"), 0) << report.to_string();
  const HostTensor in = testing::random_tensor(DataType::kF32, {3, 8}, 33);
  EXPECT_TRUE(testing::near(run_engine(plan.network, {in})[0],
                            testing::to_doubles(run_engine(net, {in})[0]), 1e-5, 1e-6));
}

// In f16 the scaled weights are rounded once more: a scale that would leave a nonzero scaled weight
// below f16's smallest normal number (ConvNeXt's 1e-6 at initialization) stays a product after the
// GEMM; one of 0.5 is folded. A cuda plan built for sm_90 without a device.
TEST(Builder, LayerScalesFoldIntoF16WeightsOnlyWhereTheyStayNormal) {
  if (!cuda::built()) GTEST_SKIP() << "this build has no CUDA backend";
  for (const float value : {0.5f, 1e-6f}) {
    SCOPED_TRACE(value);
    Network net;
    auto x = net.add_input("x", DataType::kF32, {4, 64});
    MatMulParams mp;
    mp.transpose_b = true;
    auto y = net.add("linear", mp, {x, testing::random_constant(net, "w", {32, 64}, 21)});
    auto gamma =
        net.add_constant("gamma", Weights::from_floats({32}, std::vector<float>(32, value)));
    net.mark_output(net.add("scale", ElementwiseParams{BinaryOp::kMul}, {y, gamma}), "y");
    BuilderConfig config;
    config.device = "cuda";
    config.enabled_precisions = {DataType::kF16, DataType::kF32};
    apply_switch(config, "cuda_arch=90");
    BuildReport report;
    build(net, config, &report);
    EXPECT_EQ(report.changes("scale_into_weights"), value == 0.5f ? 1 : 0) << report.to_string();
  }
}

// A matmul followed by the add of an [N] vector (torch.addmm, `x @ w + b`), either operand order,
// takes it as its bias, and the activation after it too; an add that broadcasts another way, or a
// convolution's add of [C], stays a layer. Values match the unbuilt network.
TEST(Builder, MatMulTakesAnAddedRowVectorAsItsBias) {
  for (bool bias_first : {false, true}) {
    Network net;
    auto x = net.add_input("x", DataType::kF32, {6, 8});
    auto w = net.add_constant("w", Weights::from_floats({8, 5}, std::vector<float>(40, 0.25f)));
    std::vector<float> bv = {1, -2, 3, -4, 5};
    auto b = net.add_constant("b", Weights::from_floats({5}, bv));
    auto col = net.add_constant("col", Weights::from_floats({6, 1}, std::vector<float>(6, 2.f)));
    auto mm = net.add("mm", MatMulParams{}, {x, w});
    auto add = net.add("add", ElementwiseParams{BinaryOp::kAdd},
                       bias_first ? std::vector{b, mm} : std::vector{mm, b});
    auto act = net.add("act", ActivationParams{ActivationKind::kRelu}, {add});
    auto mm2 = net.add("mm2", MatMulParams{}, {x, w});
    auto add2 = net.add("add2", ElementwiseParams{BinaryOp::kAdd}, {mm2, col});  // [6, 1]: no bias
    net.mark_output(act, "y");
    net.mark_output(add2, "z");
    BuildReport report;
    Plan plan = build(net, BuilderConfig{}, &report);
    int biased = 0, adds = 0;
    for (const Layer& l : plan.network.layers()) {
      if (const auto* m = std::get_if<MatMulParams>(&l.params)) {
        biased += m->post.has_bias;
        if (m->post.has_bias) {
          EXPECT_EQ(m->post.activation, ActivationKind::kRelu);
        }
      }
      adds += std::holds_alternative<ElementwiseParams>(l.params) ||
              std::holds_alternative<FusedElementwiseParams>(l.params);
    }
    EXPECT_EQ(biased, 1) << report.to_string();
    EXPECT_EQ(adds, 1) << report.to_string();
    auto in = testing::random_tensor(DataType::kF32, {6, 8}, 4);
    const auto got = run_engine(plan.network, {in}), want = run_engine(net, {in});
    for (size_t o = 0; o < 2; ++o) {
      EXPECT_TRUE(testing::near(got[o], testing::to_doubles(want[o]), 1e-6, 1e-6)) << o;
    }
  }
}

}  // namespace
}  // namespace kiln::engine
