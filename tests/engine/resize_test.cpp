// Resize on the CPU backend against per-element references of torch.nn.functional.interpolate's
// rules: nearest (any dtype), linear/bilinear/trilinear with align_corners both ways, bicubic.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::near;
using testing::random_tensor;
using testing::run_one_layer;

// Cubic convolution weight (torch's A = -0.75) at distance |x|.
double cubic_weight(double x) {
  const double a = -0.75;
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

std::vector<double> resize_ref(const HostTensor& x, const Shape& out, const ResizeParams& p) {
  const Shape& in = x.shape();
  const size_t spatial = in.size() - 2;
  const auto xv = testing::to_doubles(x);
  std::vector<double> r;
  for (int64_t e = 0; e < volume(out); ++e) {
    const auto o = testing::unflatten(out, e);
    // Per spatial dim: the source indices and weights this output reads.
    std::vector<std::vector<std::pair<int64_t, double>>> taps(spatial);
    for (size_t d = 0; d < spatial; ++d) {
      const int64_t n = in[d + 2], m = out[d + 2], j = o[d + 2];
      if (p.mode == ResizeMode::kNearest) {
        // torch computes the nearest index in float.
        const float s = p.scales.empty() ? static_cast<float>(n) / static_cast<float>(m)
                                         : static_cast<float>(1.0 / p.scales[d]);
        const int64_t i =
            std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<float>(j) * s)), n - 1);
        taps[d] = {{i, 1.0}};
        continue;
      }
      double scale =
          p.scales.empty() ? static_cast<double>(n) / static_cast<double>(m) : 1.0 / p.scales[d];
      if (p.align_corners)
        scale = m > 1 ? static_cast<double>(n - 1) / static_cast<double>(m - 1) : 0;
      double src = p.align_corners ? scale * static_cast<double>(j)
                                   : scale * (static_cast<double>(j) + 0.5) - 0.5;
      if (p.mode == ResizeMode::kLinear) {
        src = std::max(src, 0.0);
        const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(src)), n - 1);
        const double l = std::min(std::max(src - static_cast<double>(i0), 0.0), 1.0);
        taps[d] = {{i0, 1 - l}, {std::min(i0 + 1, n - 1), l}};
      } else {
        const int64_t f = static_cast<int64_t>(std::floor(src));
        for (int64_t k = -1; k <= 2; ++k) {
          taps[d].push_back({std::clamp<int64_t>(f + k, 0, n - 1),
                             cubic_weight(src - static_cast<double>(f + k))});
        }
      }
    }
    // Sum over every combination of taps.
    double acc = 0;
    std::vector<size_t> pick(spatial, 0);
    while (true) {
      std::vector<int64_t> idx{o[0], o[1]};
      double w = 1;
      for (size_t d = 0; d < spatial; ++d) {
        idx.push_back(taps[d][pick[d]].first);
        w *= taps[d][pick[d]].second;
      }
      acc += w * xv[static_cast<size_t>(testing::flat_index(in, idx))];
      size_t d = 0;
      while (d < spatial && ++pick[d] == taps[d].size()) pick[d++] = 0;
      if (d == spatial) break;
    }
    r.push_back(acc);
  }
  return r;
}

void check(const HostTensor& x, const ResizeParams& p, const Shape& want, double rtol = 1e-5,
           double atol = 1e-5) {
  auto out = run_one_layer(p, {x})[0];
  ASSERT_EQ(out.shape(), want);
  EXPECT_TRUE(near(out, resize_ref(x, want, p), rtol, atol))
      << "mode " << static_cast<int>(p.mode) << " align " << p.align_corners << " "
      << shape_to_string(x.shape()) << " -> " << shape_to_string(want);
}

TEST(Resize, NearestBySizeAndScaleEveryDtype) {
  for (DataType t : {DataType::kF32, DataType::kI32, DataType::kF16, DataType::kU8}) {
    auto x = random_tensor(t, {2, 3, 5, 7}, 1, 0, 100);
    check(x, {ResizeMode::kNearest, {9, 3}, {}, false}, {2, 3, 9, 3}, 0, 0);
    check(x, {ResizeMode::kNearest, {}, {2.0, 2.0}, false}, {2, 3, 10, 14}, 0, 0);
    check(x, {ResizeMode::kNearest, {}, {1.7, 0.6}, false}, {2, 3, 8, 4}, 0, 0);
  }
  auto v = random_tensor(DataType::kF32, {1, 2, 3, 4, 5}, 2);
  check(v, {ResizeMode::kNearest, {5, 2, 11}, {}, false}, {1, 2, 5, 2, 11}, 0, 0);
}

