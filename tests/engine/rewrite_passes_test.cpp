// The builder's structural rewrites: of written-out forms, RMS norm (rms_norms), a concat of
// slices of one tensor (concat_slices) and of strided slices (strided_concats); a constant bias
// before a softmax as its mask (softmax_biases); chains of gathers and shuffles as one gather of
// rows (gather_chains; with a channel shuffle's slices, gathers of channels); projections of one
// elementwise group as one matmul (elementwise_projections); attention as two matmuls and a
// (masked) softmax (decompose_attention) and written-out attention as one layer
// (written_attention). Each is checked for what it takes, what it leaves and the values it
// computes.
#include "engine/builder.h"

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/passes/pass.h"
#include "engine/passes/passes.h"
#include "engine/verify.h"
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
// concat of slices of two tensors, or of a strided slice, stays (one concat: concat_in_place off,
// which would have the negation write into it and copy the other slice). Values as the layers
// gave.
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
    BuilderConfig config;
    apply_switch(config, "concat_in_place=off");
    Plan plan = build(net, config, &report);
    EXPECT_EQ(report.changes("concat_slices"), c.gathers) << report.to_string();
    const int gathers = testing::count_layers<GatherParams>(plan.network);
    const int concats = testing::count_layers<ConcatParams>(plan.network);
    EXPECT_EQ(gathers, c.gathers);
    EXPECT_EQ(concats, 1 - c.gathers);
    const std::vector<HostTensor> in = {testing::random_tensor(DataType::kF32, {2, 3, 5, 8}, 61),
                                        testing::random_tensor(DataType::kF32, {2, 3, 5, 8}, 62)};
    EXPECT_TRUE(testing::near(run_engine(plan.network, in)[0],
                              testing::to_doubles(run_engine(net, in)[0]), 0, 0));
  }
}

