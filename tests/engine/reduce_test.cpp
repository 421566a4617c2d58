// Reduce family (reduce, argmax/argmin, topk, scans) on the CPU backend against float64
// references: every op, axes forms, keep_dims, zero-size dims, dtypes, ties, bad input.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::near;
using testing::random_tensor;
using testing::run_one_layer;
using testing::tensor_from;
using testing::to_doubles;

// Reference reduce: output shape (with keep_dims) and values, folding with `op` in double.
std::vector<double> reference_reduce(ReduceOp op, const HostTensor& x, std::vector<int64_t> axes,
                                     Shape* out_shape, bool keep_dims) {
  const Shape& s = x.shape();
  const int64_t r = static_cast<int64_t>(s.size());
  std::vector<bool> red(s.size(), axes.empty());
  for (int64_t a : axes) red[static_cast<size_t>(a < 0 ? a + r : a)] = true;
  Shape kept_shape, shape;
  for (size_t d = 0; d < s.size(); ++d) {
    kept_shape.push_back(red[d] ? 1 : s[d]);
    if (!red[d] || keep_dims) shape.push_back(red[d] ? 1 : s[d]);
  }
  *out_shape = shape;
  const auto xs = to_doubles(x);
  const size_t n_out = static_cast<size_t>(volume(kept_shape));
  std::vector<double> acc(n_out), count(n_out, 0);
  for (auto& a : acc) {
    a = op == ReduceOp::kProd || op == ReduceOp::kAll ? 1
        : op == ReduceOp::kMax                        ? -INFINITY
        : op == ReduceOp::kMin                        ? INFINITY
                                                      : 0;
  }
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto idx = testing::unflatten(s, i);
    for (size_t d = 0; d < s.size(); ++d) idx[d] = red[d] ? 0 : idx[d];
    double& a = acc[static_cast<size_t>(testing::flat_index(kept_shape, idx))];
    const double v = xs[static_cast<size_t>(i)];
    ++count[static_cast<size_t>(testing::flat_index(kept_shape, idx))];
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        a += v;
        break;
      case ReduceOp::kProd:
        a *= v;
        break;
      case ReduceOp::kMax:
        a = std::max(a, v);
        break;
      case ReduceOp::kMin:
        a = std::min(a, v);
        break;
      case ReduceOp::kAny:
        a = a || v != 0;
        break;
      case ReduceOp::kAll:
        a = a && v != 0;
        break;
    }
  }
  if (op == ReduceOp::kMean) {
    for (size_t i = 0; i < n_out; ++i) acc[i] /= count[i];
  }
  return acc;
}

const ReduceOp kAllOps[] = {ReduceOp::kSum,  ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin,
                            ReduceOp::kProd, ReduceOp::kAny,  ReduceOp::kAll};

TEST(Reduce, EveryOpAndAxesFormF32) {
  const std::vector<std::vector<int64_t>> axes_cases = {{},     {0},     {-1},
                                                        {1, 3}, {-3, 0}, {0, 1, 2, 3}};
  auto x = random_tensor(DataType::kF32, {3, 4, 5, 6}, 11, -1.5, 1.5);
  // Some exact zeros so any/all see both outcomes.
  for (int64_t i = 0; i < x.numel(); i += 7) x.as<float>()[i] = 0;
  for (ReduceOp op : kAllOps) {
    for (const auto& axes : axes_cases) {
      for (bool keep : {false, true}) {
        Shape shape;
        const auto ref = reference_reduce(op, x, axes, &shape, keep);
        auto out = run_one_layer(ReduceParams{op, axes, keep}, {x})[0];
        ASSERT_EQ(out.shape(), shape);
        const bool logical = op == ReduceOp::kAny || op == ReduceOp::kAll;
        EXPECT_EQ(out.dtype(), logical ? DataType::kBool : DataType::kF32);
        EXPECT_TRUE(near(out, ref)) << static_cast<int>(op) << " keep " << keep;
      }
    }
  }
}

TEST(Reduce, LargeSumIsAccurateAndParallel) {
  auto x = random_tensor(DataType::kF32, {64, 3000}, 12, 0, 1);
  Shape shape;
  for (auto axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0}, std::vector<int64_t>{}}) {
    auto out = run_one_layer(ReduceParams{ReduceOp::kSum, axes, false}, {x})[0];
    EXPECT_TRUE(near(out, reference_reduce(ReduceOp::kSum, x, axes, &shape, false)));
  }
}

