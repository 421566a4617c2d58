// Concats in place (passes/concat_in_place.cpp, ConcatParams::in_place, the runtime's placement):
// built networks against the unbuilt layers, on the CPU backend, at every batch of a dynamic
// profile, and which concats still run.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/builder.h"
#include "engine/plan.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

// A dense block of a dynamic batch (1 to 3) along `axis`: 1 in [N, C, 8], 2 in [N, 6, C]. Two
// maps of 8 channels, then three layers each reading the concat of every map so far (a
// per-channel product and a ReLU, which read placed tensors, then a matmul growing 4 channels),
// and the block's output, the concat of all five, under a ReLU. With `read_whole`, the second
// layer's concat is also read by a transpose (which takes no placed tensor) and is a network
// output through it.
Network dense_block(int axis, bool read_whole) {
  Network net;
  const bool last = axis == 2;
  const int64_t c0 = 8, growth = 4;
  const Shape shape = last ? Shape{kDynamic, 6, c0} : Shape{kDynamic, c0, 8};
  Profile profile{shape, shape, shape};
  profile.min[0] = 1, profile.opt[0] = 2, profile.max[0] = 3;
  const auto x = net.add_input("x", DataType::kF32, shape, profile);
  std::vector<TensorId> maps = {net.add("x0", ActivationParams{ActivationKind::kRelu}, {x}),
                                net.add("g", UnaryParams{UnaryOp::kNeg}, {x})};
  int64_t c = 2 * c0;
  uint64_t seed = 90;
  for (int k = 0; k < 3; ++k) {
    const std::string n = std::to_string(k);
    const auto cat = net.add("cat" + n, ConcatParams{axis}, maps);
    const auto scale =
        testing::random_constant(net, "s" + n, last ? Shape{c} : Shape{c, 1}, seed++);
    const auto scaled = net.add("m" + n, ElementwiseParams{BinaryOp::kMul}, {cat, scale});
    const auto h = net.add("h" + n, ActivationParams{ActivationKind::kRelu}, {scaled});
    const auto w =
        testing::random_constant(net, "w" + n, last ? Shape{c, growth} : Shape{growth, c}, seed++);
    maps.push_back(net.add("f" + n, MatMulParams{}, last ? std::vector{h, w} : std::vector{w, h}));
    if (read_whole && k == 1) {
      net.mark_output(net.add("whole", ShuffleParams{{0, 2, 1}, false, {}, {}}, {cat}), "whole");
    }
    c += growth;
  }
  const auto out = net.add("out", ConcatParams{axis}, maps);
  net.mark_output(net.add("y", ActivationParams{ActivationKind::kRelu}, {out}), "y");
  return net;
}

int in_place_concats(const Network& net) {
  int n = 0;
  for (const Layer& l : net.layers()) {
    const auto* c = std::get_if<ConcatParams>(&l.params);
    n += c && c->in_place;
  }
  return n;
}

// Runs `net` on one context at each batch, returning the outputs per batch, and (profiled) how
// many times each layer ran.
std::vector<std::vector<HostTensor>> run_batches(const Network& net, std::vector<int>* runs) {
  auto engine = std::make_shared<const Engine>(net);
  ExecutionContext ctx(engine);
  ctx.enable_profiling(runs != nullptr);
  std::vector<std::vector<HostTensor>> outs;
  for (int64_t n : {1, 3, 2}) {
    Shape s = net.tensor(net.inputs()[0]).shape;
    s[0] = n;
    outs.push_back(ctx.run({testing::random_tensor(DataType::kF32, s, 100 + n)}));
  }
  if (runs) {
    for (const LayerTiming& t : ctx.profile()) runs->push_back(t.runs);
  }
  return outs;
}

void expect_same(const std::vector<std::vector<HostTensor>>& built,
                 const std::vector<std::vector<HostTensor>>& layers) {
  ASSERT_EQ(built.size(), layers.size());
  for (size_t b = 0; b < built.size(); ++b) {
    ASSERT_EQ(built[b].size(), layers[b].size());
    for (size_t o = 0; o < built[b].size(); ++o) {
      EXPECT_EQ(built[b][o].shape(), layers[b][o].shape()) << b << " " << o;
      EXPECT_TRUE(testing::near(built[b][o], testing::to_doubles(layers[b][o]), 0, 0))
          << "batch run " << b << ", output " << o;
    }
  }
}