// A concat of strided slices of one tensor that take each element once is one space-to-depth
// shuffle: swin's patch merging (NHWC, parts counting H's phase fastest, the H slices shared by
// two parts each as torchvision's trace has them), YOLOv5's Focus (NCHW, channels), three phases
// of W, and phases of one axis sliced twice (x[:, 1::2][:, ::2]: a step of 4); Focus before a
// convolution and a dynamic batch too. It stays where the parts are not in an order of their
// phases, miss one, take a phase twice, or read two tensors. Values exactly as the layers gave.
TEST(Builder, ConcatOfStridedSlicesIsOneShuffle) {
  struct Phase {
    int64_t axis, start, step;
  };
  struct Case {
    std::string name;
    Shape shape;
    int64_t concat_axis;
    std::vector<std::vector<Phase>> parts;
    bool second_source;
    int rewrites;
  };
  const std::vector<std::vector<Phase>> swin = {{{1, 0, 2}, {2, 0, 2}},
                                                {{1, 1, 2}, {2, 0, 2}},
                                                {{1, 0, 2}, {2, 1, 2}},
                                                {{1, 1, 2}, {2, 1, 2}}};
  const std::vector<std::vector<Phase>> focus = {{{2, 0, 2}, {3, 0, 2}},
                                                 {{2, 1, 2}, {3, 0, 2}},
                                                 {{2, 0, 2}, {3, 1, 2}},
                                                 {{2, 1, 2}, {3, 1, 2}}};
  auto shuffled = swin;
  std::swap(shuffled[1], shuffled[3]);
  auto twice = swin;
  twice[3] = twice[0];
  const Case cases[] = {
      {"swin", {2, 6, 8, 5}, 3, swin, false, 1},
      {"focus", {2, 3, 6, 8}, 1, focus, false, 1},
      {"thirds", {2, 4, 9, 5}, -1, {{{2, 0, 3}}, {{2, 1, 3}}, {{2, 2, 3}}}, false, 1},
      {"quarters",
       {2, 8, 3},
       2,
       {{{1, 0, 2}, {1, 0, 2}},
        {{1, 1, 2}, {1, 0, 2}},
        {{1, 0, 2}, {1, 1, 2}},
        {{1, 1, 2}, {1, 1, 2}}},
       false,
       1},
      {"out of order", {2, 6, 8, 5}, 3, shuffled, false, 0},
      {"missing", {2, 6, 8, 5}, 3, {swin[0], swin[1], swin[2]}, false, 0},
      {"twice", {2, 6, 8, 5}, 3, twice, false, 0},
      {"two sources", {2, 6, 8, 5}, 3, swin, true, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Network net;
    auto x = net.add_input("x", DataType::kF32, c.shape);
    auto other = net.add_input("other", DataType::kF32, c.shape);
    std::map<std::string, TensorId> made;  // slices shared by parts, as in torchvision's trace
    std::vector<TensorId> parts;
    for (size_t k = 0; k < c.parts.size(); ++k) {
      TensorId t = c.second_source && k == 1 ? other : x;
      std::string key = t == x ? "x" : "other";
      for (const Phase& ph : c.parts[k]) {
        key += "/" + std::to_string(ph.axis) + ":" + std::to_string(ph.start);
        auto it = made.find(key);
        if (it == made.end()) {
          it = made.emplace(key, net.add("slice" + key,
                                         SliceParams{{ph.axis}, {ph.start}, {kSliceEnd}, {ph.step}},
                                         {t}))
                   .first;
        }
        t = it->second;
      }
      parts.push_back(t);
    }
    auto cat = net.add("cat", ConcatParams{c.concat_axis, false}, parts);
    net.mark_output(net.add("relu", ActivationParams{ActivationKind::kRelu}, {cat}), "y");
    BuildReport report;
    Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("strided_concats"), c.rewrites) << report.to_string();
    const int slices = testing::count_layers<SliceParams>(plan.network);
    const int concats = testing::count_layers<ConcatParams>(plan.network);
    EXPECT_EQ(concats, 1 - c.rewrites);
    if (c.rewrites == 1) {
      EXPECT_EQ(slices, 0);
    }
    const std::vector<HostTensor> in = {testing::random_tensor(DataType::kF32, c.shape, 63),
                                        testing::random_tensor(DataType::kF32, c.shape, 64)};
    EXPECT_TRUE(testing::near(run_engine(plan.network, in)[0],
                              testing::to_doubles(run_engine(net, in)[0]), 0, 0));
  }
  // Focus before a 3x3 convolution, which the layout pass makes channels-last: the shuffle and
  // the layout's transpose are one copy after the shuffle chains; values as the layers gave (the
  // convolution's sums in another order).
  {
    Network net;
    auto x = net.add_input("x", DataType::kF32, {2, 3, 8, 8});
    std::vector<TensorId> parts;
    for (const auto& phases : focus) {
      TensorId t = x;
      for (const Phase& ph : phases) {
        t = net.add("slice", SliceParams{{ph.axis}, {ph.start}, {kSliceEnd}, {ph.step}}, {t});
      }
      parts.push_back(t);
    }
    auto cat = net.add("cat", ConcatParams{1, false}, parts);
    ConvolutionParams p;
    p.strides = {1, 1};
    p.padding_begin = p.padding_end = {1, 1};
    p.dilations = {1, 1};
    std::vector<float> w(8 * 12 * 3 * 3);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05f * static_cast<float>(i % 13) - 0.3f;
    auto conv =
        net.add("conv", p, {cat, net.add_constant("w", Weights::from_floats({8, 12, 3, 3}, w))});
    net.mark_output(conv, "y");
    BuildReport report;
    const Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("strided_concats"), 1) << report.to_string();
    EXPECT_GT(report.changes("layout"), 0) << report.to_string();
    // One copy from NCHW x to the convolution's NHWC phases, one of its result back to NCHW.
    EXPECT_EQ(count_moving_shuffles(plan.network.layers()), 2) << network_to_text(plan.network);
    const std::vector<HostTensor> in = {testing::random_tensor(DataType::kF32, {2, 3, 8, 8}, 66)};
    EXPECT_TRUE(testing::near(run_engine(plan.network, in)[0],
                              testing::to_doubles(run_engine(net, in)[0]), 1e-5, 1e-6));
  }
  // A dynamic batch rides along as -1 in the views, at every batch of the profile.
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 6, 8, 5},
                         Profile{{1, 6, 8, 5}, {2, 6, 8, 5}, {4, 6, 8, 5}});
  std::vector<TensorId> parts;
  for (const auto& phases : swin) {
    TensorId t = x;
    for (const Phase& ph : phases) {
      t = net.add("slice", SliceParams{{ph.axis}, {ph.start}, {kSliceEnd}, {ph.step}}, {t});
    }
    parts.push_back(t);
  }
  net.mark_output(net.add("cat", ConcatParams{3, false}, parts), "y");
  BuildReport report;
  const Plan plan = build(net, BuilderConfig{}, &report);
  EXPECT_EQ(report.changes("strided_concats"), 1) << report.to_string();
  ExecutionContext built(std::make_shared<const Engine>(plan.network, plan.target));
  ExecutionContext unbuilt(std::make_shared<const Engine>(net));
  for (int64_t batch : {1, 3, 4}) {
    const HostTensor in = testing::random_tensor(DataType::kF32, {batch, 6, 8, 5}, 65);
    EXPECT_TRUE(testing::near(built.run({in})[0], testing::to_doubles(unbuilt.run({in})[0]), 0, 0))
        << "batch " << batch;
  }
}

