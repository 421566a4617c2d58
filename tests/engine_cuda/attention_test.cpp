// The CUDA resize and attention kernels against the CPU backend: nearest/linear/cubic over 1-3
// spatial dims (sizes, scales, align_corners), attention with causal, bool and float masks and
// broadcast batches, and the flash attention kernel (f16/bf16, and f32 on TF32) with its fallbacks.
#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_testing.h"
#include "engine/cuda/kernels.h"
#include "engine/verify.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;

// The flash kernel's tests keep cuDNN's fused attention out (attention_cudnn=off; its own tests are
// attention_cudnn_test.cpp): what they check is the flash kernel, whatever timing would choose.
BuilderConfig flash_only() {
  BuilderConfig config;
  apply_switch(config, "attention_cudnn=off");
  return config;
}

void compare_layer(const LayerParams& params, const std::vector<HostTensor>& inputs,
                   double rtol = 1e-5, double atol = 1e-6) {
  cuda_testing::expect_match(cuda_testing::run_both_layer(params, inputs, flash_only()), rtol,
                             atol);
}

TEST(CudaResize, ModesAndDims) {
  KILN_REQUIRE_GPU();
  const HostTensor x2 = random_tensor(DataType::kF32, {2, 3, 7, 9}, 1);
  for (ResizeMode mode : {ResizeMode::kNearest, ResizeMode::kLinear, ResizeMode::kCubic}) {
    for (bool align : {false, true}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(mode)) + (align ? " align" : ""));
      compare_layer(ResizeParams{mode, {14, 5}, {}, align}, {x2}, 1e-5, 1e-5);
      compare_layer(ResizeParams{mode, {}, {2.0, 1.5}, align}, {x2}, 1e-5, 1e-5);
    }
  }
  compare_layer(ResizeParams{ResizeMode::kLinear, {20}, {}, false},
                {random_tensor(DataType::kF32, {2, 3, 8}, 2)}, 1e-5, 1e-5);
  compare_layer(ResizeParams{ResizeMode::kLinear, {4, 6, 8}, {}, true},
                {random_tensor(DataType::kF32, {1, 2, 3, 4, 5}, 3)}, 1e-5, 1e-5);
  compare_layer(ResizeParams{ResizeMode::kNearest, {6, 6}, {}, false},
                {random_tensor(DataType::kI64, {1, 2, 3, 3}, 4, -9, 9)});
  // 2-d resizes take resize.cu's 32-bit kernels: bilinear upsampling as segmentation heads do it,
  // in f16 and bf16 too, and nearest of 1-, 2- and 4-byte elements.
  const HostTensor head = random_tensor(DataType::kF32, {2, 5, 9, 7}, 5);
  compare_layer(ResizeParams{ResizeMode::kLinear, {72, 56}, {}, false}, {head}, 1e-5, 1e-5);
  compare_layer(ResizeParams{ResizeMode::kCubic, {}, {3.0, 2.0}, true}, {head}, 1e-5, 1e-5);
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    compare_layer(ResizeParams{ResizeMode::kLinear, {36, 28}, {}, false},
                  {random_tensor(t, {2, 5, 9, 7}, 7)}, 1e-2, 1e-2);
  }
  for (DataType t : {DataType::kU8, DataType::kF16, DataType::kI32}) {
    compare_layer(ResizeParams{ResizeMode::kNearest, {}, {2.0, 3.0}, false},
                  {random_tensor(t, {1, 3, 4, 5}, 6, 0, 9)});
  }
}

TEST(CudaAttention, MasksAndBatches) {
  KILN_REQUIRE_GPU();
  const HostTensor q = random_tensor(DataType::kF32, {2, 3, 5, 16}, 5);
  const HostTensor k = random_tensor(DataType::kF32, {2, 3, 7, 16}, 6);
  const HostTensor v = random_tensor(DataType::kF32, {2, 3, 7, 8}, 7);
  compare_layer(AttentionParams{false, false, 0}, {q, k, v}, 1e-5, 1e-6);
  compare_layer(AttentionParams{true, false, 0.3}, {q, k, v}, 1e-5, 1e-6);
  compare_layer(AttentionParams{false, true, 0},
                {q, k, v, random_tensor(DataType::kBool, {5, 7}, 8, 0, 1)}, 1e-5, 1e-6);
  compare_layer(AttentionParams{false, true, 0},
                {q, k, v, random_tensor(DataType::kF32, {2, 1, 5, 7}, 9)}, 1e-5, 1e-6);
  // Shared keys and values across the batch, and a fully masked row (zeros).
  HostTensor mask = testing::tensor_from(DataType::kBool, {5, 7}, std::vector<double>(35, 1.0));
  for (int j = 0; j < 7; ++j) static_cast<uint8_t*>(mask.data())[j] = 0;
  compare_layer(AttentionParams{false, true, 0},
                {q, random_tensor(DataType::kF32, {7, 16}, 10),
                 random_tensor(DataType::kF32, {7, 8}, 11), mask},
                1e-5, 1e-6);
  compare_layer(AttentionParams{true, false, 0},
                {random_tensor(DataType::kF16, {1, 2, 9, 32}, 12),
                 random_tensor(DataType::kF16, {1, 2, 9, 32}, 13),
                 random_tensor(DataType::kF16, {1, 2, 9, 32}, 14)},
                1e-2, 1e-3);
}

