// Builder: constant folding, dead layers, fusions, memory planning; outputs never change.
#include "engine/builder.h"
#include "engine/cuda/backend.h"

#include "engine/memory_plan.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

std::vector<HostTensor> run(const Network& net, const std::vector<HostTensor>& inputs) {
  auto engine = std::make_shared<const Engine>(net);
  ExecutionContext ctx(engine);
  return ctx.run(inputs);
}

TEST(Builder, FoldsConstantsRemovesDeadLayersAndFusesChains) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 8});
  auto c1 = net.add_constant("c1", Weights::from_floats({8}, std::vector<float>(8, 3.f)));
  auto c2 = net.add_constant("c2", Weights::from_floats({8}, std::vector<float>(8, 0.5f)));
  auto folded = net.add("c1_times_c2", ElementwiseParams{BinaryOp::kMul}, {c1, c2});  // constant
  auto a = net.add("a", ElementwiseParams{BinaryOp::kAdd}, {x, folded});
  auto b = net.add("b", UnaryParams{UnaryOp::kExp}, {a});
  auto c = net.add("c", ActivationParams{ActivationKind::kSigmoid}, {b});
  auto d = net.add("d", ElementwiseParams{BinaryOp::kMul}, {c, a});  // a is used twice
  net.add("unused", UnaryParams{UnaryOp::kNeg}, {x});                // dead
  net.mark_output(d, "y");

  BuildReport report;
  Plan plan = build(net, BuilderConfig{}, &report);
  EXPECT_EQ(report.layers_folded, 1);
  // "unused", and the constants c1 and c2 that only fed the folded layer.
  EXPECT_EQ(report.dead_layers_removed, 3);
  ASSERT_EQ(report.fusions.size(), 1u) << report.to_string();
  // `a` feeds two layers, so it stays a layer of its own and its output stays materialized.
  EXPECT_NE(report.fusions[0].find("b + c + d -> d"), std::string::npos) << report.fusions[0];
  int fused = 0;
  for (const Layer& l : plan.network.layers()) {
    fused += std::holds_alternative<FusedElementwiseParams>(l.params);
    EXPECT_NE(l.name, "unused");
  }
  EXPECT_EQ(fused, 1);
  auto in = testing::random_tensor(DataType::kF32, {2, 8}, 3);
  EXPECT_TRUE(testing::near(run(plan.network, {in})[0], testing::to_doubles(run(net, {in})[0]),
                            1e-6, 1e-7));
  EXPECT_NE(report.to_string().find("arena"), std::string::npos);
}

TEST(Builder, ArenaIsSmallerThanSeparateBuffersForAChain) {
  Network net;
  auto t = net.add_input("x", DataType::kF32, {64, 64});
  auto y = net.add_input("y", DataType::kI64, {64, 64});  // integer ops are not fused
  for (int i = 0; i < 6; ++i) {
    t = net.add("neg" + std::to_string(i), UnaryParams{UnaryOp::kNeg}, {t});
    y = net.add("ineg" + std::to_string(i), UnaryParams{UnaryOp::kNeg}, {y});
  }
  net.mark_output(t);
  net.mark_output(y);
  BuildReport report;
  build(net, BuilderConfig{}, &report);
  // Five i64 intermediates of 32 KiB each; liveness lets them share two buffers.
  EXPECT_EQ(report.activation_bytes, 5u * 64 * 64 * 8);
  EXPECT_EQ(report.arena_bytes, 2u * 64 * 64 * 8);
}

TEST(Builder, MemoryPlannerNeverOverlapsLiveBuffers) {
  std::vector<BufferLifetime> bufs = {
      {100, 0, 2}, {200, 1, 3}, {50, 3, 4}, {300, 4, 5}, {10, 0, 5}};
  MemoryPlan plan = plan_memory(bufs);
  for (size_t i = 0; i < bufs.size(); ++i) {
    EXPECT_EQ(plan.offsets[i] % kArenaAlignment, 0u);
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      const bool live_together = bufs[i].first <= bufs[j].last && bufs[j].first <= bufs[i].last;
      const bool overlap = plan.offsets[i] < plan.offsets[j] + bufs[j].bytes &&
                           plan.offsets[j] < plan.offsets[i] + bufs[i].bytes;
      EXPECT_FALSE(live_together && overlap) << i << " and " << j;
    }
  }
  EXPECT_LT(plan.arena_bytes, plan.total_bytes);
}

TEST(Builder, BadConfigurationsAreRejected) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2});
  net.mark_output(net.add("n", UnaryParams{UnaryOp::kNeg}, {x}));
  BuilderConfig cuda;
  cuda.device = "cuda";
  if (!cuda::built()) {
    EXPECT_THROW(build(net, cuda), Unsupported);
  } else if (cuda::device_count() == 0) {
    EXPECT_THROW(build(net, cuda), DeviceError);
  }
  BuilderConfig other;
  other.device = "tpu";
  EXPECT_THROW(build(net, other), InvalidArgument);
  BuilderConfig no_f32;
  no_f32.enabled_precisions = {DataType::kF16};
  EXPECT_THROW(build(net, no_f32), InvalidArgument);
  BuilderConfig tiny;
  tiny.workspace_bytes = 1;
  Network big;
  auto y = big.add_input("y", DataType::kF32, {1024});
  auto a = big.add("a", UnaryParams{UnaryOp::kNeg}, {y});
  auto i = big.add("i", CastParams{DataType::kI64}, {a});
  big.mark_output(big.add("b", UnaryParams{UnaryOp::kNeg}, {i}));
  EXPECT_THROW(build(big, tiny), InvalidArgument);
  Network empty;
  empty.add_input("x", DataType::kF32, {1});
  EXPECT_THROW(build(empty, BuilderConfig{}), InvalidArgument);
}

}  // namespace
}  // namespace kiln::engine