// A gather by constant indices that keeps every element in order is a view, alone or behind a
// reshape (BERT's mask[:, None, None, :] as traced: a flatten, then a gather by arange(S) shaped
// [1, 1, 1, S]; a negative index counts from the end); one that skips or repeats an element stays
// a gather. Values as the layers gave.
TEST(Builder, GathersThatKeepEveryElementInPlaceAreViews) {
  struct Case {
    std::vector<int64_t> indices;
    Shape index_shape;
    bool flatten;
    int gathers;
  };
  for (const Case& c :
       {Case{{0, 1, 2, 3, 4, 5}, {1, 1, 1, 6}, true, 0}, Case{{0, 1, 2, 3, 4}, {5}, false, 0},
        Case{{0, 1, 2, 3, 4, -1}, {1, 1, 1, 6}, true, 0},
        Case{{0, 1, 2, 3, 4, 4}, {1, 1, 1, 6}, true, 1}, Case{{0, 1, 2, 3}, {4}, false, 1}}) {
    SCOPED_TRACE(::testing::PrintToString(c.indices));
    Network net;
    TensorId x, data;
    if (c.flatten) {
      x = net.add_input("x", DataType::kF32, {1, 6});
      data = net.add("flat", ShuffleParams{{}, true, {6}, {}}, {x});
    } else {
      x = net.add_input("x", DataType::kF32, {2, 5, 3});
      data = x;
    }
    const int64_t axis = c.flatten ? 0 : 1;
    auto idx = net.add_constant("idx", Weights::from_ints(c.index_shape, c.indices));
    auto y = net.add("pick", GatherParams{GatherMode::kDefault, axis}, {data, idx});
    net.mark_output(net.add("double", ElementwiseParams{BinaryOp::kAdd}, {y, y}), "y");
    Plan plan = build(net, BuilderConfig{});
    EXPECT_EQ(testing::count_layers<GatherParams>(plan.network), c.gathers);
    const Shape in_shape = c.flatten ? Shape{1, 6} : Shape{2, 5, 3};
    const HostTensor in = testing::random_tensor(DataType::kF32, in_shape, 73);
    const auto built = run_engine(plan.network, {in});
    const auto layers = run_engine(net, {in});
    ASSERT_EQ(built.size(), 1u);
    EXPECT_EQ(built[0].shape(), layers[0].shape());
    EXPECT_EQ(testing::to_doubles(built[0]), testing::to_doubles(layers[0]));
  }
}

// swin's shifted windows: a roll of H and W (two concats of slices: two gathers after
// concat_slices) and the window partition (reshape, permute, reshape: one copy), and after a
// per-token layer the window merge and the roll back, each direction one gather of rows (the C
// dim carried whole) between views, the same indices for each image: 196 of them at batch 2, not
// 392. A chain ends at a link read twice (the roll read by a network output: the two gathers are
// one, the partition stays a copy); a map that moves single f32 elements (the last dim permuted)
// stays as it is. Values exactly as the layers gave.
TEST(Builder, GatherAndShuffleChainsAreOneRowGather) {
  const auto roll = [](Network& net, TensorId x, int64_t axis, int64_t shift,
                       const std::string& name) {
    auto tail = net.add(name + ".tail", SliceParams{{axis}, {shift}, {kSliceEnd}, {1}}, {x});
    auto head = net.add(name + ".head", SliceParams{{axis}, {0}, {shift}, {1}}, {x});
    return net.add(name, ConcatParams{axis, false}, {tail, head});
  };
  struct Case {
    bool shared_link, element_map;
    int chains, gathers, per_image, moving;
  };
  for (const Case& c : {Case{false, false, 2, 2, 2, 0}, Case{true, false, 2, 2, 2, 1},
                        Case{false, true, 1, 2, 1, 1}}) {
    SCOPED_TRACE(std::to_string(c.shared_link) + std::to_string(c.element_map));
    Network net;
    auto x = net.add_input("x", DataType::kF32, {2, 14, 14, 8});
    auto rolled = roll(net, roll(net, x, 1, 3, "roll_h"), 2, 3, "roll_w");
    if (c.shared_link) net.mark_output(rolled, "rolled");
    auto split = net.add("split", ShuffleParams{{}, true, {2, 2, 7, 2, 7, 8}, {}}, {rolled});
    auto windows =
        net.add("windows", ShuffleParams{{0, 1, 3, 2, 4, 5}, true, {8, 49, 8}, {}}, {split});
    auto scale = net.add_constant("scale", Weights::from_floats({8}, {1, 2, 3, 4, 5, 6, 7, 8}));
    auto tokens = net.add("tokens", ElementwiseParams{BinaryOp::kMul}, {windows, scale});
    TensorId merged;
    if (c.element_map) {  // [8, 49, 8] -> [8, 8, 49]: single elements move
      merged = net.add("merge", ShuffleParams{{0, 2, 1}, false, {}, {}}, {tokens});
      merged = net.add(
          "pick", GatherParams{GatherMode::kDefault, 0},
          {merged, net.add_constant("order", Weights::from_ints({8}, {7, 6, 5, 4, 3, 2, 1, 0}))});
    } else {
      auto grid = net.add("grid", ShuffleParams{{}, true, {2, 2, 2, 7, 7, 8}, {}}, {tokens});
      merged =
          net.add("merge", ShuffleParams{{0, 1, 3, 2, 4, 5}, true, {2, 14, 14, 8}, {}}, {grid});
      merged = roll(net, roll(net, merged, 1, 11, "back_h"), 2, 11, "back_w");
    }
    net.mark_output(merged, "y");
    BuildReport report;
    Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("gather_chains"), c.chains) << report.to_string();
    int gathers = 0, per_image = 0;
    for (const Layer& l : plan.network.layers()) {
      if (!std::holds_alternative<GatherParams>(l.params)) continue;
      ++gathers;
      per_image += plan.network.tensor(l.outputs[0]).shape == Shape{2, 196, 8};
    }
    EXPECT_EQ(gathers, c.gathers);
    EXPECT_EQ(per_image, c.per_image);
    EXPECT_EQ(count_moving_shuffles(plan.network.layers()), c.moving);
    const HostTensor in = testing::random_tensor(DataType::kF32, {2, 14, 14, 8}, 71);
    const auto built = run_engine(plan.network, {in});
    const auto layers = run_engine(net, {in});
    ASSERT_EQ(built.size(), layers.size());
    for (size_t o = 0; o < built.size(); ++o) {
      EXPECT_TRUE(testing::near(built[o], testing::to_doubles(layers[o]), 0, 0)) << o;
    }
  }
}

