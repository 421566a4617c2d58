// The builder's structural rewrites of written-out forms: RMS norm (rms_norms) and a concat of
// slices of one tensor (concat_slices), each checked for what it takes, what it leaves and the
// values it computes.
#include "engine/builder.h"

#include <vector>

#include "engine/passes/pass.h"
#include "engine_testing.h"

namespace kiln::engine {
namespace {

using testing::run_engine;

// RMS norm written out (LlamaRMSNorm: pow(x, 2), mean over the last dim, + eps, rsqrt, x * it,
// weight * that; T5's x * x and operands the other way round; over two trailing dims) becomes one
// normalization layer with the weight as its scale, computing what the layers did. A mean over a
// dim that is not trailing, and a weight of another shape, stay as they are.
TEST(Builder, RmsNormWrittenOutIsOneLayer) {
  struct Case {
    bool pow, swap;
    std::vector<int64_t> axes;
    Shape weight;
    int norms;
    bool scaled;
  };
  for (const Case& c :
       {Case{true, false, {-1}, {16}, 1, true}, Case{false, true, {2}, {16}, 1, true},
        Case{true, true, {-2, -1}, {5, 16}, 1, true}, Case{true, false, {-1}, {1, 16}, 1, false},
        Case{true, false, {1}, {16}, 0, false}}) {
    Network net;
    auto x = net.add_input("x", DataType::kF32, {2, 5, 16});
    auto sq = c.pow ? net.add("sq", ElementwiseParams{BinaryOp::kPow},
                              {x, net.add_constant("two", Weights::from_floats({}, {2.f}))})
                    : net.add("sq", ElementwiseParams{BinaryOp::kMul}, {x, x});
    auto mean = net.add("mean", ReduceParams{ReduceOp::kMean, c.axes, true}, {sq});
    auto eps = net.add_constant("eps", Weights::from_floats({}, {1e-6f}));
    auto var =
        net.add("var", ElementwiseParams{BinaryOp::kAdd},
                c.swap ? std::vector<TensorId>{eps, mean} : std::vector<TensorId>{mean, eps});
    auto r = net.add("r", UnaryParams{UnaryOp::kRsqrt}, {var});
    auto h = net.add("h", ElementwiseParams{BinaryOp::kMul},
                     c.swap ? std::vector<TensorId>{r, x} : std::vector<TensorId>{x, r});
    std::vector<float> w(static_cast<size_t>(volume(c.weight)));
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + 0.1f * static_cast<float>(i % 7);
    auto weight = net.add_constant("weight", Weights::from_floats(c.weight, w));
    net.mark_output(net.add("y", ElementwiseParams{BinaryOp::kMul}, {weight, h}), "y");
    BuildReport report;
    Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("rms_norms"), c.norms) << report.to_string();
    int norms = 0;
    for (const Layer& l : plan.network.layers()) {
      const auto* p = std::get_if<NormalizationParams>(&l.params);
      if (!p) continue;
      ++norms;
      EXPECT_EQ(p->kind, NormalizationKind::kRms);
      EXPECT_EQ(p->normalized_dims, static_cast<int64_t>(c.axes.size()));
      EXPECT_EQ(p->has_affine, c.scaled);
      EXPECT_NEAR(p->epsilon, 1e-6, 1e-12);
    }
    EXPECT_EQ(norms, c.norms);
    const HostTensor in = testing::random_tensor(DataType::kF32, {2, 5, 16}, 51, -3, 4);
    EXPECT_TRUE(testing::near(run_engine(plan.network, {in})[0],
                              testing::to_doubles(run_engine(net, {in})[0]), 1e-5, 1e-6));
  }
}

// rotate_half, cat(-x[..., 4:], x[..., :4]), then * sin + x * cos as rotary embeddings compute it,
// becomes one gather by constant indices and a sign multiply; a roll (no negation) one gather; a
// concat of slices of two tensors, or of a strided slice, stays. Values as the layers gave.
TEST(Builder, ConcatOfSlicesOfOneTensorIsAGather) {
  struct Case {
    bool negate, second_source, strided;
    int gathers;
  };
  for (const Case& c : {Case{true, false, false, 1}, Case{false, false, false, 1},
                        Case{true, true, false, 0}, Case{false, false, true, 0}}) {
    Network net;
    auto x = net.add_input("x", DataType::kF32, {2, 3, 5, 8});
    auto other = net.add_input("other", DataType::kF32, {2, 3, 5, 8});
    auto upper = net.add(
        "upper", SliceParams{{-1}, {c.strided ? 1 : 4}, {kSliceEnd}, {c.strided ? 2 : 1}}, {x});
    auto lower = net.add("lower", SliceParams{{3}, {0}, {4}, {1}}, {c.second_source ? other : x});
    if (c.negate) upper = net.add("neg", UnaryParams{UnaryOp::kNeg}, {upper});
    auto rotated = net.add("cat", ConcatParams{-1, false}, {upper, lower});
    std::vector<float> table(5 * 8);
    for (size_t i = 0; i < table.size(); ++i) table[i] = 0.1f * static_cast<float>(i % 11) - 0.4f;
    auto sin = net.add_constant("sin", Weights::from_floats({5, 8}, table));
    auto cos = net.add_constant("cos", Weights::from_floats({5, 8}, std::vector<float>(40, 0.7f)));
    auto y = net.add("add", ElementwiseParams{BinaryOp::kAdd},
                     {net.add("xcos", ElementwiseParams{BinaryOp::kMul}, {x, cos}),
                      net.add("rsin", ElementwiseParams{BinaryOp::kMul}, {rotated, sin})});
    net.mark_output(y, "y");
    BuildReport report;
    Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("concat_slices"), c.gathers) << report.to_string();
    int gathers = 0, concats = 0;
    for (const Layer& l : plan.network.layers()) {
      gathers += std::holds_alternative<GatherParams>(l.params);
      concats += std::holds_alternative<ConcatParams>(l.params);
    }
    EXPECT_EQ(gathers, c.gathers);
    EXPECT_EQ(concats, 1 - c.gathers);
    const std::vector<HostTensor> in = {testing::random_tensor(DataType::kF32, {2, 3, 5, 8}, 61),
                                        testing::random_tensor(DataType::kF32, {2, 3, 5, 8}, 62)};
    EXPECT_TRUE(testing::near(run_engine(plan.network, in)[0],
                              testing::to_doubles(run_engine(net, in)[0]), 0, 0));
  }
}

}  // namespace
}  // namespace kiln::engine
