// The head-folding pass (engine/attention_heads.h) and packed-head attention layers on the CPU
// backend: the transformer head split / merge views fold into the attention layer, and the
// built plan computes what the network computes unbuilt (every view run as its own layer).
#include <gtest/gtest.h>

#include "engine/builder.h"
#include "engine/passes/attention_heads.h"
#include "engine/passes/passes.h"
#include "engine/passes/views.h"
#include "engine/verify.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;

ShuffleParams reshape(Shape to) {
  ShuffleParams p;
  p.has_reshape = true;
  p.reshape = std::move(to);
  return p;
}
ShuffleParams permute(std::vector<int64_t> perm) {
  ShuffleParams p;
  p.first_perm = std::move(perm);
  return p;
}

// x [B, L, W] -> [B, L, parts, H, E] -> [parts, B, H, L, E] -> part i as [B, H, L, E]: the head
// split of a packed projection (what torch's MultiheadAttention and BERT's self-attention do).
TensorId split(Network& net, TensorId x, const std::string& name, int64_t parts, int64_t part,
               int64_t H, int64_t E) {
  const Shape& s = net.tensor(x).shape;
  const int64_t B = s[0], L = s[1];
  const auto r = net.add(name + ".r", reshape({B, L, parts, H, E}), {x});
  const auto p = net.add(name + ".p", permute({2, 0, 3, 1, 4}), {r});
  SliceParams sl;
  sl.axes = {0}, sl.starts = {part}, sl.ends = {part + 1}, sl.steps = {1};
  const auto one = net.add(name + ".s", sl, {p});
  return net.add(name, reshape({B, H, L, E}), {one});
}

// o [B, H, L, E] -> [B, L, H, E] -> [B, L, H * E]: the head merge.
TensorId merge(Network& net, TensorId o) {
  const Shape s = net.tensor(o).shape;  // a copy: adding layers may move the tensors
  const auto t = net.add("merge.p", permute({0, 2, 1, 3}), {o});
  return net.add("merge.r", reshape({s[0], s[2], s[1] * s[3]}), {t});
}

// Key/value heads kv ([B, Hkv, S, E]) repeated `group` times to [B, Hkv * group, S, E] for
// grouped-query attention: by a gather of the heads h / group (kiln's lowering of enable_gqa), or
// as transformers' repeat_kv writes it (unsqueeze, a broadcast by a select of the tensor with
// itself, reshape).
TensorId repeat_heads(Network& net, TensorId kv, const std::string& name, int64_t group,
                      bool gather) {
  const Shape s = net.tensor(kv).shape;
  const int64_t B = s[0], Hkv = s[1], S = s[2], E = s[3], H = Hkv * group;
  if (gather) {
    std::vector<int64_t> index;
    for (int64_t h = 0; h < H; ++h) index.push_back(h / group);
    GatherParams gp;
    gp.axis = 1;
    return net.add(name + ".rep", gp,
                   {kv, net.add_constant(name + ".idx", Weights::from_ints({H}, index))});
  }
  const auto y = net.add(name + ".unsq", reshape({B, Hkv, 1, S, E}), {kv});
  FillParams fill;
  fill.dtype = DataType::kBool, fill.value = 1, fill.shape = {B, Hkv, group, S, E};
  const auto x =
      net.add(name + ".bc", SelectParams{}, {net.add_layer(name + ".cond", fill, {}).at(0), y, y});
  return net.add(name + ".rep", reshape({B, H, S, E}), {x});
}

struct Built {
  std::vector<HostTensor> folded, unbuilt;
  BuildReport report;
  Plan plan;
};

// Runs `net` as built (passes applied) and as it is, on the same inputs.
Built run_both(const Network& net, const std::vector<HostTensor>& inputs) {
  Built b;
  b.plan = build(net, BuilderConfig{}, &b.report);
  ExecutionContext folded(std::make_shared<const Engine>(b.plan.network, b.plan.target));
  b.folded = folded.run(inputs);
  ExecutionContext unbuilt(std::make_shared<const Engine>(net));
  b.unbuilt = unbuilt.run(inputs);
  return b;
}

int count_views(const Network& net) {
  int n = 0;
  for (const Layer& l : net.layers()) {
    n += std::holds_alternative<ShuffleParams>(l.params) ||
         std::holds_alternative<SliceParams>(l.params);
  }
  return n;
}

TEST(AttentionHeads, SelfAttentionOverAPackedProjectionFolds) {
  const int64_t B = 2, L = 7, H = 3, E = 8;
  for (bool causal : {false, true}) {
    Network net;
    const auto x = net.add_input("qkv", DataType::kF32, {B, L, 3 * H * E});
    AttentionParams a;
    a.causal = causal, a.scale = causal ? 0.2 : 0;
    const auto o = net.add("attn", a,
                           {split(net, x, "q", 3, 0, H, E), split(net, x, "k", 3, 1, H, E),
                            split(net, x, "v", 3, 2, H, E)});
    net.mark_output(merge(net, o), "y");
    const HostTensor in = random_tensor(DataType::kF32, {B, L, 3 * H * E}, 1);
    const Built b = run_both(net, {in});
    EXPECT_EQ(b.report.changes("attention_heads"), 1) << b.report.to_string();
    EXPECT_EQ(count_views(b.plan.network), 0);
    const auto& p = std::get<AttentionParams>(b.plan.network.layers().back().params);
    EXPECT_EQ(p.heads, H);
    EXPECT_EQ(p.head_size, E);
    EXPECT_EQ(p.columns, (std::vector<int64_t>{0, H * E, 2 * H * E}));
    ASSERT_EQ(b.folded[0].shape(), (Shape{B, L, H * E}));
    EXPECT_TRUE(testing::near(b.folded[0], testing::to_doubles(b.unbuilt[0]), 1e-5, 1e-6));
  }
}