// The flash kernel against the CPU kernel, and layers that take the simple kernel instead.
// Tolerances: the flash kernel rounds the softmax weights w_j to the input dtype for p v, relative
// error d_j <= u (half an ulp: 2^-11 f16, 2^-8 bf16), and divides by their rounded sum, which
// moves an output by about sum_j w_j d_j (v_j - out), at most 2u for v in [-2, 2) (1e-3 f16,
// 7.8e-3 bf16: atol); both backends round the output, a step apart at most (rtol). Scores, the
// softmax and p v accumulate in float from exact products.
TEST(CudaAttention, FlashF16AndBf16) {
  KILN_REQUIRE_GPU();
  struct Case {
    DataType dtype;
    double rtol, atol;
  };
  uint64_t seed = 20;
  for (const Case& c : {Case{DataType::kF16, 1e-2, 2e-3}, Case{DataType::kBF16, 3e-2, 1e-2}}) {
    const auto make = [&](const Shape& shape) { return random_tensor(c.dtype, shape, seed++); };
    for (int64_t e : {64, 128, 16}) {
      // L == S on whole tiles; L != S with tails of both query and key tiles; S = 256, the
      // most keys the resident kernel holds, with 19 query tiles (several blocks a matrix); S = 300
      // on the streaming kernel (and E = 128 there from S = 161 on).
      for (const auto& [l, s] :
           {std::pair<int64_t, int64_t>{128, 128}, {130, 77}, {300, 256}, {70, 300}}) {
        for (bool causal : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " E=" + std::to_string(e) + " L=" +
                       std::to_string(l) + " S=" + std::to_string(s) + (causal ? " causal" : ""));
          const auto r = cuda_testing::run_both_layer(
              AttentionParams{causal, false, 0},
              {make({2, 3, l, e}), make({2, 3, s, e}), make({2, 3, s, e})}, flash_only());
          EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "attention"), 1);  // not decomposed
          cuda_testing::expect_match(r, c.rtol, c.atol);
        }
      }
    }
    SCOPED_TRACE(dtype_name(c.dtype));
    // A custom scale (a sharper softmax), causal with L < S, one batch dim.
    compare_layer(AttentionParams{true, false, 0.3},
                  {make({5, 50, 64}), make({5, 90, 64}), make({5, 90, 64})}, c.rtol, c.atol);
    compare_layer(AttentionParams{false, false, -0.05},
                  {make({2, 3, 70, 32}), make({2, 3, 40, 32}), make({2, 3, 40, 32})}, c.rtol,
                  c.atol);
    // ViT's L = S = 197: the last key tile holds 5 keys (one pair of key fragments, one 16-key
    // block of p v), the last query tile one active warp.
    compare_layer(AttentionParams{false, false, 0},
                  {make({2, 2, 197, 64}), make({2, 2, 197, 64}), make({2, 2, 197, 64})}, c.rtol,
                  c.atol);
    // E = 40, which the flash kernel does not take: two matmuls and a causal softmax, and with
    // the decomposition switched off the simple kernel (in double).
    for (bool decompose : {true, false}) {
      BuilderConfig config;
      if (!decompose) apply_switch(config, "decompose_attention=off");
      const auto r = cuda_testing::run_both_layer(
          AttentionParams{true, false, 0},
          {make({1, 2, 33, 40}), make({1, 2, 33, 40}), make({1, 2, 33, 40})}, config);
      EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "attention"), decompose ? 0 : 1);
      cuda_testing::expect_match(r, c.rtol, c.atol);
    }
  }
}

// A key padding mask [B, 1, 1, S] for sequences of `lengths` (one a batch): bool (true: kept), or
// additive, 0 where kept and -inf (or the dtype's lowest value, as transformers writes it) past
// the length.
HostTensor padding_mask(DataType dtype, const std::vector<int64_t>& lengths, int64_t s,
                        bool lowest = false) {
  const double out = dtype == DataType::kBool ? 0.0
                     : lowest                 ? (dtype == DataType::kF16    ? -65504.0
                                                 : dtype == DataType::kBF16 ? -3.3895313892515355e38
                                                                            : -std::numeric_limits<float>::max())
                                              : -std::numeric_limits<double>::infinity();
  const double in = dtype == DataType::kBool ? 1.0 : 0.0;
  std::vector<double> values;
  for (int64_t n : lengths) {
    for (int64_t j = 0; j < s; ++j) values.push_back(j < n ? in : out);
  }
  return testing::tensor_from(dtype, {static_cast<int64_t>(lengths.size()), 1, 1, s}, values);
}

