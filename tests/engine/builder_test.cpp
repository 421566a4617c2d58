// Builder: constant folding, dead layers, fusions, memory planning; outputs never change.
#include "engine/builder.h"

#include <algorithm>
#include <limits>

#include "engine/cuda/backend.h"

#include "engine/layer_kinds.h"
#include "engine/memory_plan.h"
#include "engine/passes/pass.h"
#include "engine/passes/passes.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::run_engine;

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
  EXPECT_EQ(report.changes("fold_constants_early") + report.changes("fold_constants"), 1);
  // "unused", and the constants c1 and c2 that only fed the folded layer.
  EXPECT_EQ(report.changes("dead_layers"), 3);
  const auto fusions = report.lines();
  ASSERT_EQ(fusions.size(), 1u) << report.to_string();
  // `a` feeds two layers, so it stays a layer of its own and its output stays materialized.
  EXPECT_NE(fusions[0].find("b + c + d -> d"), std::string::npos) << fusions[0];
  int fused = 0;
  for (const Layer& l : plan.network.layers()) {
    fused += std::holds_alternative<FusedElementwiseParams>(l.params);
    EXPECT_NE(l.name, "unused");
  }
  EXPECT_EQ(fused, 1);
  auto in = testing::random_tensor(DataType::kF32, {2, 8}, 3);
  EXPECT_TRUE(testing::near(run_engine(plan.network, {in})[0],
                            testing::to_doubles(run_engine(net, {in})[0]), 1e-6, 1e-7));
  EXPECT_NE(report.to_string().find("arena"), std::string::npos);
}

// A backend's limits on one fused layer (the CUDA interpreter kernel's 8 inputs and 40 ops):
// a longer chain with more inputs becomes several fused layers within them, computing the same.
TEST(Builder, FusedGroupsStayWithinTheBackendsLimits) {
  Network net;
  std::vector<TensorId> xs;
  for (int i = 0; i < 10; ++i)
    xs.push_back(net.add_input("x" + std::to_string(i), DataType::kF32, {2, 8}));
  TensorId s = xs[0];
  for (int i = 1; i < 10; ++i) {
    s = net.add("add" + std::to_string(i), ElementwiseParams{BinaryOp::kAdd}, {s, xs[i]});
  }
  s = net.add("exp", UnaryParams{UnaryOp::kExp}, {net.add("neg", UnaryParams{UnaryOp::kNeg}, {s})});
  net.mark_output(s, "y");
  std::vector<HostTensor> in;
  for (int i = 0; i < 10; ++i) in.push_back(testing::random_tensor(DataType::kF32, {2, 8}, i));
  const auto expected = testing::to_doubles(run_engine(net, in)[0]);

  for (const auto& [max_inputs, max_ops] : {std::pair{0, 0}, {8, 40}, {0, 4}}) {
    Network fused = net;
    std::vector<std::string> lines;
    fuse_elementwise(fused, lines, max_inputs, max_ops);
    int layers = 0;
    for (const Layer& l : fused.layers()) {
      const auto* p = std::get_if<FusedElementwiseParams>(&l.params);
      if (!p) continue;
      ++layers;
      if (max_inputs) {
        EXPECT_LE(static_cast<int>(l.inputs.size()), max_inputs) << l.name;
      }
      if (max_ops) {
        EXPECT_LE(static_cast<int>(p->fused_layers.size()), max_ops) << l.name;
      }
    }
    // No limit: all 11 layers in one; 8 inputs: two groups; 4 ops: ceil(11 / 4) = 3 groups.
    EXPECT_EQ(layers, max_inputs == 8 ? 2 : max_ops == 4 ? 3 : 1) << max_inputs << " " << max_ops;
    EXPECT_TRUE(testing::near(run_engine(fused, in)[0], expected, 1e-6, 1e-7));
  }
}

