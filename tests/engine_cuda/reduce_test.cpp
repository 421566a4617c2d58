// The CUDA reduce family against the CPU backend: reduce ops over axes (float, integer, bool),
// argmax/argmin, topk and the scans.
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

}  // namespace
}  // namespace kiln::engine
