// Layer parameters a corrupt or hostile plan can carry (the fuzzers found each): sizes whose
// arithmetic would overflow int64 and fill values no dtype holds are clear errors naming the
// layer, never undefined behaviour. fuzz/corpus/*/regress-* hold the plans themselves.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "engine/network.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

constexpr int64_t k2to47 = int64_t{1} << 47;

// Adds `params` as layer `bad` and returns the InvalidArgument message ("" if none was thrown).
template <class Params>
std::string add_error(Network& net, const Params& params, const std::vector<TensorId>& inputs) {
  try {
    net.add("bad", params, inputs);
  } catch (const InvalidArgument& e) {
    return e.message();
  }
  return "";
}

TEST(HostileParams, PoolingWindowPastTwoToThe48IsAnError) {
  // regress-pooling-dilation-overflow.plan: dilation 53249 * (kernel - 1) 2^48 - 2^16.
  Network net;
  auto x = net.add_input("x", DataType::kF32, {1, 1, 8});
  PoolingParams p;
  p.kernel = {(int64_t{1} << 48) - (1 << 16) + 1};
  p.dilations = {53249};
  const std::string msg = add_error(net, p, {x});
  EXPECT_NE(msg.find("layer `bad`: (pooling) dilation * (kernel - 1) 53249 * 281474976645120 is "
                     "past 2^48"),
            std::string::npos)
      << msg;
}

TEST(HostileParams, ConvolutionSizesPastTwoToThe48AreErrors) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {1, 1, 8});
  auto w = net.add_constant("w", Weights::from_floats({1, 1, 3}, {1, 2, 3}));
  ConvolutionParams dilated;
  dilated.dilations = {int64_t{1} << 62};
  std::string msg = add_error(net, dilated, {x, w});
  EXPECT_NE(msg.find("layer `bad` (convolution): dilations must be in [1, 2^48], got "
                     "4611686018427387904"),
            std::string::npos)
      << msg;
  // regress-conv-padding-overflow.plan: a padding of int64's maximum (the plan reader keeps the
  // extremes, which mean "to the end" for slices).
  ConvolutionParams padded;
  padded.padding_end = {std::numeric_limits<int64_t>::max()};
  msg = add_error(net, padded, {x, w});
  EXPECT_NE(msg.find("padding_end must be in [0, 2^48], got 9223372036854775807"),
            std::string::npos)
      << msg;
  ConvolutionParams transposed;
  transposed.transposed = true;
  transposed.strides = {k2to47};
  msg = add_error(net, transposed, {x, w});
  EXPECT_NE(msg.find("stride * (input - 1) 7 * 140737488355328 is past 2^48"), std::string::npos)
      << msg;
  // Weights of unknown output channels skip the divisibility check, leaving the product.
  auto dyn_w = net.add_input("dyn_w", DataType::kF32, {kDynamic, 1, 3},
                             Profile{{1, 1, 3}, {1, 1, 3}, {4, 1, 3}});
  ConvolutionParams grouped;
  grouped.groups = int64_t{1} << 62;
  msg = add_error(net, grouped, {x, dyn_w});
  EXPECT_NE(msg.find("(convolution) channels 1 * 4611686018427387904 is past 2^48"),
            std::string::npos)
      << msg;
}

TEST(HostileParams, ResizeScaleBeyondTwoToThe48IsAnError) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {1, 1, 4});
  ResizeParams p;
  p.scales = {1e300};
  const std::string msg = add_error(net, p, {x});
  EXPECT_NE(msg.find("makes dim 2 of [1, 1, 4] larger than 2^48"), std::string::npos) << msg;
}

TEST(HostileParams, FillValuesMustFitTheirDtype) {
  Network net;
  std::string msg =
      add_error(net, FillParams{FillMode::kConstant, DataType::kI32, {2}, 1e10, 0, 1}, {});
  EXPECT_NE(msg.find("layer `bad`: fill value 1e+10 does not fit i32"), std::string::npos) << msg;
  msg = add_error(net, FillParams{FillMode::kConstant, DataType::kU8, {2}, -1, 0, 1}, {});
  EXPECT_NE(msg.find("does not fit u8"), std::string::npos) << msg;
  // regress-fill-huge-start.state: a range starting at 1.8e223.
  msg = add_error(net, FillParams{FillMode::kRange, DataType::kI64, {3}, 0, 1.8e223, 1}, {});
  EXPECT_NE(msg.find("fill start 1.8e+223 does not fit i64"), std::string::npos) << msg;
  msg = add_error(net, FillParams{FillMode::kRange, DataType::kI64, {3}, 0, 9e18, 1e18}, {});
  EXPECT_NE(msg.find("fill end"), std::string::npos) << msg;
  msg =
      add_error(net, FillParams{FillMode::kConstant, DataType::kI64, {1}, std::nan(""), 0, 1}, {});
  EXPECT_NE(msg.find("does not fit i64"), std::string::npos) << msg;

  // What does fit still runs: the i64 extremes, and floats take any value.
  const auto run = [](const FillParams& p) { return testing::run_one_layer(p, {})[0]; };
  const auto lowest =
      run(FillParams{FillMode::kConstant, DataType::kI64, {1}, -9.2233720368547758e18});
  EXPECT_EQ(lowest.as<int64_t>()[0], std::numeric_limits<int64_t>::min());
  const auto range = run(FillParams{FillMode::kRange, DataType::kI8, {3}, 0, 125, 1});
  EXPECT_EQ(range.as<int8_t>()[2], 127);
  const auto huge = run(FillParams{FillMode::kRange, DataType::kF32, {2}, 0, 1.8e223, 1});
  EXPECT_TRUE(std::isinf(huge.as<float>()[0]));
}

}  // namespace
}  // namespace kiln::engine