// A mask built from fills (zeros, regions of it replaced by other fills: swin's shifted-window
// masks) folds into one constant; a large fill that only feeds run-time layers stays a fill.
TEST(Builder, MasksBuiltFromSmallFillsFoldWhole) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {6, 8});
  auto zeros = net.add("zeros", FillParams{FillMode::kConstant, DataType::kF32, {6, 8}, 0.0}, {});
  auto ones = net.add("ones", FillParams{FillMode::kConstant, DataType::kF32, {6, 3}, 1.0}, {});
  auto head = net.add("head", SliceParams{{1}, {0}, {5}, {1}}, {zeros});
  auto mask = net.add("mask", ConcatParams{1, false}, {head, ones});
  auto y = net.add("y", ElementwiseParams{BinaryOp::kAdd}, {x, mask});
  net.mark_output(y, "y");
  auto big_x = net.add_input("big_x", DataType::kF32, {512, 1024});
  auto big = net.add("big", FillParams{FillMode::kConstant, DataType::kF32, {512, 1024}, 2.0}, {});
  net.mark_output(net.add("big_y", ElementwiseParams{BinaryOp::kMul}, {big_x, big}), "big_y");

  BuildReport report;
  Plan plan = build(net, BuilderConfig{}, &report);
  std::vector<std::string> kinds;
  for (const Layer& l : plan.network.layers()) kinds.emplace_back(layer_kind_name(l.params));
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "fill"), 1) << report.to_string();
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "slice"), 0) << report.to_string();
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "concat"), 0) << report.to_string();
  auto in = testing::random_tensor(DataType::kF32, {6, 8}, 3);
  auto big_in = testing::random_tensor(DataType::kF32, {512, 1024}, 4);
  const auto built = run_engine(plan.network, {in, big_in});
  const auto unbuilt = run_engine(net, {in, big_in});
  EXPECT_TRUE(testing::near(built[0], testing::to_doubles(unbuilt[0]), 0, 0));
  EXPECT_TRUE(testing::near(built[1], testing::to_doubles(unbuilt[1]), 0, 0));
}

// A slice that keeps every element, a pad of zeros and a concat of one input move nothing: they
// become reshapes, which run as views; a slice that drops elements stays.
TEST(Builder, LayersThatMoveNothingBecomeViews) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {4, 6});
  auto all = net.add("all", SliceParams{{0, 1}, {0, -6}, {4, kSliceEnd}, {1, 1}}, {x});
  auto pad = net.add("pad", PadParams{{0, 0}, {0, 0}, PadMode::kConstant, 1.0}, {all});
  auto cat = net.add("cat", ConcatParams{1, false}, {pad});
  auto part = net.add("part", SliceParams{{1}, {1}, {kSliceEnd}, {1}}, {cat});
  net.mark_output(net.add("y", UnaryParams{UnaryOp::kExp}, {part}), "y");

  BuildReport report;
  Plan plan = build(net, BuilderConfig{}, &report);
  EXPECT_EQ(report.changes("identity_layers"), 3) << report.to_string();
  std::vector<std::string> kinds;
  for (const Layer& l : plan.network.layers()) kinds.emplace_back(layer_kind_name(l.params));
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "slice"), 1) << report.to_string();
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "pad"), 0) << report.to_string();
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "concat"), 0) << report.to_string();
  auto in = testing::random_tensor(DataType::kF32, {4, 6}, 5);
  EXPECT_TRUE(testing::near(run_engine(plan.network, {in})[0],
                            testing::to_doubles(run_engine(net, {in})[0]), 0, 0));
}

