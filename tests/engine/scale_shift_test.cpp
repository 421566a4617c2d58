// Batch norms with constant statistics become a scale and a shift: no normalization layer is
// left, and the built network computes what the unbuilt one does.
#include "engine/passes/scale_shift.h"
#include "engine/builder.h"
#include "engine_testing.h"

namespace kiln::engine {
namespace {

using testing::run_engine;

std::vector<float> values(int64_t n, float base, float step) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + step * static_cast<float>(i);
  return v;
}

// x -> batch norm -> relu, with the statistics as constants (or the mean as a network input).
Network batch_norm_net(const Shape& shape, bool affine, bool mean_is_input) {
  Network net;
  const int64_t c = shape[1];
  const TensorId x = net.add_input("x", DataType::kF32, shape);
  std::vector<TensorId> inputs = {x};
  if (affine) {
    inputs.push_back(net.add_constant("w", Weights::from_floats({c}, values(c, 0.5f, 0.25f))));
    inputs.push_back(net.add_constant("b", Weights::from_floats({c}, values(c, -0.3f, 0.2f))));
  }
  inputs.push_back(
      mean_is_input ? net.add_input("mean", DataType::kF32, {c})
                    : net.add_constant("mean", Weights::from_floats({c}, values(c, 0.1f, -0.15f))));
  inputs.push_back(net.add_constant("var", Weights::from_floats({c}, values(c, 0.2f, 0.7f))));
  NormalizationParams p;
  p.kind = NormalizationKind::kBatch;
  p.epsilon = 1e-3;
  p.has_affine = affine;
  const TensorId y = net.add("bn", p, inputs);
  net.mark_output(net.add("relu", ActivationParams{ActivationKind::kRelu}, {y}));
  return net;
}

int normalization_layers(const Network& net) {
  int n = 0;
  for (const Layer& l : net.layers()) n += std::holds_alternative<NormalizationParams>(l.params);
  return n;
}

TEST(ScaleShift, ConstantBatchNormsBecomeAScaleAndAShift) {
  struct Case {
    Shape shape;
    bool affine, mean_is_input;
  };
  for (const Case& c : {Case{{2, 3, 4, 5}, true, false}, Case{{2, 3, 4, 5}, false, false},
                        Case{{4, 6}, true, false}, Case{{1, 5, 3, 2, 2}, true, false},
                        Case{{2, 3, 4, 5}, true, true}}) {
    SCOPED_TRACE(::testing::Message() << "rank " << c.shape.size() << ", affine " << c.affine
                                      << ", mean is an input " << c.mean_is_input);
    const Network net = batch_norm_net(c.shape, c.affine, c.mean_is_input);
    Network rewritten = net;
    EXPECT_EQ(batch_norm_to_scale_shift(rewritten), c.mean_is_input ? 0 : 1);
    EXPECT_EQ(normalization_layers(rewritten), c.mean_is_input ? 1 : 0);
    const Plan plan = build(net, BuilderConfig{});
    EXPECT_EQ(normalization_layers(plan.network), c.mean_is_input ? 1 : 0);
    std::vector<HostTensor> in;
    for (TensorId id : net.inputs()) {
      in.push_back(testing::random_tensor(DataType::kF32, net.tensor(id).shape, 3 + in.size()));
    }
    const auto reference = run_engine(net, in);
    for (const Network* n : std::vector<const Network*>{&rewritten, &plan.network}) {
      const auto got = run_engine(*n, in);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_TRUE(testing::near(got[0], testing::to_doubles(reference[0]), 1e-5, 1e-6));
    }
  }
}

// A refittable plan folds its batch norms too; a refit folds the new statistics again.
TEST(ScaleShift, RefitFoldsTheNewStatistics) {
  BuilderConfig config;
  config.refittable = true;
  Plan plan = build(batch_norm_net({2, 3, 4, 5}, true, false), config);
  EXPECT_EQ(normalization_layers(plan.network), 0);
  Network tuned = batch_norm_net({2, 3, 4, 5}, true, false);
  tuned.add_weight("var", Weights::from_floats({3}, values(3, 1.5f, 0.5f)));
  tuned.add_weight("w", Weights::from_floats({3}, values(3, -2.f, 1.f)));
  refit(plan, tuned, config, "batch norm");
  EXPECT_EQ(normalization_layers(plan.network), 0);
  const std::vector<HostTensor> in = {testing::random_tensor(DataType::kF32, {2, 3, 4, 5}, 3)};
  const auto want = run_engine(tuned, in);
  EXPECT_TRUE(
      testing::near(run_engine(plan.network, in)[0], testing::to_doubles(want[0]), 1e-5, 1e-6));
}

}  // namespace
}  // namespace kiln::engine