// Attention over heads of windows ([B, W, H, L, E], as MaxViT writes it: column slices of one
// [B, W, L, 3 H E] projection, each viewed as [B, W, L, H, E] and permuted; the result permuted
// back and viewed as [B, W, L, H E]) folds as the rank-4 form does: packed heads over B * W
// matrices, a [H, L, L] bias kept as the mask; nothing moves data. A mask that broadcasts over
// part of the leading dims stays as it was (the layer unpacked).
TEST(AttentionHeads, HeadsOfWindowsFold) {
  const int64_t B = 2, W = 3, L = 5, H = 2, E = 8;
  for (bool partial_mask : {false, true}) {
    SCOPED_TRACE(partial_mask);
    Network net;
    const auto x = net.add_input("qkv", DataType::kF32, {B, W, L, 3 * H * E});
    std::vector<TensorId> qkv;
    for (int64_t i = 0; i < 3; ++i) {
      SliceParams s;
      s.axes = {3}, s.starts = {i * H * E}, s.ends = {(i + 1) * H * E}, s.steps = {1};
      const std::string n = "p" + std::to_string(i);
      const auto part = net.add(n + ".s", s, {x});
      qkv.push_back(net.add(n, permute({0, 1, 3, 2, 4}),
                            {net.add(n + ".r", reshape({B, W, L, H, E}), {part})}));
    }
    const Shape mask_shape = partial_mask ? Shape{1, W, 1, L, L} : Shape{H, L, L};
    qkv.push_back(testing::random_constant(net, "bias", mask_shape, 9));
    AttentionParams a;
    a.has_mask = true;
    const auto o = net.add("attn", a, qkv);
    const auto t = net.add("merge.p", permute({0, 1, 3, 2, 4}), {o});
    net.mark_output(net.add("merge.r", reshape({B, W, L, H * E}), {t}), "y");
    const Built b = run_both(net, {random_tensor(DataType::kF32, {B, W, L, 3 * H * E}, 8)});
    EXPECT_EQ(b.report.changes("attention_heads"), partial_mask ? 0 : 1) << b.report.to_string();
    if (!partial_mask) {
      EXPECT_EQ(b.report.shuffles, 0) << b.report.to_string();
      for (const Layer& l : b.plan.network.layers()) {
        if (const auto* p = std::get_if<AttentionParams>(&l.params)) {
          EXPECT_EQ(p->heads, H);
          EXPECT_EQ(p->columns, (std::vector<int64_t>{0, H * E, 2 * H * E}));
          EXPECT_EQ(b.plan.network.tensor(l.outputs[0]).shape, (Shape{B * W, L, H * E}));
        }
      }
    }
    EXPECT_TRUE(testing::near(b.folded[0], testing::to_doubles(b.unbuilt[0]), 1e-5, 1e-6));
  }
}

// nn.MultiheadAttention (batch_first) as torch.export writes it: the input transposed to [L, B, D]
// before the packed in-projection, q, k and v split from it through [L, B * H, E] views (which
// merge dims that are not adjacent in the batch-first projection), the result merged through [L *
// B, D] and the out-projection, then transposed back. The transposes cross the projections
// (row_shuffles) and the head split and merge fold: no shuffle moves data, values as unbuilt.
TEST(AttentionHeads, ExportedMultiheadAttentionFolds) {
  const int64_t B = 2, L = 5, H = 3, E = 4, D = H * E;
  Network net;
  const auto x = net.add_input("x", DataType::kF32, {B, L, D});
  MatMulParams linear;
  linear.transpose_b = true;
  linear.post.has_bias = true;
  const auto seq_first = net.add("transpose", permute({1, 0, 2}), {x});
  const auto proj = net.add("in_proj", linear,
                            {seq_first, testing::random_constant(net, "w_in", {3 * D, D}, 11),
                             testing::random_constant(net, "b_in", {3 * D}, 12)});
  const auto unflat = net.add("unflatten", reshape({L, B, 3, D}), {proj});
  const auto unsq = net.add("unsqueeze", reshape({1, L, B, 3, D}), {unflat});
  const auto moved = net.add("transpose_1", permute({3, 1, 2, 0, 4}), {unsq});
  const auto squeezed = net.add("squeeze", reshape({3, L, B, D}), {moved});
  std::vector<TensorId> qkv;
  for (int64_t i = 0; i < 3; ++i) {
    SliceParams sl;
    sl.axes = {0}, sl.starts = {i}, sl.ends = {i + 1}, sl.steps = {1};
    const std::string n = "p" + std::to_string(i);
    const auto part =
        net.add(n + ".select", reshape({L, B, D}), {net.add(n + ".s", sl, {squeezed})});
    const auto heads = net.add(n + ".t", permute({1, 0, 2}),
                               {net.add(n + ".view", reshape({L, B * H, E}), {part})});
    qkv.push_back(net.add(n, reshape({B, H, L, E}), {heads}));
  }
  const auto o = net.add("attn", AttentionParams{}, qkv);
  const auto rows =
      net.add("view_6", reshape({L * B, D}), {net.add("permute_1", permute({2, 0, 1, 3}), {o})});
  const auto out = net.add("out_proj", linear,
                           {rows, testing::random_constant(net, "w_out", {D, D}, 13),
                            testing::random_constant(net, "b_out", {D}, 14)});
  const auto back =
      net.add("transpose_5", permute({1, 0, 2}), {net.add("view_7", reshape({L, B, D}), {out})});
  net.mark_output(back, "y");
  const Built b = run_both(net, {random_tensor(DataType::kF32, {B, L, D}, 15)});
  EXPECT_GE(b.report.changes("row_shuffles"), 3) << b.report.to_string();
  EXPECT_EQ(b.report.changes("attention_heads"), 1) << b.report.to_string();
  EXPECT_EQ(b.report.shuffles, 0) << b.report.to_string();
  EXPECT_TRUE(testing::near(b.folded[0], testing::to_doubles(b.unbuilt[0]), 1e-5, 1e-6));
}