// The passes' contract: the network is verified after each pass, and a pass that breaks it is
// named in the error (with what broke); print_after_all dumps the network after each pass.
TEST(Builder, TheVerifierNamesThePassThatBrokeTheNetwork) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 3});
  auto r = net.add("r", ActivationParams{ActivationKind::kRelu}, {x});
  net.mark_output(net.add("n", UnaryParams{UnaryOp::kNeg}, {r}), "y");
  const Pass keeps{"keeps_it", nullptr, [](Network&, const PassContext&) { return 0; }};
  const Pass swaps{"swaps_layers", nullptr, [](Network& n, const PassContext&) {
                     auto layers = n.layers();
                     std::swap(layers[0], layers[1]);  // `n` now reads `r` before it is written
                     n.set_layers(layers);
                     return 1;
                   }};
  const Pass reshapes{"wrong_reshape", nullptr, [](Network& n, const PassContext&) {
                        ShuffleParams p;
                        p.has_reshape = true;
                        p.reshape = {3, 2};  // r is stored as [2, 3]
                        n.mutable_layers()[0].params = p;
                        return 1;
                      }};
  BuilderConfig config;
  const EngineTarget target;
  const BackendRules rules = cpu_backend_rules();
  const auto run = [&](const std::vector<Pass>& passes, std::ostream& dump) {
    Network copy = net;
    BuildReport report;
    run_passes(copy, passes, PassContext{config, target, rules, report}, dump);
    return report;
  };
  std::ostringstream dump;
  for (const auto& [broken, what] :
       {std::pair{swaps, "reads tensor"}, std::pair{reshapes, "is stored as f32[2, 3]"}}) {
    try {
      run({keeps, broken}, dump);
      ADD_FAILURE() << "no error after " << broken.name;
    } catch (const InternalError& e) {
      EXPECT_NE(e.message().find("after pass `" + broken.name + "`"), std::string::npos)
          << e.message();
      EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
    }
  }
  config.verify_passes = false;  // unverified, the broken network gets through
  EXPECT_EQ(run({keeps, swaps}, dump).changes("swaps_layers"), 1);
  config.verify_passes = true;
  config.print_after_all = true;
  const BuildReport report = run({keeps}, dump);
  ASSERT_EQ(report.passes.size(), 1u);
  EXPECT_EQ(report.passes[0].name, "keeps_it");
  EXPECT_NE(dump.str().find("// after keeps_it (0 rewrites)"), std::string::npos) << dump.str();
  EXPECT_NE(dump.str().find("r = activation(%x:f32[2, 3])"), std::string::npos) << dump.str();
}

// The builder's pipeline: its passes in order, and on a CPU build only those the CPU backend
// takes (no precision, TF32, written-out or decomposed attention, casts into shuffles or gathered
// inputs).
TEST(Builder, CpuBuildsRunTheCpuPasses) {
  std::vector<std::string> names;
  for (const Pass& p : builder_pipeline()) names.push_back(p.name);
  ASSERT_GE(names.size(), 10u);
  EXPECT_EQ(names.front(), "scale_shift");
  EXPECT_EQ(names.back(), "concat_in_place");
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 3});
  net.mark_output(net.add("r", ActivationParams{ActivationKind::kRelu}, {x}), "y");
  BuildReport report;
  build(net, BuilderConfig{}, &report);
  std::vector<std::string> ran;
  for (const PassRecord& p : report.passes) ran.push_back(p.name);
  for (const char* cuda_only :
       {"precision", "written_attention", "decompose_attention", "tf32", "attention_mask_biases",
        "cast_into_shuffle", "gelu_tanh", "gathered_inputs"}) {
    EXPECT_EQ(std::count(ran.begin(), ran.end(), cuda_only), 0) << cuda_only;
  }
  for (const char* both :
       {"scale_shift", "layout", "fold_constants", "dead_layers", "attention_projections",
        "post_ops", "fuse_elementwise", "concat_in_place"}) {
    EXPECT_EQ(std::count(ran.begin(), ran.end(), both), 1) << both;
  }
}