// The flash kernel with every form of mask users write, against the CPU kernel: bool masks of
// [L, S], key padding [B, 1, 1, S] (one batch wholly masked: zeros, as on the CPU) and causal on
// top of one; additive masks of [B, 1, L, S] in f32, per-head biases [H, L, S] in the layer's
// dtype with -inf entries, and a [1, H, L, S] bias with a causal mask; shapes off the tiles
// (swin's 49 keys, E = 32), and 300 keys on the streaming kernel.
TEST(CudaAttention, FlashTakesEveryMask) {
  KILN_REQUIRE_GPU();
  uint64_t seed = 80;
  for (const auto& [dtype, rtol, atol] :
       {std::tuple{DataType::kF16, 1e-2, 2e-3}, std::tuple{DataType::kBF16, 3e-2, 1e-2}}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto make = [&, dt = dtype](const Shape& shape) {
      return random_tensor(dt, shape, seed++);
    };
    for (const auto& [l, s, e] : {std::tuple<int64_t, int64_t, int64_t>{49, 49, 32},
                                  {128, 128, 64},
                                  {70, 300, 64},
                                  {130, 77, 128}}) {
      SCOPED_TRACE("L=" + std::to_string(l) + " S=" + std::to_string(s) +
                   " E=" + std::to_string(e));
      const HostTensor q = make({2, 3, l, e}), k = make({2, 3, s, e}), v = make({2, 3, s, e});
      compare_layer(AttentionParams{false, true, 0},
                    {q, k, v, random_tensor(DataType::kBool, {l, s}, seed++, 0, 1)}, rtol, atol);
      HostTensor padding = random_tensor(DataType::kBool, {2, 1, 1, s}, seed++, 0, 1);
      for (int64_t j = 0; j < s; ++j) static_cast<uint8_t*>(padding.data())[j] = 0;
      compare_layer(AttentionParams{false, true, 0}, {q, k, v, padding}, rtol, atol);
      // Padded sequences (keys past each batch's length out): key tiles wholly kept, wholly out
      // (skipped) and the one that holds the end, as bool and as additive 0 / -inf and 0 / lowest
      // masks (the last keeps the padded keys at weight 0 without skipping them).
      const std::vector<int64_t> lengths{s - 3, std::min<int64_t>(s, 5)};
      compare_layer(AttentionParams{false, true, 0},
                    {q, k, v, padding_mask(DataType::kBool, lengths, s)}, rtol, atol);
      compare_layer(AttentionParams{true, true, 0},
                    {q, k, v, padding_mask(DataType::kF32, lengths, s)}, rtol, atol);
      compare_layer(AttentionParams{false, true, 0},
                    {q, k, v, padding_mask(dtype, lengths, s, /*lowest=*/true)}, rtol, atol);
      compare_layer(AttentionParams{true, true, 0},
                    {q, k, v, random_tensor(DataType::kBool, {2, 1, l, s}, seed++, 0, 1)}, rtol,
                    atol);
      compare_layer(AttentionParams{false, true, 0},
                    {q, k, v, random_tensor(DataType::kF32, {2, 1, l, s}, seed++)}, rtol, atol);
      compare_layer(AttentionParams{false, true, 0.2},
                    {q, k, v, random_tensor(dtype, {3, l, s}, seed++)}, rtol, atol);
      compare_layer(AttentionParams{true, true, 0},
                    {q, k, v, random_tensor(dtype, {1, 3, l, s}, seed++)}, rtol, atol);
    }
    // -inf in an additive mask: those keys get no weight.
    HostTensor minus_inf = random_tensor(DataType::kF32, {49, 49}, seed++);
    for (int64_t i = 0; i < 49 * 49; i += 3) {
      static_cast<float*>(minus_inf.data())[i] = -std::numeric_limits<float>::infinity();
    }
    compare_layer(AttentionParams{false, true, 0},
                  {make({2, 3, 49, 32}), make({2, 3, 49, 32}), make({2, 3, 49, 32}), minus_inf},
                  rtol, atol);
  }
}