TEST(Reduce, MiddleDimsSumRowsInTheReferenceOrder) {
  // [N, H, W, C] over H and W (channels-last global pooling): rows of C added into double
  // accumulators, C past one task's 256 (a second, partial chunk); the same bits as summing each
  // output's elements in order in double.
  auto x = random_tensor(DataType::kF32, {2, 5, 3, 300}, 13, -1e3, 1e3);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
    for (bool keep : {false, true}) {
      Shape shape;
      const auto ref = reference_reduce(op, x, {1, 2}, &shape, keep);
      auto out = run_one_layer(ReduceParams{op, {1, 2}, keep}, {x})[0];
      ASSERT_EQ(out.shape(), shape);
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_EQ(out.as<float>()[i], static_cast<float>(ref[i])) << static_cast<int>(op) << i;
    }
  }
}

TEST(Reduce, IntegerIsExactInt64) {
  auto x = tensor_from(DataType::kI32, {2, 3}, {2000000000, 2000000000, 3, -7, 1, 5});
  auto sum = run_one_layer(ReduceParams{ReduceOp::kSum, {1}, false}, {x})[0];
  EXPECT_EQ(sum.dtype(), DataType::kI64);
  EXPECT_EQ(sum.as<int64_t>()[0], 4000000003LL);
  EXPECT_EQ(sum.as<int64_t>()[1], -1);
  // Beyond 2^53, so a double accumulator would round.
  auto f = tensor_from(DataType::kI64, {5}, {3000000, 5000000, -7, 11, 13});
  EXPECT_EQ(run_one_layer(ReduceParams{ReduceOp::kProd, {}, false}, {f})[0].as<int64_t>()[0],
            3000000LL * 5000000LL * -7 * 11 * 13);
  auto big = tensor_from(DataType::kI64, {2}, {9007199254740993.0, 0});
  big.as<int64_t>()[0] = 9007199254740993LL;  // not representable as double
  big.as<int64_t>()[1] = 2;
  EXPECT_EQ(run_one_layer(ReduceParams{ReduceOp::kSum, {}, false}, {big})[0].as<int64_t>()[0],
            9007199254740995LL);
  auto mx = run_one_layer(ReduceParams{ReduceOp::kMax, {0}, true}, {x})[0];
  EXPECT_EQ(mx.dtype(), DataType::kI32);
  EXPECT_TRUE(near(mx, {2000000000, 2000000000, 5}, 0, 0));
  auto b = tensor_from(DataType::kBool, {4}, {1, 0, 1, 1});
  EXPECT_TRUE(near(run_one_layer(ReduceParams{ReduceOp::kSum, {}, false}, {b})[0], {3}, 0, 0));
  EXPECT_TRUE(near(run_one_layer(ReduceParams{ReduceOp::kAll, {}, false}, {b})[0], {0}, 0, 0));
}

TEST(Reduce, HalfAndBfloat16) {
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    auto x = random_tensor(t, {4, 50}, 13);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
      Shape shape;
      auto out = run_one_layer(ReduceParams{op, {-1}, false}, {x})[0];
      EXPECT_EQ(out.dtype(), t);
      // Only the final rounding to the 11/8-bit mantissa differs from the reference.
      EXPECT_TRUE(near(out, reference_reduce(op, x, {-1}, &shape, false),
                       t == DataType::kF16 ? 1e-3 : 8e-3, 1e-2));
    }
  }
}

TEST(Reduce, ZeroSizeAndSizeOneDims) {
  HostTensor empty(DataType::kF32, {3, 0, 2});
  EXPECT_TRUE(near(run_one_layer(ReduceParams{ReduceOp::kSum, {1}, false}, {empty})[0],
                   std::vector<double>(6, 0.0), 0, 0));
  EXPECT_TRUE(near(run_one_layer(ReduceParams{ReduceOp::kProd, {1}, false}, {empty})[0],
                   std::vector<double>(6, 1.0), 0, 0));
  EXPECT_TRUE(near(run_one_layer(ReduceParams{ReduceOp::kAll, {1}, false}, {empty})[0],
                   std::vector<double>(6, 1.0), 0, 0));
  EXPECT_TRUE(near(run_one_layer(ReduceParams{ReduceOp::kMean, {1}, false}, {empty})[0],
                   std::vector<double>(6, NAN), 0, 0));
  auto kept = run_one_layer(ReduceParams{ReduceOp::kMax, {2}, true}, {empty})[0];
  EXPECT_EQ(kept.shape(), (Shape{3, 0, 1}));
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    try {
      run_one_layer(ReduceParams{op, {1}, false}, {empty});
      FAIL() << "max over a zero-size dim did not throw";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(e.message().find("layer"), std::string::npos) << e.message();
    }
  }
  auto one = random_tensor(DataType::kF32, {1, 5, 1}, 14);
  auto out = run_one_layer(ReduceParams{ReduceOp::kSum, {0, 2}, false}, {one})[0];
  EXPECT_EQ(out.shape(), (Shape{5}));
  EXPECT_TRUE(near(out, to_doubles(one)));
}