// Measurement switches: "name=value" sets the config field and is recorded in the plan (through
// serialization) and the inspector; an unknown name or value is an error naming the switch.
TEST(Builder, SwitchesSetTheConfigAndAreRecordedInThePlan) {
  BuilderConfig config;
  apply_switch(config, "cast_into_shuffle=off");
  apply_switch(config, "conv_layout=channels_first");
  apply_switch(config, "squeeze_excitation=on");
  apply_switch(config, "gemm_timing=off");  // read by the CUDA kernels, from the plan
  EXPECT_TRUE(config.choose_at_build);
  {
    BuilderConfig biases;
    EXPECT_FALSE(biases.attention_mask_biases);
    apply_switch(biases, "attention_mask_biases=on");
    EXPECT_TRUE(biases.attention_mask_biases);
  }
  apply_switch(config, "choose_at_build=off");
  EXPECT_FALSE(config.choose_at_build);
  {
    BuilderConfig copies;
    EXPECT_TRUE(copies.concat_in_place);
    apply_switch(copies, "concat_in_place=off");
    EXPECT_FALSE(copies.concat_in_place);
  }
  EXPECT_FALSE(config.cast_into_shuffle);
  EXPECT_EQ(config.conv_layout, ConvLayout::kChannelsFirst);
  EXPECT_EQ(config.squeeze_excitation, std::optional<bool>(true));
  for (const char* bad :
       {"cast_into_shuffle=maybe", "conv_layout=nhwc", "no_such_switch=on", "excitation_projection",
        "gemm_fold=maybe", "cuda_pointwise=strip", "cuda_depthwise=cudnn", "cuda_grouped=strip",
        "cuda_arch=9", "cuda_arch=090", "cuda_arch=sm90", "cuda_arch=1000", "cuda_arch=",
        "choose_at_build=later", "attention_mask_biases=maybe", "concat_in_place=yes"}) {
    try {
      BuilderConfig c;
      apply_switch(c, bad);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(e.message().find(std::string("`") + bad + "`"), std::string::npos) << e.message();
    }
  }
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 3});
  net.mark_output(net.add("r", ActivationParams{ActivationKind::kRelu}, {x}), "y");
  const Plan plan = build(net, config);
  const std::vector<std::string> want = {"cast_into_shuffle=off", "conv_layout=channels_first",
                                         "squeeze_excitation=on", "gemm_timing=off",
                                         "choose_at_build=off"};
  EXPECT_EQ(plan.target.switches, want);
  const auto bytes = serialize_plan(plan);
  const Plan loaded = deserialize_plan(bytes.data(), bytes.size());
  EXPECT_EQ(loaded.target.switches, want);
  const Engine engine(loaded.network, loaded.target);
  EXPECT_NE(engine.inspect_json().find("conv_layout=channels_first"), std::string::npos);
}

// The kinds' traits the passes ask instead of testing kinds one by one: pointwise kinds are
// layout-agnostic, the fusible ones a subset of them, and a shape layer reads no values.
TEST(LayerKinds, TraitsAreAttributesOfTheKind) {
  for (const LayerParams& p :
       std::vector<LayerParams>{ElementwiseParams{BinaryOp::kAdd}, UnaryParams{UnaryOp::kExp},
                                ActivationParams{ActivationKind::kRelu}, CastParams{DataType::kF16},
                                FusedElementwiseParams{}}) {
    const LayerKindTraits t = layer_kind_traits(p);
    EXPECT_TRUE(t.pointwise && t.fusible && t.reads_values) << layer_kind_name(p);
  }
  const LayerKindTraits select = layer_kind_traits(SelectParams{});
  EXPECT_TRUE(select.pointwise);
  EXPECT_FALSE(select.fusible);
  for (const LayerParams& p : std::vector<LayerParams>{ConvolutionParams{}, MatMulParams{},
                                                       SoftmaxParams{}, ShuffleParams{}}) {
    const LayerKindTraits t = layer_kind_traits(p);
    EXPECT_FALSE(t.pointwise || t.fusible) << layer_kind_name(p);
    EXPECT_TRUE(t.reads_values) << layer_kind_name(p);
  }
  EXPECT_FALSE(layer_kind_traits(ShapeParams{}).reads_values);
}

ShuffleParams permute(std::vector<int64_t> perm) {
  ShuffleParams p;
  p.first_perm = std::move(perm);
  return p;
}

ShuffleParams reshape(std::vector<int64_t> dims) {
  ShuffleParams p;
  p.has_reshape = true;
  p.reshape = std::move(dims);
  return p;
}

