// The CUDA convolution (cuDNN) against the CPU backend: 1-3-D, stride, padding (asymmetric too),
// dilation, groups/depthwise, transposed with output_padding, and post-ops (fused by cuDNN where
// it can: bias + ReLU, residual + ReLU).
#include "cuda_testing.h"
#include "engine/cuda/backend.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;

constexpr double kRtol = 1e-5, kAtol = 1e-4;

ConvolutionParams conv(std::vector<int64_t> s, std::vector<int64_t> pb, std::vector<int64_t> pe,
                       std::vector<int64_t> d, int64_t groups = 1, bool transposed = false,
                       std::vector<int64_t> op = {}) {
  ConvolutionParams p;
  p.strides = std::move(s);
  p.padding_begin = std::move(pb);
  p.padding_end = std::move(pe);
  p.dilations = std::move(d);
  p.groups = groups;
  p.transposed = transposed;
  p.output_padding = std::move(op);
  return p;
}

struct Case {
  const char* name;
  Shape x, w;
  ConvolutionParams p;
};

TEST(CudaConvolution, Shapes) {
  KILN_REQUIRE_GPU();
  const Case cases[] = {
      {"2d", {2, 3, 17, 19}, {8, 3, 3, 3}, conv({1, 1}, {1, 1}, {1, 1}, {1, 1})},
      {"2d stride dilation", {1, 4, 20, 21}, {6, 4, 3, 5}, conv({2, 3}, {2, 1}, {2, 1}, {2, 1})},
      {"2d asymmetric pad", {2, 3, 12, 12}, {5, 3, 3, 3}, conv({2, 2}, {0, 1}, {1, 2}, {1, 1})},
      {"2d groups", {2, 8, 10, 10}, {12, 2, 3, 3}, conv({1, 1}, {1, 1}, {1, 1}, {1, 1}, 4)},
      {"depthwise", {1, 16, 14, 14}, {16, 1, 3, 3}, conv({2, 2}, {1, 1}, {1, 1}, {1, 1}, 16)},
      {"1x1", {4, 32, 7, 7}, {64, 32, 1, 1}, conv({1, 1}, {0, 0}, {0, 0}, {1, 1})},
      {"1d", {2, 4, 50}, {6, 4, 5}, conv({2}, {2}, {2}, {1})},
      {"3d", {1, 2, 6, 7, 8}, {4, 2, 3, 3, 3}, conv({1, 2, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1})},
      {"transposed",
       {2, 4, 7, 9},
       {4, 3, 3, 3},
       conv({2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, true, {1, 0})},
      {"transposed groups",
       {1, 6, 5, 5},
       {6, 2, 4, 4},
       conv({2, 2}, {1, 1}, {1, 1}, {1, 1}, 3, true, {0, 0})},
      {"transposed 1d", {2, 3, 11}, {3, 5, 4}, conv({3}, {0}, {0}, {1}, 1, true, {2})},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    cuda_testing::compare_layer(
        c.p,
        {random_tensor(DataType::kF32, c.x, seed), random_tensor(DataType::kF32, c.w, seed + 1)},
        kRtol, kAtol);
    seed += 2;
  }
}

TEST(CudaConvolution, PostOps) {
  KILN_REQUIRE_GPU();
  struct PostCase {
    ActivationKind act;
    bool bias, residual;
    ActivationKind act2;
  };
  const PostCase cases[] = {
      {ActivationKind::kRelu, true, false, ActivationKind::kNone},  // cuDNN-fused
      {ActivationKind::kNone, true, true, ActivationKind::kRelu},   // cuDNN-fused
      {ActivationKind::kRelu, true, true, ActivationKind::kRelu},
      {ActivationKind::kSilu, true, false, ActivationKind::kNone},
      {ActivationKind::kNone, false, true, ActivationKind::kNone},
      {ActivationKind::kHardSwish, false, false, ActivationKind::kNone},
  };
  for (bool transposed : {false, true}) {
    for (const PostCase& c : cases) {
      SCOPED_TRACE(std::string(activation_name(c.act)) + (c.bias ? " bias" : "") +
                   (c.residual ? " residual " : " ") + activation_name(c.act2) +
                   (transposed ? " transposed" : ""));
      ConvolutionParams p = conv({1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, transposed);
      p.post.has_bias = c.bias;
      p.post.activation = c.act;
      p.post.has_residual = c.residual;
      p.post.activation2 = c.act2;
      std::vector<HostTensor> in = {random_tensor(DataType::kF32, {2, 6, 9, 9}, 40),
                                    random_tensor(DataType::kF32, {6, 6, 3, 3}, 41)};
      if (c.bias) in.push_back(random_tensor(DataType::kF32, {6}, 42));
      if (c.residual) in.push_back(random_tensor(DataType::kF32, {2, 6, 9, 9}, 43));
      cuda_testing::compare_layer(p, in, kRtol, kAtol);
    }
  }
}

TEST(CudaConvolution, HalfPrecisions) {
  KILN_REQUIRE_GPU();
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    for (bool transposed : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (transposed ? " transposed" : ""));
      ConvolutionParams p = conv({2, 2}, {1, 1}, {1, 1}, {1, 1}, 2, transposed);
      p.post.has_bias = true;
      p.post.activation = ActivationKind::kRelu;
      cuda_testing::compare_layer(
          p,
          {random_tensor(t, {2, 8, 12, 12}, 60, -1, 1), random_tensor(t, {8, 4, 3, 3}, 61, -1, 1),
           random_tensor(t, {8}, 62)},
          1e-2, 2e-2);
    }
  }
}

