// The scatter layer's reductions (torch.scatter_reduce with include_self) on the CPU backend,
// against hand-computed values: duplicates combine in order, NaN, ties, integers, f16, empty.
#include <cmath>
#include <limits>

#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::near;
using testing::run_one_layer;
using testing::tensor_from;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

HostTensor scatter(ScatterReduce reduce, int64_t axis, const HostTensor& data,
                   const HostTensor& idx, const HostTensor& upd) {
  return run_one_layer(ScatterParams{axis, reduce}, {data, idx, upd})[0];
}

TEST(ScatterReduce, MultiplyMaxMinOfFloats) {
  const auto f = [](const std::vector<double>& v) {
    return tensor_from(DataType::kF32, {static_cast<int64_t>(v.size())}, v);
  };
  const auto i = [](const std::vector<double>& v) {
    return tensor_from(DataType::kI64, {static_cast<int64_t>(v.size())}, v);
  };
  EXPECT_TRUE(near(scatter(ScatterReduce::kMul, 0, f({1, 2, 3, 4}), i({0, 0, 2}), f({2, 3, 0.5})),
                   {6, 2, 1.5, 4}, 0, 0));
  // NaN wins from either side (data or update); equal values change nothing; -1 is the last.
  const auto data = f({1, kNaN, 3, 5}), idx = i({0, 1, 2, 2, -1}), upd = f({2, 7, kNaN, 1, 5});
  EXPECT_TRUE(near(scatter(ScatterReduce::kMax, 0, data, idx, upd), {2, kNaN, kNaN, 5}, 0, 0));
  EXPECT_TRUE(near(scatter(ScatterReduce::kMin, 0, data, idx, upd), {1, kNaN, kNaN, 5}, 0, 0));
  // Among equals the value held stays: max(0, -0) is 0, max(-0, 0) is -0, as torch's std::max.
  auto z = scatter(ScatterReduce::kMax, 0, f({0, -0.0}), i({0, 1}), f({-0.0, 0}));
  EXPECT_FALSE(std::signbit(z.as<float>()[0]));
  EXPECT_TRUE(std::signbit(z.as<float>()[1]));
}

TEST(ScatterReduce, IntegersAlongTheLastAxis) {
  // [2, 3] data, [2, 2] indices into its columns, [2, 4] updates (only the first 2 columns read).
  const auto data = tensor_from(DataType::kI64, {2, 3}, {3, -2, 7, -9, 0, 4});
  const auto idx = tensor_from(DataType::kI32, {2, 2}, {1, 1, 0, 2});
  const auto upd = tensor_from(DataType::kI64, {2, 4}, {5, -1, 100, 100, -5, -7, 100, 100});
  EXPECT_TRUE(near(scatter(ScatterReduce::kMul, 1, data, idx, upd), {3, 10, 7, 45, 0, -28}, 0, 0));
  EXPECT_TRUE(near(scatter(ScatterReduce::kMax, 1, data, idx, upd), {3, 5, 7, -5, 0, 4}, 0, 0));
  EXPECT_TRUE(near(scatter(ScatterReduce::kMin, 1, data, idx, upd), {3, -2, 7, -9, 0, -7}, 0, 0));
  // int64 extremes compare exactly (no trip through double) and products wrap around.
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::lowest();
  HostTensor low(DataType::kI64, {2});
  low.as<int64_t>()[0] = kMin64;
  low.as<int64_t>()[1] = kMin64 + 1;
  HostTensor big(DataType::kI64, {2});
  big.as<int64_t>()[0] = kMin64 + 1;
  big.as<int64_t>()[1] = kMin64;
  const auto pos = tensor_from(DataType::kI64, {2}, {0, 1});
  auto mx = scatter(ScatterReduce::kMax, 0, low, pos, big);
  EXPECT_EQ(mx.as<int64_t>()[0], kMin64 + 1);
  EXPECT_EQ(mx.as<int64_t>()[1], kMin64 + 1);
  auto pr = scatter(ScatterReduce::kMul, 0, low, pos, tensor_from(DataType::kI64, {2}, {-1, 2}));
  EXPECT_EQ(pr.as<int64_t>()[0], kMin64);  // -(2^63) wraps to itself
  EXPECT_EQ(pr.as<int64_t>()[1], 2);       // (1 - 2^63) * 2 = 2 - 2^64 wraps to 2
}

TEST(ScatterReduce, HalfRoundsEachStepAndEmptyIndicesKeepData) {
  // f16 products round per update, as torch's f16 scatter_reduce: 1.5 * 3, then * f16(0.1).
  const auto data = tensor_from(DataType::kF16, {1}, {1.5});
  const auto upd = tensor_from(DataType::kF16, {2}, {3, 0.1});
  auto y = scatter(ScatterReduce::kMul, 0, data, tensor_from(DataType::kI64, {2}, {0, 0}), upd);
  EXPECT_EQ(y.dtype(), DataType::kF16);
  const float step = half_to_float(float_to_half(4.5f * half_to_float(float_to_half(0.1f))));
  EXPECT_TRUE(near(y, {step}, 0, 0));
  // No indices: the data as it was.
  const auto d = tensor_from(DataType::kF32, {2, 2}, {1, 2, 3, 4});
  for (ScatterReduce r : {ScatterReduce::kMul, ScatterReduce::kMax, ScatterReduce::kMin}) {
    EXPECT_TRUE(near(
        scatter(r, 0, d, HostTensor(DataType::kI64, {0, 2}), HostTensor(DataType::kF32, {0, 2})),
        {1, 2, 3, 4}, 0, 0));
  }
}

TEST(ScatterReduce, UnknownReductionNamesTheLayer) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {3});
  auto i = net.add_input("i", DataType::kI64, {3});
  try {
    net.add_layer("bad_reduce", ScatterParams{0, static_cast<ScatterReduce>(9)}, {x, i, x});
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(e.message().find("bad_reduce"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("unknown scatter reduction"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace kiln::engine
