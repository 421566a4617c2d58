// Resources: one engine run 100,000 times keeps a stable resident size, and an input whose
// activations do not fit in memory is a clear out-of-memory error that leaves the process usable.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "engine/builder.h"
#include "engine/runtime.h"
#include "engine_testing.h"
#include "util/errors.h"

#if defined(__SANITIZE_ADDRESS__)
#define KILN_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_TEST_UNDER_ASAN 1
#endif
#endif

namespace kiln::engine {
namespace {

// Resident set size in bytes (/proc/self/statm, second field, in pages).
size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t total_pages = 0, resident_pages = 0;
  statm >> total_pages >> resident_pages;
  return resident_pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// y = relu(x @ w + b) * 0.5 over a dynamic batch, z = sum(x, 1): a few layers, weights, an arena.
std::shared_ptr<const Engine> small_engine() {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 8}, Profile{{1, 8}, {4, 8}, {16, 8}});
  std::vector<float> wv(8 * 8);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = 0.125f * static_cast<float>(i % 5) - 0.25f;
  auto w = net.add_constant("w", Weights::from_floats({8, 8}, wv));
  auto b = net.add_constant("b", Weights::from_floats({8}, {0, 1, 0, -1, 0, 1, 0, -1}));
  auto half = net.add_constant("half", Weights::from_floats({1}, {0.5f}));
  auto m = net.add("mm", MatMulParams{}, {x, w});
  auto s = net.add("bias", ElementwiseParams{BinaryOp::kAdd}, {m, b});
  auto r = net.add("relu", ActivationParams{ActivationKind::kRelu}, {s});
  net.mark_output(net.add("scale", ElementwiseParams{BinaryOp::kMul}, {r, half}), "y");
  net.mark_output(net.add("sum", ReduceParams{ReduceOp::kSum, {1}, false}, {x}), "z");
  return std::make_shared<const Engine>(build(net, BuilderConfig{}).network);
}

// The same computation in float64, for checking results after many runs.
std::vector<double> expected_y(const HostTensor& x) {
  const auto xs = testing::to_doubles(x);
  const int64_t n = x.shape()[0];
  const double b[8] = {0, 1, 0, -1, 0, 1, 0, -1};
  std::vector<double> y;
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 8; ++j) {
      double acc = b[j];
      for (int k = 0; k < 8; ++k) acc += xs[i * 8 + k] * (0.125 * ((k * 8 + j) % 5) - 0.25);
      y.push_back(0.5 * std::max(acc, 0.0));
    }
  }
  return y;
}

TEST(Resources, HundredThousandRunsKeepResidentSizeStable) {
#ifdef KILN_TEST_UNDER_ASAN
  GTEST_SKIP() << "AddressSanitizer's quarantine grows the resident size by design; leaks are "
                  "checked by LeakSanitizer in `make test-asan`";
#endif
  auto engine = small_engine();
  ExecutionContext ctx(engine);
  // Inputs of changing batch sizes, so that shapes are re-resolved and outputs re-allocated.
  std::vector<HostTensor> inputs;
  for (int64_t n : {1, 3, 16, 4})
    inputs.push_back(testing::random_tensor(DataType::kF32, {n, 8}, n));
  constexpr int kWarmup = 5000, kRuns = 100000;
  for (int i = 0; i < kWarmup; ++i) ctx.run({inputs[i % inputs.size()]});
  const size_t before = resident_bytes();
  for (int i = 0; i < kRuns; ++i) {
    auto out = ctx.run({inputs[i % inputs.size()]});
    if (i % 25000 == 0) {
      ASSERT_TRUE(testing::near(out[0], expected_y(inputs[i % inputs.size()]), 1e-5, 1e-5));
    }
  }
  const size_t after = resident_bytes();
  const double growth = (static_cast<double>(after) - static_cast<double>(before)) / before;
  // In the XML report (--gtest_output=xml), for the record.
  RecordProperty("rss_before_bytes", std::to_string(before));
  RecordProperty("rss_after_bytes", std::to_string(after));
  EXPECT_LT(growth, 0.01) << "resident size " << before << " -> " << after << " bytes over "
                          << kRuns << " runs";
  // Still correct at the end.
  EXPECT_TRUE(testing::near(ctx.run({inputs[2]})[0], expected_y(inputs[2]), 1e-5, 1e-5));
}

