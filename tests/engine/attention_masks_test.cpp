// The attention_masks pass: masks that say no more than a flag become it (all true goes, the
// causal triangle is the causal flag), also when and'ed with a padding mask or expanded; refittable
// plans keep the masks that are weights. Values always match the unbuilt network.
#include "engine/builder.h"

#include <limits>
#include <vector>

#include "engine/passes/pass.h"
#include "engine/passes/passes.h"
#include "engine/verify.h"
#include "engine_testing.h"

namespace kiln::engine {
namespace {

using testing::run_engine;

// Constant masks that say no more than a flag: all-true goes, the causal triangle (bool, or
// additive 0/-inf) becomes causal; any other mask stays. Values match the unbuilt network.
TEST(Builder, ConstantAttentionMasksBecomeFlags) {
  const int64_t L = 5, S = 5;
  std::vector<uint8_t> causal(L * S), all(L * S, 1), other(L * S, 1);
  std::vector<float> additive(L * S);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < S; ++j) {
      causal[i * S + j] = j <= i;
      additive[i * S + j] = j <= i ? 0.0f : -std::numeric_limits<float>::infinity();
    }
  }
  other[3] = 0;
  struct Case {
    Weights mask;
    bool dropped, causal;
  };
  for (const Case& c :
       {Case{Weights::from_bytes(DataType::kBool, {1, 1, L, S}, causal), true, true},
        Case{Weights::from_bytes(DataType::kBool, {2, 1, L, S}, std::vector<uint8_t>(2 * L * S, 1)),
             true, false},
        Case{Weights::from_floats({L, S}, additive), true, true},
        Case{Weights::from_bytes(DataType::kBool, {L, S}, other), false, false}}) {
    Network net;
    auto q = net.add_input("q", DataType::kF32, {2, 3, L, 8});
    auto k = net.add_input("k", DataType::kF32, {2, 3, S, 8});
    auto v = net.add_input("v", DataType::kF32, {2, 3, S, 8});
    auto m = net.add_constant("mask", c.mask);
    net.mark_output(net.add("attn", AttentionParams{false, true, 0}, {q, k, v, m}), "y");
    BuildReport report;
    Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("attention_masks"), c.dropped ? 1 : 0) << report.to_string();
    for (const Layer& l : plan.network.layers()) {
      if (const auto* a = std::get_if<AttentionParams>(&l.params)) {
        EXPECT_EQ(a->has_mask, !c.dropped);
        EXPECT_EQ(a->causal, c.causal);
      }
    }
    std::vector<HostTensor> in;
    for (uint64_t seed : {21, 22, 23}) {
      in.push_back(testing::random_tensor(DataType::kF32, {2, 3, L, 8}, seed));
    }
    EXPECT_TRUE(testing::near(run_engine(plan.network, in)[0],
                              testing::to_doubles(run_engine(net, in)[0]), 1e-6, 1e-7));
  }
}