TEST(Reduce, NanPropagatesThroughMaxAndMin) {
  auto x = tensor_from(DataType::kF32, {2, 3}, {1, NAN, 3, 4, 5, 6});
  EXPECT_TRUE(near(run_one_layer(ReduceParams{ReduceOp::kMax, {1}, false}, {x})[0], {NAN, 6}));
  EXPECT_TRUE(near(run_one_layer(ReduceParams{ReduceOp::kMin, {1}, false}, {x})[0], {NAN, 4}));
}

TEST(ArgMax, FirstIndexTiesNanAndKeepDims) {
  auto x = tensor_from(DataType::kF32, {3, 4}, {1, 5, 5, 0, 2, NAN, 7, NAN, -1, -1, 3, -1});
  EXPECT_TRUE(near(run_one_layer(ArgMaxParams{-1, false, false}, {x})[0], {1, 1, 2}, 0, 0));
  EXPECT_TRUE(near(run_one_layer(ArgMaxParams{1, false, true}, {x})[0], {3, 1, 0}, 0, 0));
  auto k = run_one_layer(ArgMaxParams{0, true, false}, {x})[0];
  EXPECT_EQ(k.shape(), (Shape{1, 4}));
  EXPECT_EQ(k.dtype(), DataType::kI64);
  EXPECT_TRUE(near(k, {1, 1, 1, 1}, 0, 0));  // column 1 holds a NaN
}

TEST(ArgMax, RandomAgainstReference) {
  for (DataType t : {DataType::kF32, DataType::kI32, DataType::kBF16}) {
    auto x = random_tensor(t, {5, 7, 9}, 15, -20, 20);
    const auto xs = to_doubles(x);
    for (bool is_min : {false, true}) {
      std::vector<double> ref;
      for (int64_t a = 0; a < 5; ++a) {
        for (int64_t c = 0; c < 9; ++c) {
          int64_t best = 0;
          for (int64_t b = 1; b < 7; ++b) {
            const double v = xs[static_cast<size_t>((a * 7 + b) * 9 + c)];
            const double w = xs[static_cast<size_t>((a * 7 + best) * 9 + c)];
            if (is_min ? v < w : v > w) best = b;
          }
          ref.push_back(static_cast<double>(best));
        }
      }
      EXPECT_TRUE(near(run_one_layer(ArgMaxParams{-2, false, is_min}, {x})[0], ref, 0, 0));
    }
  }
}

TEST(TopK, LargestSmallestWithTies) {
  auto x = tensor_from(DataType::kF32, {2, 5}, {3, 1, 3, 2, 1, 0, NAN, 4, -1, 4});
  auto big = run_one_layer(TopKParams{3, -1, true, true}, {x});
  ASSERT_EQ(big.size(), 2u);
  EXPECT_EQ(big[0].shape(), (Shape{2, 3}));
  EXPECT_TRUE(near(big[0], {3, 3, 2, NAN, 4, 4}, 0, 0));
  EXPECT_TRUE(near(big[1], {0, 2, 3, 1, 2, 4}, 0, 0));
  auto small = run_one_layer(TopKParams{2, 1, false, true}, {x});
  EXPECT_TRUE(near(small[0], {1, 1, -1, 0}, 0, 0));
  EXPECT_TRUE(near(small[1], {1, 4, 3, 0}, 0, 0));
}