// A dynamic engine's first call at a shape that is no profile point runs its 2-d convolutions as
// padded, gathered patches times the filter (strides, dilations, asymmetric padding, bias,
// activations, residual); the shape's next calls run them on cuDNN, tuned. Every call matches the
// CPU, as does the first call with first_call_gemm=off (cuDNN's kept algorithms).
TEST(CudaConvolution, FirstCallsAtNewShapesMatchTheCpu) {
  KILN_REQUIRE_GPU();
  Network net;
  const auto x = net.add_input("x", DataType::kF32, {kDynamic, 8, 13, 13},
                               Profile{{1, 8, 13, 13}, {2, 8, 13, 13}, {6, 8, 13, 13}});
  uint64_t seed = 90;
  const auto weights = [&](const Shape& shape) {
    ++seed;
    return testing::random_constant(net, "w" + std::to_string(seed), shape, seed);
  };
  ConvolutionParams c1 = conv({1, 1}, {1, 1}, {1, 1}, {1, 1});
  c1.post.has_bias = true;
  c1.post.activation = ActivationKind::kRelu;
  auto y = net.add("c1", c1, {x, weights({16, 8, 3, 3}), weights({16})});
  const auto skip = y;
  ConvolutionParams c2 = conv({1, 1}, {2, 2}, {2, 2}, {2, 2});  // dilated
  c2.post.has_residual = true;
  c2.post.activation2 = ActivationKind::kRelu;
  y = net.add("c2", c2, {y, weights({16, 16, 3, 3}), skip});
  y = net.add("c3", conv({2, 2}, {0, 1}, {1, 2}, {1, 1}), {y, weights({24, 16, 5, 5})});
  y = net.add("c4", conv({2, 2}, {0, 0}, {0, 0}, {1, 1}), {y, weights({32, 24, 1, 1})});
  net.mark_output(y, "y");
  ExecutionContext cpu(std::make_shared<const Engine>(build(net, {}).network));
  for (bool on : {true, false}) {
    SCOPED_TRACE(on ? "first_call_gemm=on" : "first_call_gemm=off");
    BuilderConfig config;
    config.device = "cuda";
    config.tf32 = false;
    apply_switch(config, "conv_layout=channels_last");
    apply_switch(config, on ? "first_call_gemm=on" : "first_call_gemm=off");
    Plan plan = build(net, config);
    int channels_last = 0;
    for (const Layer& l : plan.network.layers()) {
      if (const auto* p = std::get_if<ConvolutionParams>(&l.params))
        channels_last += p->channels_last;
    }
    ASSERT_EQ(channels_last, 4);
    ExecutionContext gpu(std::make_shared<const Engine>(plan.network, plan.target));
    // Profile points (tuned), then new shapes: first calls, then their repeats (tuned).
    for (int64_t n : {2, 1, 6, 3, 3, 3, 5, 4, 4, 5, 2}) {
      const HostTensor in = random_tensor(DataType::kF32, {n, 8, 13, 13}, 100 + n);
      const auto want = testing::to_doubles(cpu.run({in})[0]);
      EXPECT_TRUE(testing::near(gpu.run({in})[0], want, 1e-4, 1e-4)) << "batch " << n;
    }
  }
}