// shufflenet_v2's channel shuffle as the layout pass leaves it ([N H W, 2, C / 2] transposed, a
// view back to [N, H, W, C], two channel slices): on the CPU (element gathers) each slice and the
// links before it become one gather of single channels from the shuffle's input, the shuffle and
// the view then read by nothing. Where the view is also a network output they stay for it. A
// slice that runs as a view (one range of its input) before a transpose is no second copy: kept.
// The CUDA backend's rules (no element gathers) leave the chains alone. Values exactly as the
// layers gave.
TEST(Builder, ChannelShuffleSlicesAreGathersOfChannels) {
  for (bool view_out : {false, true}) {
    SCOPED_TRACE(view_out);
    Network net;
    auto x = net.add_input("x", DataType::kF32, {2, 5, 5, 12});
    auto t = net.add("shuffle", ShuffleParams{{}, true, {50, 2, 6}, {0, 2, 1}}, {x});
    auto v = net.add("view", ShuffleParams{{}, true, {2, 5, 5, 12}, {}}, {t});
    if (view_out) net.mark_output(v, "shuffled");
    auto first = net.add("first", SliceParams{{3}, {0}, {6}, {1}}, {v});
    auto second = net.add("second", SliceParams{{3}, {6}, {12}, {1}}, {v});
    net.mark_output(net.add("relu", ActivationParams{ActivationKind::kRelu}, {first}), "a");
    net.mark_output(net.add("neg", UnaryParams{UnaryOp::kNeg}, {second}), "b");
    // One image, a range of x that runs as a view, then transposed: one copy already, kept.
    auto image = net.add("image", SliceParams{{0}, {1}, {2}, {1}}, {x});
    net.mark_output(net.add("flip", ShuffleParams{{0, 3, 1, 2}, false, {}, {}}, {image}), "c");
    Network cuda_like = net;
    EXPECT_EQ(fold_gather_chains(cuda_like, {}, false), 0);
    BuildReport report;
    Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("gather_chains"), 2) << report.to_string();
    EXPECT_EQ(testing::count_layers<GatherParams>(plan.network), 2);
    EXPECT_EQ(testing::count_layers<SliceParams>(plan.network), 1);
    EXPECT_EQ(count_moving_shuffles(plan.network.layers()), view_out ? 2 : 1);
    const HostTensor in = testing::random_tensor(DataType::kF32, {2, 5, 5, 12}, 75);
    const auto built = run_engine(plan.network, {in});
    const auto layers = run_engine(net, {in});
    ASSERT_EQ(built.size(), layers.size());
    for (size_t o = 0; o < built.size(); ++o) {
      EXPECT_TRUE(testing::near(built[o], testing::to_doubles(layers[o]), 0, 0)) << o;
    }
  }
}