// A projection between two attentions, with whole-row shuffles on either side: row_shuffles would
// move the first down towards the second attention and then back up towards the first, for ever;
// it leaves them, and the build ends with the values of the unbuilt network.
TEST(AttentionHeads, AProjectionBetweenTwoAttentionsKeepsItsShuffle) {
  const int64_t B = 2, L = 5, H = 2, E = 4, D = H * E;
  Network net;
  const auto x = net.add_input("x", DataType::kF32, {B, H, L, E});
  const auto first = net.add("attn1", AttentionParams{}, {x, x, x});
  const auto rows = net.add("transpose", permute({1, 0, 2}), {merge(net, first)});
  MatMulParams linear;
  linear.transpose_b = true;
  const auto proj = net.add("proj", linear, {rows, testing::random_constant(net, "w", {D, D}, 21)});
  const auto flat = net.add("flat", reshape({L * B, D}), {proj});  // whole rows again
  const auto heads =
      net.add("heads", permute({1, 2, 0, 3}), {net.add("split", reshape({L, B, H, E}), {flat})});
  const auto second = net.add("attn2", AttentionParams{}, {heads, heads, heads});
  net.mark_output(net.add("out", permute({0, 2, 1, 3}), {second}), "y");
  const Built b = run_both(net, {random_tensor(DataType::kF32, {B, H, L, E}, 22)});
  EXPECT_EQ(b.report.changes("row_shuffles"), 0) << b.report.to_string();
  EXPECT_TRUE(testing::near(b.folded[0], testing::to_doubles(b.unbuilt[0]), 1e-5, 1e-6));
}

// Swin's window attention: the window partition (reshape, permute of the window and position
// dims, reshape) before the qkv projection and its reverse after the out-projection. No head
// split takes them, so moving them across the projections would only make the partition shuffle
// the three times wider qkv rows (and part it from a roll before it, which gather_chains composes
// with it): row_shuffles leaves both where they are, each shuffling rows of D elements, and the
// values are the unbuilt network's.
TEST(AttentionHeads, WindowPartitionsStayOnTheNarrowRows) {
  const int64_t side = 4, window = 2, H = 2, E = 4, D = H * E;
  const int64_t windows = (side / window) * (side / window), tokens = window * window;
  Network net;
  const auto x = net.add_input("x", DataType::kF32, {1, side, side, D});
  const auto grid = [&](const std::string& name, TensorId t) {
    return net.add(name, reshape({1, side / window, window, side / window, window, D}), {t});
  };
  const auto parted =
      net.add("partition", reshape({windows, tokens, D}),
              {net.add("partition.p", permute({0, 1, 3, 2, 4, 5}), {grid("partition.r", x)})});
  MatMulParams linear;
  linear.transpose_b = true;
  linear.post.has_bias = true;
  const auto qkv = net.add("qkv", linear,
                           {parted, testing::random_constant(net, "w_qkv", {3 * D, D}, 31),
                            testing::random_constant(net, "b_qkv", {3 * D}, 32)});
  const auto o = net.add("attn", AttentionParams{},
                         {split(net, qkv, "q", 3, 0, H, E), split(net, qkv, "k", 3, 1, H, E),
                          split(net, qkv, "v", 3, 2, H, E)});
  const auto proj = net.add("proj", linear,
                            {merge(net, o), testing::random_constant(net, "w_proj", {D, D}, 33),
                             testing::random_constant(net, "b_proj", {D}, 34)});
  const auto reverse =
      net.add("reverse.p", permute({0, 1, 3, 2, 4, 5}),
              {net.add("reverse.r", reshape({1, side / window, side / window, window, window, D}),
                       {proj})});
  net.mark_output(net.add("reverse", reshape({1, side, side, D}), {reverse}), "y");
  const Built b = run_both(net, {random_tensor(DataType::kF32, {1, side, side, D}, 35)});
  EXPECT_EQ(b.report.changes("row_shuffles"), 0) << b.report.to_string();
  EXPECT_EQ(b.report.changes("attention_heads"), 1) << b.report.to_string();
  EXPECT_EQ(b.report.shuffles, 2) << b.report.to_string();
  for (const Layer& l : b.plan.network.layers()) {
    const auto* s = std::get_if<ShuffleParams>(&l.params);
    if (s != nullptr && shuffle_moves_data(*s)) {
      EXPECT_EQ(b.plan.network.tensor(l.outputs[0]).shape.back(), D) << l.name;
    }
  }
  EXPECT_TRUE(testing::near(b.folded[0], testing::to_doubles(b.unbuilt[0]), 1e-5, 1e-6));
}

// Queries from one tensor, keys and values from another of another length (cross-attention).
TEST(AttentionHeads, CrossAttentionFolds) {
  const int64_t B = 3, L = 5, S = 9, H = 2, E = 4;
  Network net;
  const auto xq = net.add_input("q_in", DataType::kF32, {B, L, H * E});
  const auto xkv = net.add_input("kv_in", DataType::kF32, {B, S, 2 * H * E});
  const auto q = net.add("q", permute({0, 2, 1, 3}), {net.add("q.r", reshape({B, L, H, E}), {xq})});
  const auto o = net.add("attn", AttentionParams{},
                         {q, split(net, xkv, "k", 2, 0, H, E), split(net, xkv, "v", 2, 1, H, E)});
  net.mark_output(merge(net, o), "y");
  const Built b = run_both(net, {random_tensor(DataType::kF32, {B, L, H * E}, 2),
                                 random_tensor(DataType::kF32, {B, S, 2 * H * E}, 3)});
  EXPECT_EQ(b.report.changes("attention_heads"), 1) << b.report.to_string();
  EXPECT_EQ(count_views(b.plan.network), 0);
  EXPECT_TRUE(testing::near(b.folded[0], testing::to_doubles(b.unbuilt[0]), 1e-5, 1e-6));
}

