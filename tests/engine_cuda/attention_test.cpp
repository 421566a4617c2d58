// The CUDA resize and attention kernels against the CPU backend: nearest/linear/cubic over 1-3
// spatial dims (sizes, scales, align_corners), attention with causal, bool and float masks and
// broadcast batches, and the flash attention kernel (f16/bf16) with its fallbacks.
#include <string>
#include <utility>

#include "cuda_testing.h"

namespace kiln::engine {
namespace {

using cuda_testing::compare_layer;
using testing::random_tensor;

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
      // L == S on whole tiles; L != S with tails of both query and key tiles.
      for (const auto& [l, s] : {std::pair<int64_t, int64_t>{128, 128}, {130, 77}}) {
        for (bool causal : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " E=" + std::to_string(e) + " L=" +
                       std::to_string(l) + " S=" + std::to_string(s) + (causal ? " causal" : ""));
          const auto r = cuda_testing::run_both_layer(
              AttentionParams{causal, false, 0},
              {make({2, 3, l, e}), make({2, 3, s, e}), make({2, 3, s, e})});
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
    // Fallbacks (the simple kernel, in double): a mask; E = 40 (causal, else the builder turns
    // the layer into two matmuls and a softmax).
    compare_layer(AttentionParams{false, true, 0},
                  {make({1, 2, 70, 64}), make({1, 2, 70, 64}), make({1, 2, 70, 64}),
                   random_tensor(DataType::kBool, {70, 70}, seed++, 0, 1)},
                  c.rtol, c.atol);
    compare_layer(AttentionParams{true, false, 0},
                  {make({1, 2, 33, 40}), make({1, 2, 33, 40}), make({1, 2, 33, 40})}, c.rtol,
                  c.atol);
  }
}

}  // namespace
}  // namespace kiln::engine