// SwiGLU's silu(x Wg + bg) * (x Wu): the two projections of one input, read by one elementwise
// group, become one matmul of both weights (the bias zero-padded) and a gather of each part's
// columns, which the fused kernel then reads in place: one matmul and one fused layer, values as
// the layers gave (weights stored either way round). A part read by another layer too, and a
// group of one layer (the product alone), stay as they are.
TEST(Builder, ProjectionsOfOneElementwiseGroupAreOneMatmul) {
  struct Case {
    bool transposed, shared_part, activation;
    int merged;
  };
  for (const Case& c : {Case{true, false, true, 1}, Case{false, false, true, 1},
                        Case{true, true, true, 0}, Case{true, false, false, 0}}) {
    SCOPED_TRACE(std::to_string(c.transposed) + std::to_string(c.shared_part) +
                 std::to_string(c.activation));
    Network net;
    const auto x = net.add_input("x", DataType::kF32, {2, 5, 16});
    uint64_t seed = 80;
    const auto project = [&](const std::string& name, int64_t n, bool bias) {
      MatMulParams m;
      m.transpose_b = c.transposed;
      m.post.has_bias = bias;
      std::vector<TensorId> ins = {
          x, testing::random_constant(net, name + ".w", c.transposed ? Shape{n, 16} : Shape{16, n},
                                      seed++)};
      if (bias) ins.push_back(testing::random_constant(net, name + ".b", {n}, seed++));
      return net.add(name, m, ins);
    };
    const auto gate = project("gate", 24, true), up = project("up", 24, false);
    const auto act =
        c.activation ? net.add("silu", ActivationParams{ActivationKind::kSilu}, {gate}) : gate;
    net.mark_output(net.add("y", ElementwiseParams{BinaryOp::kMul}, {act, up}), "y");
    if (c.shared_part) net.mark_output(net.add("up2", UnaryParams{UnaryOp::kNeg}, {up}), "up2");
    const HostTensor in = testing::random_tensor(DataType::kF32, {2, 5, 16}, 81);
    const auto expected = run_engine(net, {in});
    std::vector<std::string> lines;
    EXPECT_EQ(merge_elementwise_projections(net, lines), c.merged);
    const auto count = [&](auto pick) {
      int n = 0;
      for (const Layer& l : net.layers()) n += pick(l.params);
      return n;
    };
    const auto matmuls = [](const LayerParams& p) {
      return std::holds_alternative<MatMulParams>(p);
    };
    const auto gathers = [](const LayerParams& p) {
      return std::holds_alternative<GatherParams>(p);
    };
    EXPECT_EQ(count(matmuls), 2 - c.merged);
    EXPECT_EQ(count(gathers), 2 * c.merged);
    const auto check = [&] {
      const auto got = run_engine(net, {in});
      ASSERT_EQ(got.size(), expected.size());
      for (size_t o = 0; o < got.size(); ++o) {
        EXPECT_TRUE(testing::near(got[o], testing::to_doubles(expected[o]), 1e-6, 1e-6)) << o;
      }
    };
    check();
    // The fused kernel reads the columns in place.
    fuse_elementwise(net, lines);
    fold_gathers_into_elementwise(net);
    EXPECT_EQ(count(gathers), 0);
    check();
  }
}