// f32 attention on TF32 (the layer's tf32): the flash kernel's m16n8k8 form against the CPU
// kernel in double. Tolerances: q, k, v and p are rounded to TF32 (half an ulp u = 2^-11, as
// f16's): p's rounding moves an output by up to 2u for v in [-2, 2) (1e-3, as f16's atol); the
// scores' products err by up to 2u relatively, which at E = 128 (sum of |q_e k_e| about E, scaled
// by 1/sqrt(E)) moves a score by about 2u sqrt(E) in the worst case, 1e-2, and so each weight by as
// much relatively; random signs keep the sum near sqrt(E) u: 5e-3 atol. Every path: head sizes 16
// to 128, whole and partial tiles, the resident kernel (S <= 256) and the streaming one, causal, a
// custom and a negative scale, and every mask form.
TEST(CudaAttention, FlashF32OnTf32) {
  KILN_REQUIRE_GPU();
  BuilderConfig config;
  config.tf32 = true;
  const double rtol = 1e-2, atol = 5e-3;
  uint64_t seed = 500;
  const auto make = [&](const Shape& shape) {
    return random_tensor(DataType::kF32, shape, seed++);
  };
  const auto check = [&](const AttentionParams& p, const std::vector<HostTensor>& in) {
    const auto r = cuda_testing::run_both_layer(p, in, config);
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "attention"), 1);  // not decomposed
    cuda_testing::expect_match(r, rtol, atol);
  };
  for (int64_t e : {32, 64, 128, 16}) {
    for (const auto& [l, s] :
         {std::pair<int64_t, int64_t>{128, 128}, {130, 77}, {300, 256}, {70, 300}, {49, 49}}) {
      for (bool causal : {false, true}) {
        SCOPED_TRACE("E=" + std::to_string(e) + " L=" + std::to_string(l) +
                     " S=" + std::to_string(s) + (causal ? " causal" : ""));
        check(AttentionParams{causal, false, 0},
              {make({2, 3, l, e}), make({2, 3, s, e}), make({2, 3, s, e})});
      }
    }
  }
  check(AttentionParams{true, false, 0.3},
        {make({5, 50, 64}), make({5, 90, 64}), make({5, 90, 64})});
  check(AttentionParams{false, false, -0.05},
        {make({2, 3, 70, 32}), make({2, 3, 40, 32}), make({2, 3, 40, 32})});
  // Masks, at swin's windows (49 keys, E = 32) and on the streaming kernel.
  for (const auto& [l, s, e] : {std::tuple<int64_t, int64_t, int64_t>{49, 49, 32}, {70, 300, 64}}) {
    SCOPED_TRACE("masks L=" + std::to_string(l) + " S=" + std::to_string(s));
    const HostTensor q = make({2, 3, l, e}), k = make({2, 3, s, e}), v = make({2, 3, s, e});
    check(AttentionParams{false, true, 0},
          {q, k, v, random_tensor(DataType::kBool, {l, s}, seed++, 0, 1)});
    HostTensor padding = random_tensor(DataType::kBool, {2, 1, 1, s}, seed++, 0, 1);
    for (int64_t j = 0; j < s; ++j) static_cast<uint8_t*>(padding.data())[j] = 0;
    check(AttentionParams{false, true, 0}, {q, k, v, padding});
    check(AttentionParams{true, true, 0},
          {q, k, v, padding_mask(DataType::kF32, {s - 3, std::min<int64_t>(s, 5)}, s)});
    check(AttentionParams{false, true, 0},
          {q, k, v, padding_mask(DataType::kF32, {s - 7, 4}, s, /*lowest=*/true)});
    check(AttentionParams{false, true, 0}, {q, k, v, make({2, 1, l, s})});
    check(AttentionParams{true, true, 0.2}, {q, k, v, make({3, l, s})});
    HostTensor minus_inf = make({l, s});
    for (int64_t i = 0; i < l * s; i += 3) {
      static_cast<float*>(minus_inf.data())[i] = -std::numeric_limits<float>::infinity();
    }
    check(AttentionParams{false, true, 0}, {q, k, v, minus_inf});
  }
  // Packed heads: one [B, rows, 3 * width] tensor for q, k and v, and cross-attention with q past
  // a pad column.
  AttentionParams self;
  self.heads = 4, self.head_size = 64, self.columns = {0, 256, 512};
  const HostTensor qkv = make({2, 130, 3 * 256});
  check(self, {qkv, qkv, qkv});
  AttentionParams cross;
  cross.causal = true, cross.scale = 0.2;
  cross.heads = 3, cross.head_size = 32, cross.columns = {8, 0, 96};
  check(cross, {make({3, 70, 8 + 96}), make({3, 77, 192}), make({3, 77, 192})});
  // The kernels' shapes: swin's windows on the resident kernel, E = 128 at 256 keys streaming.
  EXPECT_GT(cuda::flash_launch(DataType::kF32, 32, 49, 49, 64 * 3, 0, false).warps, 0);
  EXPECT_EQ(cuda::flash_launch(DataType::kF32, 128, 256, 256, 12, 0, false).warps, 0);
}

