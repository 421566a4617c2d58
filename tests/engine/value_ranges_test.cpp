// Value ranges (passes/value_ranges.h): bounds from constants, ranges and fills through views,
// arithmetic, casts, selects and comparisons; nothing where a value could wrap or a weight may be
// refit.
#include "engine/passes/value_ranges.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::engine {
namespace {

struct Ranges {
  Network net;
  TensorId positions;  // arange(L), L dynamic

  Ranges() {
    const auto x = net.add_input("x", DataType::kF32, {kDynamic}, Profile{{1}, {8}, {64}});
    positions =
        net.add("positions", FillParams{FillMode::kRange, DataType::kI64, {kDynamic}, 0, 0, 1},
                {net.add("shape", ShapeParams{}, {x})});
  }
  TensorId scalar(const std::string& name, int64_t v) {
    return net.add_constant(name, Weights::from_ints({}, {v}));
  }
  TensorId op(BinaryOp o, TensorId a, TensorId b) {
    return net.add("op" + std::to_string(net.layers().size()), ElementwiseParams{o}, {a, b});
  }
  std::optional<ValueRange> range(TensorId id, const std::set<std::string>& keep = {}) {
    return value_range(net, NetworkIndex(net), id, keep);
  }
};

TEST(ValueRanges, FollowArithmeticFromRangesAndConstants) {
  Ranges r;
  const auto p = r.range(r.positions);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->lo, 0);
  EXPECT_TRUE(std::isinf(p->hi));
  const auto shifted = r.op(BinaryOp::kSub, r.positions, r.scalar("three", 3));  // >= -3
  EXPECT_EQ(r.range(shifted)->lo, -3);
  const auto halved = r.op(BinaryOp::kFloorDiv, shifted, r.scalar("two", 2));  // >= -2
  EXPECT_EQ(r.range(halved)->lo, -2);
  const auto clipped = r.op(BinaryOp::kMin, halved, r.scalar("ten", 10));  // [-2, 10]
  EXPECT_EQ(r.range(clipped)->lo, -2);
  EXPECT_EQ(r.range(clipped)->hi, 10);
  const auto negated = r.op(BinaryOp::kMul, clipped, r.scalar("minus", -1));  // [-10, 2]
  EXPECT_EQ(r.range(negated)->lo, -10);
  EXPECT_EQ(r.range(negated)->hi, 2);
  // Comparisons the range decides, and those it does not.
  EXPECT_TRUE(
      always_true(r.net, NetworkIndex(r.net), r.op(BinaryOp::kGe, clipped, r.scalar("m2", -2))));
  EXPECT_TRUE(always_true(r.net, NetworkIndex(r.net),
                          r.op(BinaryOp::kNe, negated, r.scalar("three_again", 3))));
  EXPECT_FALSE(
      always_true(r.net, NetworkIndex(r.net), r.op(BinaryOp::kGt, clipped, r.scalar("m1", -1))));
  // A select by a decided condition is the side it picks; an undecided one spans both.
  const auto lt0 = r.op(BinaryOp::kLt, r.positions, r.scalar("zero", 0));  // all false
  const auto picked = r.net.add("picked", SelectParams{}, {lt0, negated, r.positions});
  EXPECT_EQ(r.range(picked)->lo, 0);
  const auto both =
      r.net.add("both", SelectParams{},
                {r.op(BinaryOp::kLt, r.positions, r.scalar("five", 5)), negated, clipped});
  EXPECT_EQ(r.range(both)->lo, -10);
  EXPECT_EQ(r.range(both)->hi, 10);
}

TEST(ValueRanges, NothingWhereValuesWrapOrWeightsMayChange) {
  Ranges r;
  // i32 positions times 2^30 may wrap: nothing known.
  CastParams to_i32{DataType::kI32};
  const auto narrow = r.net.add("narrow", to_i32, {r.positions});
  EXPECT_FALSE(r.range(narrow).has_value());  // [0, inf) does not fit i32
  const auto small = r.net.add(
      "small", to_i32,
      {r.net.add("ten", ElementwiseParams{BinaryOp::kMin}, {r.positions, r.scalar("c10", 10)})});
  EXPECT_EQ(r.range(small)->hi, 10);
  const auto big = r.net.add_constant("big", Weights::from_ints({}, {int64_t{1} << 30}));
  const auto scaled = r.net.add("scaled", ElementwiseParams{BinaryOp::kMul},
                                {small, r.net.add("big32", to_i32, {big})});
  EXPECT_FALSE(r.range(scaled).has_value());
  // A constant's values are a range unless its weight may be refit.
  const auto w = r.scalar("w", 4);
  EXPECT_EQ(r.range(w)->lo, 4);
  EXPECT_FALSE(r.range(w, {"w"}).has_value());
  // Floats and floor divisions by what may be negative say nothing.
  EXPECT_FALSE(r.range(r.net.inputs()[0]).has_value());
  EXPECT_FALSE(r.range(r.op(BinaryOp::kFloorDiv, r.scalar("a", 5), r.positions)).has_value());
}

}  // namespace
}  // namespace kiln::engine