// A constant bias added to attention scores before the softmax (swin's relative position bias,
// [1, H, L, S] over [W, H, L, S]; a full [L, S] one; on a causal softmax; and swin's shifted
// blocks, a bias and a window mask on two views of the scores) becomes the softmax's additive
// mask: no add left, values as before within rounding. It stays where the bias is not a
// constant, holds an infinity, the scores are no matmul's, the add is read twice, or the softmax
// is a log-softmax.
TEST(Builder, ConstantBiasBeforeSoftmaxIsItsMask) {
  struct Case {
    std::string name;
    Shape bias;
    bool causal, input_bias, infinite, from_input, read_twice, log;
    int folds;
  };
  const int64_t W = 4, H = 3, L = 7, E = 8;
  for (const Case& c :
       {Case{"swin", {1, H, L, L}, false, false, false, false, false, false, 1},
        Case{"full", {L, L}, true, false, false, false, false, false, 1},
        Case{"input", {1, H, L, L}, false, true, false, false, false, false, 0},
        Case{"infinite", {1, H, L, L}, false, false, true, false, false, false, 0},
        Case{"not a matmul", {1, H, L, L}, false, false, false, true, false, false, 0},
        Case{"read twice", {1, H, L, L}, false, false, false, false, true, false, 0},
        Case{"log", {1, H, L, L}, false, false, false, false, false, true, 0}}) {
    SCOPED_TRACE(c.name);
    Network net;
    auto q = net.add_input("q", DataType::kF32, {W, H, L, E});
    auto k = net.add_input("k", DataType::kF32, {W, H, L, E});
    auto bias_in = net.add_input("bias_in", DataType::kF32, c.bias);
    MatMulParams qk;
    qk.transpose_b = true;
    auto scores = c.from_input ? net.add_input("scores", DataType::kF32, {W, H, L, L})
                               : net.add("qk", qk, {q, k});
    std::vector<float> b(static_cast<size_t>(volume(c.bias)));
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.3f * static_cast<float>(i % 5) - 0.6f;
    if (c.infinite) b[3] = -std::numeric_limits<float>::infinity();
    auto bias = c.input_bias ? bias_in : net.add_constant("bias", Weights::from_floats(c.bias, b));
    auto biased = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {scores, bias});
    auto probs = net.add("softmax", SoftmaxParams{-1, c.log, c.causal}, {biased});
    net.mark_output(net.add("pv", MatMulParams{}, {probs, q}), "y");
    if (c.read_twice) net.mark_output(biased, "biased");
    BuildReport report;
    const Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("softmax_biases"), c.folds) << report.to_string();
    int adds = 0;
    for (const Layer& l : plan.network.layers()) {
      const auto* e = std::get_if<ElementwiseParams>(&l.params);
      adds += e && e->op == BinaryOp::kAdd;
    }
    EXPECT_EQ(adds, 1 - c.folds) << network_to_text(plan.network);
    std::vector<HostTensor> in = {testing::random_tensor(DataType::kF32, {W, H, L, E}, 67),
                                  testing::random_tensor(DataType::kF32, {W, H, L, E}, 68),
                                  testing::random_tensor(DataType::kF32, c.bias, 69)};
    if (c.from_input) in.push_back(testing::random_tensor(DataType::kF32, {W, H, L, L}, 70));
    const auto built = run_engine(plan.network, in), unbuilt = run_engine(net, in);
    for (size_t o = 0; o < built.size(); ++o) {
      EXPECT_TRUE(testing::near(built[o], testing::to_doubles(unbuilt[o]), 1e-6, 1e-6)) << o;
    }
  }
  // A causal softmax behind a view that regroups its query rows ([W, H, L, L] as [W, H * L, L])
  // keeps its add: on the scores' shape the causal rows would be others.
  {
    Network net;
    auto q = net.add_input("q", DataType::kF32, {W, H, L, E});
    MatMulParams qk;
    qk.transpose_b = true;
    std::vector<float> b(static_cast<size_t>(H * L * L));
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * static_cast<float>(i % 9) - 0.4f;
    auto biased = net.add("add", ElementwiseParams{BinaryOp::kAdd},
                          {net.add("qk", qk, {q, q}),
                           net.add_constant("bias", Weights::from_floats({1, H, L, L}, b))});
    auto rows = net.add("rows", ShuffleParams{{}, true, {W, H * L, L}, {}}, {biased});
    net.mark_output(net.add("softmax", SoftmaxParams{-1, false, true}, {rows}), "y");
    BuildReport report;
    const Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("softmax_biases"), 0) << report.to_string();
    const std::vector<HostTensor> in = {testing::random_tensor(DataType::kF32, {W, H, L, E}, 72)};
    EXPECT_TRUE(testing::near(run_engine(plan.network, in)[0],
                              testing::to_doubles(run_engine(net, in)[0]), 1e-6, 1e-6));
  }
  // swin's shifted blocks: the bias on [B * W, H, L, L], a view as [B, W, H, L, L], the window
  // mask [1, W, 1, L, L] and a view back: the softmax runs on the 5-d view with the two summed,
  // at a static batch of 2, at every batch of a dynamic one, and causal (the view keeps the
  // query rows).
  for (const auto& [dynamic, causal] : {std::pair{false, false}, {true, false}, {false, true}}) {
    SCOPED_TRACE(std::string("shifted") + (dynamic ? ", dynamic batch" : "") +
                 (causal ? ", causal" : ""));
    const int64_t B = 2, Wn = 2;
    Network net;
    const auto batch = [&](int64_t n) { return dynamic ? kDynamic : n; };
    std::optional<Profile> profile;
    if (dynamic) profile = Profile{{Wn, H, L, E}, {2 * Wn, H, L, E}, {3 * Wn, H, L, E}};
    auto q = net.add_input("q", DataType::kF32, {batch(B * Wn), H, L, E}, profile);
    MatMulParams qk;
    qk.transpose_b = true;
    auto scores = net.add("qk", qk, {q, q});
    std::vector<float> b(static_cast<size_t>(H * L * L)), m(static_cast<size_t>(Wn * L * L));
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.2f * static_cast<float>(i % 7) - 0.5f;
    for (size_t i = 0; i < m.size(); ++i) m[i] = i % 3 == 0 ? -100.f : 0.f;
    auto biased =
        net.add("add", ElementwiseParams{BinaryOp::kAdd},
                {scores, net.add_constant("bias", Weights::from_floats({1, H, L, L}, b))});
    auto windows = net.add("windows", ShuffleParams{{}, true, {-1, Wn, H, L, L}, {}}, {biased});
    auto masked = net.add(
        "mask", ElementwiseParams{BinaryOp::kAdd},
        {windows, net.add_constant("window_mask", Weights::from_floats({1, Wn, 1, L, L}, m))});
    auto back = net.add("back", ShuffleParams{{}, true, {-1, H, L, L}, {}}, {masked});
    auto probs = net.add("softmax", SoftmaxParams{-1, false, causal}, {back});
    net.mark_output(net.add("pv", MatMulParams{}, {probs, q}), "y");
    BuildReport report;
    const Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("softmax_biases"), 1) << report.to_string();
    for (const Layer& l : plan.network.layers()) {
      EXPECT_FALSE(std::holds_alternative<ElementwiseParams>(l.params)) << l.name;
    }
    ExecutionContext built(std::make_shared<const Engine>(plan.network, plan.target));
    ExecutionContext unbuilt(std::make_shared<const Engine>(net));
    for (int64_t images : dynamic ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{B}) {
      const HostTensor in = testing::random_tensor(DataType::kF32, {images * Wn, H, L, E}, 71);
      EXPECT_TRUE(
          testing::near(built.run({in})[0], testing::to_doubles(unbuilt.run({in})[0]), 1e-6, 1e-6))
          << images << " images";
    }
  }
}