// Which f32 attention the builder keeps for the flash kernel, without a device (cuda_arch): with
// TF32 (kiln::compile's default) f32 attention stays one layer, marked tf32, through the plan's
// serialization, and attention written out as matmul, scale, bias and softmax (swin's) becomes
// one; with TF32 off both run as two matmuls and a softmax; and only where the target
// architecture's shared memory holds the f32 tiles.
TEST(CudaBuilder, F32AttentionIsFusedOnTf32) {
  const int64_t B = 2, H = 3, L = 49, E = 32;
  Network sdpa;
  {
    auto q = sdpa.add_input("q", DataType::kF32, {B, H, L, E});
    auto k = sdpa.add_input("k", DataType::kF32, {B, H, L, E});
    auto v = sdpa.add_input("v", DataType::kF32, {B, H, L, E});
    sdpa.mark_output(sdpa.add("attn", AttentionParams{false, false, 0}, {q, k, v}), "y");
  }
  Network written;
  {
    auto q = written.add_input("q", DataType::kF32, {B, H, L, E});
    auto k = written.add_input("k", DataType::kF32, {B, H, L, E});
    auto v = written.add_input("v", DataType::kF32, {B, H, L, E});
    MatMulParams qk;
    qk.transpose_b = true;
    auto scores = written.add("qk", qk, {q, k});
    scores = written.add("scale", ElementwiseParams{BinaryOp::kMul},
                         {scores, written.add_constant("s", Weights::from_floats({1}, {0.17f}))});
    std::vector<float> bias(static_cast<size_t>(H * L * L));
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.01f * static_cast<float>(i % 37) - 0.2f;
    scores =
        written.add("bias", ElementwiseParams{BinaryOp::kAdd},
                    {scores, written.add_constant("b", Weights::from_floats({1, H, L, L}, bias))});
    auto probs = written.add("softmax", SoftmaxParams{-1, false, false}, {scores});
    written.mark_output(written.add("pv", MatMulParams{}, {probs, v}), "y");
  }
  for (bool tf32 : {true, false}) {
    for (const Network* net : {&sdpa, &written}) {
      SCOPED_TRACE(std::string(net == &sdpa ? "attention" : "written out") +
                   (tf32 ? ", tf32" : ", no tf32"));
      BuilderConfig config;
      config.device = "cuda";
      config.tf32 = tf32;
      apply_switch(config, "cuda_arch=90");
      const Plan built = build(*net, config);
      const auto bytes = serialize_plan(built);
      const Plan plan = deserialize_plan(bytes.data(), bytes.size());
      int attention = 0, matmuls = 0;
      for (const Layer& l : plan.network.layers()) {
        if (const auto* a = std::get_if<AttentionParams>(&l.params)) {
          ++attention;
          EXPECT_TRUE(a->tf32);
          EXPECT_EQ(a->has_mask, net == &written);  // the bias, as an additive mask
        }
        matmuls += std::holds_alternative<MatMulParams>(l.params);
      }
      EXPECT_EQ(attention, tf32 ? 1 : 0) << network_to_text(plan.network);
      EXPECT_EQ(matmuls, tf32 ? 0 : 2) << network_to_text(plan.network);
    }
  }
  // Tiles the target's shared memory holds: f32 needs twice f16's bytes (streaming E = 128: 165
  // KiB; sm_86 and sm_89 allow 99 KiB a block, sm_80 163, sm_90 227).
  EXPECT_TRUE(cuda::fused_attention_fits(DataType::kF32, 128, 90));
  EXPECT_FALSE(cuda::fused_attention_fits(DataType::kF32, 128, 80));
  EXPECT_TRUE(cuda::fused_attention_fits(DataType::kF32, 112, 80));
  EXPECT_FALSE(cuda::fused_attention_fits(DataType::kF32, 80, 86));
  EXPECT_TRUE(cuda::fused_attention_fits(DataType::kF32, 64, 86));
  EXPECT_TRUE(cuda::fused_attention_fits(DataType::kF16, 128, 86));
  EXPECT_FALSE(cuda::fused_attention_fits(DataType::kF32, 40, 90));  // no kernel for E = 40
  // ... and so the builder: f32 attention of E = 128 is fused for sm_90, decomposed for sm_86.
  for (const auto& [arch, fused] : {std::pair{"90", 1}, {"86", 0}}) {
    SCOPED_TRACE(std::string("sm_") + arch);
    Network wide;
    auto q = wide.add_input("q", DataType::kF32, {B, H, L, 128});
    wide.mark_output(wide.add("attn", AttentionParams{false, false, 0}, {q, q, q}), "y");
    BuilderConfig config;
    config.device = "cuda";
    config.tf32 = true;
    apply_switch(config, std::string("cuda_arch=") + arch);
    EXPECT_EQ(cuda_testing::count_layers(build(wide, config), "attention"), fused);
  }
}

