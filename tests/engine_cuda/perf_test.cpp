// A timing report, not a check of speed (DISABLED_: gpu-test.sh runs it explicitly): a stack of
// conv + bias + ReLU layers and a chain of small elementwise layers, eager and as CUDA graphs.
// It asserts only that both ways compute the same outputs.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "cuda_testing.h"

namespace kiln::engine {
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

void time_network(const char* name, const Network& net, const Shape& in_shape) {
  BuilderConfig config;
  config.device = "cuda";
  const Plan plan = build(net, config);
  auto engine = std::make_shared<const Engine>(plan.network, plan.target);
  ExecutionContext eager(engine), graphs(engine);
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreate(&s));
  eager.set_stream(s);
  graphs.set_stream(s);
  graphs.enable_cuda_graphs(true);
  const HostTensor x = testing::random_tensor(DataType::kF32, in_shape, 1);
  const size_t out_bytes = static_cast<size_t>(volume(eager.output_shape(0))) * 4;
  void *din = nullptr, *d1 = nullptr, *d2 = nullptr;
  CUDA_OK(cudaMalloc(&din, x.nbytes()));
  CUDA_OK(cudaMalloc(&d1, out_bytes));
  CUDA_OK(cudaMalloc(&d2, out_bytes));
  CUDA_OK(cudaMemcpy(din, x.data(), x.nbytes(), cudaMemcpyHostToDevice));
  eager.bind_input(0, din);
  eager.bind_output(0, d1);
  graphs.bind_input(0, din);
  graphs.bind_output(0, d2);
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  auto time = [&](ExecutionContext& ctx) {
    for (int i = 0; i < 5; ++i) ctx.execute();
    constexpr int kRuns = 50;
    cudaEventRecord(start, s);
    for (int i = 0; i < kRuns; ++i) ctx.execute();
    cudaEventRecord(stop, s);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    return ms / kRuns;
  };
  const float eager_ms = time(eager), graph_ms = time(graphs);
  std::printf("[ perf ] %s: %zu layers, eager %.3f ms, cuda graph %.3f ms per run\n", name,
              plan.network.layers().size(), eager_ms, graph_ms);
  std::vector<float> a(out_bytes / 4), b(out_bytes / 4);
  CUDA_OK(cudaMemcpy(a.data(), d1, out_bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(b.data(), d2, out_bytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(a, b);
  cudaFree(din);
  cudaFree(d1);
  cudaFree(d2);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(s);
}

TEST(CudaPerf, DISABLED_EagerAndGraphs) {
  KILN_REQUIRE_GPU();
  {
    Network net;
    TensorId y = net.add_input("x", DataType::kF32, {8, 64, 56, 56});
    for (int i = 0; i < 8; ++i) {
      ConvolutionParams c;
      c.strides = {1, 1};
      c.padding_begin = c.padding_end = {1, 1};
      c.dilations = {1, 1};
      const std::string n = std::to_string(i);
      auto w = net.add_constant(
          "w" + n, Weights::from_floats({64, 64, 3, 3}, std::vector<float>(64 * 64 * 9, 0.01f)));
      auto b = net.add_constant("b" + n,
                                Weights::from_floats({1, 64, 1, 1}, std::vector<float>(64, 0.1f)));
      y = net.add("conv" + n, c, {y, w});
      y = net.add("bias" + n, ElementwiseParams{BinaryOp::kAdd}, {y, b});
      y = net.add("relu" + n, ActivationParams{ActivationKind::kRelu}, {y});
    }
    net.mark_output(y);
    time_network("conv3x3 64ch 56x56 batch 8, x8", net, {8, 64, 56, 56});
  }
  {
    Network net;
    TensorId y = net.add_input("x", DataType::kF32, {4, 256});
    for (int i = 0; i < 40; ++i) {
      const std::string n = std::to_string(i);
      y = net.add("sm" + n, SoftmaxParams{-1, false}, {y});
      y = net.add("t" + n, ShuffleParams{{1, 0}, false, {}, {}}, {y});
    }
    net.mark_output(y);
    time_network("80 small layers", net, {4, 256});
  }
}

}  // namespace
}  // namespace kiln::engine
