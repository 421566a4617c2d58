// The CUDA resize and attention kernels against the CPU backend: nearest/linear/cubic over 1-3
// spatial dims (sizes, scales, align_corners), and attention with causal, bool and float masks
// and broadcast batches.
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

}  // namespace
}  // namespace kiln::engine