int count_shuffles(const Plan& plan) {
  int n = 0;
  for (const Layer& l : plan.network.layers()) n += std::holds_alternative<ShuffleParams>(l.params);
  return n;
}

// NHWC -> NCHW, flatten, transpose back (ViT's patch tokens after a channels-last convolution)
// keeps every element in place: one reshape. A chain whose middle is used elsewhere, or in which
// one shuffle alone moves elements, stays as it was. Values always match the unbuilt network.
TEST(Builder, ShuffleChainsThatKeepElementOrderBecomeOneReshape) {
  const auto flatten_tokens = [](Network& net, TensorId x) {
    auto y = net.add("to_nchw", permute({0, 3, 1, 2}), {x});  // [2, 6, 4, 5]
    y = net.add("flatten", reshape({2, 6, 20}), {y});
    return net.add("tokens", permute({0, 2, 1}), {y});  // [2, 20, 6]
  };
  const HostTensor in = testing::random_tensor(DataType::kF32, {2, 4, 5, 6}, 41);
  {
    Network net;
    net.mark_output(flatten_tokens(net, net.add_input("x", DataType::kF32, {2, 4, 5, 6})), "y");
    BuildReport report;
    const Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("shuffle_chains"), 1) << report.to_string();
    ASSERT_EQ(count_shuffles(plan), 1);
    const auto& p = std::get<ShuffleParams>(plan.network.layers().back().params);
    EXPECT_TRUE(p.first_perm.empty() && p.second_perm.empty());
    EXPECT_EQ(p.reshape, (std::vector<int64_t>{2, 20, 6}));
    const HostTensor out = run_engine(plan.network, {in})[0];
    EXPECT_EQ(out.shape(), (Shape{2, 20, 6}));
    EXPECT_TRUE(testing::near(out, testing::to_doubles(in), 0, 0));  // the same elements in order
    EXPECT_NE(report.to_string().find("shuffle_chains 1"), std::string::npos) << report.to_string();
  }
  {
    Network net;  // to_nchw's output is used twice: nothing folds
    auto x = net.add_input("x", DataType::kF32, {2, 4, 5, 6});
    auto nchw = net.add("to_nchw", permute({0, 3, 1, 2}), {x});
    auto y = net.add("flatten", reshape({2, 6, 20}), {nchw});
    net.mark_output(net.add("tokens", permute({0, 2, 1}), {y}), "y");
    net.mark_output(net.add("neg", UnaryParams{UnaryOp::kNeg}, {nchw}), "z");
    BuildReport report;
    const Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("shuffle_chains"), 0);
    EXPECT_EQ(count_shuffles(plan), 3);
    const auto got = run_engine(plan.network, {in}), want = run_engine(net, {in});
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(testing::near(got[i], testing::to_doubles(want[i]), 0, 0)) << i;
    }
  }
  {
    Network net;  // a flatten, then a transpose: one shuffle moves elements, nothing to fold
    auto x = net.add_input("x", DataType::kF32, {2, 4, 5, 6});
    auto y = net.add("flatten", reshape({2, 20, 6}), {x});
    net.mark_output(net.add("t", permute({0, 2, 1}), {y}), "y");
    BuildReport report;
    const Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("shuffle_chains"), 0);
    EXPECT_EQ(count_shuffles(plan), 2);
  }
}

// Moving shuffles of a tensor the moved shuffle of shape `shape` (f32 input x), built and run
// against the unbuilt network: the plan's shuffles that move data, and its layers' params.
struct BuiltChain {
  int moving = 0;
  std::vector<ShuffleParams> shuffles;
};
BuiltChain build_chain(Network& net, const Shape& shape) {
  BuildReport report;
  const Plan plan = build(net, BuilderConfig{}, &report);
  const HostTensor in = testing::random_tensor(DataType::kF32, shape, 43);
  const auto got = run_engine(plan.network, {in}), want = run_engine(net, {in});
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    EXPECT_EQ(got[i].shape(), want[i].shape());
    EXPECT_TRUE(testing::near(got[i], testing::to_doubles(want[i]), 1e-3, 0)) << i;
  }
  BuiltChain b;
  for (const Layer& l : plan.network.layers()) {
    if (const auto* p = std::get_if<ShuffleParams>(&l.params)) {
      b.moving += shuffle_moves_data(*p);
      b.shuffles.push_back(*p);
    }
  }
  return b;
}

