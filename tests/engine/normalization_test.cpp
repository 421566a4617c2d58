// Normalization family (batch/layer/group/instance norm, softmax) on the CPU backend against
// float64 references, plus dtypes, dynamic shapes and bad input.
#include <cmath>
#include <tuple>

#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::near;
using testing::random_tensor;
using testing::run_one_layer;
using testing::to_doubles;

// Normalizes contiguous runs of `len`; element j of run r uses affine index ch(r, j).
template <class Ch>
std::vector<double> reference_runs(const std::vector<double>& x, int64_t len, double eps,
                                   const std::vector<double>& scale,
                                   const std::vector<double>& bias, Ch ch) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r * len < static_cast<int64_t>(x.size()); ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < len; ++j) mean += x[static_cast<size_t>(r * len + j)];
    mean /= static_cast<double>(len);
    for (int64_t j = 0; j < len; ++j) {
      const double d = x[static_cast<size_t>(r * len + j)] - mean;
      var += d * d;
    }
    var /= static_cast<double>(len);
    for (int64_t j = 0; j < len; ++j) {
      double v = (x[static_cast<size_t>(r * len + j)] - mean) / std::sqrt(var + eps);
      if (!scale.empty()) {
        const size_t c = static_cast<size_t>(ch(r, j));
        v = v * scale[c] + bias[c];
      }
      y[static_cast<size_t>(r * len + j)] = v;
    }
  }
  return y;
}

NormalizationParams norm(NormalizationKind kind, double eps = 1e-5) {
  NormalizationParams p;
  p.kind = kind;
  p.epsilon = eps;
  return p;
}

TEST(Normalization, LayerNormOneAndTwoDims) {
  // An offset of 100 checks that the variance is computed around the mean, not as E[x^2]-E[x]^2.
  auto x = random_tensor(DataType::kF32, {4, 6, 8}, 21, 99, 101);
  for (int64_t dims : {1, 2}) {
    const int64_t len = dims == 1 ? 8 : 48;
    auto scale = random_tensor(DataType::kF32, dims == 1 ? Shape{8} : Shape{6, 8}, 22);
    auto bias = random_tensor(DataType::kF32, dims == 1 ? Shape{8} : Shape{6, 8}, 23);
    auto p = norm(NormalizationKind::kLayer);
    p.normalized_dims = dims;
    auto ref = reference_runs(to_doubles(x), len, 1e-5, to_doubles(scale), to_doubles(bias),
                              [](int64_t, int64_t j) { return j; });
    // x's own f32 rounding at magnitude 100 (~4e-6) is amplified by 1/std (~1.7): 1e-4 abs.
    EXPECT_TRUE(near(run_one_layer(p, {x, scale, bias})[0], ref, 1e-5, 1e-4)) << dims;
    p.has_affine = false;
    auto plain =
        reference_runs(to_doubles(x), len, 1e-5, {}, {}, [](int64_t, int64_t) { return 0; });
    EXPECT_TRUE(near(run_one_layer(p, {x})[0], plain, 1e-5, 1e-4)) << dims;
  }
}

