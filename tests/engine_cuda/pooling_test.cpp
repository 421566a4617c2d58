// The CUDA pooling kernel against the CPU backend: max/average, padding, ceil_mode, dilation,
// count_include_pad, 1-3-D and adaptive.
#include <cmath>

#include "cuda_testing.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;

PoolingParams pool(PoolingKind kind, std::vector<int64_t> k, std::vector<int64_t> s,
                   std::vector<int64_t> pb, std::vector<int64_t> pe, bool ceil = false,
                   bool include_pad = true, std::vector<int64_t> dil = {}) {
  PoolingParams p;
  p.kind = kind;
  p.kernel = std::move(k);
  p.strides = std::move(s);
  p.padding_begin = std::move(pb);
  p.padding_end = std::move(pe);
  p.ceil_mode = ceil;
  p.count_include_pad = include_pad;
  p.dilations = std::move(dil);
  return p;
}

TEST(CudaPooling, WindowedAndAdaptive) {
  KILN_REQUIRE_GPU();
  const HostTensor x2 = random_tensor(DataType::kF32, {2, 3, 17, 18}, 1);
  for (PoolingKind kind : {PoolingKind::kMax, PoolingKind::kAverage}) {
    SCOPED_TRACE(kind == PoolingKind::kMax ? "max" : "avg");
    cuda_testing::compare_layer(pool(kind, {3, 3}, {2, 2}, {1, 1}, {1, 1}), {x2});
    cuda_testing::compare_layer(pool(kind, {3, 2}, {2, 3}, {1, 0}, {1, 0}, true), {x2});
    cuda_testing::compare_layer(pool(kind, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, false), {x2});
    cuda_testing::compare_layer(pool(kind, {4}, {3}, {1}, {1}),
                                {random_tensor(DataType::kF32, {2, 5, 40}, 2)});
    cuda_testing::compare_layer(pool(kind, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {0, 0, 0}),
                                {random_tensor(DataType::kF32, {1, 2, 6, 7, 8}, 3)});
    PoolingParams adaptive;
    adaptive.kind = kind;
    adaptive.adaptive = true;
    adaptive.output_size = {5, 7};
    cuda_testing::compare_layer(adaptive, {x2});
  }
  cuda_testing::compare_layer(
      pool(PoolingKind::kMax, {3, 3}, {1, 1}, {2, 2}, {2, 2}, false, true, {2, 2}), {x2});
  cuda_testing::compare_layer(pool(PoolingKind::kAverage, {2, 2}, {2, 2}, {0, 0}, {0, 0}),
                              {random_tensor(DataType::kF16, {2, 3, 8, 8}, 4)}, 1e-2, 1e-3);
}

// Channels-last windows in 16-byte words of channels (C = 64 in f16 and bf16, C = 8 in f32; C = 6
// takes the per-element kernel): resnet's 3x3/2 max pool, NaN winning, ceil mode, and averages
// with and without the padding in the divisor.
TEST(CudaPooling, ChannelsLastWindows) {
  KILN_REQUIRE_GPU();
  HostTensor f16 = random_tensor(DataType::kF16, {2, 17, 15, 64}, 40);
  static_cast<uint16_t*>(f16.data())[777] = 0x7e00;  // NaN
  const HostTensor bf16 = random_tensor(DataType::kBF16, {2, 9, 12, 64}, 41);
  const HostTensor f32 = random_tensor(DataType::kF32, {2, 11, 9, 8}, 42);
  const HostTensor odd = random_tensor(DataType::kF32, {2, 11, 9, 6}, 43);
  for (PoolingKind kind : {PoolingKind::kMax, PoolingKind::kAverage}) {
    SCOPED_TRACE(kind == PoolingKind::kMax ? "max" : "avg");
    for (bool include_pad : {true, false}) {
      PoolingParams p = pool(kind, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, include_pad);
      p.channels_last = true;
      cuda_testing::compare_layer(p, {f16}, 1e-2, 1e-3);
      cuda_testing::compare_layer(p, {bf16}, 2e-2, 1e-2);
      cuda_testing::compare_layer(p, {f32});
      cuda_testing::compare_layer(p, {odd});
      PoolingParams ceil = pool(kind, {3, 2}, {2, 3}, {1, 0}, {1, 0}, true, include_pad);
      ceil.channels_last = true;
      cuda_testing::compare_layer(ceil, {f32});
    }
  }
}

