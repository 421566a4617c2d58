// cuDNN's fused attention as the attention layer's second form (attention_cudnn.h): with
// attention_cudnn=on it runs every f16/bf16 shape the flash kernel takes and answers as the CPU
// kernel does (masks of every form, rows a mask leaves without keys, causal, grouped-query and
// packed heads); with auto (the default) each shape's form is chosen by timing while building and
// kept in the plan; it runs inside captured CUDA graphs; the switch is parsed without a device.
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda_testing.h"
#include "engine/cuda/attention_cudnn.h"
#include "engine/cuda/backend.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;

// A key padding mask [B, 1, 1, S] for sequences of `lengths` (one a batch; 0: every key out):
// bool (true: kept), or additive, 0 where kept and -inf past the length.
HostTensor padding_mask(DataType dtype, const std::vector<int64_t>& lengths, int64_t s) {
  const bool is_bool = dtype == DataType::kBool;
  std::vector<double> values;
  for (int64_t n : lengths) {
    for (int64_t j = 0; j < s; ++j) {
      values.push_back(j < n ? (is_bool ? 1.0 : 0.0)
                             : (is_bool ? 0.0 : -std::numeric_limits<double>::infinity()));
    }
  }
  return testing::tensor_from(dtype, {static_cast<int64_t>(lengths.size()), 1, 1, s}, values);
}

// Runs one attention layer on the CPU and on cuda with `config`, compares them, and says whether
// cuDNN ran it there.
bool cudnn_ran(const AttentionParams& p, const std::vector<HostTensor>& in, double rtol,
               double atol, const BuilderConfig& config) {
  const int64_t before = cuda::cudnn_attention_runs();
  const auto r = cuda_testing::run_both_layer(p, in, config);
  EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "attention"), 1);  // not decomposed
  cuda_testing::expect_match(r, rtol, atol);
  return cuda::cudnn_attention_runs() > before;
}

// No GPU needed: attention_cudnn=auto|on|off reaches the kernels from the plan's switches, auto
// when not given; any other value is an error that names the switch.
TEST(CudaKernelOptions, AttentionCudnnIsASwitch) {
  EXPECT_EQ(cuda::kernel_options({}).attention_cudnn, cuda::AttentionCudnn::kAuto);
  for (const auto& [value, want] : {std::pair{"on", cuda::AttentionCudnn::kOn},
                                    {"off", cuda::AttentionCudnn::kOff},
                                    {"auto", cuda::AttentionCudnn::kAuto}}) {
    BuilderConfig config;
    apply_switch(config, std::string("attention_cudnn=") + value);
    EXPECT_EQ(cuda::kernel_options(config.switches).attention_cudnn, want) << value;
  }
  for (const char* bad : {"attention_cudnn=cudnn", "attention_cudnn=", "attention_cudnn"}) {
    try {
      BuilderConfig config;
      apply_switch(config, bad);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(e.message().find(std::string("`") + bad + "`"), std::string::npos) << e.message();
    }
  }
}

