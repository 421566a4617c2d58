// The CUDA normalization family against the CPU backend: softmax/log-softmax on every axis, masked
// and causal softmax, and batch, layer, group and instance normalization (with and without affine
// parameters).
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_testing.h"

namespace kiln::engine {
namespace {

using cuda_testing::compare_layer;
using testing::random_tensor;

TEST(CudaNormalization, Softmax) {
  KILN_REQUIRE_GPU();
  const HostTensor x = random_tensor(DataType::kF32, {3, 5, 67}, 1, -8, 8);
  for (int64_t axis : {0, 1, 2}) {
    for (bool log : {false, true}) {
      SCOPED_TRACE(std::to_string(axis) + (log ? " log" : ""));
      compare_layer(SoftmaxParams{axis, log}, {x}, 1e-5, 1e-6);
    }
  }
  compare_layer(SoftmaxParams{-1, false}, {random_tensor(DataType::kF32, {2, 5000}, 2)}, 1e-5,
                1e-7);
  compare_layer(SoftmaxParams{-1, false}, {random_tensor(DataType::kBF16, {4, 100}, 3)}, 1e-2,
                1e-3);
}

// A masked softmax (attention's weights) against the CPU: bool key padding [B, 1, 1, S] with a
// wholly masked row (zeros), per-row bool masks, additive [L, S] with -inf, causal alone and with
// padding; rows in registers (S = 8 and 64: vectors; 197: scalars) and on the general kernel
// (S = 1500); f32, f16 and bf16 scores.
TEST(CudaNormalization, MaskedSoftmax) {
  KILN_REQUIRE_GPU();
  uint64_t seed = 40;
  for (const auto& [dtype, rtol, atol] :
       {std::tuple{DataType::kF32, 1e-5, 1e-6}, std::tuple{DataType::kF16, 1e-2, 1e-3},
        std::tuple{DataType::kBF16, 2e-2, 1e-2}}) {
    for (int64_t s : {8, 64, 197, 1500}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " S=" + std::to_string(s));
      const int64_t l = 5;
      const HostTensor x = random_tensor(dtype, {2, 3, l, s}, seed++, -6, 6);
      HostTensor pad = random_tensor(DataType::kBool, {2, 1, 1, s}, seed++, 0, 1);
      for (int64_t j = 0; j < s; ++j) static_cast<uint8_t*>(pad.data())[s + j] = 0;
      compare_layer(SoftmaxParams{-1, false}, {x, pad}, rtol, atol);
      compare_layer(SoftmaxParams{-1, false},
                    {x, random_tensor(DataType::kBool, {2, 3, l, s}, seed++, 0, 1)}, rtol, atol);
      HostTensor additive = random_tensor(DataType::kF32, {l, s}, seed++, -3, 3);
      for (int64_t i = 0; i < l * s; i += 3) {
        static_cast<float*>(additive.data())[i] = -std::numeric_limits<float>::infinity();
      }
      compare_layer(SoftmaxParams{-1, false}, {x, additive}, rtol, atol);
      compare_layer(SoftmaxParams{-1, false, true}, {x}, rtol, atol);
      std::vector<double> kept(static_cast<size_t>(2 * s), 1.0);
      kept[static_cast<size_t>(s)] = kept[static_cast<size_t>(s + 1)] = 0;  // queries 0, 1: none
      const HostTensor late = testing::tensor_from(DataType::kBool, {2, 1, 1, s}, kept);
      compare_layer(SoftmaxParams{-1, false, true}, {x, late}, rtol, atol);
    }
  }
}

TEST(CudaNormalization, Kinds) {
  KILN_REQUIRE_GPU();
  const HostTensor x = random_tensor(DataType::kF32, {2, 6, 5, 7}, 4, -3, 5);
  const HostTensor scale = random_tensor(DataType::kF32, {6}, 5);
  const HostTensor bias = random_tensor(DataType::kF32, {6}, 6);
  const HostTensor mean = random_tensor(DataType::kF32, {6}, 7);
  const HostTensor var = random_tensor(DataType::kF32, {6}, 8, 0.5, 2);
  NormalizationParams batch{NormalizationKind::kBatch, 1e-5};
  compare_layer(batch, {x, scale, bias, mean, var});
  batch.has_affine = false;
  compare_layer(batch, {x, mean, var});
  NormalizationParams group{NormalizationKind::kGroup, 1e-5};
  group.num_groups = 3;
  compare_layer(group, {x, scale, bias}, 1e-5, 1e-5);
  NormalizationParams instance{NormalizationKind::kInstance, 1e-5};
  compare_layer(instance, {x, scale, bias}, 1e-5, 1e-5);
  instance.has_affine = false;
  compare_layer(instance, {x}, 1e-5, 1e-5);
  NormalizationParams layer{NormalizationKind::kLayer, 1e-5};
  layer.normalized_dims = 2;
  compare_layer(
      layer,
      {x, random_tensor(DataType::kF32, {5, 7}, 9), random_tensor(DataType::kF32, {5, 7}, 10)},
      1e-5, 1e-5);
  layer.normalized_dims = 1;
  layer.has_affine = false;
  compare_layer(layer, {random_tensor(DataType::kF32, {3, 4000}, 11, 100, 101)}, 1e-5, 1e-5);
  compare_layer(layer, {random_tensor(DataType::kF16, {3, 64}, 12)}, 1e-2, 1e-2);
  // Affine rows of x's dtype (loaded once per lane, as x's rows) and of another dtype.
  layer.has_affine = true;
  const HostTensor h = random_tensor(DataType::kF16, {6, 768}, 13);
  compare_layer(
      layer,
      {h, random_tensor(DataType::kF16, {768}, 14), random_tensor(DataType::kF16, {768}, 15)}, 1e-2,
      1e-2);
  compare_layer(
      layer,
      {h, random_tensor(DataType::kF32, {768}, 16), random_tensor(DataType::kF32, {768}, 17)}, 1e-2,
      1e-2);
  compare_layer(
      layer,
      {random_tensor(DataType::kBF16, {4, 80}, 18), random_tensor(DataType::kBF16, {80}, 19),
       random_tensor(DataType::kBF16, {80}, 20)},
      3e-2, 3e-2);
}

// RMS norm: the row kernel (typed scale of x's dtype, a scale of another dtype, none; f16 rows
// whose squares overflow f16), the general kernel past 1024 elements and over two dims.
TEST(CudaNormalization, RmsNorm) {
  KILN_REQUIRE_GPU();
  NormalizationParams rms{NormalizationKind::kRms, 1e-6};
  const HostTensor h = random_tensor(DataType::kF16, {6, 512}, 21, -400, 400);
  compare_layer(rms, {h, random_tensor(DataType::kF16, {512}, 22)}, 1e-2, 1e-2);
  compare_layer(rms, {h, random_tensor(DataType::kF32, {512}, 23)}, 1e-2, 1e-2);
  compare_layer(
      rms, {random_tensor(DataType::kBF16, {4, 80}, 24), random_tensor(DataType::kBF16, {80}, 25)},
      3e-2, 3e-2);
  rms.has_affine = false;
  compare_layer(rms, {random_tensor(DataType::kF32, {3, 4000}, 26)}, 1e-5, 1e-5);
  compare_layer(rms, {random_tensor(DataType::kF32, {3, 7, 5}, 27)}, 1e-5, 1e-5);
  rms.normalized_dims = 2;
  rms.has_affine = true;
  compare_layer(
      rms,
      {random_tensor(DataType::kF32, {3, 7, 5}, 28), random_tensor(DataType::kF32, {7, 5}, 29)},
      1e-5, 1e-5);
}

}  // namespace
}  // namespace kiln::engine