// More channels-last windows of the 2-D fast path: 2x2 windows, dilation, more 16-byte words per
// pixel than a warp has lanes (C = 320 in f16: 40 words), words that do not divide 32 (C = 24: 3),
// and 3-D windows, which take the 64-bit kernel.
TEST(CudaPooling, ChannelsLastWindowShapes) {
  KILN_REQUIRE_GPU();
  HostTensor wide = random_tensor(DataType::kF16, {2, 9, 7, 320}, 44);
  static_cast<uint16_t*>(wide.data())[3001] = 0x7e00;  // NaN
  const HostTensor narrow = random_tensor(DataType::kF16, {2, 9, 7, 24}, 45);
  const HostTensor f16 = random_tensor(DataType::kF16, {2, 17, 15, 64}, 46);
  const HostTensor f32 = random_tensor(DataType::kF32, {2, 10, 12, 8}, 47);
  const HostTensor three = random_tensor(DataType::kF16, {2, 6, 7, 8, 64}, 48);
  for (PoolingKind kind : {PoolingKind::kMax, PoolingKind::kAverage}) {
    SCOPED_TRACE(kind == PoolingKind::kMax ? "max" : "avg");
    for (bool include_pad : {true, false}) {
      PoolingParams p = pool(kind, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, include_pad);
      p.channels_last = true;
      cuda_testing::compare_layer(p, {wide}, 1e-2, 1e-3);
      cuda_testing::compare_layer(p, {narrow}, 1e-2, 1e-3);
    }
    PoolingParams two = pool(kind, {2, 2}, {2, 2}, {0, 0}, {0, 0});
    two.channels_last = true;
    cuda_testing::compare_layer(two, {f16}, 1e-2, 1e-3);
    cuda_testing::compare_layer(two, {f32});
    PoolingParams cube = pool(kind, {2, 2, 2}, {2, 2, 2}, {0, 1, 0}, {0, 1, 0});
    cube.channels_last = true;
    cuda_testing::compare_layer(cube, {three}, 1e-2, 1e-3);
  }
  PoolingParams dilated =
      pool(PoolingKind::kMax, {3, 3}, {1, 2}, {2, 2}, {2, 2}, false, true, {2, 2});
  dilated.channels_last = true;
  cuda_testing::compare_layer(dilated, {f16}, 1e-2, 1e-3);
  cuda_testing::compare_layer(dilated, {f32});
}

// Windows covering whole planes run as a reduction over the spatial dims: adaptive 1x1 and a
// full-size kernel, channels-first and channels-last, f16 and bf16 (16-byte words of channels
// where they divide), and NaN winning the max.
TEST(CudaPooling, GlobalPooling) {
  KILN_REQUIRE_GPU();
  HostTensor x = random_tensor(DataType::kF32, {2, 5, 33, 31}, 5);
  static_cast<float*>(x.data())[40] = NAN;
  const HostTensor x_last = random_tensor(DataType::kF32, {2, 33, 31, 5}, 6);
  for (PoolingKind kind : {PoolingKind::kMax, PoolingKind::kAverage}) {
    SCOPED_TRACE(kind == PoolingKind::kMax ? "max" : "avg");
    PoolingParams adaptive;
    adaptive.kind = kind;
    adaptive.adaptive = true;
    adaptive.output_size = {1, 1};
    cuda_testing::compare_layer(adaptive, {x});
    cuda_testing::compare_layer(pool(kind, {33, 31}, {}, {0, 0}, {0, 0}), {x});
    PoolingParams last = adaptive;
    last.channels_last = true;
    cuda_testing::compare_layer(last, {x_last});
    cuda_testing::compare_layer(last, {random_tensor(DataType::kF16, {4, 7, 7, 64}, 7)}, 1e-2,
                                1e-3);
    // Planes long enough to be split over blocks (partials combined by a second kernel).
    HostTensor big = random_tensor(DataType::kF32, {2, 64, 64, 8}, 8);
    static_cast<float*>(big.data())[5000] = NAN;
    cuda_testing::compare_layer(last, {big});
    cuda_testing::compare_layer(adaptive, {random_tensor(DataType::kF32, {1, 3, 100, 100}, 9)});
    cuda_testing::compare_layer(last, {random_tensor(DataType::kF16, {2, 56, 56, 24}, 10)}, 1e-2,
                                1e-3);
    cuda_testing::compare_layer(last, {random_tensor(DataType::kBF16, {3, 40, 40, 16}, 11)}, 2e-2,
                                1e-2);
  }
}

}  // namespace
}  // namespace kiln::engine
