// The CUDA runtime: device pointers on the caller's stream, contexts sharing one engine, dynamic
// shapes (shape tensors computed on the host), plans saved and loaded, and clear errors for host
// pointers, missing devices and foreign compute capabilities.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <memory>
#include <stdexcept>

#include "cuda_testing.h"
#include "engine/cuda/backend.h"
#include "engine/cuda/graphs.h"
#include "engine/cuda/kernels.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;

Network small_network() {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 3, 8, 8});
  ConvolutionParams c;
  c.strides = {1, 1};
  c.padding_begin = c.padding_end = {1, 1};
  c.dilations = {1, 1};
  auto w =
      net.add_constant("w", Weights::from_floats({4, 3, 3, 3}, std::vector<float>(108, 0.05f)));
  auto y = net.add("conv", c, {x, w});
  y = net.add("relu", ActivationParams{ActivationKind::kRelu}, {y});
  y = net.add("scale", ElementwiseParams{BinaryOp::kMul},
              {y, net.add_constant("k", Weights::from_floats({1}, {3.f}))});
  y = net.add("tanh", ActivationParams{ActivationKind::kTanh}, {y});
  net.mark_output(y, "y");
  return net;
}

std::shared_ptr<const Engine> cuda_engine(const Network& net) {
  BuilderConfig config;
  config.device = "cuda";
  Plan plan = build(net, config);
  return std::make_shared<const Engine>(plan.network, plan.target);
}

// The kernels' measurement switches come from the plan (no GPU needed): the last setting of each
// wins, and a plan without them runs every fast path.
TEST(CudaKernelOptions, ComeFromThePlansSwitches) {
  const cuda::KernelOptions fast = cuda::kernel_options({"conv_layout=auto"});
  EXPECT_FALSE(fast.pointwise_on_cudnn);
  EXPECT_EQ(fast.grouped, cuda::GroupedPath::kAuto);
  EXPECT_TRUE(fast.depthwise_tiled && fast.gemm_fold && fast.gemm_timing && fast.gemm_split_k);
  EXPECT_FALSE(fast.attention_key_split);
  EXPECT_TRUE(fast.first_call_gemm && fast.repeat_tuning && fast.reuse_algorithms);
  BuilderConfig config;
  for (const char* s : {"cuda_pointwise=cudnn", "cuda_depthwise=strip", "cuda_grouped=cudnn",
                        "gemm_fold=off", "gemm_timing=off", "gemm_timing=on", "gemm_split_k=off",
                        "attention_key_split=on", "first_call_gemm=off", "repeat_tuning=off"}) {
    apply_switch(config, s);
  }
  const cuda::KernelOptions o = cuda::kernel_options(config.switches);
  EXPECT_TRUE(o.pointwise_on_cudnn);
  EXPECT_FALSE(o.depthwise_tiled);
  EXPECT_EQ(o.grouped, cuda::GroupedPath::kCudnn);
  EXPECT_FALSE(o.gemm_fold);
  EXPECT_FALSE(o.first_call_gemm);
  EXPECT_TRUE(o.gemm_timing);
  EXPECT_FALSE(o.gemm_split_k);
  EXPECT_TRUE(o.attention_key_split);
  EXPECT_FALSE(o.repeat_tuning);
  EXPECT_THROW(apply_switch(config, "repeat_tuning=sometimes"), InvalidArgument);
}

