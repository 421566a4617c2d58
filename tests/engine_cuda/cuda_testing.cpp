// GPU test helpers and the test executable's main, which says once why GPU tests skip.
#include "cuda_testing.h"

#include <cstdio>

#include "engine/cuda/backend.h"

namespace kiln::engine::cuda_testing {

bool gpu_available() {
  static const bool available = cuda::built() && cuda::device_count() > 0;
  return available;
}

BothResults run_both(const std::vector<HostTensor>& inputs, const NetworkBuilder& build,
                     BuilderConfig config) {
  Network net;
  std::vector<TensorId> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ids.push_back(net.add_input("in" + std::to_string(i), inputs[i].dtype(), inputs[i].shape()));
  }
  for (TensorId out : build(net, ids)) net.mark_output(out);
  BothResults r;
  BuilderConfig cpu_config = config;
  cpu_config.device = "cpu";
  Plan cpu_plan = engine::build(net, cpu_config);
  config.device = "cuda:0";
  r.gpu_plan = engine::build(net, config);
  EXPECT_EQ(r.gpu_plan.target.device, "cuda");
  EXPECT_GT(r.gpu_plan.target.compute_capability, 0);
  {
    ExecutionContext ctx(std::make_shared<const Engine>(cpu_plan.network, cpu_plan.target));
    r.cpu = ctx.run(inputs);
  }
  ExecutionContext ctx(std::make_shared<const Engine>(r.gpu_plan.network, r.gpu_plan.target));
  r.gpu = ctx.run(inputs);
  return r;
}

BothResults run_both_layer(const LayerParams& params, const std::vector<HostTensor>& inputs,
                           BuilderConfig config) {
  return run_both(
      inputs,
      [&](Network& net, const std::vector<TensorId>& ids) {
        return net.add_layer("layer", params, ids);
      },
      std::move(config));
}

void expect_match(const BothResults& r, double rtol, double atol) {
  ASSERT_EQ(r.cpu.size(), r.gpu.size());
  for (size_t i = 0; i < r.cpu.size(); ++i) {
    EXPECT_EQ(r.cpu[i].dtype(), r.gpu[i].dtype());
    EXPECT_EQ(r.cpu[i].shape(), r.gpu[i].shape());
    EXPECT_TRUE(testing::near(r.gpu[i], testing::to_doubles(r.cpu[i]), rtol, atol))
        << "output " << i;
  }
}

void compare_layer(const LayerParams& params, const std::vector<HostTensor>& inputs, double rtol,
                   double atol) {
  expect_match(run_both_layer(params, inputs), rtol, atol);
}

Network conv_gemm_network() {
  Network net;
  auto in = net.add_input("x", DataType::kF32, {kDynamic, 3, kDynamic, 8},
                          Profile{{1, 3, 4, 8}, {2, 3, 8, 8}, {8, 3, 16, 8}});
  ConvolutionParams c;
  c.strides = {1, 1};
  c.padding_begin = c.padding_end = {1, 1};
  c.dilations = {1, 1};
  auto y = net.add("conv", c, {in, testing::random_constant(net, "w", {8, 3, 3, 3}, 5)});
  y = net.add("relu", ActivationParams{ActivationKind::kRelu}, {y});
  y = net.add("mm", MatMulParams{}, {y, testing::random_constant(net, "w2", {8, 8}, 6)});
  c.padding_begin = c.padding_end = {0, 0};
  y = net.add("conv2", c, {y, testing::random_constant(net, "w3", {4, 8, 1, 1}, 7)});
  net.mark_output(y);
  return net;
}

int count_layers(const Plan& plan, const std::string& kind) {
  int n = 0;
  for (const Layer& l : plan.network.layers()) n += kind == layer_kind_name(l.params);
  return n;
}

}  // namespace kiln::engine::cuda_testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!kiln::engine::cuda_testing::gpu_available()) {
    std::printf("no CUDA device: skipping GPU tests\n");
  }
  return RUN_ALL_TESTS();
}