// Attention decomposed into matmul(q * scale, k^T) -> softmax -> matmul(., v) computes what the
// attention layer does for every mask form: none, bool padding (one sequence fully padded: zero
// rows), bool per query, additive, causal alone and with padding; grouped batch broadcasting of
// k and v; an explicit scale. Packed heads, and attention the fused kernel takes, stay.
TEST(Builder, DecomposedAttentionTakesEveryMask) {
  enum Mask { kNone, kPad, kPerQuery, kAdditive };
  struct Case {
    Mask mask;
    bool causal;
    double scale;
  };
  const HostTensor q = testing::random_tensor(DataType::kF32, {2, 3, 5, 8}, 61, -2, 2);
  const HostTensor k = testing::random_tensor(DataType::kF32, {2, 3, 7, 8}, 62, -2, 2);
  const HostTensor v = testing::random_tensor(DataType::kF32, {2, 3, 7, 6}, 63, -2, 2);
  HostTensor pad(DataType::kBool, {2, 1, 1, 7}), per(DataType::kBool, {2, 1, 5, 7});
  for (int64_t j = 0; j < 7; ++j) {
    pad.as<uint8_t>()[j] = j < 5;  // sequence 0: 5 keys; sequence 1: fully padded
    pad.as<uint8_t>()[7 + j] = 0;
  }
  for (int64_t i = 0; i < 2 * 5 * 7; ++i) per.as<uint8_t>()[i] = i % 4 != 1;
  const HostTensor additive = testing::random_tensor(DataType::kF32, {5, 7}, 64, -3, 1);
  for (const Case& c : {Case{kNone, false, 0}, Case{kPad, false, 0}, Case{kPerQuery, false, 0.3},
                        Case{kAdditive, false, 0}, Case{kNone, true, 0}, Case{kPad, true, 0}}) {
    SCOPED_TRACE(std::to_string(c.mask) + (c.causal ? " causal" : ""));
    Network net;
    std::vector<TensorId> in = {net.add_input("q", DataType::kF32, q.shape()),
                                net.add_input("k", DataType::kF32, k.shape()),
                                net.add_input("v", DataType::kF32, v.shape())};
    std::vector<HostTensor> values = {q, k, v};
    const HostTensor* mask = c.mask == kPad        ? &pad
                             : c.mask == kPerQuery ? &per
                             : c.mask == kAdditive ? &additive
                                                   : nullptr;
    if (mask) {
      in.push_back(net.add_input("mask", mask->dtype(), mask->shape()));
      values.push_back(*mask);
    }
    AttentionParams a;
    a.causal = c.causal;
    a.has_mask = mask != nullptr;
    a.scale = c.scale;
    net.mark_output(net.add("attn", a, in), "y");
    const std::vector<HostTensor> want = run_engine(net, values);
    Network taken = net;
    EXPECT_EQ(decompose_attention(
                  taken, [](const Shape&, const Shape&, const Shape&, DataType) { return false; }),
              1);
    int matmuls = 0, softmaxes = 0;
    for (const Layer& l : taken.layers()) {
      EXPECT_FALSE(std::holds_alternative<AttentionParams>(l.params)) << l.name;
      matmuls += std::holds_alternative<MatMulParams>(l.params);
      if (const auto* s = std::get_if<SoftmaxParams>(&l.params)) {
        ++softmaxes;
        EXPECT_EQ(s->causal, c.causal);
        EXPECT_EQ(l.inputs.size(), mask ? 2u : 1u);
      }
    }
    EXPECT_EQ(matmuls, 2);
    EXPECT_EQ(softmaxes, 1);
    const HostTensor got = run_engine(taken, values)[0];
    EXPECT_TRUE(testing::near(got, testing::to_doubles(want[0]), 1e-5, 1e-6));
    if (c.mask == kPad) {  // the fully padded sequence: zeros, as the attention gives
      for (int64_t i = got.numel() / 2; i < got.numel(); ++i) EXPECT_EQ(got.as<float>()[i], 0.f);
    }
    Network kept = net;  // the fused kernel takes it: the attention stays
    EXPECT_EQ(decompose_attention(
                  kept, [](const Shape&, const Shape&, const Shape&, DataType) { return true; }),
              0);
  }
}