// GPT-2's form: the projection is a [B * L, 3 D] GEMM viewed as [B, L, 3 D], split by three
// column slices, each reshaped to [B, L, H, E] and permuted; the causal result is merged and
// viewed as [B * L, D] for the next GEMM. The operands trace back to the [B, L, 3 D] view.
TEST(AttentionHeads, SplitColumnsOfAFlatProjectionFold) {
  const int64_t B = 2, L = 5, H = 3, E = 8, D = H * E;
  Network net;
  const auto flat = net.add_input("qkv", DataType::kF32, {B * L, 3 * D});
  const auto x = net.add("qkv.r", reshape({B, L, 3 * D}), {flat});
  std::vector<TensorId> qkv;
  for (int64_t part = 0; part < 3; ++part) {
    const std::string name = std::string(1, "qkv"[part]);
    SliceParams sl;
    sl.axes = {2}, sl.starts = {part * D}, sl.ends = {(part + 1) * D}, sl.steps = {1};
    const auto cols = net.add(name + ".s", sl, {x});
    const auto heads = net.add(name + ".r", reshape({B, L, H, E}), {cols});
    qkv.push_back(net.add(name, permute({0, 2, 1, 3}), {heads}));
  }
  AttentionParams a;
  a.causal = true;
  const auto o = net.add("attn", a, qkv);
  net.mark_output(net.add("y.flat", reshape({B * L, D}), {merge(net, o)}), "y");
  const Built b = run_both(net, {random_tensor(DataType::kF32, {B * L, 3 * D}, 5)});
  EXPECT_EQ(b.report.changes("attention_heads"), 1) << b.report.to_string();
  const Layer* attn = nullptr;
  for (const Layer& l : b.plan.network.layers()) {
    if (std::holds_alternative<AttentionParams>(l.params)) attn = &l;
  }
  ASSERT_NE(attn, nullptr);
  const auto& p = std::get<AttentionParams>(attn->params);
  EXPECT_EQ(p.heads, H);
  EXPECT_EQ(p.columns, (std::vector<int64_t>{0, D, 2 * D}));
  EXPECT_TRUE(p.causal);
  EXPECT_EQ(b.report.shuffles, 0) << b.report.to_string();
  EXPECT_TRUE(testing::near(b.folded[0], testing::to_doubles(b.unbuilt[0]), 1e-5, 1e-6));
}

// Masked attention folds too, the mask unchanged (it broadcasts to [B, H, L, S] as before): key
// padding (bool [B, 1, 1, S], a batch wholly masked), an additive [B, 1, L, S] bias, a per-head
// [H, L, S] bias and a [L, S] mask with causal.
TEST(AttentionHeads, MaskedAttentionFolds) {
  const int64_t B = 2, L = 6, H = 3, E = 8;
  const HostTensor in = random_tensor(DataType::kF32, {B, L, 3 * H * E}, 6);
  HostTensor padding(DataType::kBool, {B, 1, 1, L});
  for (int64_t j = 0; j < L; ++j) {
    padding.as<bool>()[j] = j < 4;      // batch 0: 4 keys
    padding.as<bool>()[L + j] = false;  // batch 1: none (a zero output, as torch's flash)
  }
  const std::vector<std::pair<HostTensor, bool>> masks = {
      {padding, false},
      {random_tensor(DataType::kF32, {B, 1, L, L}, 7), false},
      {random_tensor(DataType::kF32, {H, L, L}, 8), false},
      {random_tensor(DataType::kF32, {L, L}, 9), true}};
  for (size_t m = 0; m < masks.size(); ++m) {
    SCOPED_TRACE(m);
    const HostTensor& mask = masks[m].first;
    Network net;
    const auto x = net.add_input("qkv", DataType::kF32, {B, L, 3 * H * E});
    const auto mk = net.add_input("mask", mask.dtype(), mask.shape());
    AttentionParams a;
    a.has_mask = true, a.causal = masks[m].second;
    const auto o = net.add("attn", a,
                           {split(net, x, "q", 3, 0, H, E), split(net, x, "k", 3, 1, H, E),
                            split(net, x, "v", 3, 2, H, E), mk});
    net.mark_output(merge(net, o), "y");
    const Built b = run_both(net, {in, mask});
    EXPECT_EQ(b.report.changes("attention_heads"), 1) << b.report.to_string();
    EXPECT_EQ(count_views(b.plan.network), 0);
    EXPECT_TRUE(testing::near(b.folded[0], testing::to_doubles(b.unbuilt[0]), 1e-5, 1e-6));
  }
}

// Grouped-query attention (Llama's): q from [B, L, H * E], k and v from [B, S, Hkv * E] (their
// own projections), their heads repeated to H either as transformers' repeat_kv writes it
// (unsqueeze, broadcast by a select of the tensor with itself, reshape) or as kiln's lowering of
// enable_gqa (a gather by the constant heads h / group), causal, with and without a padding mask.
TEST(AttentionHeads, GroupedQueryHeadsFoldUnrepeated) {
  const int64_t B = 2, L = 6, H = 4, Hkv = 2, E = 8, group = H / Hkv;
  for (const bool gather : {false, true}) {
    for (const bool masked : {false, true}) {
      SCOPED_TRACE(std::string(gather ? "gather" : "repeat_kv") + (masked ? " masked" : ""));
      Network net;
      const auto xq = net.add_input("xq", DataType::kF32, {B, L, H * E});
      const auto xkv = net.add_input("xkv", DataType::kF32, {B, L, 2 * Hkv * E});
      const auto heads = [&](TensorId x, const std::string& name, int64_t n, int64_t col) {
        TensorId t = x;
        if (col >= 0) {
          SliceParams sl;
          sl.axes = {2}, sl.starts = {col}, sl.ends = {col + n * E}, sl.steps = {1};
          t = net.add(name + ".s", sl, {x});
        }
        return net.add(name, permute({0, 2, 1, 3}),
                       {net.add(name + ".r", reshape({B, L, n, E}), {t})});
      };
      const auto repeat = [&](TensorId kv, const std::string& name) {
        return repeat_heads(net, kv, name, group, gather);
      };
      AttentionParams a;
      a.causal = true, a.has_mask = masked;
      std::vector<TensorId> in = {heads(xq, "q", H, -1), repeat(heads(xkv, "k", Hkv, 0), "k"),
                                  repeat(heads(xkv, "v", Hkv, Hkv * E), "v")};
      HostTensor padding(DataType::kBool, {B, 1, 1, L});
      for (int64_t j = 0; j < B * L; ++j) padding.as<uint8_t>()[j] = j % L < 4 + j / L;
      if (masked) in.push_back(net.add_input("mask", DataType::kBool, {B, 1, 1, L}));
      net.mark_output(merge(net, net.add("attn", a, in)), "y");
      std::vector<HostTensor> inputs = {random_tensor(DataType::kF32, {B, L, H * E}, 11),
                                        random_tensor(DataType::kF32, {B, L, 2 * Hkv * E}, 12)};
      if (masked) inputs.push_back(padding);
      const Built b = run_both(net, inputs);
      EXPECT_EQ(b.report.changes("attention_heads"), 1) << b.report.to_string();
      EXPECT_EQ(count_views(b.plan.network), 0);
      for (const Layer& l : b.plan.network.layers()) {
        EXPECT_FALSE(std::holds_alternative<GatherParams>(l.params) ||
                     std::holds_alternative<SelectParams>(l.params))
            << l.name;
        if (const auto* p = std::get_if<AttentionParams>(&l.params)) {
          EXPECT_EQ(p->heads, H);
          EXPECT_EQ(p->kv_heads, Hkv);
          EXPECT_EQ(p->columns, (std::vector<int64_t>{0, 0, Hkv * E}));
        }
      }
      EXPECT_TRUE(testing::near(b.folded[0], testing::to_doubles(b.unbuilt[0]), 1e-5, 1e-6));
    }
  }
}