// Convolutions of one operation (a network's repeated blocks) ask cuDNN's heuristics once in the
// process: two such layers, one query at most (none where an earlier test asked it), same
// answers as the CPU.
TEST(CudaConvolution, LayersOfOneOperationAskTheHeuristicsOnce) {
  KILN_REQUIRE_GPU();
  Network net;
  auto x = net.add_input("x", DataType::kF32, {3, 7, 9, 11});
  auto y = net.add("conv_a", conv({1, 1}, {2, 1}, {2, 1}, {1, 1}),
                   {x, testing::random_constant(net, "wa", {7, 7, 5, 3}, 1)});
  y = net.add("relu", ActivationParams{ActivationKind::kRelu}, {y});
  y = net.add("conv_b", conv({1, 1}, {2, 1}, {2, 1}, {1, 1}),
              {y, testing::random_constant(net, "wb", {7, 7, 5, 3}, 2)});
  net.mark_output(y);
  BuilderConfig config;
  config.device = "cuda";
  apply_switch(config, "choose_at_build=off");
  const Plan plan = build(net, config);
  ASSERT_EQ(cuda_testing::count_layers(plan, "convolution"), 2);
  ExecutionContext gpu(std::make_shared<const Engine>(plan.network, plan.target));
  ExecutionContext cpu(std::make_shared<const Engine>(build(net, {}).network));
  const HostTensor in = random_tensor(DataType::kF32, {3, 7, 9, 11}, 3);
  const int64_t before = cuda::algorithm_searches();
  const HostTensor got = gpu.run({in})[0];
  EXPECT_LE(cuda::algorithm_searches() - before, 1);
  EXPECT_TRUE(testing::near(got, testing::to_doubles(cpu.run({in})[0]), kRtol, kAtol));
}

TEST(CudaConvolution, BuilderFusesConvBiasReluWithConstantWeights) {
  KILN_REQUIRE_GPU();
  const HostTensor w = random_tensor(DataType::kF32, {8, 3, 3, 3}, 50);
  auto r = cuda_testing::run_both(
      {random_tensor(DataType::kF32, {2, 3, 16, 16}, 51),
       random_tensor(DataType::kF32, {2, 8, 16, 16}, 52)},
      [&](Network& net, const std::vector<TensorId>& in) {
        std::vector<uint8_t> bytes(static_cast<const uint8_t*>(w.data()),
                                   static_cast<const uint8_t*>(w.data()) + w.nbytes());
        auto wid = net.add_constant("w", Weights::from_bytes(w.dtype(), w.shape(), bytes));
        auto y = net.add("conv", conv({1, 1}, {1, 1}, {1, 1}, {1, 1}), {in[0], wid});
        y = net.add("relu", ActivationParams{ActivationKind::kRelu}, {y});
        y = net.add("res", ElementwiseParams{BinaryOp::kAdd}, {y, in[1]});
        return std::vector<TensorId>{y};
      });
  EXPECT_EQ(r.gpu_plan.network.layers().size(), 2u);  // the weights' constant and the conv
  cuda_testing::expect_match(r, kRtol, kAtol);
}

}  // namespace
}  // namespace kiln::engine