// attention_cudnn=on: cuDNN runs every f16 and bf16 layer below and answers as the CPU kernel does,
// with the flash kernel's tolerances (attention_test.cpp: cuDNN too rounds the softmax weights to
// the input dtype for p v). Head sizes 64 and 128; L = S on whole tiles, ViT's 197 (no multiple of
// a tile or of 8: converted masks get padded rows) and one query over CLIP's 77 keys. Unpacked
// [B, H, L, E] operands and packed heads (q, k and v column ranges of one [B, L, 3 H E] tensor;
// cross-attention's q apart), with: no mask; causal; bool key padding [B, 1, 1, S] with one batch
// wholly masked (its rows keep no key: zeros, as on the CPU); bool [B, 1, L, S]; additive f32
// [B, 1, L, S]; additive padding of the layer's dtype with -inf (read in place where S allows);
// causal with key padding; a custom scale; and grouped-query heads (8 over 2) with causal padding.
// f32 (on TF32) stays on the flash kernel.
TEST(CudaAttention, CudnnMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  if (!cuda::cudnn_attention_built()) GTEST_SKIP() << "this build has no cuDNN frontend";
  BuilderConfig on;
  apply_switch(on, "attention_cudnn=on");
  uint64_t seed = 900;
  for (const auto& [dtype, rtol, atol] :
       {std::tuple{DataType::kF16, 1e-2, 2e-3}, std::tuple{DataType::kBF16, 3e-2, 1e-2}}) {
    const auto make = [&, dt = dtype](const Shape& shape) {
      return random_tensor(dt, shape, seed++);
    };
    for (int64_t e : {64, 128}) {
      for (const auto& [l, s] : {std::pair<int64_t, int64_t>{128, 128}, {197, 197}, {1, 77}}) {
        const std::string shape = std::string(dtype_name(dtype)) + " E=" + std::to_string(e) +
                                  " L=" + std::to_string(l) + " S=" + std::to_string(s);
        const int64_t B = 2, H = 3;
        const HostTensor q = make({B, H, l, e}), k = make({B, H, s, e}), v = make({B, H, s, e});
        const std::vector<int64_t> lengths = {s - 3, 0};
        const std::vector<std::pair<AttentionParams, std::vector<HostTensor>>> plain = {
            {AttentionParams{false, false, 0}, {q, k, v}},
            {AttentionParams{true, false, 0}, {q, k, v}},
            {AttentionParams{false, true, 0}, {q, k, v, padding_mask(DataType::kBool, lengths, s)}},
            {AttentionParams{false, true, 0},
             {q, k, v, random_tensor(DataType::kBool, {B, 1, l, s}, seed++, 0, 1)}},
            {AttentionParams{false, true, 0},
             {q, k, v, random_tensor(DataType::kF32, {B, 1, l, s}, seed++)}},
            {AttentionParams{false, true, 0}, {q, k, v, padding_mask(dtype, {s - 5, 2}, s)}},
            {AttentionParams{true, true, 0.2},
             {q, k, v, padding_mask(DataType::kBool, {s - 7, 4}, s)}}};
        for (size_t i = 0; i < plain.size(); ++i) {
          SCOPED_TRACE(shape + " unpacked case " + std::to_string(i));
          EXPECT_TRUE(cudnn_ran(plain[i].first, plain[i].second, rtol, atol, on));
        }
        // Packed heads: self-attention where L == S, cross-attention (q apart) where not.
        AttentionParams packed;
        packed.heads = 4, packed.head_size = e;
        std::vector<HostTensor> qkv;
        if (l == s) {
          packed.columns = {0, 4 * e, 8 * e};
          const HostTensor x = make({B, l, 12 * e});
          qkv = {x, x, x};
        } else {
          packed.columns = {0, 0, 4 * e};
          const HostTensor kv = make({B, s, 8 * e});
          qkv = {make({B, l, 4 * e}), kv, kv};
        }
        const auto with = [](std::vector<HostTensor> in, const HostTensor& mask) {
          in.push_back(mask);
          return in;
        };
        AttentionParams masked = packed, causal_masked = packed;
        masked.has_mask = causal_masked.has_mask = true;
        causal_masked.causal = true;
        AttentionParams causal = packed;
        causal.causal = true;
        // Grouped-query heads: 8 query heads over 2 key/value heads, q, k and v in one
        // [B, L, (8 + 2 + 2) E] projection (cross: k and v in their own).
        AttentionParams gqa = causal_masked;
        gqa.heads = 8, gqa.kv_heads = 2;
        std::vector<HostTensor> gqa_in;
        if (l == s) {
          gqa.columns = {0, 8 * e, 10 * e};
          const HostTensor x = make({B, l, 12 * e});
          gqa_in = {x, x, x};
        } else {
          gqa.columns = {0, 0, 2 * e};
          const HostTensor kv = make({B, s, 4 * e});
          gqa_in = {make({B, l, 8 * e}), kv, kv};
        }
        const std::vector<std::pair<AttentionParams, std::vector<HostTensor>>> heads = {
            {packed, qkv},
            {causal, qkv},
            {masked, with(qkv, padding_mask(DataType::kBool, lengths, s))},
            {masked, with(qkv, random_tensor(DataType::kBool, {B, 1, l, s}, seed++, 0, 1))},
            {masked, with(qkv, padding_mask(DataType::kF32, lengths, s))},
            {causal_masked, with(qkv, padding_mask(DataType::kBool, {s - 7, 4}, s))},
            {gqa, with(gqa_in, padding_mask(DataType::kBool, {s - 7, 0}, s))}};
        for (size_t i = 0; i < heads.size(); ++i) {
          SCOPED_TRACE(shape + " packed case " + std::to_string(i));
          EXPECT_TRUE(cudnn_ran(heads[i].first, heads[i].second, rtol, atol, on));
        }
      }
    }
  }
  // f32 on TF32: the flash kernel's alone, even with attention_cudnn=on.
  const HostTensor x = random_tensor(DataType::kF32, {2, 3, 128, 64}, seed++);
  BuilderConfig tf32 = on;
  tf32.tf32 = true;
  SCOPED_TRACE("f32");
  EXPECT_FALSE(cudnn_ran(AttentionParams{false, false, 0}, {x, x, x}, 1e-2, 5e-3, tf32));
}