// Llama's attention: rotary embeddings computed on the split heads of q and k (halves sliced,
// one negated, concatenated, multiplied by cos and sin tables over [L, E], added), k and v with
// fewer heads repeated (repeat_kv, or kiln's gather of enable_gqa), causal. The head permutes move
// below the rotary layers, so the attention reads packed, grouped heads and no shuffle is left; the
// values do not change. A permute whose computed heads are also a network output stays where it is.
TEST(AttentionHeads, RotaryHeadsFoldAfterTheirPermutesMoveDown) {
  const int64_t B = 2, L = 6, H = 4, Hkv = 2, E = 8, group = H / Hkv;
  for (const auto& [also_output, gather] :
       {std::pair{false, false}, {false, true}, {true, false}}) {
    SCOPED_TRACE(std::to_string(also_output) + std::to_string(gather));
    Network net;
    const auto xq = net.add_input("xq", DataType::kF32, {B, L, H * E});
    const auto xk = net.add_input("xk", DataType::kF32, {B, L, Hkv * E});
    const auto xv = net.add_input("xv", DataType::kF32, {B, L, Hkv * E});
    const auto cos = testing::random_constant(net, "cos", {1, 1, L, E}, 13);
    const auto sin = testing::random_constant(net, "sin", {1, 1, L, E}, 14);
    const auto split = [&](TensorId x, const std::string& name, int64_t n) {
      return net.add(name, permute({0, 2, 1, 3}),
                     {net.add(name + ".r", reshape({B, L, n, E}), {x})});
    };
    const auto rotary = [&](TensorId x, const std::string& name) {
      SliceParams lo, hi;
      lo.axes = hi.axes = {3}, lo.steps = hi.steps = {1};
      lo.starts = {0}, lo.ends = {E / 2}, hi.starts = {E / 2}, hi.ends = {E};
      const auto x1 = net.add(name + ".x1", lo, {x});
      const auto x2 = net.add(name + ".x2", hi, {x});
      ConcatParams cat;
      cat.axis = -1;
      const auto rot = net.add(name + ".rot", cat,
                               {net.add(name + ".neg", UnaryParams{UnaryOp::kNeg}, {x2}), x1});
      const auto a = net.add(name + ".c", ElementwiseParams{BinaryOp::kMul}, {x, cos});
      const auto b = net.add(name + ".s", ElementwiseParams{BinaryOp::kMul}, {rot, sin});
      return net.add(name + ".emb", ElementwiseParams{BinaryOp::kAdd}, {a, b});
    };
    const auto repeat = [&, gather = gather](TensorId kv, const std::string& name) {
      return repeat_heads(net, kv, name, group, gather);
    };
    const auto q = rotary(split(xq, "q", H), "q");
    AttentionParams a;
    a.causal = true;
    const auto o = net.add(
        "attn", a,
        {q, repeat(rotary(split(xk, "k", Hkv), "k"), "k"), repeat(split(xv, "v", Hkv), "v")});
    net.mark_output(merge(net, o), "y");
    if (also_output) net.mark_output(q, "q");
    const std::vector<HostTensor> in = {random_tensor(DataType::kF32, {B, L, H * E}, 15),
                                        random_tensor(DataType::kF32, {B, L, Hkv * E}, 16),
                                        random_tensor(DataType::kF32, {B, L, Hkv * E}, 17)};
    const Built b = run_both(net, in);
    if (also_output) {
      EXPECT_EQ(b.report.changes("attention_heads"), 0) << b.report.to_string();
    } else {
      EXPECT_EQ(b.report.changes("head_permutes"), 2) << b.report.to_string();  // q and k
      EXPECT_EQ(b.report.changes("attention_heads"), 1) << b.report.to_string();
      EXPECT_EQ(b.report.shuffles, 0) << b.report.to_string();
      for (const Layer& l : b.plan.network.layers()) {
        if (const auto* p = std::get_if<AttentionParams>(&l.params)) {
          EXPECT_EQ(p->kv_heads, Hkv);
        }
      }
    }
    for (size_t i = 0; i < b.folded.size(); ++i) {
      EXPECT_TRUE(testing::near(b.folded[i], testing::to_doubles(b.unbuilt[i]), 1e-5, 1e-6)) << i;
    }
  }
}