// Chains of shuffles in which several move elements are one shuffle that moves them (and a
// reshape, a view, where the result is not that shuffle's shape): two transposes are one;
// an NHWC -> NCHW transpose followed by a channel shuffle (reshape [N, G, C / G, H, W], swap the
// groups and channels, reshape back) is one transpose of [N H W, G, C / G]; a cast in the chain
// is the new shuffle's. Two casts stay as they were, and so does a chain whose middle is read
// twice.
TEST(Builder, ShuffleChainsThatMoveElementsAreOneCopy) {
  {
    Network net;
    auto x = net.add_input("x", DataType::kF32, {2, 4, 5, 6});
    auto y = net.add("t1", permute({0, 3, 1, 2}), {x});  // [2, 6, 4, 5]
    net.mark_output(net.add("t2", permute({0, 1, 3, 2}), {y}), "y");
    const BuiltChain b = build_chain(net, {2, 4, 5, 6});
    ASSERT_EQ(b.shuffles.size(), 1u);
    EXPECT_EQ(b.shuffles[0].first_perm, (std::vector<int64_t>{0, 3, 2, 1}));
    EXPECT_FALSE(b.shuffles[0].has_reshape);
  }
  const auto channel_shuffle = [](Network& net, TensorId nhwc, bool cast) {
    auto y = net.add("to_nchw", permute({0, 3, 1, 2}), {nhwc});  // [2, 12, 3, 5]
    y = net.add("split", reshape({2, 3, 4, 3, 5}), {y});
    ShuffleParams swap = permute({0, 2, 1, 3, 4});
    if (cast) {
      swap.cast = true;
      swap.to = DataType::kF16;
    }
    y = net.add("swap", swap, {y});
    return net.add("merge", reshape({2, 12, 3, 5}), {y});
  };
  for (bool cast : {false, true}) {
    Network net;
    auto x = net.add_input("x", DataType::kF32, {2, 3, 5, 12});
    net.mark_output(channel_shuffle(net, x, cast), "y");
    const BuiltChain b = build_chain(net, {2, 3, 5, 12});
    EXPECT_EQ(b.moving, 1) << cast;
    ASSERT_EQ(b.shuffles.size(), 2u) << cast;  // the copy and a view
    const ShuffleParams& move = b.shuffles[0];
    // [N, H, W, C] as [N, H W, G, C / G] -> [N, C / G, G, H W]: the channel shuffle and the
    // transpose to NCHW in one.
    EXPECT_EQ(move.reshape, (std::vector<int64_t>{2, 15, 3, 4})) << cast;
    EXPECT_EQ(move.second_perm, (std::vector<int64_t>{0, 3, 2, 1})) << cast;
    EXPECT_EQ(move.cast, cast);
    EXPECT_FALSE(shuffle_moves_data(b.shuffles[1]));
  }
  {
    // maxvit's window merge and grid partition: [2, 6, 5] split as (2, 3) and merged as (3, 2),
    // then split as (2, 3) again, which no strided view of the input is; the chain is composed in
    // two pieces, the second's two transposes one copy.
    Network net;
    auto x = net.add_input("x", DataType::kF32, {2, 6, 5});
    auto y = net.add("split1", reshape({2, 2, 3, 5}), {x});
    y = net.add("swap1", permute({0, 2, 1, 3}), {y});
    y = net.add("merge1", reshape({2, 6, 5}), {y});
    y = net.add("split2", reshape({2, 2, 3, 5}), {y});
    y = net.add("swap2", permute({0, 2, 1, 3}), {y});
    net.mark_output(net.add("swap3", permute({0, 1, 3, 2}), {y}), "y");
    EXPECT_EQ(build_chain(net, {2, 6, 5}).moving, 2);
  }
  {
    Network net;  // two casts: as it was
    auto x = net.add_input("x", DataType::kF32, {2, 4, 5, 6});
    ShuffleParams t1 = permute({0, 3, 1, 2}), t2 = permute({0, 1, 3, 2});
    t1.cast = t2.cast = true;
    t1.to = DataType::kF16;
    t2.to = DataType::kF32;
    net.mark_output(net.add("t2", t2, {net.add("t1", t1, {x})}), "y");
    EXPECT_EQ(build_chain(net, {2, 4, 5, 6}).moving, 2);
  }
  {
    Network net;  // the transposed tensor is read twice: the chain is the channel shuffle alone
    auto x = net.add_input("x", DataType::kF32, {2, 3, 5, 12});
    auto nchw = net.add("to_nchw", permute({0, 3, 1, 2}), {x});
    auto y = net.add("split", reshape({2, 3, 4, 3, 5}), {nchw});
    y = net.add("swap", permute({0, 2, 1, 3, 4}), {y});
    net.mark_output(net.add("merge", reshape({2, 12, 3, 5}), {y}), "y");
    net.mark_output(net.add("neg", UnaryParams{UnaryOp::kNeg}, {nchw}), "z");
    EXPECT_EQ(build_chain(net, {2, 3, 5, 12}).moving, 2);
  }
}