// The resident kernel's shape at few matrices (BERT's 12 heads at batch 1): blocks of 4 warps
// spread over 24 SMs; with attention_key_split=on each row tile's keys split between two warps
// that merge their rows (48 blocks); at batch 32 one warp takes all keys of its rows either way.
// Both forms answer as the CPU does: key padding (tiles wholly kept, wholly out and mixed),
// causal (a part with no tile left), an additive mask with -inf rows (nothing kept: zeros), a
// negative scale, ViT's 197 keys (4 key tiles, the last of 5 keys), and 256 keys with one row
// tile.
TEST(CudaAttention, KeySplitsAtFewMatrices) {
  KILN_REQUIRE_GPU();
  const cuda::FlashLaunch bert_b1 = cuda::flash_launch(DataType::kF16, 64, 128, 128, 12, 0, false);
  EXPECT_EQ(bert_b1.warps, 4);
  EXPECT_EQ(bert_b1.block_rows, 64);
  EXPECT_EQ(bert_b1.splits, 1);
  const cuda::FlashLaunch halves = cuda::flash_launch(DataType::kF16, 64, 128, 128, 12, 0, true);
  EXPECT_EQ(halves.warps, 4);
  EXPECT_EQ(halves.block_rows, 32);
  EXPECT_EQ(halves.splits, 2);
  EXPECT_EQ(cuda::flash_launch(DataType::kF16, 64, 128, 128, 384, 0, true).splits, 1);
  EXPECT_GT(cuda::flash_launch(DataType::kBF16, 64, 197, 197, 12, 0, true).splits, 1);
  EXPECT_EQ(cuda::flash_launch(DataType::kF16, 64, 70, 300, 12, 0, true).warps, 0);  // streaming
  EXPECT_THROW(cuda::flash_launch(DataType::kI32, 64, 128, 128, 12, 0, true), Error);
  EXPECT_THROW(cuda::flash_launch(DataType::kF32, 40, 128, 128, 12, 0, true), Error);

  uint64_t seed = 300;
  for (const auto& [dtype, rtol, atol] :
       {std::tuple{DataType::kF16, 1e-2, 2e-3}, std::tuple{DataType::kBF16, 3e-2, 1e-2}}) {
    const auto make = [&, dt = dtype](const Shape& shape) {
      return random_tensor(dt, shape, seed++);
    };
    for (const auto& [l, s] : {std::pair<int64_t, int64_t>{128, 128}, {197, 197}, {16, 256}}) {
      const HostTensor q = make({1, 12, l, 64}), k = make({1, 12, s, 64}), v = make({1, 12, s, 64});
      HostTensor minus_inf = random_tensor(DataType::kF32, {1, 1, l, s}, seed++);
      for (int64_t j = 0; j < s; ++j) {
        static_cast<float*>(minus_inf.data())[j] = -std::numeric_limits<float>::infinity();
      }
      HostTensor mixed = random_tensor(DataType::kBool, {1, 1, 1, s}, seed++, 0, 1);
      for (int64_t j = 0; j < std::min<int64_t>(s, 64); ++j) {
        static_cast<uint8_t*>(mixed.data())[j] = 1;  // the first key tile wholly kept
      }
      const std::vector<std::pair<AttentionParams, std::vector<HostTensor>>> layers = {
          {AttentionParams{false, false, 0}, {q, k, v}},
          {AttentionParams{true, false, 0}, {q, k, v}},
          {AttentionParams{false, false, -0.05}, {q, k, v}},
          {AttentionParams{false, true, 0}, {q, k, v, mixed}},
          {AttentionParams{false, true, 0}, {q, k, v, minus_inf}},
          {AttentionParams{true, true, 0}, {q, k, v, mixed}}};
      for (bool split : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " L=" + std::to_string(l) +
                     " S=" + std::to_string(s) + (split ? " attention_key_split=on" : ""));
        BuilderConfig config = flash_only();
        if (split) apply_switch(config, "attention_key_split=on");
        for (size_t i = 0; i < layers.size(); ++i) {
          SCOPED_TRACE("layer " + std::to_string(i));
          const auto r = cuda_testing::run_both_layer(layers[i].first, layers[i].second, config);
          EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "attention"), 1);
          cuda_testing::expect_match(r, rtol, atol);
        }
      }
    }
  }
}