TEST(TopK, RandomAlongInnerAxisAndIntegers) {
  for (DataType t : {DataType::kF32, DataType::kI64, DataType::kF16}) {
    auto x = random_tensor(t, {3, 10, 4}, 16, -50, 50);
    const auto xs = to_doubles(x);
    auto out = run_one_layer(TopKParams{4, 1, true, true}, {x});
    EXPECT_EQ(out[0].shape(), (Shape{3, 4, 4}));
    EXPECT_EQ(out[0].dtype(), t);
    std::vector<double> ref_v(48), ref_i(48);
    for (int64_t a = 0; a < 3; ++a) {
      for (int64_t c = 0; c < 4; ++c) {
        std::vector<std::pair<double, int64_t>> row;
        for (int64_t b = 0; b < 10; ++b)
          row.push_back({-xs[static_cast<size_t>((a * 10 + b) * 4 + c)], b});
        std::stable_sort(row.begin(), row.end(),
                         [](const auto& u, const auto& v) { return u.first < v.first; });
        for (int64_t b = 0; b < 4; ++b) {
          ref_v[static_cast<size_t>((a * 4 + b) * 4 + c)] = -row[static_cast<size_t>(b)].first;
          ref_i[static_cast<size_t>((a * 4 + b) * 4 + c)] =
              static_cast<double>(row[static_cast<size_t>(b)].second);
        }
      }
    }
    EXPECT_TRUE(near(out[0], ref_v, 0, 0));
    EXPECT_TRUE(near(out[1], ref_i, 0, 0));
  }
}