// Each input of the block's concat is written once into its output: the two first maps by their
// own layers (the CPU's elementwise kernels write placed outputs), the matmuls' by copies; all
// four concats are in place and never run: the three inner ones are views of the last one's
// bytes, read strided by the products. Values exactly as the layers gave, at batches 1, 3 and 2
// of one context, along the middle and the last axis, also after a plan's round trip. A concat
// also read by a transpose stays a concat (it runs, reading the maps in place); the rest of its
// block is still in place.
TEST(ConcatInPlace, DenseBlockConcatsAreViewsOfOneBuffer) {
  for (int axis : {1, 2}) {
    for (bool read_whole : {false, true}) {
      SCOPED_TRACE("axis " + std::to_string(axis) + (read_whole ? ", read whole" : ""));
      const Network net = dense_block(axis, read_whole);
      BuildReport report;
      const Plan plan = build(net, BuilderConfig{}, &report);
      const int in_place = read_whole ? 3 : 4;
      EXPECT_EQ(report.changes("concat_in_place"), in_place) << report.to_string();
      EXPECT_EQ(in_place_concats(plan.network), in_place);
      EXPECT_EQ(testing::count_layers<ConcatParams>(plan.network), 4 + 3);  // the matmuls'
      std::vector<int> runs;
      const auto built = run_batches(plan.network, &runs);
      for (size_t li = 0; li < plan.network.layers().size(); ++li) {
        const Layer& l = plan.network.layers()[li];
        const auto* c = std::get_if<ConcatParams>(&l.params);
        if (!c) continue;
        EXPECT_EQ(runs[li], c->in_place ? 0 : 3) << l.name;
      }
      const auto layers = run_batches(net, nullptr);
      expect_same(built, layers);
      const auto bytes = serialize_plan(plan);
      const Plan loaded = deserialize_plan(bytes.data(), bytes.size());
      EXPECT_EQ(in_place_concats(loaded.network), in_place);
      expect_same(run_batches(loaded.network, nullptr), layers);
      // Off: no concat in place, the same values.
      BuilderConfig off;
      apply_switch(off, "concat_in_place=off");
      const Plan copies = build(net, off);
      EXPECT_EQ(in_place_concats(copies.network), 0);
      EXPECT_EQ(testing::count_layers<ConcatParams>(copies.network), 4);
      expect_same(run_batches(copies.network, nullptr), layers);
    }
  }
}

// A concat of a concat along the same axis: the inner one writes its result where it sits in the
// outer one's output, which takes the other input as a copy: one concat runs where two did. A
// lone concat of two maps would move as many bytes in more launches: left alone.
// (Its maps come from matmuls, which write dense outputs.)
TEST(ConcatInPlace, InnerConcatWritesIntoTheOuterOne) {
  Network net;
  const Shape shape = {kDynamic, 5, 6};
  const auto x =
      net.add_input("x", DataType::kF32, shape, Profile{{1, 5, 6}, {2, 5, 6}, {3, 5, 6}});
  uint64_t seed = 130;
  const auto map = [&](const std::string& name) {
    return net.add(name, MatMulParams{},
                   {x, testing::random_constant(net, "w" + name, {6, 6}, seed++)});
  };
  const auto p = map("p"), q = map("q"), r = map("r");
  const auto inner = net.add("inner", ConcatParams{2}, {p, q});
  const auto outer = net.add("outer", ConcatParams{2}, {r, inner});
  net.mark_output(net.add("y", ActivationParams{ActivationKind::kRelu}, {outer}), "y");
  const auto lone = net.add("lone", ConcatParams{1}, {p, q});
  net.mark_output(net.add("z", UnaryParams{UnaryOp::kNeg}, {lone}), "z");
  BuildReport report;
  const Plan plan = build(net, BuilderConfig{}, &report);
  EXPECT_EQ(report.changes("concat_in_place"), 1) << report.to_string();
  EXPECT_EQ(in_place_concats(plan.network), 1);
  EXPECT_EQ(testing::count_layers<ConcatParams>(plan.network), 4);  // inner, r's copy, outer, lone
  std::vector<int> runs;
  const auto built = run_batches(plan.network, &runs);
  int ran = 0;
  for (size_t li = 0; li < plan.network.layers().size(); ++li) {
    if (std::holds_alternative<ConcatParams>(plan.network.layers()[li].params)) ran += runs[li] > 0;
  }
  EXPECT_EQ(ran, 3);
  expect_same(built, run_batches(net, nullptr));
}