// BERT-base's attention at batch 1 and 8 (12 packed heads of 64, 128 tokens, f16, unmasked): with
// attention_cudnn=auto the build times both forms at the plan's shape and keeps one in the plan;
// the loaded plan runs that form without timing anything, and answers as the CPU does; without
// choices in the plan, the first run chooses (as timed before in the process: the same form) and
// the engine keeps it. With attention_cudnn=off cuDNN never runs, nor with auto where the layer has
// a mask (a bool key padding mask: the flash kernel, nothing timed or kept).
TEST(CudaAttention, CudnnOrFlashIsChosenPerShapeAndKept) {
  KILN_REQUIRE_GPU();
  if (!cuda::cudnn_attention_built()) GTEST_SKIP() << "this build has no cuDNN frontend";
  const auto form_choices = [](const std::vector<KernelChoice>& choices) {
    std::vector<std::vector<uint8_t>> forms;
    for (const KernelChoice& c : choices) {
      if (!c.key.empty() && c.key[0] == cuda::kAttentionFormTag) forms.push_back(c.data);
    }
    return forms;
  };
  for (int64_t batch : {1, 8}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const int64_t L = 128, H = 12, E = 64;
    AttentionParams p;
    p.heads = H, p.head_size = E, p.columns = {0, H * E, 2 * H * E};
    const HostTensor qkv = random_tensor(DataType::kF16, {batch, L, 3 * H * E}, 40 + batch);
    Network net;
    const TensorId x = net.add_input("qkv", DataType::kF16, qkv.shape());
    net.mark_output(net.add("attn", p, {x, x, x}), "y");
    const std::vector<HostTensor> cpu =
        ExecutionContext(std::make_shared<const Engine>(build(net, {}).network)).run({qkv});

    BuilderConfig config;
    config.device = "cuda";
    const Plan built = build(net, config);
    const std::vector<std::vector<uint8_t>> forms = form_choices(built.target.choices);
    ASSERT_EQ(forms.size(), 1u) << "one form choice for the shape";
    ASSERT_EQ(forms[0].size(), 1u);
    ASSERT_LE(forms[0][0], 1);
    const int chosen = forms[0][0];
    std::printf("[          ] batch %lld: attention on %s\n", static_cast<long long>(batch),
                chosen == 1 ? "cuDNN" : "the flash kernel");
    const std::vector<uint8_t> bytes = serialize_plan(built);
    const Plan loaded = deserialize_plan(bytes.data(), bytes.size());
    {
      ExecutionContext ctx(std::make_shared<const Engine>(loaded.network, loaded.target));
      const int64_t searches = cuda::algorithm_searches(), runs = cuda::cudnn_attention_runs();
      const std::vector<HostTensor> gpu = ctx.run({qkv});
      EXPECT_EQ(cuda::algorithm_searches(), searches);  // nothing timed
      EXPECT_EQ(cuda::cudnn_attention_runs() - runs, chosen);
      EXPECT_TRUE(testing::near(gpu[0], testing::to_doubles(cpu[0]), 1e-2, 2e-3));
    }
    // Chosen at the first run where the plan has no choice, and kept by the engine.
    apply_switch(config, "choose_at_build=off");
    const Plan unchosen = build(net, config);
    auto engine = std::make_shared<const Engine>(unchosen.network, unchosen.target);
    ExecutionContext ctx(engine);
    EXPECT_TRUE(engine->kernel_choices().empty());
    const int64_t runs_before = cuda::cudnn_attention_runs();
    EXPECT_TRUE(testing::near(ctx.run({qkv})[0], testing::to_doubles(cpu[0]), 1e-2, 2e-3));
    EXPECT_EQ(cuda::cudnn_attention_runs() - runs_before, chosen);
    EXPECT_EQ(form_choices(engine->kernel_choices()),
              std::vector<std::vector<uint8_t>>{{static_cast<uint8_t>(chosen)}});
    // Never with attention_cudnn=off.
    BuilderConfig off;
    off.device = "cuda";
    apply_switch(off, "attention_cudnn=off");
    const Plan flash = build(net, off);
    const int64_t runs = cuda::cudnn_attention_runs();
    ExecutionContext flash_ctx(std::make_shared<const Engine>(flash.network, flash.target));
    EXPECT_TRUE(testing::near(flash_ctx.run({qkv})[0], testing::to_doubles(cpu[0]), 1e-2, 2e-3));
    EXPECT_EQ(cuda::cudnn_attention_runs(), runs);
    // Nor with auto where the layer has a mask.
    AttentionParams masked = p;
    masked.has_mask = true;
    std::vector<int64_t> lengths(static_cast<size_t>(batch), L);
    lengths[0] = L - 17;
    const HostTensor mask = padding_mask(DataType::kBool, lengths, L);
    Network mnet;
    const TensorId mx = mnet.add_input("qkv", DataType::kF16, qkv.shape());
    const TensorId m = mnet.add_input("mask", DataType::kBool, mask.shape());
    mnet.mark_output(mnet.add("attn", masked, {mx, mx, mx, m}), "y");
    const std::vector<HostTensor> mcpu =
        ExecutionContext(std::make_shared<const Engine>(build(mnet, {}).network)).run({qkv, mask});
    BuilderConfig with_mask;
    with_mask.device = "cuda";
    const Plan mplan = build(mnet, with_mask);
    EXPECT_TRUE(form_choices(mplan.target.choices).empty());
    const int64_t mruns = cuda::cudnn_attention_runs();
    ExecutionContext mctx(std::make_shared<const Engine>(mplan.network, mplan.target));
    EXPECT_TRUE(testing::near(mctx.run({qkv, mask})[0], testing::to_doubles(mcpu[0]), 1e-2, 2e-3));
    EXPECT_EQ(cuda::cudnn_attention_runs(), mruns);
  }
}