// The q, k and v projections of a packed-head attention become one matmul whose columns the
// attention reads: BERT's three Linears (weights [N, K], biased); [K, N] weights with k unbiased
// (zeros in the merged bias); cross-attention (k and v merge, q stays); k also a network output
// (q and v merge). Values as the unbuilt network.
TEST(AttentionHeads, ProjectionsOfOneInputAreOneMatmul) {
  const int64_t B = 2, L = 5, S = 6, H = 2, E = 8, D = H * E, K = 12;
  enum Form { kSelf, kUntransposed, kCross, kOutputK };
  for (Form f : {kSelf, kUntransposed, kCross, kOutputK}) {
    SCOPED_TRACE(f);
    Network net;
    const auto x = net.add_input("x", DataType::kF32, {B, L, K});
    const auto mem = f == kCross ? net.add_input("mem", DataType::kF32, {B, S, K}) : x;
    uint64_t seed = 30;
    const auto project = [&](TensorId in, const std::string& name, bool bias) {
      MatMulParams m;
      m.transpose_b = f != kUntransposed;
      m.post.has_bias = bias;
      std::vector<TensorId> ins = {
          in, testing::random_constant(net, name + ".w", m.transpose_b ? Shape{D, K} : Shape{K, D},
                                       seed++)};
      if (bias) ins.push_back(testing::random_constant(net, name + ".b", {D}, seed++));
      return net.add(name, m, ins);
    };
    const auto heads = [&](TensorId t, const std::string& name) {
      const int64_t rows = net.tensor(t).shape[1];
      return net.add(name + ".p", permute({0, 2, 1, 3}),
                     {net.add(name + ".r", reshape({B, rows, H, E}), {t})});
    };
    const auto q = project(x, "q", true);
    const auto k = project(mem, "k", f != kUntransposed);
    const auto v = project(mem, "v", true);
    AttentionParams a;
    a.causal = f == kSelf;
    const auto o = net.add("attn", a, {heads(q, "q"), heads(k, "k"), heads(v, "v")});
    net.mark_output(merge(net, o), "y");
    if (f == kOutputK) net.mark_output(k, "k");
    std::vector<HostTensor> in = {random_tensor(DataType::kF32, {B, L, K}, 5)};
    if (f == kCross) in.push_back(random_tensor(DataType::kF32, {B, S, K}, 6));
    const Built b = run_both(net, in);
    EXPECT_EQ(b.report.changes("attention_projections"), 1) << b.report.to_string();
    int matmuls = 0;
    for (const Layer& l : b.plan.network.layers()) {
      matmuls += std::holds_alternative<MatMulParams>(l.params);
      if (const auto* p = std::get_if<AttentionParams>(&l.params)) {
        const std::vector<int64_t> columns = f == kCross     ? std::vector<int64_t>{0, 0, D}
                                             : f == kOutputK ? std::vector<int64_t>{0, 0, D}
                                                             : std::vector<int64_t>{0, D, 2 * D};
        EXPECT_EQ(p->columns, columns);
      }
    }
    EXPECT_EQ(matmuls, f == kSelf || f == kUntransposed ? 1 : 2);
    for (size_t i = 0; i < b.folded.size(); ++i) {
      EXPECT_TRUE(testing::near(b.folded[i], testing::to_doubles(b.unbuilt[i]), 1e-5, 1e-6)) << i;
    }
  }
}

// Attention decomposed into matmuls (CUDA's f32 path) reads grouped key/value heads unrepeated:
// q as [B, Hkv, G * L, E] against the [B, Hkv, S, E] sources, so the repeats (both forms) go
// with the dead layers; values as the attention over the repeated heads, with a padding mask
// (one sequence fully padded: zeros) and causal. Repeats of different groups stay.
TEST(AttentionHeads, DecomposedAttentionReadsGroupedHeadsUnrepeated) {
  const int64_t B = 2, Hkv = 2, L = 5, S = 7, E = 8;
  HostTensor pad(DataType::kBool, {B, 1, 1, S});
  for (int64_t j = 0; j < S; ++j) {
    pad.as<uint8_t>()[j] = j < 5;
    pad.as<uint8_t>()[S + j] = 0;
  }
  struct Case {
    bool gather, causal, mask;
    int64_t group_k, group_v;
  };
  for (const Case& c : {Case{false, false, true, 3, 3}, Case{true, true, false, 2, 2},
                        Case{false, true, true, 2, 2}, Case{true, false, false, 2, 4}}) {
    SCOPED_TRACE(std::to_string(c.gather) + std::to_string(c.causal) + std::to_string(c.mask) +
                 std::to_string(c.group_v));
    const int64_t H = Hkv * c.group_k;
    Network net;
    const auto q = net.add_input("q", DataType::kF32, {B, H, L, E});
    const auto k = net.add_input("k", DataType::kF32, {B, Hkv, S, E});
    const auto v = net.add_input("v", DataType::kF32, {B, H / c.group_v, S, E});
    std::vector<TensorId> in = {q, repeat_heads(net, k, "k", c.group_k, c.gather),
                                repeat_heads(net, v, "v", c.group_v, c.gather)};
    std::vector<HostTensor> values = {random_tensor(DataType::kF32, {B, H, L, E}, 21, -2, 2),
                                      random_tensor(DataType::kF32, {B, Hkv, S, E}, 22, -2, 2),
                                      random_tensor(DataType::kF32, {B, H / c.group_v, S, E}, 23)};
    if (c.mask) {
      in.push_back(net.add_input("mask", DataType::kBool, pad.shape()));
      values.push_back(pad);
    }
    AttentionParams a;
    a.causal = c.causal;
    a.has_mask = c.mask;
    net.mark_output(net.add("attn", a, in), "y");
    const HostTensor want = testing::run_engine(net, values)[0];
    Network taken = net;
    ASSERT_EQ(decompose_attention(
                  taken, [](const Shape&, const Shape&, const Shape&, DataType) { return false; }),
              1);
    remove_dead_layers(taken);
    const bool grouped = c.group_k == c.group_v;
    int repeats = 0;
    for (const Layer& l : taken.layers()) {
      repeats += std::holds_alternative<SelectParams>(l.params) ||
                 std::holds_alternative<GatherParams>(l.params);
      if (std::holds_alternative<MatMulParams>(l.params) && grouped) {
        EXPECT_TRUE(l.inputs[1] == k || l.inputs[1] == v) << l.name;
        EXPECT_EQ(taken.tensor(l.outputs[0]).shape[1], Hkv) << l.name;
      }
    }
    EXPECT_EQ(repeats, grouped ? 0 : 2);
    const HostTensor got = testing::run_engine(taken, values)[0];
    EXPECT_TRUE(testing::near(got, testing::to_doubles(want), 1e-5, 1e-6));
    if (c.mask) {  // the fully padded sequence: zeros, as the attention gives
      for (int64_t i = got.numel() / 2; i < got.numel(); ++i) EXPECT_EQ(got.as<float>()[i], 0.f);
    }
  }
}