// Attention the flash kernel does not take (f32 without TF32; f16 with E = 40) as the builder
// decomposes it, two batched GEMMs around a masked softmax, with every mask form: bool [L, S], key
// padding with a wholly padded sequence (zeros), padding with causal, per-query bool [B, 1, L, S],
// additive [L, S] with -inf entries and transformers' lowest-value padding; ViT's 197 keys and
// 1500 keys (the softmax's general kernel).
TEST(CudaAttention, DecomposedTakesEveryMask) {
  KILN_REQUIRE_GPU();
  uint64_t seed = 300;
  for (const auto& [dtype, l, s, e, rtol, atol] :
       {std::tuple<DataType, int64_t, int64_t, int64_t, double, double>{DataType::kF32, 197, 197,
                                                                        64, 1e-4, 1e-5},
        {DataType::kF32, 33, 1500, 32, 1e-4, 1e-5},
        {DataType::kF16, 70, 90, 40, 1e-2, 2e-3}}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " L=" + std::to_string(l) +
                 " S=" + std::to_string(s) + " E=" + std::to_string(e));
    const HostTensor q = random_tensor(dtype, {2, 3, l, e}, seed++),
                     k = random_tensor(dtype, {2, 3, s, e}, seed++),
                     v = random_tensor(dtype, {2, 3, s, e}, seed++);
    HostTensor additive = random_tensor(DataType::kF32, {l, s}, seed++);
    for (int64_t i = 0; i < l * s; i += 5) {
      static_cast<float*>(additive.data())[i] = -std::numeric_limits<float>::infinity();
    }
    const std::vector<std::pair<AttentionParams, HostTensor>> cases = {
        {AttentionParams{false, true, 0}, random_tensor(DataType::kBool, {l, s}, seed++, 0, 1)},
        {AttentionParams{false, true, 0}, padding_mask(DataType::kBool, {s - 3, 0}, s)},
        {AttentionParams{true, true, 0}, padding_mask(DataType::kBool, {s, 5}, s)},
        {AttentionParams{false, true, 0.2},
         random_tensor(DataType::kBool, {2, 1, l, s}, seed++, 0, 1)},
        {AttentionParams{false, true, 0}, additive},
        {AttentionParams{false, true, 0}, padding_mask(dtype, {s - 7, 4}, s, /*lowest=*/true)}};
    for (const auto& [p, mask] : cases) {
      const auto r = cuda_testing::run_both_layer(p, {q, k, v, mask});
      EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "attention"), 0);
      EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "softmax"), 1);
      cuda_testing::expect_match(r, rtol, atol);
    }
  }
}

// Packed heads (AttentionParams::heads): q, k, v as column ranges of [B, rows, width] tensors,
// one shared by all three or q apart (cross-attention), with and without masks, against the
// CPU's gather-and-attend.
TEST(CudaAttention, PackedHeadsF16AndBf16) {
  KILN_REQUIRE_GPU();
  uint64_t seed = 60;
  for (const auto& [dtype, rtol, atol] :
       {std::tuple{DataType::kF16, 1e-2, 2e-3}, std::tuple{DataType::kBF16, 3e-2, 1e-2}}) {
    SCOPED_TRACE(dtype_name(dtype));
    AttentionParams self;
    self.heads = 4, self.head_size = 64, self.columns = {0, 256, 512};
    const HostTensor qkv = random_tensor(dtype, {2, 130, 3 * 256}, seed++);
    compare_layer(self, {qkv, qkv, qkv}, rtol, atol);
    // ViT-B/16's layer at batch 32 (384 matrices of 197 rows): enough blocks that the resident
    // kernel's warps take several query tiles each (5 warps, 3 rounds, on a 132-SM device).
    AttentionParams vit;
    vit.heads = 12, vit.head_size = 64, vit.columns = {0, 768, 1536};
    const HostTensor vit_qkv = random_tensor(dtype, {32, 197, 3 * 768}, seed++);
    compare_layer(vit, {vit_qkv, vit_qkv, vit_qkv}, rtol, atol);
    AttentionParams cross;
    cross.causal = true, cross.scale = 0.2;
    cross.heads = 3, cross.head_size = 32, cross.columns = {8, 0, 96};  // q past a pad column
    compare_layer(
        cross,
        {random_tensor(dtype, {3, 70, 8 + 96}, seed++), random_tensor(dtype, {3, 77, 192}, seed++),
         random_tensor(dtype, {3, 77, 192}, seed++)},
        rtol, atol);
    // With masks ([B, heads, L, S] broadcast): key padding with a batch wholly masked (bool
    // [B, 1, 1, S]), causal with a [L, S] bool mask, an additive per-head [heads, L, S] bias.
    AttentionParams masked = self;
    masked.has_mask = true;
    HostTensor padding = random_tensor(DataType::kBool, {2, 1, 1, 130}, seed++, 0, 1);
    for (int64_t j = 0; j < 130; ++j) static_cast<uint8_t*>(padding.data())[j] = 0;
    compare_layer(masked, {qkv, qkv, qkv, padding}, rtol, atol);
    masked.causal = true;
    compare_layer(masked, {qkv, qkv, qkv, random_tensor(DataType::kBool, {130, 130}, seed++, 0, 1)},
                  rtol, atol);
    masked.causal = false;
    compare_layer(masked, {qkv, qkv, qkv, random_tensor(dtype, {4, 130, 130}, seed++)}, rtol, atol);
    // Grouped-query heads: 8 query heads over 2 key/value heads (q, k and v in one [B, L, (8 + 2
    // + 2) * 64] projection, Llama's layout), causal with a padding mask; and one key/value head.
    AttentionParams gqa;
    gqa.causal = true, gqa.has_mask = true;
    gqa.heads = 8, gqa.head_size = 64, gqa.kv_heads = 2, gqa.columns = {0, 512, 640};
    const HostTensor fused = random_tensor(dtype, {2, 130, 768}, seed++);
    compare_layer(gqa, {fused, fused, fused, padding}, rtol, atol);
    gqa.has_mask = false, gqa.kv_heads = 1, gqa.columns = {0, 512, 576};
    compare_layer(gqa, {fused, fused, fused}, rtol, atol);
  }
}