// How a squeeze-excitation block differs from torch's form in SqueezeExcitationCases.
enum class SeVariant {
  kTorch,
  kOtherOperand,
  kHiddenIsOutput,
  kNoBiasHardSigmoid,
  kWeightIsAnInput  // the second convolution's weight is an input, not a constant
};

// x [2, 6, 5, 4] (channels-first) or [2, 5, 4, 6] (channels-last), squeezed to 3 channels.
Network squeeze_excitation_net(bool channels_last, SeVariant variant) {
  Network net;
  const Shape shape = channels_last ? Shape{2, 5, 4, 6} : Shape{2, 6, 5, 4};
  const TensorId x = net.add_input("x", DataType::kF32, shape);
  const TensorId other = net.add_input("other", DataType::kF32, shape);
  PoolingParams pool;
  pool.kind = PoolingKind::kAverage;
  pool.adaptive = true;
  pool.output_size = {1, 1};
  pool.channels_last = channels_last;
  const auto fc = [&](const std::string& name, TensorId in, int64_t out, int64_t c, bool bias,
                      uint64_t seed) {
    ConvolutionParams p;
    p.strides = {1, 1};
    p.padding_begin = p.padding_end = {0, 0};
    p.post.has_bias = bias;
    p.channels_last = channels_last;
    const Shape w = channels_last ? Shape{out, 1, 1, c} : Shape{out, c, 1, 1};
    const TensorId weight = variant == SeVariant::kWeightIsAnInput && name == "fc2"
                                ? net.add_input(name + "_w", DataType::kF32, w)
                                : testing::random_constant(net, name + "_w", w, seed);
    std::vector<TensorId> inputs = {in, weight};
    if (bias) inputs.push_back(testing::random_constant(net, name + "_b", {out}, seed + 1));
    return net.add(name, p, inputs);
  };
  const bool plain = variant != SeVariant::kNoBiasHardSigmoid;
  TensorId t = net.add("pool", pool, {x});
  t = fc("fc1", t, 3, 6, plain, 1);
  const TensorId hidden =
      net.add("act1", ActivationParams{plain ? ActivationKind::kSilu : ActivationKind::kRelu}, {t});
  t = fc("fc2", hidden, 6, 3, true, 3);
  t = net.add("act2",
              ActivationParams{plain ? ActivationKind::kSigmoid : ActivationKind::kHardSigmoid},
              {t});
  t = net.add("scale", ElementwiseParams{BinaryOp::kMul},
              {t, variant == SeVariant::kOtherOperand ? other : x});
  net.mark_output(t, "y");
  if (variant == SeVariant::kHiddenIsOutput) net.mark_output(hidden, "hidden");
  return net;
}