// RMS norm over one and two trailing dims, with and without a scale, f32 (vector rows) and f16
// (whose squares pass f16's range here: the sums are in double), against x / sqrt(mean(x^2) +
// eps) * scale in double.
TEST(Normalization, RmsNorm) {
  for (const auto& [dtype, dims, lo, hi] :
       {std::tuple{DataType::kF32, int64_t{1}, -3.0, 5.0},
        std::tuple{DataType::kF32, int64_t{2}, -3.0, 5.0},
        std::tuple{DataType::kF16, int64_t{1}, -400.0, 400.0}}) {
    const Shape tail = dims == 1 ? Shape{40} : Shape{6, 40};
    const int64_t len = volume(tail);
    const HostTensor x = random_tensor(dtype, {3, 6, 40}, 40, lo, hi);
    const HostTensor scale = random_tensor(dtype, tail, 41);
    const auto xs = to_doubles(x), sc = to_doubles(scale);
    std::vector<double> ref(xs.size()), plain(xs.size());
    for (size_t r = 0; r * static_cast<size_t>(len) < xs.size(); ++r) {
      double sq = 0;
      for (int64_t j = 0; j < len; ++j) sq += xs[r * len + j] * xs[r * len + j];
      const double inv = 1 / std::sqrt(sq / static_cast<double>(len) + 1e-6);
      for (int64_t j = 0; j < len; ++j) {
        plain[r * len + j] = xs[r * len + j] * inv;
        ref[r * len + j] = plain[r * len + j] * sc[static_cast<size_t>(j)];
      }
    }
    auto p = norm(NormalizationKind::kRms, 1e-6);
    p.normalized_dims = dims;
    const double tol = dtype == DataType::kF16 ? 2e-3 : 1e-5;
    EXPECT_TRUE(near(run_one_layer(p, {x, scale})[0], ref, tol, tol)) << dims;
    p.has_affine = false;
    EXPECT_TRUE(near(run_one_layer(p, {x})[0], plain, tol, tol)) << dims;
  }
}

TEST(Normalization, BatchNormInference) {
  auto x = random_tensor(DataType::kF32, {2, 3, 4, 5}, 24);
  auto scale = random_tensor(DataType::kF32, {3}, 25),
       bias = random_tensor(DataType::kF32, {3}, 26);
  auto mean = random_tensor(DataType::kF32, {3}, 27);
  auto var = random_tensor(DataType::kF32, {3}, 28, 0.5, 2);
  const auto xs = to_doubles(x), sc = to_doubles(scale), bi = to_doubles(bias),
             mu = to_doubles(mean), va = to_doubles(var);
  std::vector<double> ref(xs.size()), plain(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const size_t c = (i / 20) % 3;
    plain[i] = (xs[i] - mu[c]) / std::sqrt(va[c] + 1e-3);
    ref[i] = plain[i] * sc[c] + bi[c];
  }
  auto p = norm(NormalizationKind::kBatch, 1e-3);
  EXPECT_TRUE(near(run_one_layer(p, {x, scale, bias, mean, var})[0], ref));
  p.has_affine = false;
  EXPECT_TRUE(near(run_one_layer(p, {x, mean, var})[0], plain));
}

TEST(Normalization, GroupAndInstanceNorm) {
  auto x = random_tensor(DataType::kF32, {2, 6, 3, 5}, 29);
  auto scale = random_tensor(DataType::kF32, {6}, 30),
       bias = random_tensor(DataType::kF32, {6}, 31);
  const auto xs = to_doubles(x), sc = to_doubles(scale), bi = to_doubles(bias);
  for (int64_t g : {1, 2, 3, 6}) {
    auto p = norm(NormalizationKind::kGroup);
    p.num_groups = g;
    const int64_t per = 6 / g;
    auto ref = reference_runs(xs, per * 15, 1e-5, sc, bi,
                              [&](int64_t r, int64_t j) { return (r % g) * per + j / 15; });
    EXPECT_TRUE(near(run_one_layer(p, {x, scale, bias})[0], ref)) << g;
  }
  auto p = norm(NormalizationKind::kInstance);
  EXPECT_TRUE(near(run_one_layer(p, {x, scale, bias})[0],
                   reference_runs(xs, 15, 1e-5, sc, bi, [](int64_t r, int64_t) { return r % 6; })));
  p.has_affine = false;
  EXPECT_TRUE(near(run_one_layer(p, {x})[0],
                   reference_runs(xs, 15, 1e-5, {}, {}, [](int64_t, int64_t) { return 0; })));
}

