// Scaled dot-product attention on the CPU backend against a float64 reference: scale, causal,
// bool and float masks, batch broadcasting, half precision, bad input.
#include <cmath>

#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::near;
using testing::random_tensor;
using testing::to_doubles;

// softmax(q k^T * scale + mask) v over batch `batch`, as torch's math path (fully masked rows: 0).
std::vector<double> reference_attention(const HostTensor& q, const HostTensor& k,
                                        const HostTensor& v, const HostTensor* mask, bool causal,
                                        double scale, const Shape& batch) {
  const auto qs = to_doubles(q), ks = to_doubles(k), vs = to_doubles(v);
  const std::vector<double> ms = mask ? to_doubles(*mask) : std::vector<double>{};
  const int64_t L = q.shape()[q.shape().size() - 2], E = q.shape().back();
  const int64_t S = k.shape()[k.shape().size() - 2], Ev = v.shape().back();
  if (scale == 0) scale = 1 / std::sqrt(static_cast<double>(E));
  auto mat = [](const HostTensor& t, const Shape& b, const std::vector<int64_t>& bi, int64_t i,
                int64_t j) {
    std::vector<int64_t> idx = bi;
    idx.push_back(i);
    idx.push_back(j);
    Shape full = b;
    full.push_back(t.shape()[t.shape().size() - 2]);
    full.push_back(t.shape().back());
    Shape tb = t.shape();
    return static_cast<size_t>(testing::broadcast_index(tb, full, idx));
  };
  std::vector<double> out;
  for (int64_t b = 0; b < volume(batch); ++b) {
    const auto bi = testing::unflatten(batch, b);
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> w(static_cast<size_t>(S));
      double mx = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        double s = 0;
        for (int64_t e = 0; e < E; ++e)
          s += qs[mat(q, batch, bi, i, e)] * ks[mat(k, batch, bi, j, e)];
        s *= scale;
        if (causal && j > i) s = -INFINITY;
        if (mask) {
          Shape full = batch;
          full.push_back(L);
          full.push_back(S);
          auto idx = bi;
          idx.push_back(i);
          idx.push_back(j);
          const double m =
              ms[static_cast<size_t>(testing::broadcast_index(mask->shape(), full, idx))];
          if (mask->dtype() == DataType::kBool) {
            if (m == 0) s = -INFINITY;
          } else {
            s += m;
          }
        }
        w[static_cast<size_t>(j)] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (auto& x : w) sum += (x = mx == -INFINITY ? 0 : std::exp(x - mx));
      for (int64_t e = 0; e < Ev; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) {
          if (w[static_cast<size_t>(j)] != 0)
            acc += w[static_cast<size_t>(j)] / sum * vs[mat(v, batch, bi, j, e)];
        }
        out.push_back(acc);
      }
    }
  }
  return out;
}

AttentionParams attn(bool causal, bool has_mask, double scale = 0) {
  AttentionParams p;
  p.causal = causal;
  p.has_mask = has_mask;
  p.scale = scale;
  return p;
}

TEST(Attention, PlainScaledAndCausal) {
  auto q = random_tensor(DataType::kF32, {2, 3, 5, 8}, 41);
  auto k = random_tensor(DataType::kF32, {2, 3, 7, 8}, 42);
  auto v = random_tensor(DataType::kF32, {2, 3, 7, 4}, 43);
  for (bool causal : {false, true}) {
    for (double scale : {0.0, 0.3}) {
      auto out = testing::run_one_layer(attn(causal, false, scale), {q, k, v})[0];
      ASSERT_EQ(out.shape(), (Shape{2, 3, 5, 4}));
      EXPECT_TRUE(near(out, reference_attention(q, k, v, nullptr, causal, scale, {2, 3})))
          << causal << " " << scale;
    }
  }
}

TEST(Attention, BoolAndFloatMasksBroadcast) {
  auto q = random_tensor(DataType::kF32, {2, 4, 6}, 44);
  auto k = random_tensor(DataType::kF32, {2, 5, 6}, 45);
  auto v = random_tensor(DataType::kF32, {2, 5, 3}, 46);
  auto bmask = random_tensor(DataType::kBool, {4, 5}, 47);
  bmask.as<uint8_t>()[0] = bmask.as<uint8_t>()[1] = bmask.as<uint8_t>()[2] = 0;
  bmask.as<uint8_t>()[3] = bmask.as<uint8_t>()[4] = 0;  // row 0 fully masked: zeros
  auto out = testing::run_one_layer(attn(false, true), {q, k, v, bmask})[0];
  EXPECT_TRUE(near(out, reference_attention(q, k, v, &bmask, false, 0, {2})));
  for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(out.as<float>()[e], 0.f);
  auto fmask = random_tensor(DataType::kF32, {2, 1, 5}, 48, -3, 1);
  EXPECT_TRUE(near(testing::run_one_layer(attn(true, true), {q, k, v, fmask})[0],
                   reference_attention(q, k, v, &fmask, true, 0, {2})));
}