// What must stay: a result that is also a network output, an operand computed rather than
// viewed, and a merge into another layout ([B, H * E, L]).
TEST(AttentionHeads, OnlyViewsFold) {
  const int64_t B = 2, L = 6, H = 2, E = 4;
  const HostTensor in = random_tensor(DataType::kF32, {B, L, 3 * H * E}, 4);
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    Network net;
    const auto x = net.add_input("qkv", DataType::kF32, {B, L, 3 * H * E});
    TensorId q = split(net, x, "q", 3, 0, H, E);
    if (variant == 1) q = net.add("q.act", ActivationParams{ActivationKind::kRelu}, {q});
    const auto o = net.add("attn", AttentionParams{},
                           {q, split(net, x, "k", 3, 1, H, E), split(net, x, "v", 3, 2, H, E)});
    if (variant == 0) {
      net.mark_output(merge(net, o), "y");
      net.mark_output(o, "o");
    } else if (variant == 1) {
      net.mark_output(merge(net, o), "y");
    } else {
      const auto t = net.add("merge.p", permute({0, 1, 3, 2}), {o});
      net.mark_output(net.add("merge.r", reshape({B, H * E, L}), {t}), "y");
    }
    const Built b = run_both(net, {in});
    EXPECT_EQ(b.report.changes("attention_heads"), 0) << b.report.to_string();
    for (size_t i = 0; i < b.folded.size(); ++i) {
      EXPECT_TRUE(testing::near(b.folded[i], testing::to_doubles(b.unbuilt[i]), 1e-5, 1e-6));
    }
  }
}

// Dynamic batch and sequence: the head splits and merges are written with 0 (the input's dim)
// and -1 (inferred) for the dynamic dims, as exported programs' views are. They fold as the
// static ones do (traced with the dims as symbols), and the packed layer computes what the views
// did at every shape of the profile: q, k, v as slices of a [B, L, 3, H, E] view (BERT's fused
// projection, its own reshape to [B, L, 3 H E] before the layer) or as column slices of [B, L,
// 3 H E] (GPT-2's), with a key padding mask whose dims are the inputs' own.
TEST(AttentionHeads, DynamicBatchAndSequenceFold) {
  const int64_t H = 2, E = 8, D = H * E;
  const Profile profile{{1, 1, 3 * D}, {2, 8, 3 * D}, {4, 16, 3 * D}};
  for (const bool columns : {false, true}) {
    SCOPED_TRACE(columns);
    Network net;
    const auto x = net.add_input("qkv", DataType::kF32, {kDynamic, kDynamic, 3 * D}, profile);
    const auto keep = net.add_input("keep", DataType::kBool, {kDynamic, 1, 1, kDynamic},
                                    Profile{{1, 1, 1, 1}, {2, 1, 1, 8}, {4, 1, 1, 16}});
    std::vector<TensorId> qkv;
    for (int64_t part = 0; part < 3; ++part) {
      const std::string name = std::string(1, "qkv"[part]);
      SliceParams sl;
      sl.steps = {1};
      TensorId heads;
      if (columns) {
        sl.axes = {2}, sl.starts = {part * D}, sl.ends = {(part + 1) * D};
        heads = net.add(name + ".r", reshape({0, 0, H, E}), {net.add(name + ".s", sl, {x})});
      } else {
        sl.axes = {2}, sl.starts = {part}, sl.ends = {part + 1};
        const auto parts = net.add(name + ".parts", reshape({0, 0, 3, H, E}), {x});
        heads = net.add(name + ".r", reshape({0, 0, H, E}), {net.add(name + ".s", sl, {parts})});
      }
      qkv.push_back(net.add(name, permute({0, 2, 1, 3}), {heads}));
    }
    qkv.push_back(keep);
    AttentionParams a;
    a.has_mask = true;
    const auto o = net.add("attn", a, qkv);
    const auto t = net.add("merge.p", permute({0, 2, 1, 3}), {o});
    net.mark_output(net.add("merge.r", reshape({0, 0, -1}), {t}), "y");
    ASSERT_EQ(net.tensor(net.outputs()[0]).shape, (Shape{kDynamic, kDynamic, D}));
    const Plan plan = build(net, BuilderConfig{});
    EXPECT_EQ(count_views(plan.network), 0) << network_to_text(plan.network);
    ExecutionContext folded(std::make_shared<const Engine>(plan.network, plan.target));
    ExecutionContext unbuilt(std::make_shared<const Engine>(net));
    for (const auto& [batch, seq] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 8}, {3, 5}, {4, 16}, {1, 13}}) {
      SCOPED_TRACE(std::to_string(batch) + " x " + std::to_string(seq));
      const HostTensor in = random_tensor(DataType::kF32, {batch, seq, 3 * D}, batch * 100 + seq);
      HostTensor mask(DataType::kBool, {batch, 1, 1, seq});
      for (int64_t i = 0; i < batch * seq; ++i) mask.as<bool>()[i] = (i * 7 + batch) % 5 != 0;
      const auto got = folded.run({in, mask});
      const auto want = unbuilt.run({in, mask});
      ASSERT_EQ(got[0].shape(), (Shape{batch, seq, D}));
      EXPECT_TRUE(testing::near(got[0], testing::to_doubles(want[0]), 1e-5, 1e-6));
    }
  }
}