TEST(Normalization, HalfPrecisionAndLargeParallel) {
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    auto x = random_tensor(t, {3, 64}, 32);
    auto scale = random_tensor(t, {64}, 33), bias = random_tensor(t, {64}, 34);
    auto out = run_one_layer(norm(NormalizationKind::kLayer), {x, scale, bias})[0];
    EXPECT_EQ(out.dtype(), t);
    auto ref = reference_runs(to_doubles(x), 64, 1e-5, to_doubles(scale), to_doubles(bias),
                              [](int64_t, int64_t j) { return j; });
    EXPECT_TRUE(near(out, ref, t == DataType::kF16 ? 2e-3 : 1e-2, 1e-2));
  }
  auto x = random_tensor(DataType::kF32, {256, 512}, 35);
  auto ref = reference_runs(to_doubles(x), 512, 1e-5, {}, {}, [](int64_t, int64_t) { return 0; });
  auto p = norm(NormalizationKind::kLayer);
  p.has_affine = false;
  EXPECT_TRUE(near(run_one_layer(p, {x})[0], ref));
  HostTensor empty(DataType::kF32, {0, 4});
  EXPECT_EQ(run_one_layer(p, {empty})[0].shape(), (Shape{0, 4}));
}

std::vector<double> reference_softmax(const std::vector<double>& x, const Shape& s, int axis,
                                      bool log) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t n = s[static_cast<size_t>(axis)];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return static_cast<size_t>((o * n + k) * inner + i); };
      double mx = -INFINITY, sum = 0;
      for (int64_t k = 0; k < n; ++k) mx = std::max(mx, x[at(k)]);
      for (int64_t k = 0; k < n; ++k) sum += std::exp(x[at(k)] - mx);
      for (int64_t k = 0; k < n; ++k) {
        y[at(k)] = log ? x[at(k)] - mx - std::log(sum) : std::exp(x[at(k)] - mx) / sum;
      }
    }
  }
  return y;
}

TEST(Softmax, AxesLogAndLargeValues) {
  auto x = random_tensor(DataType::kF32, {3, 7, 5}, 36, -30, 30);
  x.as<float>()[0] = 1000;  // would overflow exp() without max subtraction
  for (int axis : {0, 1, 2}) {
    for (bool log : {false, true}) {
      auto out = run_one_layer(SoftmaxParams{axis - 3, log}, {x})[0];
      EXPECT_TRUE(near(out, reference_softmax(to_doubles(x), {3, 7, 5}, axis, log))) << axis << log;
    }
  }
  auto h = random_tensor(DataType::kF16, {4, 33}, 37);
  EXPECT_TRUE(near(run_one_layer(SoftmaxParams{-1, false}, {h})[0],
                   reference_softmax(to_doubles(h), {4, 33}, 1, false), 2e-3, 1e-4));
  auto one = random_tensor(DataType::kF32, {4, 1}, 38);
  EXPECT_TRUE(near(run_one_layer(SoftmaxParams{1, false}, {one})[0], {1, 1, 1, 1}));
}

// The f32 rows take the vector loops: rows longer than a vector block (1000, with tails that are
// not a multiple of the lanes), masked entries (-inf weighs 0), and rows torch gives NaN for (all
// -inf, or a NaN in them).
TEST(Softmax, LongRowsMaskedAndNaN) {
  for (int64_t n : {1000, 37, 3}) {
    auto x = random_tensor(DataType::kF32, {5, n}, 40, -20, 20);
    float* v = x.as<float>();
    v[1] = -INFINITY;
    v[n + 2] = -INFINITY;
    for (bool log : {false, true}) {
      auto out = run_one_layer(SoftmaxParams{-1, log}, {x})[0];
      EXPECT_TRUE(near(out, reference_softmax(to_doubles(x), {5, n}, 1, log), 1e-5, 1e-6))
          << n << log;
      for (int64_t r = 0; r < 5; ++r) {
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          const double y = out.as<float>()[r * n + j];
          sum += log ? std::exp(y) : y;
        }
        EXPECT_NEAR(sum, 1.0, 1e-5) << n << " row " << r;
      }
    }
  }
  HostTensor bad(DataType::kF32, {2, 9});
  for (int j = 0; j < 9; ++j) {
    bad.as<float>()[j] = -INFINITY;
    bad.as<float>()[9 + j] = static_cast<float>(j);
  }
  bad.as<float>()[9 + 4] = NAN;
  auto out = run_one_layer(SoftmaxParams{-1, false}, {bad})[0];
  for (int j = 0; j < 18; ++j) EXPECT_TRUE(std::isnan(out.as<float>()[j])) << j;
}