// A dynamic engine called at 10,000 random shapes of its profile (batch and both spatial dims,
// 3,174 shapes: oneDNN primitives and resize taps per shape, the arena re-planned each time) keeps
// its resident size: what it keeps per shape is bounded, and results stay right. The bounded
// caches (oneDNN's holds 1,024 primitives) fill in the first few thousand calls (about 40 MB
// here, flat after some 4,000), which the warm-up covers.
TEST(Resources, TenThousandRandomShapesKeepResidentSizeStable) {
#ifdef KILN_TEST_UNDER_ASAN
  GTEST_SKIP() << "AddressSanitizer's quarantine grows the resident size by design";
#endif
  const Network net =
      testing::conv_resize_network(Profile{{1, 2, 2, 2}, {4, 2, 8, 8}, {6, 2, 24, 24}}, {2.0, 1.5});
  const Plan plan = build(net, BuilderConfig{});
  ExecutionContext ctx(std::make_shared<const Engine>(plan.network, plan.target));
  ExecutionContext reference(std::make_shared<const Engine>(net));  // unbuilt: layer by layer
  testing::ShapeDraws draw(12345);
  constexpr int kWarmup = 5000, kCalls = kWarmup + 10000;
  size_t before = 0;
  for (int i = 0; i < kCalls; ++i) {
    if (i == kWarmup) before = resident_bytes();
    const Shape shape = {draw.next(1, 6), 2, draw.next(2, 24), draw.next(2, 24)};
    const HostTensor in = testing::random_tensor(DataType::kF32, shape, static_cast<uint64_t>(i));
    const auto out = ctx.run({in});
    if (i % 997 == 0) {
      ASSERT_TRUE(testing::near(out[0], testing::to_doubles(reference.run({in})[0]), 1e-5, 1e-5))
          << shape_to_string(shape);
    }
  }
  const size_t after = resident_bytes();
  RecordProperty("rss_before_bytes", std::to_string(before));
  RecordProperty("rss_after_bytes", std::to_string(after));
  EXPECT_LT(static_cast<double>(after), static_cast<double>(before) * 1.02 + 4e6)
      << "resident size " << before << " -> " << after << " bytes over " << kCalls - kWarmup
      << " calls at random shapes";
  // Outside the profile: a clear error, and the context still runs.
  EXPECT_THROW(ctx.run({testing::random_tensor(DataType::kF32, {7, 2, 8, 8}, 1)}), ShapeMismatch);
  EXPECT_EQ(ctx.run({testing::random_tensor(DataType::kF32, {2, 2, 8, 8}, 2)})[0].shape(),
            (Shape{2, 4, 16, 12}));
}

TEST(Resources, ActivationsTooLargeForMemoryAreAClearErrorAndTheProcessStaysUsable) {
  // x [N, 1] + y [1, M] broadcasts to [N, M]: small inputs, an output of 2^21 * 2^21 floats (16
  // TiB), which no machine here has.
  Network net;
  const int64_t big = int64_t{1} << 21;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 1}, Profile{{1, 1}, {1, 1}, {big, 1}});
  auto y = net.add_input("y", DataType::kF32, {1, kDynamic}, Profile{{1, 1}, {1, 1}, {1, big}});
  auto s = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {x, y});
  net.mark_output(net.add("relu", ActivationParams{ActivationKind::kRelu}, {s}), "out");
  auto engine = std::make_shared<const Engine>(build(net, BuilderConfig{}).network);

  const HostTensor xs = testing::random_tensor(DataType::kF32, {big, 1}, 1);
  const HostTensor ys = testing::random_tensor(DataType::kF32, {1, big}, 2);
  ExecutionContext ctx(engine);
  try {
    ctx.run({xs, ys});
    FAIL() << "a 16 TiB activation was allocated";
  } catch (const DeviceError& e) {
    EXPECT_NE(e.message().find("out of host memory"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("17592186044416 bytes"), std::string::npos) << e.message();
  }
  // The same context and engine still run inputs that fit.
  const HostTensor xs_small = testing::tensor_from(DataType::kF32, {2, 1}, {1, -3});
  const HostTensor ys_small = testing::tensor_from(DataType::kF32, {1, 3}, {1, 2, 3});
  auto out = ctx.run({xs_small, ys_small});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(testing::near(out[0], {2, 3, 4, 0, 0, 0}));
  // As does a new context.
  ExecutionContext fresh(engine);
  EXPECT_TRUE(testing::near(fresh.run({xs_small, ys_small})[0], {2, 3, 4, 0, 0, 0}));
}

}  // namespace
}  // namespace kiln::engine