// The builder folds BERT's head split (reshape, permute, slices) and merge (permute, reshape)
// into one packed attention layer on cuda, with the values of the CPU plan.
TEST(CudaAttention, HeadSplitAndMergeFoldIntoTheLayer) {
  KILN_REQUIRE_GPU();
  const int64_t B = 2, L = 40, H = 3, E = 32;
  const HostTensor x = random_tensor(DataType::kF16, {B, L, 3 * H * E}, 70);
  const auto r = cuda_testing::run_both({x}, [&](Network& net, const std::vector<TensorId>& in) {
    ShuffleParams split;
    split.has_reshape = true, split.reshape = {B, L, 3, H, E}, split.second_perm = {2, 0, 3, 1, 4};
    const auto heads = net.add("split", split, {in[0]});
    std::vector<TensorId> qkv;
    for (int64_t i = 0; i < 3; ++i) {
      SliceParams s;
      s.axes = {0}, s.starts = {i}, s.ends = {i + 1}, s.steps = {1};
      ShuffleParams squeeze;
      squeeze.has_reshape = true, squeeze.reshape = {B, H, L, E};
      const std::string n = "qkv" + std::to_string(i);
      qkv.push_back(net.add(n, squeeze, {net.add(n + ".s", s, {heads})}));
    }
    const auto o = net.add("attn", AttentionParams{}, qkv);
    ShuffleParams m;
    m.first_perm = {0, 2, 1, 3}, m.has_reshape = true, m.reshape = {B, L, H * E};
    return std::vector<TensorId>{net.add("merge", m, {o})};
  });
  EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "attention"), 1);
  EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "shuffle"), 0);
  EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "slice"), 0);
  cuda_testing::expect_match(r, 1e-2, 2e-3);
}

// Window attention as Swin and MaxViT write it (q or k times a scalar, k permuted, a [1, H, L, S]
// position bias, Swin's shifted-window mask added in a [B, W, H, L, S] reshape of the scores,
// softmax, p v) runs as one attention layer on cuda, with the values of the CPU's separate layers.
TEST(CudaAttention, WrittenOutWindowAttentionIsOneLayer) {
  KILN_REQUIRE_GPU();
  const int64_t W = 3, H = 2, L = 49, E = 32;
  for (bool shifted : {false, true}) {
    SCOPED_TRACE(shifted);
    const Shape lead = shifted ? Shape{2 * W, H} : Shape{2, W, H};
    Shape qs = lead;
    qs.push_back(L);
    qs.push_back(E);
    const std::vector<HostTensor> in = {random_tensor(DataType::kF16, qs, 80),
                                        random_tensor(DataType::kF16, qs, 81),
                                        random_tensor(DataType::kF16, qs, 82)};
    const auto r = cuda_testing::run_both(in, [&](Network& net, const std::vector<TensorId>& x) {
      const auto half = [&](TensorId c) {
        return net.add(net.tensor(c).name + ".f16", CastParams{DataType::kF16}, {c});
      };
      const auto scale = half(net.add_constant("scale", Weights::from_floats({}, {0.17678f})));
      const auto q = net.add("qs", ElementwiseParams{BinaryOp::kMul}, {x[0], scale});
      ShuffleParams t;
      t.first_perm =
          shifted ? std::vector<int64_t>{0, 1, 3, 2} : std::vector<int64_t>{0, 1, 2, 4, 3};
      auto scores = net.add("qk", MatMulParams{}, {q, net.add("kt", t, {x[1]})});
      scores = net.add("biased", ElementwiseParams{BinaryOp::kAdd},
                       {scores, half(testing::random_constant(net, "bias", {1, H, L, L}, 83))});
      if (shifted) {
        ShuffleParams to5, to4;
        to5.has_reshape = to4.has_reshape = true;
        to5.reshape = {2, W, H, L, L}, to4.reshape = {2 * W, H, L, L};
        std::vector<float> mask(static_cast<size_t>(W * L * L));
        for (size_t i = 0; i < mask.size(); ++i) mask[i] = i % 7 == 3 ? -100.f : 0.f;
        const auto m = half(net.add_constant("mask", Weights::from_floats({W, 1, L, L}, mask)));
        scores = net.add("unwin", to4,
                         {net.add("masked", ElementwiseParams{BinaryOp::kAdd},
                                  {net.add("win", to5, {scores}), m})});
      }
      const auto p = net.add("softmax", SoftmaxParams{}, {scores});
      return std::vector<TensorId>{net.add("pv", MatMulParams{}, {p, x[2]})};
    });
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "attention"), 1);
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "softmax"), 0);
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "matmul"), 0);
    cuda_testing::expect_match(r, 1e-2, 3e-3);
  }
}

}  // namespace
}  // namespace kiln::engine