// Softmax over the last axis of x [B, H, L, S] (as doubles) where `kept(b, h, i, j)` says which
// entries count and `add(b, h, i, j)` what is added to them; rows with nothing kept are zero.
template <class Kept, class Add>
std::vector<double> reference_masked_softmax(const std::vector<double>& x, const Shape& s,
                                             Kept kept, Add add) {
  std::vector<double> y(x.size(), 0.0);
  const int64_t B = s[0], H = s[1], L = s[2], S = s[3];
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < L; ++i) {
        const size_t row = static_cast<size_t>(((b * H + h) * L + i) * S);
        double mx = -INFINITY, sum = 0;
        std::vector<double> v(static_cast<size_t>(S), -INFINITY);
        for (int64_t j = 0; j < S; ++j) {
          if (kept(b, h, i, j)) v[static_cast<size_t>(j)] = x[row + j] + add(b, h, i, j);
          mx = std::max(mx, v[static_cast<size_t>(j)]);
        }
        if (mx == -INFINITY) continue;
        for (double e : v) sum += std::exp(e - mx);
        for (int64_t j = 0; j < S; ++j) y[row + j] = std::exp(v[static_cast<size_t>(j)] - mx) / sum;
      }
    }
  }
  return y;
}

// A masked softmax (attention's weights): bool masks of padding ([B, 1, 1, S]) and per query
// ([B, 1, L, S]), an additive one ([L, S]), causal alone and with a mask; rows with nothing kept
// (a fully padded sequence, causal with the first keys padded) come out zero instead of NaN.
TEST(Softmax, MaskedAndCausal) {
  const Shape s = {2, 3, 5, 7};
  const HostTensor x = random_tensor(DataType::kF32, s, 41, -6, 6);
  const auto xs = to_doubles(x);
  const auto none = [](int64_t, int64_t, int64_t, int64_t) { return 0.0; };
  // Padding: sequence 0 keeps its first 4 keys, sequence 1 none.
  HostTensor pad(DataType::kBool, {2, 1, 1, 7});
  for (int64_t j = 0; j < 7; ++j) {
    pad.as<uint8_t>()[j] = j < 4;
    pad.as<uint8_t>()[7 + j] = 0;
  }
  const auto padded = [](int64_t b, int64_t, int64_t, int64_t j) { return b == 0 && j < 4; };
  EXPECT_TRUE(near(run_one_layer(SoftmaxParams{-1, false}, {x, pad})[0],
                   reference_masked_softmax(xs, s, padded, none), 1e-5, 1e-7));
  // Per query: key j kept where (i + j + b) % 3 != 0.
  HostTensor per(DataType::kBool, {2, 1, 5, 7});
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 5; ++i) {
      for (int64_t j = 0; j < 7; ++j) per.as<uint8_t>()[(b * 5 + i) * 7 + j] = (i + j + b) % 3 != 0;
    }
  }
  const auto per_kept = [](int64_t b, int64_t, int64_t i, int64_t j) {
    return (i + j + b) % 3 != 0;
  };
  EXPECT_TRUE(near(run_one_layer(SoftmaxParams{-1, false}, {x, per})[0],
                   reference_masked_softmax(xs, s, per_kept, none), 1e-5, 1e-7));
  // Additive [L, S] (a relative-position bias with -inf entries).
  HostTensor bias = random_tensor(DataType::kF32, {5, 7}, 42, -2, 2);
  bias.as<float>()[3] = -INFINITY;
  const auto bias_kept = [](int64_t, int64_t, int64_t i, int64_t j) { return i * 7 + j != 3; };
  const auto bias_add = [&](int64_t, int64_t, int64_t i, int64_t j) {
    return i * 7 + j == 3 ? 0.0 : static_cast<double>(bias.as<float>()[i * 7 + j]);
  };
  EXPECT_TRUE(near(run_one_layer(SoftmaxParams{-1, false}, {x, bias})[0],
                   reference_masked_softmax(xs, s, bias_kept, bias_add), 1e-5, 1e-7));
  // Causal (top-left: key j <= query i), alone and with keys 0..1 of sequence 1 padded: its
  // queries 0 and 1 keep nothing.
  const auto causal = [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; };
  EXPECT_TRUE(near(run_one_layer(SoftmaxParams{-1, false, true}, {x})[0],
                   reference_masked_softmax(xs, s, causal, none), 1e-5, 1e-7));
  HostTensor late(DataType::kBool, {2, 1, 1, 7});
  for (int64_t j = 0; j < 7; ++j) {
    late.as<uint8_t>()[j] = 1;
    late.as<uint8_t>()[7 + j] = j >= 2;
  }
  const auto causal_late = [](int64_t b, int64_t, int64_t i, int64_t j) {
    return j <= i && (b == 0 || j >= 2);
  };
  const auto out = run_one_layer(SoftmaxParams{-1, false, true}, {x, late})[0];
  EXPECT_TRUE(near(out, reference_masked_softmax(xs, s, causal_late, none), 1e-5, 1e-7));
  EXPECT_EQ(out.as<float>()[((1 * 3 + 2) * 5 + 1) * 7], 0.f);  // b 1, head 2, query 1: zeros
  // f16 scores with a bool mask.
  const HostTensor h = random_tensor(DataType::kF16, s, 43, -6, 6);
  EXPECT_TRUE(near(run_one_layer(SoftmaxParams{-1, false}, {h, per})[0],
                   reference_masked_softmax(to_doubles(h), s, per_kept, none), 2e-3, 1e-4));
}

