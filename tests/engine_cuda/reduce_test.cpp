// The CUDA reduce family against the CPU backend: reduce ops over axes (float, integer, bool),
// argmax/argmin, topk, the scans, and nonzero (its rows counted while the engine runs).
#include <cmath>

#include "cuda_testing.h"

namespace kiln::engine {
namespace {

using cuda_testing::compare_layer;
using testing::random_tensor;

TEST(CudaReduce, OpsAndAxes) {
  KILN_REQUIRE_GPU();
  const HostTensor x = random_tensor(DataType::kF32, {3, 4, 5, 70}, 1, 0.5, 1.5);
  const std::vector<std::vector<int64_t>> axes = {{}, {0}, {1, 3}, {-1}, {0, 2}};
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
    for (const auto& a : axes) {
      for (bool keep : {false, true}) {
        SCOPED_TRACE(std::to_string(static_cast<int>(op)) + " axes " + std::to_string(a.size()) +
                     (keep ? " keep" : ""));
        compare_layer(ReduceParams{op, a, keep}, {x}, 1e-5, 1e-6);
      }
    }
  }
  const HostTensor i = random_tensor(DataType::kI64, {6, 33}, 2, -50, 50);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin}) {
    compare_layer(ReduceParams{op, {1}, false}, {i});
  }
  const HostTensor b = random_tensor(DataType::kBool, {5, 40}, 3, 0, 1);
  compare_layer(ReduceParams{ReduceOp::kAny, {1}, false}, {b});
  compare_layer(ReduceParams{ReduceOp::kAll, {0}, true}, {b});
  compare_layer(ReduceParams{ReduceOp::kSum, {2}, false},
                {random_tensor(DataType::kF16, {2, 3, 300}, 4)}, 1e-2, 1e-2);
  // One run of reduced dims (the [outer, m, inner] kernel), size-1 dims inside it, NaN.
  HostTensor n = random_tensor(DataType::kF32, {3, 1, 50, 1, 20, 7}, 5);
  static_cast<float*>(n.data())[123] = NAN;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin}) {
    compare_layer(ReduceParams{op, {2, 3, 4}, false}, {n}, 1e-5, 1e-6);
    compare_layer(ReduceParams{op, {1, 2}, true}, {n}, 1e-5, 1e-6);
  }
  compare_layer(ReduceParams{ReduceOp::kMean, {1, 2}, false},
                {random_tensor(DataType::kBF16, {4, 30, 30, 48}, 6)}, 2e-2, 1e-2);
}

TEST(CudaReduce, ArgMaxTopKCumSum) {
  KILN_REQUIRE_GPU();
  const HostTensor x = random_tensor(DataType::kF32, {4, 37, 6}, 5);
  for (int64_t axis : {0, 1, -1}) {
    SCOPED_TRACE(axis);
    compare_layer(ArgMaxParams{axis, false, false}, {x});
    compare_layer(ArgMaxParams{axis, true, true}, {x});
    compare_layer(TopKParams{3, axis, true, true}, {x});
    compare_layer(TopKParams{2, axis, false, true}, {x});
    compare_layer(ScanParams{ScanOp::kSum, axis, false, false}, {x}, 1e-5, 1e-5);
    compare_layer(ScanParams{ScanOp::kSum, axis, true, true}, {x}, 1e-5, 1e-5);
  }
  const HostTensor ints = random_tensor(DataType::kI64, {5, 20}, 6, -3, 3);  // many ties
  compare_layer(TopKParams{4, 1, true, true}, {ints});
  compare_layer(ArgMaxParams{1, false, false}, {ints});
  compare_layer(ScanParams{ScanOp::kSum, 1, false, false}, {ints});
}