// Attention written out as matmuls and a softmax becomes one attention layer computing what the
// layers did: MaxViT's form (5-d heads, k times a scalar, a permuted k, a [1, H, L, S] position
// bias), Swin's shifted windows (q times a scalar, the bias added in the [B * W, H, L, S] frame,
// the window mask in a reshape to [B, W, H, L, S], back: the attention runs in the 5-d frame with
// the sum of both as its mask), scores over a scalar with the matmul's transpose flag. What must
// stay: a scale applied after a term ((s + t) * c: the term would be scaled), probabilities read
// twice, and what the fused kernel does not take.
TEST(Builder, WrittenOutAttentionIsOneLayer) {
  enum Form { kMaxVit, kSwin, kDivided, kScaledTerm, kProbsRead, kNotFused };
  const auto transpose_last = [](size_t rank) {
    std::vector<int64_t> perm;
    for (size_t d = 0; d < rank; ++d) perm.push_back(static_cast<int64_t>(d));
    std::swap(perm[rank - 1], perm[rank - 2]);
    ShuffleParams p;
    p.first_perm = perm;
    return p;
  };
  const auto reshape = [](Shape to) {
    ShuffleParams p;
    p.has_reshape = true;
    p.reshape = std::move(to);
    return p;
  };
  for (Form f : {kMaxVit, kSwin, kDivided, kScaledTerm, kProbsRead, kNotFused}) {
    SCOPED_TRACE(f);
    const Shape lead = f == kMaxVit ? Shape{2, 3, 2} : Shape{6, 2};
    const int64_t L = 5, S = 7, E = 8, Ev = 6;
    const auto shape = [&](int64_t a, int64_t b) {
      Shape s = lead;
      s.push_back(a);
      s.push_back(b);
      return s;
    };
    Network net;
    const auto q = net.add_input("q", DataType::kF32, shape(L, E));
    const auto k = net.add_input("k", DataType::kF32, shape(S, E));
    const auto v = net.add_input("v", DataType::kF32, shape(S, Ev));
    const auto scalar = [&](const std::string& name, float x) {
      return net.add_constant(name, Weights::from_floats({}, {x}));
    };
    TensorId scores;
    if (f == kDivided) {
      MatMulParams m;
      m.transpose_b = true;
      scores = net.add("qk", m, {q, k});
      scores = net.add("div", ElementwiseParams{BinaryOp::kDiv}, {scores, scalar("c", 2.5f)});
    } else {
      const TensorId qs =
          f == kMaxVit ? q
                       : net.add("qs", ElementwiseParams{BinaryOp::kMul}, {q, scalar("c", 0.3f)});
      const TensorId ks =
          f == kMaxVit ? net.add("ks", ElementwiseParams{BinaryOp::kMul}, {scalar("c", 0.4f), k})
                       : k;
      scores =
          net.add("qk", MatMulParams{}, {qs, net.add("kt", transpose_last(lead.size() + 2), {ks})});
      const TensorId bias = testing::random_constant(net, "bias", {1, 2, L, S}, 71);
      scores = net.add("biased", ElementwiseParams{BinaryOp::kAdd}, {scores, bias});
      if (f == kSwin) {
        scores = net.add("win", reshape({2, 3, 2, L, S}), {scores});
        const TensorId mask = testing::random_constant(net, "mask", {3, 1, L, S}, 72);
        scores = net.add("masked", ElementwiseParams{BinaryOp::kAdd}, {scores, mask});
        scores = net.add("unwin", reshape({6, 2, L, S}), {scores});
      }
      if (f == kScaledTerm) {
        scores = net.add("late", ElementwiseParams{BinaryOp::kMul}, {scores, scalar("d", 0.7f)});
      }
    }
    const auto probs = net.add("softmax", SoftmaxParams{}, {scores});
    net.mark_output(net.add("pv", MatMulParams{}, {probs, v}), "y");
    if (f == kProbsRead) net.mark_output(probs, "probs");
    const std::vector<HostTensor> in = {
        testing::random_tensor(DataType::kF32, shape(L, E), 73, -2, 2),
        testing::random_tensor(DataType::kF32, shape(S, E), 74, -2, 2),
        testing::random_tensor(DataType::kF32, shape(S, Ev), 75)};
    const std::vector<HostTensor> want = run_engine(net, in);
    Network taken = net;
    const bool expected = f == kMaxVit || f == kSwin || f == kDivided;
    std::vector<Shape> asked;
    EXPECT_EQ(fold_written_attention(taken,
                                     [&](const Shape& qs, const Shape&, const Shape&, DataType) {
                                       asked.push_back(qs);
                                       return f != kNotFused;
                                     }),
              expected ? 1 : 0);
    remove_dead_layers(taken);
    int attentions = 0, softmaxes = 0;
    for (const Layer& l : taken.layers()) {
      softmaxes += std::holds_alternative<SoftmaxParams>(l.params);
      const auto* a = std::get_if<AttentionParams>(&l.params);
      if (!a) continue;
      ++attentions;
      const double scale = f == kMaxVit ? 0.4 : f == kSwin ? 0.3 : 1 / 2.5;
      EXPECT_NEAR(a->scale, scale, 1e-6);
      EXPECT_EQ(a->has_mask, f != kDivided);
      const Shape q_shape = taken.tensor(l.inputs[0]).shape;
      EXPECT_EQ(q_shape, f == kSwin ? (Shape{2, 3, 2, L, E}) : shape(L, E));
      if (f == kSwin) {  // bias [1, 1, 2, L, S] + mask [1, 3, 1, L, S]
        EXPECT_EQ(taken.tensor(l.inputs[3]).shape, (Shape{1, 3, 2, L, S}));
      }
    }
    EXPECT_EQ(attentions, expected ? 1 : 0);
    EXPECT_EQ(softmaxes, expected ? 0 : 1);
    if (f == kNotFused) {
      EXPECT_EQ(asked.size(), 1u);
    }
    const std::vector<HostTensor> got = run_engine(taken, in);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(testing::near(got[i], testing::to_doubles(want[i]), 1e-5, 1e-6)) << i;
    }
  }
}

}  // namespace
}  // namespace kiln::engine