// transformers' masks: a padding mask (bool [B, 1, 1, S], an input) and'ed with a constant over
// [L, S] (all true: BERT; the causal triangle: GPT-2, Llama). The attention reads the padding
// mask, with the causal flag for the triangle; another constant keeps the product. A batch with
// no key kept gives zero rows on both sides.
TEST(Builder, ConstantsAndedWithAPaddingMaskLeaveIt) {
  const int64_t B = 3, L = 5, S = 5;
  std::vector<uint8_t> causal(L * S), other(L * S, 1);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < S; ++j) causal[i * S + j] = j <= i;
  }
  other[3] = 0;
  struct Case {
    Weights constant;
    bool simplified, causal;
  };
  for (const Case& c :
       {Case{Weights::from_bytes(DataType::kBool, {1, 1, L, S}, causal), true, true},
        Case{Weights::from_bytes(DataType::kBool, {1, 1, L, 1}, std::vector<uint8_t>(L, 1)), true,
             false},
        Case{Weights::from_bytes(DataType::kBool, {L, S}, other), false, false}}) {
    Network net;
    auto q = net.add_input("q", DataType::kF32, {B, 2, L, 8});
    auto k = net.add_input("k", DataType::kF32, {B, 2, S, 8});
    auto v = net.add_input("v", DataType::kF32, {B, 2, S, 8});
    auto padding = net.add_input("padding", DataType::kBool, {B, 1, 1, S});
    auto mask = net.add("mask", ElementwiseParams{BinaryOp::kAnd},
                        {net.add_constant("constant", c.constant), padding});
    net.mark_output(net.add("attn", AttentionParams{false, true, 0}, {q, k, v, mask}), "y");
    BuildReport report;
    Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("attention_masks"), c.simplified ? 1 : 0) << report.to_string();
    for (const Layer& l : plan.network.layers()) {
      EXPECT_FALSE(c.simplified && std::holds_alternative<ElementwiseParams>(l.params)) << l.name;
      if (const auto* a = std::get_if<AttentionParams>(&l.params)) {
        EXPECT_TRUE(a->has_mask);
        EXPECT_EQ(a->causal, c.causal);
      }
    }
    std::vector<HostTensor> in;
    for (uint64_t seed : {31, 32, 33}) {
      in.push_back(testing::random_tensor(DataType::kF32, {B, 2, L, 8}, seed));
    }
    HostTensor keep(DataType::kBool, {B, 1, 1, S});
    for (int64_t i = 0; i < B * S; ++i) keep.as<uint8_t>()[i] = i / S == 1 ? 0 : i % S < 3 + i / S;
    in.push_back(keep);
    EXPECT_TRUE(testing::near(run_engine(plan.network, in)[0],
                              testing::to_doubles(run_engine(net, in)[0]), 1e-6, 1e-7));
  }
}

// Masks built from positions with a dynamic sequence (transformers' `arange(L)[:, None] + c >=
// 0` and'ed with the padding mask) cannot fold to constants, yet are decided by the positions'
// range: one true whatever L leaves the padding mask (and'ed) or no mask (or'ed), one that is
// not (positions >= 1) stays. Values match the unbuilt network at every L.
TEST(Builder, MasksTrueWhateverTheInputsGo) {
  const int64_t H = 2, E = 8;
  struct Case {
    BinaryOp logic;  // with the padding mask
    double offset, bound;
    int left;  // 1: the mask's layers stay, 0: the padding mask is the mask, -1: no mask
  };
  for (const Case& c : {Case{BinaryOp::kAnd, 3, 0, 0}, Case{BinaryOp::kOr, 0, 0, -1},
                        Case{BinaryOp::kAnd, 0, 1, 1}}) {
    SCOPED_TRACE(binary_op_name(c.logic) + std::string(" ") + std::to_string(c.bound));
    Network net;
    const Profile profile{{1, H, 1, E}, {1, H, 8, E}, {1, H, 16, E}};
    const auto q = net.add_input("q", DataType::kF32, {1, H, kDynamic, E}, profile);
    const auto kv = net.add_input("kv", DataType::kF32, {1, H, kDynamic, E}, profile);
    const auto padding = net.add_input("padding", DataType::kBool, {1, 1, 1, kDynamic},
                                       Profile{{1, 1, 1, 1}, {1, 1, 1, 8}, {1, 1, 1, 16}});
    SliceParams dim2;
    dim2.axes = {0}, dim2.starts = {2}, dim2.ends = {3}, dim2.steps = {1};
    const auto length = net.add("L", dim2, {net.add("shape", ShapeParams{}, {q})});
    FillParams range{FillMode::kRange, DataType::kI64, {kDynamic}, 0, 0, 1};
    const auto positions = net.add("positions", range, {length});
    ShuffleParams column;
    column.has_reshape = true;
    column.reshape = {1, 1, -1, 1};
    const auto shifted =
        net.add("shifted", ElementwiseParams{BinaryOp::kAdd},
                {net.add("column", column, {positions}),
                 net.add_constant("offset", Weights::from_ints({}, {int64_t(c.offset)}))});
    const auto decided =
        net.add("decided", ElementwiseParams{BinaryOp::kGe},
                {shifted, net.add_constant("bound", Weights::from_ints({}, {int64_t(c.bound)}))});
    const auto mask = net.add("mask", ElementwiseParams{c.logic}, {decided, padding});
    net.mark_output(net.add("attn", AttentionParams{false, true, 0}, {q, kv, kv, mask}), "y");
    BuildReport report;
    const Plan plan = build(net, BuilderConfig{}, &report);
    int mask_layers = 0;
    bool masked = false;
    for (const Layer& l : plan.network.layers()) {
      if (const auto* a = std::get_if<AttentionParams>(&l.params)) {
        masked = a->has_mask;
        if (masked && c.left == 0) {
          EXPECT_EQ(l.inputs[3], plan.network.inputs()[2]);
        }
      } else if (!std::holds_alternative<ConstantParams>(l.params)) {
        ++mask_layers;
      }
    }
    EXPECT_EQ(masked, c.left >= 0) << report.to_string();
    EXPECT_EQ(mask_layers > 0, c.left > 0) << network_to_text(plan.network);
    for (int64_t L : {1, 5, 16}) {
      std::vector<HostTensor> in = {testing::random_tensor(DataType::kF32, {1, H, L, E}, L),
                                    testing::random_tensor(DataType::kF32, {1, H, L, E}, L + 1)};
      HostTensor keep(DataType::kBool, {1, 1, 1, L});
      for (int64_t j = 0; j < L; ++j) keep.as<uint8_t>()[j] = j % 3 != 1;
      in.push_back(keep);
      EXPECT_TRUE(testing::near(run_engine(plan.network, in)[0],
                                testing::to_doubles(run_engine(net, in)[0]), 1e-6, 1e-7));
    }
  }
}