// Every scan op against the CPU: products, logsumexp, and max/min with their indices over ties
// (integers), NaN and -inf/inf, f16 and bool.
TEST(CudaReduce, Scans) {
  KILN_REQUIRE_GPU();
  HostTensor x = random_tensor(DataType::kF32, {4, 37, 6}, 7, 0.5, 1.5);
  float* xf = static_cast<float*>(x.data());
  xf[40] = NAN;
  xf[100] = -INFINITY;
  xf[101] = INFINITY;
  xf[300] = NAN;
  const HostTensor ints = random_tensor(DataType::kI64, {5, 20}, 8, -3, 3);
  const HostTensor half = random_tensor(DataType::kF16, {3, 50}, 9);
  for (int64_t axis : {0, 1, -1}) {
    SCOPED_TRACE(axis);
    compare_layer(ScanParams{ScanOp::kProd, axis, false, false}, {x}, 1e-5, 1e-5);
    compare_layer(ScanParams{ScanOp::kProd, axis, true, true}, {x}, 1e-5, 1e-5);
    compare_layer(ScanParams{ScanOp::kLogSumExp, axis, false, false}, {x}, 1e-5, 1e-5);
    compare_layer(ScanParams{ScanOp::kLogSumExp, axis, false, true}, {x}, 1e-5, 1e-5);
    compare_layer(ScanParams{ScanOp::kMax, axis, false, false}, {x});
    compare_layer(ScanParams{ScanOp::kMin, axis, false, true}, {x});
  }
  for (ScanOp op : {ScanOp::kSum, ScanOp::kProd, ScanOp::kMax, ScanOp::kMin}) {
    SCOPED_TRACE(static_cast<int>(op));
    compare_layer(ScanParams{op, 1, false, false}, {ints});
    compare_layer(ScanParams{op, 1, false, false}, {half}, 1e-3, 1e-3);
  }
  compare_layer(ScanParams{ScanOp::kLogSumExp, 1, false, false}, {half}, 1e-3, 1e-3);
  compare_layer(ScanParams{ScanOp::kMax, 0, false, false},
                {random_tensor(DataType::kBool, {30, 3}, 10, 0, 1)});
}

// nonzero on empty, full and random masks of every rank up to 4 and of sizes that take one chunk
// of one tile, many tiles, and many chunks of many tiles (the compaction's three passes), against
// the CPU backend: the same rows in the same (row-major) order, and the same count.
TEST(CudaReduce, NonZeroOfEmptyFullAndRandomMasks) {
  KILN_REQUIRE_GPU();
  const std::vector<Shape> shapes = {{},     {7},        {0, 3},         {2, 3, 4},
                                     {1000}, {513, 257}, {3, 1000, 700}, {2, 3, 64, 129}};
  uint64_t seed = 0;
  for (DataType dtype : {DataType::kBool, DataType::kF32, DataType::kF16, DataType::kI64}) {
    for (const Shape& shape : shapes) {
      for (int kind : {0, 1, 2}) {
        for (double density : {0.3, 0.001}) {
          if (kind != 2 && density != 0.3) continue;
          SCOPED_TRACE(std::string(dtype_name(dtype)) + shape_to_string(shape) + " kind " +
                       std::to_string(kind) + " density " + std::to_string(density));
          const auto r = cuda_testing::run_both_layer(
              NonZeroParams{}, {testing::mask_of(dtype, shape, kind, ++seed, density)});
          cuda_testing::expect_match(r, 0, 0);
        }
      }
    }
  }
}

// A dynamic engine with a count in the middle (x[keep] as the converters write it: gather by the
// nonzero rows, then layers sized by the count) on the GPU, against the CPU backend, as the
// counts change from call to call; the bound planned at the profile's max.
TEST(CudaReduce, LayersAfterANonZeroCountAreSizedByIt) {
  KILN_REQUIRE_GPU();
  const int64_t D = 48;
  const Network net = testing::masked_rows_network(D, 64, 4096);
  BuilderConfig gpu_config;
  gpu_config.device = "cuda:0";
  const Plan cpu_plan = build(net, BuilderConfig{}), gpu_plan = build(net, gpu_config);
  ExecutionContext cpu(std::make_shared<const Engine>(cpu_plan.network, cpu_plan.target));
  ExecutionContext gpu(std::make_shared<const Engine>(gpu_plan.network, gpu_plan.target));
  uint64_t call = 0;
  for (const auto& [n, kind] : std::vector<std::pair<int64_t, int>>{
           {64, 2}, {4096, 0}, {4096, 1}, {1, 1}, {3000, 2}, {1, 0}, {4096, 2}, {64, 2}}) {
    SCOPED_TRACE("n " + std::to_string(n) + " kind " + std::to_string(kind));
    const std::vector<HostTensor> in = {random_tensor(DataType::kF32, {n, D}, ++call),
                                        testing::mask_of(DataType::kBool, {n}, kind, call)};
    const auto want = cpu.run(in), got = gpu.run(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].shape(), want[i].shape()) << "output " << i;
      EXPECT_TRUE(testing::near(got[i], testing::to_doubles(want[i]), 1e-5, 1e-5))
          << "output " << i;
    }
    EXPECT_EQ(gpu.executed_output_shape(0), want[0].shape());
  }
}

}  // namespace
}  // namespace kiln::engine