// A layer's states by shape (no GPU needed): a shape that comes back finds its own; past the bound
// the least recently used goes; one added again replaces its key's; the nearest usable state is
// the one of least distance, the most recently used among equals.
TEST(CudaKernelStates, KeptPerShapeLeastRecentlyUsedGoesFirst) {
  struct State : KernelState {
    std::vector<int64_t> key;
    int tag = 0;
  };
  const auto make = [](int64_t k, int tag) {
    auto s = std::make_unique<State>();
    s->key = {k};
    s->tag = tag;
    return s;
  };
  cuda::StatesByShape<State> states;
  constexpr int64_t kBound = cuda::StatesByShape<State>::kShapes;
  for (int64_t k = 0; k < kBound; ++k) states.add(make(k, static_cast<int>(k)));
  EXPECT_EQ(states.size(), static_cast<size_t>(kBound));
  ASSERT_NE(states.find({0}), nullptr);  // 0 is now the most recently used: 1 goes next
  states.add(make(kBound, 100));
  EXPECT_EQ(states.size(), static_cast<size_t>(kBound));
  EXPECT_EQ(states.find({1}), nullptr);
  ASSERT_NE(states.find({0}), nullptr);
  EXPECT_EQ(states.find({0})->tag, 0);
  states.add(make(5, 55));  // replaces 5's
  EXPECT_EQ(states.size(), static_cast<size_t>(kBound));
  EXPECT_EQ(states.find({5})->tag, 55);
  // Nearest to 20.4 among the even keys: 20.
  const auto nearest = [&](double to) {
    return states.nearest([](const State& s) { return s.key[0] % 2 == 0; },
                          [to](const State& s) { return std::abs(s.key[0] - to); });
  };
  ASSERT_NE(nearest(20.4), nullptr);
  EXPECT_EQ(nearest(20.4)->key[0], 20);
  // 21 is as near to 20 as to 22: the most recently used of the two.
  states.find({22});
  EXPECT_EQ(nearest(21)->key[0], 22);
  states.find({20});
  EXPECT_EQ(nearest(21)->key[0], 20);
  EXPECT_EQ(states.nearest([](const State&) { return false; }, [](const State&) { return 0.0; }),
            nullptr);
}

// cuda_arch=NN builds a plan for that compute capability without asking a device (no GPU needed:
// plans for a GPU elsewhere), and the plan keeps it through serialization.
TEST(CudaBuilder, ArchSwitchBuildsForThatArchitectureWithoutADevice) {
  BuilderConfig config;
  config.device = "cuda";
  apply_switch(config, "cuda_arch=87");
  const Plan plan = build(small_network(), config);
  EXPECT_EQ(plan.target.device, "cuda");
  EXPECT_EQ(plan.target.compute_capability, 87);
  const auto bytes = serialize_plan(plan);
  EXPECT_EQ(deserialize_plan(bytes.data(), bytes.size()).target.compute_capability, 87);
}

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

TEST(CudaRuntime, DevicePointersOnTheCallersStream) {
  KILN_REQUIRE_GPU();
  const Network net = small_network();
  const HostTensor x = random_tensor(DataType::kF32, {2, 3, 8, 8}, 1);
  const auto expected = testing::to_doubles(
      ExecutionContext(std::make_shared<const Engine>(build(net, {}).network)).run({x})[0]);
  auto engine = cuda_engine(net);
  EXPECT_TRUE(engine->on_cuda());
  // Two contexts of one engine, each on its own stream, interleaved.
  ExecutionContext a(engine), b(engine);
  cudaStream_t sa = nullptr, sb = nullptr;
  CUDA_OK(cudaStreamCreate(&sa));
  CUDA_OK(cudaStreamCreate(&sb));
  a.set_stream(sa);
  b.set_stream(sb);
  EXPECT_EQ(a.stream(), sa);
  void *in = nullptr, *out_a = nullptr, *out_b = nullptr;
  const size_t out_bytes = static_cast<size_t>(volume(a.output_shape(0))) * 4;
  CUDA_OK(cudaMalloc(&in, x.nbytes()));
  CUDA_OK(cudaMalloc(&out_a, out_bytes));
  CUDA_OK(cudaMalloc(&out_b, out_bytes));
  CUDA_OK(cudaMemcpy(in, x.data(), x.nbytes(), cudaMemcpyHostToDevice));
  for (ExecutionContext* ctx : {&a, &b}) ctx->bind_input(0, in);
  a.bind_output(0, out_a);
  b.bind_output(0, out_b);
  for (int i = 0; i < 3; ++i) {
    a.execute();
    b.execute();
  }
  HostTensor ya(DataType::kF32, a.output_shape(0)), yb(DataType::kF32, b.output_shape(0));
  CUDA_OK(cudaMemcpyAsync(ya.data(), out_a, out_bytes, cudaMemcpyDeviceToHost, sa));
  CUDA_OK(cudaMemcpyAsync(yb.data(), out_b, out_bytes, cudaMemcpyDeviceToHost, sb));
  CUDA_OK(cudaStreamSynchronize(sa));
  CUDA_OK(cudaStreamSynchronize(sb));
  EXPECT_TRUE(testing::near(ya, expected, 1e-5, 1e-5));
  EXPECT_TRUE(testing::near(yb, expected, 1e-5, 1e-5));
  // One context moving between streams keeps its results (the new stream waits for the old).
  for (int i = 0; i < 4; ++i) {
    a.set_stream(i % 2 ? sb : sa);
    a.execute();
  }
  CUDA_OK(cudaMemcpyAsync(ya.data(), out_a, out_bytes, cudaMemcpyDeviceToHost, sb));
  CUDA_OK(cudaStreamSynchronize(sb));
  EXPECT_TRUE(testing::near(ya, expected, 1e-5, 1e-5));
  // Host memory is refused where device memory is expected.
  EXPECT_THROW(a.bind_input(0, x.data()), InvalidArgument);
  cudaFree(in);
  cudaFree(out_a);
  cudaFree(out_b);
  cudaStreamDestroy(sa);
  cudaStreamDestroy(sb);
}