// An expanded mask (select(fill, x, x), the converters' expand) is read as x, which broadcasts:
// a padding mask input stays the mask, unexpanded; an all-true [1, 1, L, 1] expanded past what
// folding takes (transformers' ViT at batch 32) goes. Values match the unbuilt network.
TEST(Builder, ExpandedAttentionMasksAreReadUnexpanded) {
  for (const bool padding : {true, false}) {
    const int64_t B = padding ? 3 : 5, L = padding ? 5 : 512, S = L;
    Network net;
    auto q = net.add_input("q", DataType::kF32, {B, 2, L, 8});
    auto k = net.add_input("k", DataType::kF32, {B, 2, S, 8});
    auto v = net.add_input("v", DataType::kF32, {B, 2, S, 8});
    auto x = padding ? net.add_input("padding", DataType::kBool, {B, 1, 1, S})
                     : net.add_constant("ones", Weights::from_bytes(DataType::kBool, {1, 1, L, 1},
                                                                    std::vector<uint8_t>(L, 1)));
    FillParams all;
    all.dtype = DataType::kBool;
    all.shape = {B, 1, L, S};
    all.value = 1;
    auto c = net.add_layer("expand.c", all, {}).at(0);
    auto mask = net.add("expand", SelectParams{}, {c, x, x});
    net.mark_output(net.add("attn", AttentionParams{false, true, 0}, {q, k, v, mask}), "y");
    BuildReport report;
    Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("attention_masks"), padding ? 1 : 2) << report.to_string();
    for (const Layer& l : plan.network.layers()) {
      EXPECT_FALSE(std::holds_alternative<SelectParams>(l.params)) << l.name;
      if (const auto* a = std::get_if<AttentionParams>(&l.params)) {
        EXPECT_EQ(a->has_mask, padding);
        if (padding) {
          EXPECT_EQ(plan.network.tensor(l.inputs[3]).shape, (Shape{B, 1, 1, S}));
        }
      }
    }
    std::vector<HostTensor> in;
    for (uint64_t seed : {41, 42, 43}) {
      in.push_back(testing::random_tensor(DataType::kF32, {B, 2, L, 8}, seed));
    }
    if (padding) {
      HostTensor keep(DataType::kBool, {B, 1, 1, S});
      for (int64_t i = 0; i < B * S; ++i)
        keep.as<uint8_t>()[i] = i / S == 1 ? 0 : i % S < 2 + i / S;
      in.push_back(keep);
    }
    EXPECT_TRUE(testing::near(run_engine(plan.network, in)[0],
                              testing::to_doubles(run_engine(net, in)[0]), 1e-6, 1e-7));
  }
}