// attention_mask_biases=on: two f16 BERT-shaped layers (packed heads) reading one bool key padding
// mask, a batch without keys among its rows, read one additive bias made from it, on the flash
// kernel and on cuDNN, and answer as the CPU does with the bool mask.
TEST(CudaAttention, MaskBiasesMatchTheCpu) {
  KILN_REQUIRE_GPU();
  const int64_t B = 3, L = 128, H = 12, E = 64;
  AttentionParams first;
  first.has_mask = true;
  first.heads = H, first.head_size = E, first.columns = {0, H * E, 2 * H * E};
  AttentionParams second = first;
  second.columns = {0, 0, 0};  // the first's output as q, k and v
  const HostTensor qkv = random_tensor(DataType::kF16, {B, L, 3 * H * E}, 61);
  const HostTensor mask = padding_mask(DataType::kBool, {L - 17, L, 0}, L);
  Network net;
  const TensorId x = net.add_input("qkv", DataType::kF16, qkv.shape());
  const TensorId m = net.add_input("mask", DataType::kBool, mask.shape());
  const TensorId a = net.add("attn1", first, {x, x, x, m});
  net.mark_output(net.add("attn2", second, {a, a, a, m}), "y");
  const std::vector<HostTensor> cpu =
      ExecutionContext(std::make_shared<const Engine>(build(net, {}).network)).run({qkv, mask});
  for (const char* form : {"attention_cudnn=off", "attention_cudnn=on"}) {
    SCOPED_TRACE(form);
    BuilderConfig config;
    config.device = "cuda";
    apply_switch(config, "attention_mask_biases=on");
    apply_switch(config, form);
    BuildReport report;
    const Plan plan = build(net, config, &report);
    EXPECT_EQ(report.changes("attention_mask_biases"), 2) << report.to_string();
    const int64_t runs = cuda::cudnn_attention_runs();
    ExecutionContext ctx(std::make_shared<const Engine>(plan.network, plan.target));
    const std::vector<HostTensor> gpu = ctx.run({qkv, mask});
    EXPECT_TRUE(testing::near(gpu[0], testing::to_doubles(cpu[0]), 1e-2, 2e-3));
    if (cuda::cudnn_attention_built()) {
      EXPECT_EQ(cuda::cudnn_attention_runs() > runs, std::string(form) == "attention_cudnn=on");
    }
  }
}

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// attention_cudnn=on inside a context's CUDA graphs: a shape runs eagerly, is captured with cuDNN's
// execution, the mask's conversion and the empty-row zeros, and replays read each call's data
// (packed heads, a bool key padding mask; the last calls leave a batch without keys).
TEST(CudaAttention, CudnnRunsInCapturedGraphs) {
  KILN_REQUIRE_GPU();
  if (!cuda::cudnn_attention_built()) GTEST_SKIP() << "this build has no cuDNN frontend";
  const int64_t B = 2, L = 128, H = 4, E = 64;
  AttentionParams p;
  p.has_mask = true;
  p.heads = H, p.head_size = E, p.columns = {0, H * E, 2 * H * E};
  Network net;
  const TensorId x = net.add_input("qkv", DataType::kF16, {B, L, 3 * H * E});
  const TensorId m = net.add_input("mask", DataType::kBool, {B, 1, 1, L});
  net.mark_output(net.add("attn", p, {x, x, x, m}), "y");
  ExecutionContext cpu(std::make_shared<const Engine>(build(net, {}).network));
  BuilderConfig config;
  config.device = "cuda";
  apply_switch(config, "attention_cudnn=on");
  const Plan plan = build(net, config);
  ExecutionContext gpu(std::make_shared<const Engine>(plan.network, plan.target));
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreate(&s));
  gpu.set_stream(s);
  gpu.enable_cuda_graphs(true);
  const size_t x_bytes = static_cast<size_t>(B * L * 3 * H * E) * 2, out_bytes = x_bytes / 3;
  void *dx = nullptr, *dm = nullptr, *dout = nullptr;
  CUDA_OK(cudaMalloc(&dx, x_bytes));
  CUDA_OK(cudaMalloc(&dm, static_cast<size_t>(B * L)));
  CUDA_OK(cudaMalloc(&dout, out_bytes));
  const int64_t runs = cuda::cudnn_attention_runs();
  constexpr int kCalls = 6;
  for (int call = 0; call < kCalls; ++call) {
    const HostTensor qkv = random_tensor(DataType::kF16, {B, L, 3 * H * E}, 70 + call);
    const HostTensor mask =
        padding_mask(DataType::kBool, {L - 9 * call, call >= 4 ? 0 : L - call}, L);
    CUDA_OK(cudaMemcpyAsync(dx, qkv.data(), qkv.nbytes(), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(dm, mask.data(), mask.nbytes(), cudaMemcpyHostToDevice, s));
    gpu.bind_input(0, dx);
    gpu.bind_input(1, dm);
    gpu.bind_output(0, dout);
    gpu.execute();
    HostTensor got(DataType::kF16, {B, L, H * E});
    CUDA_OK(cudaMemcpyAsync(got.data(), dout, got.nbytes(), cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    EXPECT_TRUE(testing::near(got, testing::to_doubles(cpu.run({qkv, mask})[0]), 1e-2, 2e-3))
        << "call " << call;
  }
  // cuDNN ran eagerly and while capturing; replays run no host code.
  const int64_t host_runs = cuda::cudnn_attention_runs() - runs;
  EXPECT_GE(host_runs, 1);
  EXPECT_LT(host_runs, kCalls) << "no call replayed a CUDA graph";
  cudaFree(dx);
  cudaFree(dm);
  cudaFree(dout);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace kiln::engine