// Squeeze-excitation in torch's form (global average pool, 1x1 convolution + activation, another,
// times the pool's input) becomes one layer in either layout, with or without the first bias,
// and the built network computes what the unbuilt one does; a product with another tensor, a
// hidden value used elsewhere, or a second weight that is not a constant (the CUDA kernel keeps a
// transposed copy) leaves the layers as they were. CPU plans fuse by default, and not under
// squeeze_excitation=off.
TEST(Builder, SqueezeExcitationBecomesOneLayer) {
  struct Case {
    bool channels_last;
    SeVariant variant;
    int fused;
  };
  const Case cases[] = {{false, SeVariant::kTorch, 1},
                        {true, SeVariant::kTorch, 1},
                        {false, SeVariant::kNoBiasHardSigmoid, 1},
                        {true, SeVariant::kNoBiasHardSigmoid, 1},
                        {false, SeVariant::kOtherOperand, 0},
                        {true, SeVariant::kHiddenIsOutput, 0},
                        {true, SeVariant::kWeightIsAnInput, 0}};
  BuilderConfig channels_first;
  channels_first.conv_layout = ConvLayout::kChannelsFirst;  // the layout the network is built in
  BuildReport cpu_default, cpu_off;
  build(squeeze_excitation_net(false, SeVariant::kTorch), channels_first, &cpu_default);
  EXPECT_EQ(cpu_default.changes("squeeze_excitation"), 1);
  BuilderConfig off = channels_first;
  apply_switch(off, "squeeze_excitation=off");
  build(squeeze_excitation_net(false, SeVariant::kTorch), off, &cpu_off);
  EXPECT_EQ(cpu_off.changes("squeeze_excitation"), 0);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "channels_last " << c.channels_last << ", variant "
                                      << static_cast<int>(c.variant));
    const Network net = squeeze_excitation_net(c.channels_last, c.variant);
    BuildReport report;
    const Plan plan = build(net, channels_first, &report);
    EXPECT_EQ(report.changes("squeeze_excitation"), c.fused);
    int se = 0, pools = 0;
    for (const Layer& l : plan.network.layers()) {
      se += std::holds_alternative<SqueezeExcitationParams>(l.params);
      pools += std::holds_alternative<PoolingParams>(l.params);
    }
    EXPECT_EQ(se, c.fused);
    EXPECT_EQ(pools, 1 - c.fused);
    std::vector<HostTensor> in;
    for (TensorId id : net.inputs()) {
      in.push_back(testing::random_tensor(DataType::kF32, net.tensor(id).shape, 7 + in.size()));
    }
    const auto built = run_engine(plan.network, in), reference = run_engine(net, in);
    ASSERT_EQ(built.size(), reference.size());
    for (size_t i = 0; i < built.size(); ++i) {
      EXPECT_TRUE(testing::near(built[i], testing::to_doubles(reference[i]), 1e-5, 1e-6));
    }
  }
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
  // No limit by default: activations of 2.4 GB (r3d_18 at batch 32 in f32 needs 1.2 GB) build.
  Network huge;
  auto h = huge.add_input("h", DataType::kF32, {300, 1024, 1024});
  auto wide =
      huge.add("c", CastParams{DataType::kI64}, {huge.add("n1", UnaryParams{UnaryOp::kNeg}, {h})});
  huge.mark_output(huge.add("n2", UnaryParams{UnaryOp::kNeg}, {wide}));
  BuildReport report;
  build(huge, BuilderConfig{}, &report);
  EXPECT_GT(report.arena_bytes, size_t{2} << 30);
  BuilderConfig one_gib;
  one_gib.workspace_bytes = size_t{1} << 30;
  EXPECT_THROW(build(huge, one_gib), InvalidArgument);
  Network empty;
  empty.add_input("x", DataType::kF32, {1});
  EXPECT_THROW(build(empty, BuilderConfig{}), InvalidArgument);
}

}  // namespace
}  // namespace kiln::engine