TEST(Scan, SumExclusiveReverseAndIntegers) {
  auto x = random_tensor(DataType::kF32, {3, 6, 2}, 17);
  const auto xs = to_doubles(x);
  for (bool exclusive : {false, true}) {
    for (bool reverse : {false, true}) {
      std::vector<double> ref(xs.size());
      for (int64_t a = 0; a < 3; ++a) {
        for (int64_t c = 0; c < 2; ++c) {
          for (int64_t b = 0; b < 6; ++b) {
            double s = 0;
            for (int64_t j = 0; j < 6; ++j) {
              const bool before = reverse ? j > b : j < b;
              if (before || (!exclusive && j == b))
                s += xs[static_cast<size_t>((a * 6 + j) * 2 + c)];
            }
            ref[static_cast<size_t>((a * 6 + b) * 2 + c)] = s;
          }
        }
      }
      EXPECT_TRUE(
          near(run_one_layer(ScanParams{ScanOp::kSum, -2, exclusive, reverse}, {x})[0], ref))
          << exclusive << reverse;
    }
  }
  auto i = tensor_from(DataType::kI32, {4}, {2000000000, 2000000000, -1, 5});
  auto ci = run_one_layer(ScanParams{ScanOp::kSum, 0, false, false}, {i})[0];
  EXPECT_EQ(ci.dtype(), DataType::kI64);
  EXPECT_EQ(ci.as<int64_t>()[1], 4000000000LL);
  EXPECT_EQ(ci.as<int64_t>()[3], 4000000004LL);
  HostTensor empty(DataType::kF32, {0, 3});
  EXPECT_EQ(run_one_layer(ScanParams{ScanOp::kSum, 0, false, false}, {empty})[0].shape(),
            (Shape{0, 3}));
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

ScanParams scan(ScanOp op, int64_t axis, bool exclusive = false, bool reverse = false) {
  return ScanParams{op, axis, exclusive, reverse};
}

TEST(Scan, ProdOfFloatsAndIntegers) {
  auto x = tensor_from(DataType::kF32, {4}, {2, -1, 0.5, 3});
  EXPECT_TRUE(near(run_one_layer(scan(ScanOp::kProd, 0), {x})[0], {2, -2, -1, -3}, 0, 0));
  // Exclusive from the end: each leaves out itself and what comes before it.
  EXPECT_TRUE(
      near(run_one_layer(scan(ScanOp::kProd, 0, true, true), {x})[0], {-1.5, 1.5, 3, 1}, 0, 0));
  // Integers (and bools) multiply in int64, as torch.cumprod: 1e10 leaves int32.
  auto i = tensor_from(DataType::kI32, {3}, {100000, 100000, 3});
  auto pi = run_one_layer(scan(ScanOp::kProd, 0), {i})[0];
  EXPECT_EQ(pi.dtype(), DataType::kI64);
  EXPECT_EQ(pi.as<int64_t>()[1], 10000000000LL);
  EXPECT_EQ(pi.as<int64_t>()[2], 30000000000LL);
  auto b = run_one_layer(scan(ScanOp::kProd, 0), {tensor_from(DataType::kBool, {3}, {1, 0, 1})});
  EXPECT_EQ(b[0].dtype(), DataType::kI64);
  EXPECT_TRUE(near(b[0], {1, 0, 0}, 0, 0));
  // f16 products run in double, rounded to f16 once per output (not per step).
  auto h = tensor_from(DataType::kF16, {3}, {0.1, 0.1, 100});
  auto ph = run_one_layer(scan(ScanOp::kProd, 0), {h})[0];
  EXPECT_EQ(ph.dtype(), DataType::kF16);
  const double h01 = half_to_float(float_to_half(0.1f));
  EXPECT_TRUE(near(ph,
                   {h01, half_to_float(float_to_half(static_cast<float>(h01 * h01))),
                    half_to_float(float_to_half(static_cast<float>(h01 * h01 * 100)))},
                   0, 0));
}

// torch.cummax/cummin: the last of equal values and the last NaN give the index; NaN stays.
TEST(Scan, MaxMinTiesAndNaN) {
  auto x = tensor_from(DataType::kF32, {8}, {1, 3, 3, 2, kNaN, 5, kNaN, 1});
  auto mx = run_one_layer(scan(ScanOp::kMax, 0), {x});
  ASSERT_EQ(mx.size(), 2u);
  EXPECT_EQ(mx[0].dtype(), DataType::kF32);
  EXPECT_EQ(mx[1].dtype(), DataType::kI64);
  EXPECT_TRUE(near(mx[0], {1, 3, 3, 3, kNaN, kNaN, kNaN, kNaN}, 0, 0));
  EXPECT_TRUE(near(mx[1], {0, 1, 2, 2, 4, 4, 6, 6}, 0, 0));
  auto mn = run_one_layer(scan(ScanOp::kMin, 0), {x});
  EXPECT_TRUE(near(mn[0], {1, 1, 1, 1, kNaN, kNaN, kNaN, kNaN}, 0, 0));
  EXPECT_TRUE(near(mn[1], {0, 0, 0, 0, 4, 4, 6, 6}, 0, 0));
  auto i = tensor_from(DataType::kI64, {8}, {1, 3, 3, 2, 0, 5, 5, 1});
  auto mi = run_one_layer(scan(ScanOp::kMax, 0), {i});
  EXPECT_EQ(mi[0].dtype(), DataType::kI64);
  EXPECT_TRUE(near(mi[0], {1, 3, 3, 3, 3, 5, 5, 5}, 0, 0));
  EXPECT_TRUE(near(mi[1], {0, 1, 2, 2, 2, 5, 6, 6}, 0, 0));
  auto ni = run_one_layer(scan(ScanOp::kMin, 0), {i});
  EXPECT_TRUE(near(ni[0], {1, 1, 1, 1, 0, 0, 0, 0}, 0, 0));
  EXPECT_TRUE(near(ni[1], {0, 0, 0, 0, 4, 4, 4, 4}, 0, 0));
  // Along dim 0 of [3, 2]; f16 and bool keep their dtype.
  auto m = tensor_from(DataType::kF16, {3, 2}, {1, 5, 2, 5, 0, 7});
  auto mm = run_one_layer(scan(ScanOp::kMax, 0), {m});
  EXPECT_EQ(mm[0].dtype(), DataType::kF16);
  EXPECT_TRUE(near(mm[0], {1, 5, 2, 5, 2, 7}, 0, 0));
  EXPECT_TRUE(near(mm[1], {0, 0, 1, 1, 1, 2}, 0, 0));
  auto b = run_one_layer(scan(ScanOp::kMax, 0), {tensor_from(DataType::kBool, {3}, {1, 0, 1})});
  EXPECT_EQ(b[0].dtype(), DataType::kBool);
  EXPECT_TRUE(near(b[0], {1, 1, 1}, 0, 0));
  EXPECT_TRUE(near(b[1], {0, 0, 2}, 0, 0));
  // Empty dims give empty values and indices.
  auto e = run_one_layer(scan(ScanOp::kMin, 0), {HostTensor(DataType::kF32, {0, 3})});
  EXPECT_EQ(e[0].shape(), (Shape{0, 3}));
  EXPECT_EQ(e[1].shape(), (Shape{0, 3}));
}

// torch.logcumsumexp: -inf is the identity, equal infinities stay, NaN propagates.
TEST(Scan, LogSumExpEdges) {
  const auto run = [](const std::vector<double>& v, DataType t = DataType::kF32) {
    return run_one_layer(scan(ScanOp::kLogSumExp, 0),
                         {tensor_from(t, {static_cast<int64_t>(v.size())}, v)})[0];
  };
  EXPECT_TRUE(near(run({-kInf, -kInf, 1}), {-kInf, -kInf, 1}, 0, 0));
  EXPECT_TRUE(near(run({kInf, kInf, 1}), {kInf, kInf, kInf}, 0, 0));
  EXPECT_TRUE(near(run({1, kInf, -kInf}), {1, kInf, kInf}, 0, 0));
  EXPECT_TRUE(near(run({kNaN, 1}), {kNaN, kNaN}, 0, 0));
  EXPECT_TRUE(near(run({1, kNaN, kInf}), {1, kNaN, kNaN}, 0, 0));
  EXPECT_TRUE(near(run({0, 0, 0}), {0, std::log(2.0), std::log(3.0)}, 1e-7, 0));
  EXPECT_TRUE(near(run({1, 2}), {1, std::log(std::exp(1.0) + std::exp(2.0))}, 1e-7, 0));
  // Large values do not overflow (the running value is the larger plus log1p).
  EXPECT_TRUE(near(run({1000, 1000}), {1000, 1000 + std::log(2.0)}, 1e-7, 0));
  // f16 rounds once: log(e + e^2) = 2.31326 is 2.3125 in f16.
  auto h = run({1, 2}, DataType::kF16);
  EXPECT_EQ(h.dtype(), DataType::kF16);
  EXPECT_TRUE(near(h, {1, 2.3125}, 0, 0));
  // Exclusive from the end.
  EXPECT_TRUE(near(run_one_layer(scan(ScanOp::kLogSumExp, 0, true, true),
                                 {tensor_from(DataType::kF32, {3}, {0, 0, 0})})[0],
                   {std::log(2.0), 0, -kInf}, 1e-7, 0));
}

template <class E>
void expect_error_naming(const std::function<void()>& f, const std::string& name) {
  try {
    f();
    ADD_FAILURE() << "no error for " << name;
  } catch (const E& e) {
    EXPECT_NE(e.message().find(name), std::string::npos) << e.message();
  }
}

TEST(Reduce, BadInputNamesTheLayer) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 3});
  auto i = net.add_input("i", DataType::kI64, {2, 3});
  auto add = [&](const std::string& n, LayerParams p, std::vector<TensorId> in) {
    return [&net, n, p, in] { net.add_layer(n, p, in); };
  };
  expect_error_naming<InvalidArgument>(add("dup_axes", ReduceParams{ReduceOp::kSum, {1, -1}}, {x}),
                                       "dup_axes");
  expect_error_naming<InvalidArgument>(add("bad_axis", ReduceParams{ReduceOp::kSum, {2}}, {x}),
                                       "bad_axis");
  expect_error_naming<InvalidArgument>(add("int_mean", ReduceParams{ReduceOp::kMean, {}}, {i}),
                                       "int_mean");
  expect_error_naming<InvalidArgument>(add("two_in", ReduceParams{ReduceOp::kSum, {}}, {x, x}),
                                       "two_in");
  expect_error_naming<InvalidArgument>(add("big_k", TopKParams{4, -1, true, true}, {x}), "big_k");
  expect_error_naming<InvalidArgument>(add("argmax_axis", ArgMaxParams{5, false, false}, {x}),
                                       "argmax_axis");
  expect_error_naming<InvalidArgument>(add("scan_axis", scan(ScanOp::kSum, -3), {x}), "scan_axis");
  expect_error_naming<InvalidArgument>(add("int_logsumexp", scan(ScanOp::kLogSumExp, 0), {i}),
                                       "int_logsumexp");
  expect_error_naming<InvalidArgument>(add("exclusive_max", scan(ScanOp::kMax, 0, true), {x}),
                                       "exclusive_max");
  expect_error_naming<InvalidArgument>(add("bad_op", scan(static_cast<ScanOp>(9), 0), {x}),
                                       "bad_op");
}

TEST(Reduce, DynamicDimsStaySymbolic) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 4, 5},
                         Profile{{1, 4, 5}, {2, 4, 5}, {8, 4, 5}});
  auto r = net.add("r", ReduceParams{ReduceOp::kSum, {1}, false}, {x});
  EXPECT_EQ(net.tensor(r).shape, (Shape{kDynamic, 5}));
  auto r0 = net.add("r0", ReduceParams{ReduceOp::kMax, {0}, true}, {x});
  EXPECT_EQ(net.tensor(r0).shape, (Shape{1, 4, 5}));
  auto tk = net.add_layer("tk", TopKParams{2, 0, true, true}, {x});
  EXPECT_EQ(net.tensor(tk[0]).shape, (Shape{2, 4, 5}));
  auto am = net.add("am", ArgMaxParams{-1, false, false}, {x});
  EXPECT_EQ(net.tensor(am).shape, (Shape{kDynamic, 4}));
}

}  // namespace
}  // namespace kiln::engine