// Views that are a head split or merge at some sizes only do not fold with dynamic dims: [B, L,
// H E] viewed as [B, H, L, E] directly (no permutation: at L = H it has the split's shape, never
// its elements), and the result [B, H, L, E] viewed as [B, L, H E] likewise.
TEST(AttentionHeads, DynamicViewsThatAreNoHeadSplitsDoNotFold) {
  const int64_t H = 2, E = 4, D = H * E;
  for (const bool bad_merge : {false, true}) {
    SCOPED_TRACE(bad_merge);
    Network net;
    const auto x = net.add_input("x", DataType::kF32, {1, kDynamic, D},
                                 Profile{{1, 1, D}, {1, 4, D}, {1, 8, D}});
    const auto heads =
        net.add("heads", permute({0, 2, 1, 3}), {net.add("heads.r", reshape({0, 0, H, E}), {x})});
    const auto q = bad_merge ? heads : net.add("q", reshape({0, H, -1, E}), {x});
    const auto o = net.add("attn", AttentionParams{}, {q, heads, heads});
    TensorId y;
    if (bad_merge) {
      y = net.add("merge.r", reshape({0, -1, D}), {o});
    } else {
      y = net.add("merge.r", reshape({0, 0, -1}), {net.add("merge.p", permute({0, 2, 1, 3}), {o})});
    }
    net.mark_output(y, "y");
    BuildReport report;
    const Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("attention_heads"), 0) << network_to_text(plan.network);
    ExecutionContext folded(std::make_shared<const Engine>(plan.network, plan.target));
    ExecutionContext unbuilt(std::make_shared<const Engine>(net));
    for (int64_t seq : {1, 2, 5, 8}) {
      const HostTensor in = random_tensor(DataType::kF32, {1, seq, D}, seq);
      EXPECT_TRUE(testing::near(folded.run({in})[0], testing::to_doubles(unbuilt.run({in})[0]),
                                1e-5, 1e-6));
    }
  }
}

TEST(AttentionHeads, ViewStridesFollowTorchsViewRules) {
  // Contiguous: any reshape.
  EXPECT_EQ(view_strides({2, 3, 4}, {12, 4, 1}, {6, 4}), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(view_strides({2, 3, 4}, {12, 4, 1}, {2, 12}), (std::vector<int64_t>{12, 1}));
  // Transposed [3, 2] of a [2, 3]: splitting a dim works, merging across the transpose does not.
  EXPECT_EQ(view_strides({3, 2}, {1, 3}, {3, 2, 1}), (std::vector<int64_t>{1, 3, 3}));
  EXPECT_FALSE(view_strides({3, 2}, {1, 3}, {6}).has_value());
  EXPECT_FALSE(view_strides({2, 3}, {3, 1}, {5}).has_value());  // another size
}

// The one shuffle a view's modes amount to: a permutation of the source's elements (dims that
// stay adjacent merged), a reshape where they stay in order, nothing for a broadcast, a crop or
// too many dims.
TEST(Views, ShuffleForModesPermutesTheSourceOrRefuses) {
  // [2, 3, 4] -> permute [2, 0, 1]: dims 0 and 1 stay adjacent, so it is [6, 4] transposed.
  Modes m = {{{4, 1}}, {{2, 12}}, {{3, 4}}};
  auto c = shuffle_for_modes({2, 3, 4}, m, {4, 2, 3});
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->moves);
  EXPECT_EQ(c->move.reshape, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(c->move.second_perm, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(c->moved, (Shape{4, 6}));
  // [2, 12], each row the transposed [3, 4] of the source's: a permutation of its own dims.
  m = {{{2, 12}}, {{4, 1}, {3, 4}}};
  c = shuffle_for_modes({2, 3, 4}, m, {2, 12});
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(c->move.has_reshape);
  EXPECT_EQ(c->move.first_perm, (std::vector<int64_t>{0, 2, 1}));
  EXPECT_EQ(c->moved, (Shape{2, 4, 3}));
  // In order: a reshape.
  c = shuffle_for_modes({2, 3, 4}, contiguous_modes({6, 4}), {6, 4});
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(c->moves);
  EXPECT_EQ(c->move.reshape, (std::vector<int64_t>{6, 4}));
  // A broadcast (stride 0) and a crop (a stride that skips elements) are not permutations.
  EXPECT_FALSE(shuffle_for_modes({4}, {{{2, 0}}, {{4, 1}}}, {2, 4}).has_value());
  EXPECT_FALSE(shuffle_for_modes({8}, {{{4, 2}}}, {4}).has_value());
  EXPECT_FALSE(shuffle_for_modes({2, 4}, {{{2, 1}}, {{2, 4}}}, {2, 2}).has_value());
  // A permutation of more dims than the bound.
  EXPECT_FALSE(shuffle_for_modes({2, 3, 4}, m, {2, 12}, 2).has_value());
}

TEST(AttentionHeads, PackedLayersAreValidated) {
  Network net;
  const auto x = net.add_input("x", DataType::kF32, {2, 5, 24});
  AttentionParams p;
  p.heads = 2, p.head_size = 4, p.columns = {0, 8, 16};
  EXPECT_EQ(net.tensor(net.add("ok", p, {x, x, x})).shape, (Shape{2, 5, 8}));
  const auto expect_error = [&](AttentionParams bad, const std::string& what) {
    try {
      net.add("bad_attn", bad, {x, x, x});
      FAIL() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("bad_attn"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(what), std::string::npos) << e.message();
    }
  };
  AttentionParams bad = p;
  bad.columns = {0, 8, 20};  // past the width
  expect_error(bad, "has no 2 heads of 4 at column 20");
  bad = p;
  bad.columns = {0, 8};
  expect_error(bad, "3 column offsets");
  bad = p;
  bad.heads = -1;
  expect_error(bad, "negative");
  bad = AttentionParams{};
  bad.columns = {0, 0, 0};
  expect_error(bad, "for packed heads");
  bad = p;
  bad.kv_heads = 3;  // of 2 query heads
  expect_error(bad, "3 key/value heads do not divide 2 query heads");
  bad = p;
  bad.heads = 4, bad.kv_heads = 2, bad.head_size = 4, bad.columns = {0, 0, 20};  // v: 2 x 4 > 4
  expect_error(bad, "v [2, 5, 24] has no 2 heads of 4 at column 20");
  // A mask broadcasts to [B, heads, L, S] = [2, 2, 5, 5].
  AttentionParams masked = p;
  masked.has_mask = true;
  const auto keep = net.add_input("keep", DataType::kBool, {2, 1, 1, 5});
  EXPECT_EQ(net.tensor(net.add("masked", masked, {x, x, x, keep})).shape, (Shape{2, 5, 8}));
  const auto wrong = net.add_input("wrong", DataType::kF32, {3, 5});
  try {
    net.add("bad_mask", masked, {x, x, x, wrong});
    FAIL() << "no error for a mask of 3 query rows";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("does not broadcast to the attention weights [2, 2, 5, 5]"),
              std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace kiln::engine