TEST(Attention, BatchBroadcastLargeAndHalf) {
  // k and v shared across heads (multi-query); big enough to run in parallel.
  auto q = random_tensor(DataType::kF32, {2, 4, 33, 16}, 49);
  auto k = random_tensor(DataType::kF32, {2, 1, 40, 16}, 50);
  auto v = random_tensor(DataType::kF32, {1, 40, 8}, 51);
  auto out = testing::run_one_layer(attn(true, false), {q, k, v})[0];
  ASSERT_EQ(out.shape(), (Shape{2, 4, 33, 8}));
  EXPECT_TRUE(near(out, reference_attention(q, k, v, nullptr, true, 0, {2, 4})));
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    auto qh = random_tensor(t, {3, 6, 8}, 52), kh = random_tensor(t, {3, 9, 8}, 53),
         vh = random_tensor(t, {3, 9, 8}, 54);
    auto oh = testing::run_one_layer(attn(false, false), {qh, kh, vh})[0];
    EXPECT_EQ(oh.dtype(), t);
    EXPECT_TRUE(near(oh, reference_attention(qh, kh, vh, nullptr, false, 0, {3}),
                     t == DataType::kF16 ? 2e-3 : 1e-2, 1e-2));
  }
  // L > S with causal keeps row 0 attending to key 0; S = 0 gives zeros.
  auto q2 = random_tensor(DataType::kF32, {6, 4}, 55),
       k2 = random_tensor(DataType::kF32, {3, 4}, 56),
       v2 = random_tensor(DataType::kF32, {3, 2}, 57);
  EXPECT_TRUE(near(testing::run_one_layer(attn(true, false), {q2, k2, v2})[0],
                   reference_attention(q2, k2, v2, nullptr, true, 0, {})));
  HostTensor k0(DataType::kF32, {0, 4}), v0(DataType::kF32, {0, 2});
  EXPECT_TRUE(near(testing::run_one_layer(attn(false, false), {q2, k0, v0})[0],
                   std::vector<double>(12, 0.0), 0, 0));
}

TEST(Attention, LongRowsRunInBlocksAndEmptyDotProductsWeighEvenly) {
  // 200 query rows: blocks of query rows with a tail, causal past the 150 keys, and a float mask
  // with -inf, one row of it everywhere (that row's output: zeros).
  auto q = random_tensor(DataType::kF32, {2, 200, 16}, 58);
  auto k = random_tensor(DataType::kF32, {2, 150, 16}, 59);
  auto v = random_tensor(DataType::kF32, {2, 150, 8}, 60);
  auto mask = random_tensor(DataType::kF32, {200, 150}, 61, -2, 1);
  for (int64_t j = 0; j < 150; j += 3) mask.as<float>()[5 * 150 + j] = -INFINITY;
  for (int64_t j = 0; j < 150; ++j) mask.as<float>()[7 * 150 + j] = -INFINITY;
  for (bool causal : {false, true}) {
    auto out = testing::run_one_layer(attn(causal, true), {q, k, v, mask})[0];
    EXPECT_TRUE(near(out, reference_attention(q, k, v, &mask, causal, 0, {2}))) << causal;
    for (int64_t e = 0; e < 8; ++e) EXPECT_EQ(out.as<float>()[7 * 8 + e], 0.f);
  }
  // Heads of size 0: every score is 0 (not 0 times the default scale's infinity), so each row is
  // the mean of v's rows, as in torch.
  HostTensor q0(DataType::kF32, {2, 3, 0}), k0(DataType::kF32, {2, 5, 0});
  auto v5 = random_tensor(DataType::kF32, {2, 5, 2}, 62);
  std::vector<double> mean;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t e = 0; e < 2; ++e) {
        double sum = 0;
        for (int64_t j = 0; j < 5; ++j) sum += v5.as<float>()[(b * 5 + j) * 2 + e];
        mean.push_back(sum / 5);
      }
    }
  }
  for (double scale : {0.0, 0.5}) {
    EXPECT_TRUE(near(testing::run_one_layer(attn(false, false, scale), {q0, k0, v5})[0], mean))
        << scale;
  }
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

TEST(Attention, BadInputNamesTheLayer) {
  Network net;
  auto q = net.add_input("q", DataType::kF32, {2, 5, 8});
  auto k = net.add_input("k", DataType::kF32, {2, 7, 8});
  auto v = net.add_input("v", DataType::kF32, {2, 7, 4});
  auto k9 = net.add_input("k9", DataType::kF32, {2, 7, 9});
  auto v6 = net.add_input("v6", DataType::kF32, {2, 6, 4});
  auto kh = net.add_input("kh", DataType::kF16, {2, 7, 8});
  auto m = net.add_input("m", DataType::kBool, {5, 6});
  auto mi = net.add_input("mi", DataType::kI64, {5, 7});
  auto add = [&](const std::string& n, LayerParams p, std::vector<TensorId> in) {
    return [&net, n, p, in] { net.add_layer(n, p, in); };
  };
  expect_error_naming<ShapeMismatch>(add("emb", attn(false, false), {q, k9, v}), "emb");
  expect_error_naming<ShapeMismatch>(add("seq", attn(false, false), {q, k, v6}), "seq");
  expect_error_naming<InvalidArgument>(add("dtypes", attn(false, false), {q, kh, v}), "dtypes");
  expect_error_naming<ShapeMismatch>(add("mask_shape", attn(false, true), {q, k, v, m}),
                                     "mask_shape");
  expect_error_naming<InvalidArgument>(add("mask_int", attn(false, true), {q, k, v, mi}),
                                       "mask_int");
  expect_error_naming<InvalidArgument>(add("no_mask", attn(false, true), {q, k, v}), "no_mask");
}

TEST(Attention, DynamicDimsStaySymbolic) {
  Network net;
  auto q = net.add_input("q", DataType::kF32, {kDynamic, kDynamic, 8},
                         Profile{{1, 1, 8}, {2, 4, 8}, {4, 64, 8}});
  auto kv = net.add_input("kv", DataType::kF32, {kDynamic, kDynamic, 8},
                          Profile{{1, 1, 8}, {2, 4, 8}, {4, 64, 8}});
  auto y = net.add("a", attn(true, false), {q, kv, kv});
  EXPECT_EQ(net.tensor(y).shape, (Shape{kDynamic, kDynamic, 8}));
}

}  // namespace
}  // namespace kiln::engine