TEST(CudaRuntime, CudaGraphsReplayAndFollowShapes) {
  KILN_REQUIRE_GPU();
  Network net;
  auto in = net.add_input("x", DataType::kF32, {kDynamic, 16}, Profile{{1, 16}, {4, 16}, {8, 16}});
  auto w = net.add_constant("w", Weights::from_floats({16, 16}, std::vector<float>(256, 0.1f)));
  auto y = net.add("mm", MatMulParams{}, {in, w});
  y = net.add("gelu", ActivationParams{ActivationKind::kGelu}, {y});
  y = net.add("sm", SoftmaxParams{-1, false}, {y});
  net.mark_output(y);
  auto engine = cuda_engine(net);
  ExecutionContext cpu(std::make_shared<const Engine>(build(net, {}).network));
  ExecutionContext gpu(engine);
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreate(&s));
  gpu.set_stream(s);
  gpu.enable_cuda_graphs(true);
  void *din = nullptr, *dout[2] = {nullptr, nullptr};
  CUDA_OK(cudaMalloc(&din, 8 * 16 * 4));
  CUDA_OK(cudaMalloc(&dout[0], 8 * 16 * 4));
  CUDA_OK(cudaMalloc(&dout[1], 8 * 16 * 4));
  // Each shape runs eagerly, then is captured, then replays (both shapes keep their graphs; 2, no
  // profile point, runs eagerly twice first, tuning the second time); the input data and the
  // output buffer change every run.
  int run = 0;
  for (int64_t n : {2, 2, 2, 8, 8, 8, 2, 8, 2}) {
    const HostTensor x = random_tensor(DataType::kF32, {n, 16}, static_cast<uint64_t>(100 + run));
    void* out = dout[run++ % 2];
    CUDA_OK(cudaMemcpyAsync(din, x.data(), x.nbytes(), cudaMemcpyHostToDevice, s));
    gpu.set_input_shape(0, {n, 16});
    gpu.bind_input(0, din);
    gpu.bind_output(0, out);
    gpu.execute();
    HostTensor got(DataType::kF32, {n, 16});
    CUDA_OK(cudaMemcpyAsync(got.data(), out, got.nbytes(), cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    EXPECT_TRUE(testing::near(got, testing::to_doubles(cpu.run({x})[0]), 1e-5, 1e-6))
        << "run " << run << " n " << n;
  }
  cudaFree(din);
  cudaFree(dout[0]);
  cudaFree(dout[1]);
  cudaStreamDestroy(s);
}

// The graph cache keeps the most recently run shapes up to its bound, replays each shape's own
// graph, drops every graph once memory they read has moved, and captures a shape only after an
// eager run that made every choice for it, whatever ran in between.
TEST(CudaRuntime, GraphCacheKeepsRecentShapesAndDropsGraphsWhenMemoryMoves) {
  KILN_REQUIRE_GPU();
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreate(&s));
  void* out = nullptr;
  CUDA_OK(cudaMalloc(&out, sizeof(int)));
  cuda::GraphCache cache(2);
  uint64_t moves = 0;
  int enqueued = 0;
  // Runs "shape" k: the enqueued work fills the output's bytes with k. `complete`: whether the
  // run made every choice for its shape; `allocates`: whether it allocates device memory (a
  // kernel whose state for the shape went), which a capture refuses.
  const auto run = [&](int k, bool complete = true, bool allocates = false) {
    const int before = enqueued;
    cache.execute(
        s, {k}, {}, {}, {out}, {sizeof(int)},
        [&](const std::vector<const void*>&, const std::vector<void*>& outs) {
          ++enqueued;
          if (allocates) {
            void* p = nullptr;
            const cudaError_t status = cudaMalloc(&p, 256);
            if (status != cudaSuccess) throw std::runtime_error(cudaGetErrorString(status));
            cudaFree(p);
          }
          CUDA_OK(cudaMemsetAsync(outs[0], k, sizeof(int), s));
        },
        &moves, [&] { return complete; });
    unsigned char got[sizeof(int)] = {};
    EXPECT_EQ(cudaMemcpyAsync(got, out, sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    for (unsigned char b : got) EXPECT_EQ(b, k) << "shape " << k;
    return enqueued > before;  // false: a graph replayed
  };
  const auto captures = [&](int k) { return cache.will_capture(s, {k}, &moves); };
  EXPECT_FALSE(captures(1));
  EXPECT_TRUE(run(1));  // eager
  EXPECT_TRUE(captures(1));
  EXPECT_FALSE(cache.will_capture(nullptr, {1}, &moves));  // the legacy stream runs eagerly
  EXPECT_TRUE(run(1));                                     // captured
  EXPECT_FALSE(captures(1));
  EXPECT_FALSE(run(1));  // replayed
  EXPECT_TRUE(run(2));
  EXPECT_TRUE(run(2));
  EXPECT_FALSE(run(2));
  EXPECT_FALSE(run(1));  // 1 is now the most recent
  EXPECT_TRUE(run(3));
  EXPECT_TRUE(run(3));  // captured: 2, the least recently run, goes
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_TRUE(cache.has({1}) && cache.has({3}) && !cache.has({2}));
  EXPECT_FALSE(run(1));
  EXPECT_FALSE(run(3));
  ++moves;  // e.g. the arena grew: no graph replays; 1's choices stand, so it is captured again
  EXPECT_TRUE(captures(1));
  EXPECT_TRUE(run(1));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_TRUE(cache.has({1}) && !cache.has({3}));
  EXPECT_FALSE(run(1));
  // A run that left choices to later calls (a new shape of a dynamic engine): eager again, until
  // one completes; then captured.
  EXPECT_TRUE(run(4, false));
  EXPECT_FALSE(captures(4));
  EXPECT_TRUE(run(4, false));
  EXPECT_TRUE(run(4));  // eager, its last choices made
  EXPECT_FALSE(cache.has({4}));
  EXPECT_TRUE(run(4));  // captured
  EXPECT_TRUE(cache.has({4}));
  EXPECT_FALSE(run(4));
  // Shapes that alternate are captured too: completeness is kept per shape.
  EXPECT_TRUE(run(5));
  EXPECT_TRUE(run(6));
  EXPECT_TRUE(run(5));  // captured (1 goes)
  EXPECT_TRUE(run(6));  // captured (4 goes)
  EXPECT_FALSE(run(5));
  EXPECT_FALSE(run(6));
  EXPECT_TRUE(cache.has({5}) && cache.has({6}) && !cache.has({4}));
  // An evicted shape that was complete is captured at its next call, and replays after.
  EXPECT_TRUE(captures(4));
  EXPECT_TRUE(run(4));
  EXPECT_TRUE(cache.has({4}));
  EXPECT_FALSE(run(4));
  // A capture that fails (a kernel allocates) runs the call eagerly and right; the shape is
  // captured after its next complete eager run. One whose run left a choice is not kept.
  EXPECT_TRUE(run(7));
  EXPECT_TRUE(captures(7));
  EXPECT_TRUE(run(7, true, true));  // the capture failed: eager
  EXPECT_FALSE(cache.has({7}));
  EXPECT_TRUE(captures(7));  // the eager run was complete
  EXPECT_TRUE(run(7));
  EXPECT_TRUE(cache.has({7}));
  EXPECT_FALSE(run(7));
  EXPECT_TRUE(run(8));
  EXPECT_TRUE(run(8, false));  // captured, but a kernel left a choice: ran once, not kept
  EXPECT_FALSE(cache.has({8}));
  EXPECT_FALSE(captures(8));
  cudaFree(out);
  cudaStreamDestroy(s);
}

// Each of `bad` as the variable's value makes `read` throw an InvalidArgument that names it.
template <typename Read>
void expect_rejected(testing::ScopedEnv& env, const char* name,
                     std::initializer_list<const char*> bad, Read read) {
  for (const char* value : bad) {
    env.set(value);
    try {
      read();
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(e.message().find(name), std::string::npos) << e.message();
    }
  }
}

// KILN_CUDA_GRAPH_CACHE sets the bound; anything but a positive integer is an error naming it.
TEST(CudaRuntime, GraphCacheBoundComesFromTheEnvironment) {
  testing::ScopedEnv env("KILN_CUDA_GRAPH_CACHE", std::nullopt);
  EXPECT_EQ(cuda::graph_cache_size(), 16u);
  env.set("5");
  EXPECT_EQ(cuda::graph_cache_size(), 5u);
  expect_rejected(env, "KILN_CUDA_GRAPH_CACHE", {"0", "-3", "many", "4x"},
                  [] { cuda::graph_cache_size(); });
}

// KILN_CUDA_TUNING_MS sets a call's choosing time at repeated shapes (10 ms unset, 0 allowed,
// `unbounded`); anything else is an error naming it.
TEST(CudaRuntime, TuningBudgetComesFromTheEnvironment) {
  testing::ScopedEnv env("KILN_CUDA_TUNING_MS", std::nullopt);
  EXPECT_EQ(cuda::tuning_budget_ms(), 10.0);
  env.set("unbounded");
  EXPECT_EQ(cuda::tuning_budget_ms(), std::numeric_limits<double>::infinity());
  env.set("2.5");
  EXPECT_EQ(cuda::tuning_budget_ms(), 2.5);
  env.set("0");
  EXPECT_EQ(cuda::tuning_budget_ms(), 0.0);
  expect_rejected(env, "KILN_CUDA_TUNING_MS", {"-1", "soon", "5ms", "inf", "nan"},
                  [] { cuda::tuning_budget_ms(); });
}

// Shapes of a dynamic engine that are no profile point, interleaved, with no choosing time (each
// call at a repeated shape chooses for one layer): convolutions and GEMMs start from the choices
// of the nearest shape that chose, choose over the calls that follow, and are captured once all
// is chosen; every call matches the CPU, eager, captured or replayed.
TEST(CudaRuntime, InterleavedShapesChooseOverTheirCallsAndStayRight) {
  KILN_REQUIRE_GPU();
  const testing::ScopedEnv env("KILN_CUDA_TUNING_MS", "0");
  const Network net = cuda_testing::conv_gemm_network();
  auto engine = cuda_engine(net);
  ExecutionContext cpu(std::make_shared<const Engine>(build(net, {}).network));
  ExecutionContext gpu(engine);
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreate(&s));
  gpu.set_stream(s);
  gpu.enable_cuda_graphs(true);
  const size_t most = 8 * 8 * 16 * 8 * 4;
  void *din = nullptr, *dout = nullptr;
  CUDA_OK(cudaMalloc(&din, most));
  CUDA_OK(cudaMalloc(&dout, most));
  int run = 0;
  for (int round = 0; round < 8; ++round) {
    for (const auto& [n, h] : std::vector<std::pair<int64_t, int64_t>>{{3, 6}, {5, 12}, {7, 10}}) {
      const HostTensor x =
          random_tensor(DataType::kF32, {n, 3, h, 8}, static_cast<uint64_t>(200 + run++));
      CUDA_OK(cudaMemcpyAsync(din, x.data(), x.nbytes(), cudaMemcpyHostToDevice, s));
      gpu.set_input_shape(0, {n, 3, h, 8});
      gpu.bind_input(0, din);
      gpu.bind_output(0, dout);
      gpu.execute();
      HostTensor got(DataType::kF32, {n, 4, h, 8});
      CUDA_OK(cudaMemcpyAsync(got.data(), dout, got.nbytes(), cudaMemcpyDeviceToHost, s));
      CUDA_OK(cudaStreamSynchronize(s));
      EXPECT_TRUE(testing::near(got, testing::to_doubles(cpu.run({x})[0]), 2e-3, 1e-4))
          << "round " << round << ": " << n << " x " << h;
    }
  }
  cudaFree(din);
  cudaFree(dout);
  cudaStreamDestroy(s);
}

// Dynamic shapes that alternate, one of them larger (the arena grows), through a resize (tables
// per shape): every run matches the CPU's, replayed or not.
TEST(CudaRuntime, GraphsOfAlternatingShapesStayRight) {
  KILN_REQUIRE_GPU();
  Network net;
  auto in = net.add_input("x", DataType::kF32, {kDynamic, 2, 4, 4},
                          Profile{{1, 2, 4, 4}, {2, 2, 4, 4}, {6, 2, 4, 4}});
  auto up = net.add("up", ResizeParams{ResizeMode::kLinear, {}, {2.0, 2.0}, false}, {in});
  auto y = net.add("gelu", ActivationParams{ActivationKind::kGelu}, {up});
  net.mark_output(y);
  auto engine = cuda_engine(net);
  ExecutionContext cpu(std::make_shared<const Engine>(build(net, {}).network));
  ExecutionContext gpu(engine);
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreate(&s));
  gpu.set_stream(s);
  gpu.enable_cuda_graphs(true);
  const size_t most = 6 * 2 * 8 * 8 * 4;
  void *din = nullptr, *dout = nullptr;
  CUDA_OK(cudaMalloc(&din, most));
  CUDA_OK(cudaMalloc(&dout, most));
  int run = 0;
  for (int64_t n : {1, 1, 1, 3, 3, 3, 1, 3, 1, 6, 6, 6, 1, 3, 6, 1, 3, 6}) {
    const HostTensor x = random_tensor(DataType::kF32, {n, 2, 4, 4}, static_cast<uint64_t>(run++));
    CUDA_OK(cudaMemcpyAsync(din, x.data(), x.nbytes(), cudaMemcpyHostToDevice, s));
    gpu.set_input_shape(0, {n, 2, 4, 4});
    gpu.bind_input(0, din);
    gpu.bind_output(0, dout);
    gpu.execute();
    HostTensor got(DataType::kF32, {n, 2, 8, 8});
    CUDA_OK(cudaMemcpyAsync(got.data(), dout, got.nbytes(), cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    EXPECT_TRUE(testing::near(got, testing::to_doubles(cpu.run({x})[0]), 1e-5, 1e-6))
        << "run " << run << " n " << n;
  }
  cudaFree(din);
  cudaFree(dout);
  cudaStreamDestroy(s);
}

// 10,000 calls at random shapes of a dynamic engine with CUDA graphs (128 shapes: graphs
// captured, replayed and evicted past the cache's bound of 16, cuDNN plans and resize tables per
// shape) keep the device memory in use flat after a warm-up, and results right.
TEST(CudaRuntime, TenThousandRandomShapesKeepDeviceMemoryFlat) {
  KILN_REQUIRE_GPU();
  const Network net =
      testing::conv_resize_network(Profile{{1, 2, 4, 4}, {4, 2, 8, 8}, {8, 2, 19, 19}}, {2.0, 2.0});
  ExecutionContext gpu(cuda_engine(net));
  ExecutionContext cpu(std::make_shared<const Engine>(build(net, {}).network));
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreate(&s));
  gpu.set_stream(s);
  gpu.enable_cuda_graphs(true);
  const size_t most = 8 * 4 * 38 * 38 * 4;
  void *din = nullptr, *dout = nullptr;
  CUDA_OK(cudaMalloc(&din, most));
  CUDA_OK(cudaMalloc(&dout, most));
  const auto used = [] {
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    return total - free;
  };
  testing::ShapeDraws draw(7);
  constexpr int kWarmup = 2000, kCalls = kWarmup + 10000;
  size_t before = 0;
  for (int i = 0; i < kCalls; ++i) {
    if (i == kWarmup) {
      CUDA_OK(cudaStreamSynchronize(s));
      before = used();
    }
    const int64_t n = draw.next(1, 8), h = draw.next(4, 19);
    const HostTensor in = random_tensor(DataType::kF32, {n, 2, h, h}, static_cast<uint64_t>(i));
    CUDA_OK(cudaMemcpyAsync(din, in.data(), in.nbytes(), cudaMemcpyHostToDevice, s));
    gpu.set_input_shape(0, {n, 2, h, h});
    gpu.bind_input(0, din);
    gpu.bind_output(0, dout);
    gpu.execute();
    if (i % 499 == 0) {
      HostTensor got(DataType::kF32, {n, 4, 2 * h, 2 * h});
      CUDA_OK(cudaMemcpyAsync(got.data(), dout, got.nbytes(), cudaMemcpyDeviceToHost, s));
      CUDA_OK(cudaStreamSynchronize(s));
      ASSERT_TRUE(testing::near(got, testing::to_doubles(cpu.run({in})[0]), 1e-4, 1e-5))
          << "call " << i << ": " << n << " x " << h;
    }
  }
  CUDA_OK(cudaStreamSynchronize(s));
  const size_t after = used();
  RecordProperty("device_bytes_before", std::to_string(before));
  RecordProperty("device_bytes_after", std::to_string(after));
  EXPECT_LE(after, before + (size_t{8} << 20))
      << "device memory in use " << before << " -> " << after << " bytes over 10,000 calls";
  cudaFree(din);
  cudaFree(dout);
  cudaStreamDestroy(s);
}

TEST(CudaRuntime, DynamicShapesAndShapeTensors) {
  KILN_REQUIRE_GPU();
  Network net;
  auto in = net.add_input("x", DataType::kF32, {kDynamic, 3, 4},
                          Profile{{1, 3, 4}, {2, 3, 4}, {4, 3, 4}});
  auto shape = net.add("shape", ShapeParams{}, {in});
  auto batch = net.add("batch", SliceParams{{0}, {0}, {1}, {1}}, {shape});
  auto dims = net.add("dims", ConcatParams{-1, false},
                      {batch, net.add_constant("twelve", Weights::from_ints({1}, {12}))});
  auto flat = net.add("flat", ShuffleParams{{}, true, {}, {1, 0}}, {in, dims});
  auto sm = net.add("softmax", SoftmaxParams{0, false}, {flat});
  net.mark_output(sm);
  net.mark_output(dims);
  auto engine = cuda_engine(net);
  ExecutionContext cpu(std::make_shared<const Engine>(build(net, {}).network));
  ExecutionContext gpu(engine);
  for (int64_t n : {1, 4, 2, 4}) {
    const HostTensor x = random_tensor(DataType::kF32, {n, 3, 4}, static_cast<uint64_t>(n));
    const auto want = cpu.run({x}), got = gpu.run({x});
    ASSERT_EQ(got[0].shape(), (Shape{12, n}));
    EXPECT_TRUE(testing::near(got[0], testing::to_doubles(want[0]), 1e-5, 1e-6));
    EXPECT_TRUE(testing::near(got[1], testing::to_doubles(want[1]), 0, 0));
  }
  EXPECT_THROW(gpu.run({random_tensor(DataType::kF32, {5, 3, 4}, 9)}), ShapeMismatch);
}

TEST(CudaRuntime, PlanRoundTripKeepsTheTarget) {
  KILN_REQUIRE_GPU();
  BuilderConfig config;
  config.device = "cuda:0";
  const Plan plan = build(small_network(), config);
  const auto bytes = serialize_plan(plan);
  const Plan loaded = deserialize_plan(bytes.data(), bytes.size());
  EXPECT_EQ(loaded.target.device, "cuda");
  EXPECT_EQ(loaded.target.compute_capability, cuda::compute_capability(0));
  const HostTensor x = random_tensor(DataType::kF32, {2, 3, 8, 8}, 2);
  ExecutionContext ctx(std::make_shared<const Engine>(loaded.network, loaded.target));
  ExecutionContext ref(std::make_shared<const Engine>(plan.network, EngineTarget{}));
  EXPECT_TRUE(testing::near(ctx.run({x})[0], testing::to_doubles(ref.run({x})[0]), 1e-5, 1e-5));
}

TEST(CudaRuntime, DeviceErrorsAreClear) {
  KILN_REQUIRE_GPU();
  const Plan plan = build(small_network(), BuilderConfig{"cuda"});
  EngineTarget elsewhere = plan.target;
  elsewhere.device_index = cuda::device_count();
  EXPECT_THROW(Engine(plan.network, elsewhere), DeviceError);
  EngineTarget foreign = plan.target;
  foreign.compute_capability = 10;
  EXPECT_THROW(Engine(plan.network, foreign), DeviceError);
  ExecutionContext cpu(std::make_shared<const Engine>(plan.network, EngineTarget{}));
  EXPECT_THROW(cpu.set_stream(nullptr), InvalidArgument);
  BuilderConfig bad;
  bad.device = "cuda:x";
  EXPECT_THROW(build(small_network(), bad), InvalidArgument);
}

TEST(CudaRuntime, UnsupportedLayersFailTheBuildNamingThem) {
  KILN_REQUIRE_GPU();
  Network net;
  auto x = net.add_input("x", DataType::kF32, {1, 2, 5, 5});
  ConvolutionParams c;
  c.strides = {2, 2};
  c.padding_begin = {0, 1};
  c.padding_end = {1, 0};
  c.dilations = {1, 1};
  c.transposed = true;
  c.output_padding = {0, 0};
  auto w = net.add_constant("w", Weights::from_floats({2, 3, 3, 3}, std::vector<float>(54, 1.f)));
  net.mark_output(net.add("odd_deconv", c, {x, w}));
  EXPECT_NO_THROW(build(net, {}));  // the CPU backend runs it
  try {
    build(net, BuilderConfig{"cuda"});
    FAIL() << "built a cuda plan with a layer the backend cannot run";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("odd_deconv"), std::string::npos) << e.what();
  }
}

// Runs on every machine: without a GPU (or without CUDA in the build) a cuda engine is refused.
TEST(CudaRuntime, NoDeviceMeansAClearError) {
  if (cuda_testing::gpu_available()) GTEST_SKIP() << "a CUDA device is present";
  EngineTarget target{"cuda", 90, 0};
  try {
    Engine engine(small_network(), target);
    FAIL() << "a cuda engine was made without a device";
  } catch (const Error& e) {
    EXPECT_TRUE(e.kind() == ErrorKind::kDevice || e.kind() == ErrorKind::kUnsupported) << e.what();
  }
}

}  // namespace
}  // namespace kiln::engine