TEST(Resize, LinearAlignCornersBothWays) {
  for (bool align : {false, true}) {
    auto a = random_tensor(DataType::kF32, {2, 3, 10}, 3);
    check(a, {ResizeMode::kLinear, {17}, {}, align}, {2, 3, 17});
    check(a, {ResizeMode::kLinear, {4}, {}, align}, {2, 3, 4});
    check(a, {ResizeMode::kLinear, {1}, {}, align}, {2, 3, 1});
    auto b = random_tensor(DataType::kF32, {2, 3, 6, 5}, 4);
    check(b, {ResizeMode::kLinear, {11, 8}, {}, align}, {2, 3, 11, 8});
    check(b, {ResizeMode::kLinear, {}, {1.5, 0.7}, align}, {2, 3, 9, 3});
    check(b, {ResizeMode::kLinear, {}, {2.0, 2.0}, align}, {2, 3, 12, 10});
    auto c = random_tensor(DataType::kF32, {1, 2, 3, 4, 5}, 5);
    check(c, {ResizeMode::kLinear, {}, {1.5, 2.25, 0.8}, align}, {1, 2, 4, 9, 4});
  }
  auto big = random_tensor(DataType::kF32, {2, 8, 40, 40}, 6);
  check(big, {ResizeMode::kLinear, {64, 57}, {}, false}, {2, 8, 64, 57});
  auto h = random_tensor(DataType::kBF16, {1, 2, 4, 4}, 7);
  check(h, {ResizeMode::kLinear, {7, 9}, {}, true}, {1, 2, 7, 9}, 1e-2, 1e-2);
}

TEST(Resize, Bicubic) {
  for (bool align : {false, true}) {
    auto x = random_tensor(DataType::kF32, {1, 2, 5, 6}, 8);
    check(x, {ResizeMode::kCubic, {9, 4}, {}, align}, {1, 2, 9, 4});
    check(x, {ResizeMode::kCubic, {}, {2.5, 1.5}, align}, {1, 2, 12, 9});
  }
}

// 2-d resizes take a row-wise kernel, the others the generic one. A 2-d resize equals the 3-d
// resize of the same data with a leading spatial dim of 1 (whose one tap weighs 1, and 0 for
// cubic's other three), and the row kernel sums the taps in the generic kernel's order, so the
// two agree bit for bit.
TEST(Resize, TwoDimsRowKernelMatchesTheGenericOneExactly) {
  const HostTensor x = random_tensor(DataType::kF32, {2, 3, 9, 7}, 9);
  HostTensor x3(DataType::kF32, {2, 3, 1, 9, 7});
  std::memcpy(x3.data(), x.data(), x.nbytes());
  for (ResizeMode mode : {ResizeMode::kLinear, ResizeMode::kCubic, ResizeMode::kNearest}) {
    for (bool align : {false, true}) {
      if (mode == ResizeMode::kNearest && align) continue;
      SCOPED_TRACE(std::to_string(static_cast<int>(mode)) + (align ? " align" : ""));
      const auto two = run_one_layer(ResizeParams{mode, {20, 15}, {}, align}, {x})[0];
      const auto three = run_one_layer(ResizeParams{mode, {1, 20, 15}, {}, align}, {x3})[0];
      ASSERT_EQ(two.numel(), three.numel());
      EXPECT_EQ(std::memcmp(two.data(), three.data(), two.nbytes()), 0);
    }
  }
}

TEST(Resize, BadInputsNameTheLayer) {
  Network net;
  auto i = net.add_input("i", DataType::kI32, {1, 1, 4, 4});
  auto f = net.add_input("f", DataType::kF32, {1, 1, 4, 4});
  auto r2 = net.add_input("r2", DataType::kF32, {4, 4});
  const std::pair<const char*, std::pair<ResizeParams, TensorId>> cases[] = {
      {"int_linear", {{ResizeMode::kLinear, {8, 8}, {}, false}, i}},
      {"one_size", {{ResizeMode::kNearest, {8}, {}, false}, f}},
      {"no_size", {{ResizeMode::kNearest, {}, {}, false}, f}},
      {"bad_scale", {{ResizeMode::kNearest, {}, {2.0, -1.0}, false}, f}},
      {"rank2", {{ResizeMode::kNearest, {8}, {}, false}, r2}},
  };
  for (const auto& [name, c] : cases) {
    try {
      net.add(name, c.first, {c.second});
      ADD_FAILURE() << name << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(e.message().find(name), std::string::npos) << e.message();
    }
  }
  Network dyn;
  auto d = dyn.add_input("d", DataType::kF32, {1, 2, kDynamic, 4},
                         Profile{{1, 2, 2, 4}, {1, 2, 3, 4}, {1, 2, 8, 4}});
  auto y = dyn.add("up", ResizeParams{ResizeMode::kLinear, {}, {2.0, 2.0}, false}, {d});
  EXPECT_EQ(dyn.tensor(y).shape, (Shape{1, 2, kDynamic, 8}));
}

}  // namespace
}  // namespace kiln::engine