// Layer norm rows longer than a summing block, far from zero: the f32 loop keeps the double
// reference's precision (the variance of values near 1000 with spread 1 needs centered sums).
TEST(Normalization, LongOffsetRowsKeepPrecision) {
  auto x = random_tensor(DataType::kF32, {3, 1000}, 41, 999, 1001);
  auto scale = random_tensor(DataType::kF32, {1000}, 42),
       bias = random_tensor(DataType::kF32, {1000}, 43);
  auto ref = reference_runs(to_doubles(x), 1000, 1e-5, to_doubles(scale), to_doubles(bias),
                            [](int64_t, int64_t j) { return j; });
  // A mean summed in float lanes, or rounded to one float (3e-5 at 1000), would put errors of
  // 1e-4 into the outputs; kiln's are those of float arithmetic on the centered values.
  EXPECT_TRUE(
      near(run_one_layer(norm(NormalizationKind::kLayer), {x, scale, bias})[0], ref, 1e-5, 2e-6));
  auto group = norm(NormalizationKind::kGroup);
  group.num_groups = 2;
  auto channels = random_tensor(DataType::kF32, {2, 4, 250}, 44, 999, 1001);
  auto cs = random_tensor(DataType::kF32, {4}, 45), cb = random_tensor(DataType::kF32, {4}, 46);
  EXPECT_TRUE(near(run_one_layer(group, {channels, cs, cb})[0],
                   reference_runs(to_doubles(channels), 500, 1e-5, to_doubles(cs), to_doubles(cb),
                                  [](int64_t r, int64_t j) { return (r % 2) * 2 + j / 250; }),
                   1e-5, 2e-6));
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

TEST(Normalization, BadInputNamesTheLayer) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 6, 4});
  auto c6 = net.add_input("c6", DataType::kF32, {6});
  auto c5 = net.add_input("c5", DataType::kF32, {5});
  auto i = net.add_input("i", DataType::kI64, {2, 6, 4});
  auto add = [&](const std::string& n, LayerParams p, std::vector<TensorId> in) {
    return [&net, n, p, in] { net.add_layer(n, p, in); };
  };
  auto group = norm(NormalizationKind::kGroup);
  group.num_groups = 4;
  expect_error_naming<InvalidArgument>(add("groups4", group, {x, c6, c6}), "groups4");
  expect_error_naming<ShapeMismatch>(
      add("bn_shape", norm(NormalizationKind::kBatch), {x, c6, c6, c6, c5}), "bn_shape");
  expect_error_naming<InvalidArgument>(add("bn_count", norm(NormalizationKind::kBatch), {x, c6}),
                                       "bn_count");
  expect_error_naming<ShapeMismatch>(add("ln_shape", norm(NormalizationKind::kLayer), {x, c6, c6}),
                                     "ln_shape");
  auto deep = norm(NormalizationKind::kLayer);
  deep.normalized_dims = 4;
  expect_error_naming<InvalidArgument>(add("ln_dims", deep, {x}), "ln_dims");
  expect_error_naming<InvalidArgument>(
      add("int_norm", norm(NormalizationKind::kInstance), {i, c6, c6}), "int_norm");
  auto c4 = net.add_input("c4", DataType::kF32, {4});
  // RMS norm takes a scale and no bias; a kind past the last is named too (a corrupt plan).
  expect_error_naming<InvalidArgument>(add("rms_bias", norm(NormalizationKind::kRms), {x, c4, c4}),
                                       "rms_bias");
  expect_error_naming<ShapeMismatch>(add("rms_shape", norm(NormalizationKind::kRms), {x, c6}),
                                     "rms_shape");
  expect_error_naming<InvalidArgument>(
      add("bad_kind", norm(static_cast<NormalizationKind>(9)), {x}), "bad_kind");
  expect_error_naming<InvalidArgument>(add("sm_axis", SoftmaxParams{3, false}, {x}), "sm_axis");
  expect_error_naming<InvalidArgument>(add("sm_int", SoftmaxParams{0, false}, {i}), "sm_int");
  // A masked or causal softmax: over the last axis, not log, with a bool or float mask that
  // broadcasts to the input.
  auto m = net.add_input("m", DataType::kBool, {2, 1, 4});
  auto m_bad = net.add_input("m_bad", DataType::kBool, {3, 4});
  expect_error_naming<InvalidArgument>(add("sm_mask_axis", SoftmaxParams{1, false}, {x, m}),
                                       "sm_mask_axis");
  expect_error_naming<InvalidArgument>(add("sm_mask_log", SoftmaxParams{-1, true}, {x, m}),
                                       "sm_mask_log");
  expect_error_naming<InvalidArgument>(add("sm_causal_log", SoftmaxParams{-1, true, true}, {x}),
                                       "sm_causal_log");
  expect_error_naming<InvalidArgument>(add("sm_mask_int", SoftmaxParams{-1, false}, {x, i}),
                                       "sm_mask_int");
  expect_error_naming<ShapeMismatch>(add("sm_mask_shape", SoftmaxParams{-1, false}, {x, m_bad}),
                                     "sm_mask_shape");
}

TEST(Normalization, DynamicDimsStaySymbolic) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, kDynamic, 8},
                         Profile{{1, 1, 8}, {2, 4, 8}, {4, 16, 8}});
  auto c = net.add_input("c", DataType::kF32, {8});
  auto g = norm(NormalizationKind::kGroup);
  g.num_groups = 3;                     // the channel count is unknown until run time
  auto y = net.add("g", g, {x, c, c});  // scale [8] vs dynamic C is accepted symbolically
  EXPECT_EQ(net.tensor(y).shape, (Shape{kDynamic, kDynamic, 8}));
  auto s = net.add("s", SoftmaxParams{1, true}, {x});
  EXPECT_EQ(net.tensor(s).shape, (Shape{kDynamic, kDynamic, 8}));
}

}  // namespace
}  // namespace kiln::engine