// A refittable plan keeps a mask that is one of its weights (a refit may change it), and still
// drops one its own fill makes (all true).
TEST(Builder, RefittablePlansKeepMasksThatAreWeights) {
  const int64_t L = 4, S = 4;
  for (const bool from_fill : {false, true}) {
    Network net;
    auto q = net.add_input("q", DataType::kF32, {1, 2, L, 8});
    auto k = net.add_input("k", DataType::kF32, {1, 2, S, 8});
    auto v = net.add_input("v", DataType::kF32, {1, 2, S, 8});
    FillParams ones;
    ones.dtype = DataType::kBool;
    ones.shape = {L, S};
    ones.value = 1;
    auto m = from_fill
                 ? net.add_layer("ones", ones, {}).at(0)
                 : net.add_constant("mask", Weights::from_bytes(DataType::kBool, {L, S},
                                                                std::vector<uint8_t>(L * S, 1)));
    net.mark_output(net.add("attn", AttentionParams{false, true, 0}, {q, k, v, m}), "y");
    BuilderConfig config;
    config.refittable = true;
    BuildReport report;
    build(net, config, &report);
    EXPECT_EQ(report.changes("attention_masks"), from_fill ? 1 : 0)
        << from_fill << report.to_string();
  }
}

// attention_mask_biases (cuda builds, behind its switch): the f16 layers reading one bool mask read
// one additive bias of their dtype made from it once (a cast and a log: 0 kept, -inf not); an f32
// layer keeps the bool. Values match the unconverted network, rows the mask leaves without keys
// (batch 1 here) zeros as before.
TEST(Builder, BoolMasksBecomeOneBiasForTheLayersReadingThem) {
  const int64_t B = 2, H = 2, L = 4, S = 6, E = 8;
  Network net;
  auto q = net.add_input("q", DataType::kF16, {B, H, L, E});
  auto k = net.add_input("k", DataType::kF16, {B, H, S, E});
  auto v = net.add_input("v", DataType::kF16, {B, H, S, E});
  auto q32 = net.add_input("q32", DataType::kF32, {B, H, L, E});
  auto k32 = net.add_input("k32", DataType::kF32, {B, H, S, E});
  auto m = net.add_input("mask", DataType::kBool, {B, 1, 1, S});
  const AttentionParams masked{false, true, 0};
  auto a1 = net.add("attn1", masked, {q, k, v, m});
  net.mark_output(net.add("attn2", masked, {a1, k, v, m}), "y");
  net.mark_output(net.add("attn32", masked, {q32, k32, k32, m}), "y32");

  Network converted = net;
  EXPECT_EQ(attention_mask_biases(converted), 2);
  verify_network(converted, "attention_mask_biases");
  EXPECT_EQ(converted.layers().size(), net.layers().size() + 2);  // one cast, one log
  std::vector<TensorId> masks;
  for (const Layer& l : converted.layers()) {
    if (std::holds_alternative<AttentionParams>(l.params)) masks.push_back(l.inputs[3]);
  }
  ASSERT_EQ(masks.size(), 3u);
  EXPECT_EQ(masks[0], masks[1]);
  EXPECT_EQ(converted.tensor(masks[0]).dtype, DataType::kF16);
  EXPECT_EQ(masks[2], m);
  EXPECT_EQ(attention_mask_biases(converted), 0);  // nothing left to convert

  // Batch 0 keeps keys 0-3, batch 1 none.
  HostTensor mask(DataType::kBool, {B, 1, 1, S});
  for (int64_t j = 0; j < S; ++j) {
    static_cast<uint8_t*>(mask.data())[j] = j < 4;
    static_cast<uint8_t*>(mask.data())[S + j] = 0;
  }
  const std::vector<HostTensor> in = {testing::random_tensor(DataType::kF16, {B, H, L, E}, 31),
                                      testing::random_tensor(DataType::kF16, {B, H, S, E}, 32),
                                      testing::random_tensor(DataType::kF16, {B, H, S, E}, 33),
                                      testing::random_tensor(DataType::kF32, {B, H, L, E}, 34),
                                      testing::random_tensor(DataType::kF32, {B, H, S, E}, 35),
                                      mask};
  const std::vector<HostTensor> want = run_engine(net, in), got = run_engine(converted, in);
  for (size_t o = 0; o < want.size(); ++o) {
    EXPECT_TRUE(testing::near(got[o], testing::to_doubles(want[o]), 1e-3, 1e-3)) << o;
  }
  const std::vector<double> y = testing::to_doubles(got[0]);
  for (size_t i = y.size() / 2; i < y.size(); ++i) ASSERT_EQ(y[i], 0.0) << i;
}

}  // namespace
}  // namespace kiln::engine