// Layers the backend writes placed (the CPU's elementwise kernels: BackendRules::writes_placed,
// EngineBackend::writes_placed) write straight into their slice of a lone concat, which then
// copies nothing and never runs: `ab` of two such maps; `cm` of one and a matmul's (copied); `eg`
// of one also read by a matmul (copied: the matmul takes no placed tensor) and one written in
// place. Along the middle and the last axis, values exactly as the layers gave at batches 1, 3
// and 2.
TEST(ConcatInPlace, ProducersWriteIntoTheirSlices) {
  for (int axis : {1, 2}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    Network net;
    const Shape shape = {kDynamic, 4, 6};
    const auto x =
        net.add_input("x", DataType::kF32, shape, Profile{{1, 4, 6}, {2, 4, 6}, {3, 4, 6}});
    const auto a = net.add("a", ActivationParams{ActivationKind::kRelu}, {x});
    const auto b = net.add("b", UnaryParams{UnaryOp::kAbs}, {x});
    net.mark_output(
        net.add("y1", UnaryParams{UnaryOp::kNeg}, {net.add("ab", ConcatParams{axis}, {a, b})}),
        "y1");
    const auto c = net.add("c", UnaryParams{UnaryOp::kNeg}, {x});
    const auto m =
        net.add("m", MatMulParams{}, {x, testing::random_constant(net, "wm", {6, 6}, 140)});
    net.mark_output(
        net.add("y2", UnaryParams{UnaryOp::kAbs}, {net.add("cm", ConcatParams{axis}, {c, m})}),
        "y2");
    const auto e = net.add("e", ActivationParams{ActivationKind::kSigmoid}, {x});
    const auto g = net.add("g", UnaryParams{UnaryOp::kExp}, {x});
    net.mark_output(
        net.add("y3", UnaryParams{UnaryOp::kNeg}, {net.add("eg", ConcatParams{axis}, {e, g})}),
        "y3");
    net.mark_output(
        net.add("f", MatMulParams{}, {e, testing::random_constant(net, "wf", {6, 6}, 141)}), "f");
    BuildReport report;
    const Plan plan = build(net, BuilderConfig{}, &report);
    EXPECT_EQ(report.changes("concat_in_place"), 3) << report.to_string();
    EXPECT_EQ(in_place_concats(plan.network), 3);
    EXPECT_EQ(testing::count_layers<ConcatParams>(plan.network), 3 + 2);  // m's and e's copies
    std::vector<int> runs;
    const auto built = run_batches(plan.network, &runs);
    for (size_t li = 0; li < plan.network.layers().size(); ++li) {
      const Layer& l = plan.network.layers()[li];
      const auto* cp = std::get_if<ConcatParams>(&l.params);
      if (cp) {
        EXPECT_EQ(runs[li], cp->in_place ? 0 : 3) << l.name;
      }
    }
    expect_same(built, run_batches(net, nullptr));
  }
}

// A network marked in place by hand (a plan from elsewhere) where placing would be wrong: a
// concat's result also read by a transpose as an input of an in-place concat, an in-place concat
// (a view of a later one's bytes) read by a transpose, an input that is the network's. The
// runtime places only what every reader takes, runs the rest as concats, and the values are the
// unmarked network's.
TEST(ConcatInPlace, MarkedConcatsRunWherePlacingIsWrong) {
  const auto make = [](bool in_place) {
    Network net;
    const auto x = net.add_input("x", DataType::kF32, {2, 3, 4});
    const ShuffleParams flip{{0, 2, 1}, false, {}, {}};
    const auto copy = [&](const std::string& name, TensorId t) {
      return net.add(name, ConcatParams{2, false}, {t});
    };
    const auto a = net.add("a", ActivationParams{ActivationKind::kRelu}, {x});
    const auto b = net.add("b", UnaryParams{UnaryOp::kNeg}, {x});
    const auto c = net.add("c", UnaryParams{UnaryOp::kAbs}, {x});
    const auto a2 = copy("a2", a), b2 = copy("b2", b), c2 = copy("c2", c), d = copy("d", c);
    const auto ab = net.add("ab", ConcatParams{2, false, in_place}, {a2, b2});
    net.mark_output(net.add("flip_ab", flip, {ab}), "flip_ab");
    const auto all = net.add("all", ConcatParams{2, false, in_place}, {a2, b2, c2});
    net.mark_output(net.add("y", UnaryParams{UnaryOp::kAbs}, {all}), "y");
    const auto p = net.add("p", ConcatParams{2, false}, {a, b});
    net.mark_output(net.add("flip_p", flip, {p}), "flip_p");
    const auto outer = net.add("outer", ConcatParams{2, false, in_place}, {p, d});
    net.mark_output(net.add("z", UnaryParams{UnaryOp::kNeg}, {outer}), "z");
    const auto xa = net.add("xa", ConcatParams{2, false, in_place}, {x, a});
    net.mark_output(net.add("neg_xa", UnaryParams{UnaryOp::kNeg}, {xa}), "neg_xa");
    return net;
  };
  const HostTensor in = testing::random_tensor(DataType::kF32, {2, 3, 4}, 120);
  const auto marked = testing::run_engine(make(true), {in});
  const auto plain = testing::run_engine(make(false), {in});
  ASSERT_EQ(marked.size(), plain.size());
  for (size_t o = 0; o < marked.size(); ++o) {
    EXPECT_TRUE(testing::near(marked[o], testing::to_doubles(plain[o]), 0, 0)) << o;
  }
}

// Placed tensors have strides: rows of the concat's width, a pitch apart.
TEST(ConcatInPlace, PlacedStrides) {
  EXPECT_EQ(placed_strides({2, 3, 4}, 12, 20), (std::vector<int64_t>{20, 4, 1}));
  EXPECT_EQ(placed_strides({2, 3, 4}, 4, 10), (std::vector<int64_t>{30, 10, 1}));
  EXPECT_EQ(placed_strides({2, 3, 4}, 0, 0), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(placed_strides({2, 3, 4}, 1, 7), (std::vector<int64_t>{84, 28, 7}));
  EXPECT_THROW(placed_strides({2, 3, 4}, 5, 10), InternalError);
}

}  // namespace
}  // namespace kiln::engine
