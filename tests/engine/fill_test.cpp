// Fill family (shape, fill) on the CPU backend: shape values at build and run time, constant
// and range fills in every dtype, shapes from shape tensors, bad input.
#include <cmath>
#include <map>

#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::near;
using testing::random_tensor;

// How many times each layer ran (or was written from the host) in a profiling context.
std::map<std::string, int> layer_runs(const ExecutionContext& ctx) {
  std::map<std::string, int> runs;
  for (const LayerTiming& t : ctx.profile()) runs[t.name] = t.runs;
  return runs;
}

std::vector<HostTensor> run_built(Network net, const std::vector<HostTensor>& inputs) {
  ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
  return ctx.run(inputs);
}

TEST(Shape, StaticInputHasKnownValues) {
  Network net;
  auto x = net.add_input("x", DataType::kF16, {2, 3, 5});
  auto s = net.add("shape", ShapeParams{}, {x});
  EXPECT_EQ(net.tensor(s).dtype, DataType::kI64);
  ASSERT_TRUE(net.tensor(s).values.has_value());
  EXPECT_EQ(*net.tensor(s).values, (std::vector<int64_t>{2, 3, 5}));
  net.mark_output(s);
  auto out = run_built(std::move(net), {random_tensor(DataType::kF16, {2, 3, 5}, 1)})[0];
  EXPECT_TRUE(near(out, {2, 3, 5}, 0, 0));
}

TEST(Shape, DynamicInputGivesStaticRank) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 3}, Profile{{1, 3}, {4, 3}, {8, 3}});
  auto s = net.add("shape", ShapeParams{}, {x});
  EXPECT_EQ(net.tensor(s).shape, (Shape{2}));
  EXPECT_FALSE(net.tensor(s).values.has_value());
  // A fill whose shape follows the input's at run time.
  auto ones = net.add("ones", FillParams{FillMode::kConstant, DataType::kI32, {}, 1}, {s});
  EXPECT_EQ(net.tensor(ones).shape, (Shape{kDynamic, kDynamic}));
  net.mark_output(s);
  net.mark_output(ones);
  ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
  for (int64_t n : {1, 4, 8}) {
    auto outs = ctx.run({random_tensor(DataType::kF32, {n, 3}, 2)});
    EXPECT_TRUE(near(outs[0], {static_cast<double>(n), 3}, 0, 0));
    EXPECT_EQ(outs[1].shape(), (Shape{n, 3}));
    EXPECT_TRUE(near(outs[1], std::vector<double>(static_cast<size_t>(3 * n), 1.0), 0, 0));
  }
}

// Shape arithmetic whose values only size other tensors (a fill's shape, a reshape's target) is
// known on the host while shapes resolve and never runs; where a kernel reads such values (an
// output here), they are written.
TEST(Shape, ValuesThatOnlySizeTensorsAreNotWritten) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 3}, Profile{{1, 3}, {4, 3}, {8, 3}});
  auto s = net.add("shape", ShapeParams{}, {x});
  auto twice = net.add("twice", ElementwiseParams{BinaryOp::kMul},
                       {s, net.add_constant("two", Weights::from_ints({2}, {2, 1}))});
  auto ones =
      net.add("ones", FillParams{FillMode::kConstant, DataType::kF32, {kDynamic, 3}, 1}, {twice});
  ShuffleParams flat;
  flat.has_reshape = true;
  auto reshaped = net.add("reshaped", flat,
                          {x, net.add("count", ReduceParams{ReduceOp::kProd, {0}, true}, {s})});
  net.mark_output(ones, "ones");
  net.mark_output(reshaped, "reshaped");
  ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
  ctx.enable_profiling(true);
  for (int64_t n : {2, 5}) {
    auto outs = ctx.run({random_tensor(DataType::kF32, {n, 3}, 4)});
    EXPECT_EQ(outs[0].shape(), (Shape{2 * n, 3}));
    EXPECT_TRUE(near(outs[0], std::vector<double>(static_cast<size_t>(6 * n), 1.0), 0, 0));
    EXPECT_EQ(outs[1].shape(), (Shape{3 * n}));
  }
  std::map<std::string, int> runs = layer_runs(ctx);
  EXPECT_EQ(runs["shape"], 0);
  EXPECT_EQ(runs["twice"], 0);
  EXPECT_EQ(runs["count"], 0);
  EXPECT_EQ(runs["ones"], 2);
  EXPECT_EQ(runs["reshaped"], 2);
}

// A slice whose end is only known at run time, as a dynamic export gives BertModel's
// `position_ids[:, :seq]`: an index range of the sequence's length (shape -> sizes -> range fill)
// gathered out of a constant buffer, the positions then gathering rows of an embedding table. With
// the values tracked while resolving, both gathers read one contiguous range of a constant: views
// of it, and neither the range nor the gathers run. A mask's advanced index `mask[:, None, None,
// :]` (an index chain ending in a gather of the flat mask) is a view too, and so are the token
// types `token_type_ids[:, :seq]`, a torch.gather of a zeros buffer by the positions, and the
// where(ones, ids, ids) after it. A gather whose indices do not count up by one still runs; its
// index list is written from the host where it has up to 64 values, else made on the device by its
// layer. Values at sequence lengths on both sides of 64, against what the layers compute. (Profiles
// count a layer written from the host as run.)
TEST(Shape, RunTimeRangesGatherInPlace) {
  const int64_t kMax = 300;
  Network net;
  auto ids =
      net.add_input("ids", DataType::kI64, {1, kDynamic}, Profile{{1, 1}, {1, 128}, {1, kMax}});
  auto mask =
      net.add_input("mask", DataType::kF32, {1, kDynamic}, Profile{{1, 1}, {1, 128}, {1, kMax}});
  std::vector<int64_t> positions(kMax);
  for (int64_t i = 0; i < kMax; ++i) positions[static_cast<size_t>(i)] = i;
  auto buffer = net.add_constant("positions", Weights::from_ints({1, kMax}, positions));
  std::vector<float> rows(static_cast<size_t>(kMax * 4));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i) * 0.5f;
  auto table = net.add_constant("table", Weights::from_floats({kMax, 4}, rows));
  auto shape = net.add("shape", ShapeParams{}, {ids});
  SliceParams at1;
  at1.axes = {0}, at1.starts = {1}, at1.ends = {2};
  auto length = net.add("length", at1, {shape});
  FillParams range{FillMode::kRange, DataType::kI64, {kDynamic}, 0};
  range.start = 0, range.delta = 1;
  auto r = net.add("range", range, {length});
  auto pos = net.add("pos", GatherParams{GatherMode::kDefault, 1}, {buffer, r});
  auto emb = net.add("emb", GatherParams{GatherMode::kDefault, 0}, {table, pos});  // [1, S, 4]
  // Reversed positions: a gather that runs (S - 1 - pos).
  auto last = net.add("last", ElementwiseParams{BinaryOp::kSub},
                      {length, net.add_constant("one", Weights::from_ints({1}, {1}))});
  auto reversed = net.add("reversed", ElementwiseParams{BinaryOp::kSub}, {last, pos});
  auto back = net.add("back", GatherParams{GatherMode::kDefault, 0}, {table, reversed});
  // mask[:, None, None, :] as the flat mask gathered by (0 * S + range) viewed [1, 1, 1, S].
  ShuffleParams flat;
  flat.has_reshape = true;
  flat.reshape = {-1};
  ShuffleParams four;
  four.has_reshape = true;
  four.reshape = {1, 1, 1, -1};
  auto lin =
      net.add("lin", ElementwiseParams{BinaryOp::kAdd},
              {net.add("four", four, {r}), net.add_constant("zero", Weights::from_ints({1}, {0}))});
  auto picked = net.add("picked", GatherParams{GatherMode::kDefault, 0},
                        {net.add("flat", flat, {mask}), lin});
  // token_type_ids[:, :seq] as exported: torch.gather of a zeros buffer by the positions, then
  // where(ones, ids, ids): views of the buffer; the embedding by those zeros runs.
  auto zeros = net.add_constant("zeros", Weights::from_ints({1, kMax}, std::vector<int64_t>(kMax)));
  auto types = net.add("types", GatherParams{GatherMode::kElements, 1}, {zeros, pos});
  auto ones =
      net.add("ones", FillParams{FillMode::kConstant, DataType::kBool, {1, kDynamic}, 1}, {shape});
  auto same = net.add("same", SelectParams{}, {ones, types, types});
  auto type_rows =
      net.add_constant("type_rows", Weights::from_floats({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}));
  auto typed = net.add("typed", GatherParams{GatherMode::kDefault, 0}, {type_rows, same});
  auto sum = net.add("sum", ElementwiseParams{BinaryOp::kAdd},
                     {net.add("both", ElementwiseParams{BinaryOp::kAdd}, {emb, back}), typed});
  net.mark_output(sum, "sum");
  net.mark_output(net.add("masked", UnaryParams{UnaryOp::kNeg}, {picked}), "masked");
  ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
  ctx.enable_profiling(true);
  for (int64_t n : {int64_t{5}, int64_t{100}, kMax}) {
    SCOPED_TRACE(n);
    const HostTensor m = random_tensor(DataType::kF32, {1, n}, 9);
    auto outs = ctx.run({random_tensor(DataType::kI64, {1, n}, 8), m});
    std::vector<double> want;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < 4; ++c)
        want.push_back(0.5 * (i * 4 + c) + 0.5 * ((n - 1 - i) * 4 + c) + (c + 1));
    }
    EXPECT_EQ(outs[0].shape(), (Shape{1, n, 4}));
    EXPECT_TRUE(near(outs[0], want, 0, 0));
    std::vector<double> neg;
    for (int64_t i = 0; i < n; ++i) neg.push_back(-m.as<float>()[i]);
    EXPECT_EQ(outs[1].shape(), (Shape{1, 1, 1, n}));
    EXPECT_TRUE(near(outs[1], neg, 0, 0));
  }
  std::map<std::string, int> runs = layer_runs(ctx);
  // Views and host values never run. `reversed` is written at n = 5 and runs at 100 and 300
  // (from `last`, then written, and the view `pos`); the range never runs.
  const std::map<std::string, int> want = {
      {"shape", 0},    {"length", 0}, {"pos", 0},  {"emb", 0},   {"lin", 0},
      {"picked", 0},   {"types", 0},  {"ones", 0}, {"same", 0},  {"range", 0},
      {"reversed", 3}, {"last", 2},   {"back", 3}, {"typed", 3}, {"sum", 3}};
  for (const auto& [name, n] : want) EXPECT_EQ(runs[name], n) << name;
}

// Index values known while a shape resolves that fall outside the gathered axis are the gather's
// own error, naming it, at the shape where they do (here lengths past the buffer's 8 positions),
// whether the gather's values are computed then (an integer buffer) or it runs (a float one);
// other lengths run before and after.
TEST(Shape, KnownIndicesOutsideTheAxisNameTheGather) {
  for (DataType t : {DataType::kI64, DataType::kF32}) {
    SCOPED_TRACE(dtype_name(t));
    Network net;
    auto x = net.add_input("x", t, {kDynamic}, Profile{{1}, {4}, {12}});
    SliceParams at0;
    at0.axes = {0}, at0.starts = {0}, at0.ends = {1};
    auto length = net.add("length", at0, {net.add("shape", ShapeParams{}, {x})});
    FillParams range{FillMode::kRange, DataType::kI64, {kDynamic}, 0};
    range.delta = 1;
    auto r = net.add("range", range, {length});
    auto buffer = net.add_constant(
        "buffer", t == DataType::kI64 ? Weights::from_ints({8}, std::vector<int64_t>(8, 2))
                                      : Weights::from_floats({8}, std::vector<float>(8, 2)));
    auto g = net.add("positions", GatherParams{GatherMode::kDefault, 0}, {buffer, r});
    net.mark_output(net.add("y", ElementwiseParams{BinaryOp::kMul}, {x, g}), "y");
    ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
    auto out = ctx.run({random_tensor(t, {5}, 13)});
    EXPECT_EQ(out[0].shape(), (Shape{5}));
    try {
      ctx.run({random_tensor(t, {10}, 14)});
      ADD_FAILURE() << "indices past the buffer gathered";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("positions"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
    EXPECT_EQ(ctx.run({random_tensor(t, {3}, 15)})[0].shape(), (Shape{3}));  // and runs on
  }
}

// where(c, a, a) is a: a view of a where the condition does not broadcast it larger (BertModel's
// exported token_type_ids, where(ones, ids, ids)), a layer that runs where it does. The condition,
// a fill of known values, then need not run either.
TEST(Shape, SelectsOfOneTensorAreViews) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 4}, Profile{{1, 4}, {2, 4}, {3, 4}});
  auto c = net.add_input("c", DataType::kBool, {2, kDynamic, 4},
                         Profile{{2, 1, 4}, {2, 2, 4}, {2, 3, 4}});
  auto ones = net.add("ones", FillParams{FillMode::kConstant, DataType::kBool, {kDynamic, 4}, 1},
                      {net.add("shape", ShapeParams{}, {x})});
  auto e = net.add("e", UnaryParams{UnaryOp::kExp}, {x});
  auto same = net.add("same", SelectParams{}, {ones, e, e});
  auto wide = net.add("wide", SelectParams{}, {c, e, e});  // [2, n, 4]: e broadcast
  net.mark_output(net.add("y", UnaryParams{UnaryOp::kNeg}, {same}), "y");
  net.mark_output(net.add("z", UnaryParams{UnaryOp::kNeg}, {wide}), "z");
  ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
  ctx.enable_profiling(true);
  for (int64_t n : {1, 3}) {
    const HostTensor in = random_tensor(DataType::kF32, {n, 4}, 11);
    const HostTensor cond = random_tensor(DataType::kBool, {2, n, 4}, 12);
    auto outs = ctx.run({in, cond});
    std::vector<double> want;
    for (int64_t i = 0; i < n * 4; ++i)
      want.push_back(-std::exp(static_cast<double>(in.as<float>()[i])));
    EXPECT_TRUE(near(outs[0], want, 1e-6, 1e-6));
    std::vector<double> twice = want;
    twice.insert(twice.end(), want.begin(), want.end());
    EXPECT_TRUE(near(outs[1], twice, 1e-6, 1e-6));
  }
  std::map<std::string, int> runs = layer_runs(ctx);
  EXPECT_EQ(runs["same"], 0);
  EXPECT_EQ(runs["ones"], 0);
  EXPECT_EQ(runs["wide"], 2);
  EXPECT_EQ(runs["y"], 2);
}

// With a shape input, a fill's and a reshape's own dims are what is known while building: the
// static ones stay static, and a shape input that disagrees at run time is refused.
TEST(Shape, ShapeInputsKeepTheDimsKnownWhileBuilding) {
  Network net;
  auto x =
      net.add_input("x", DataType::kF32, {kDynamic, kDynamic}, Profile{{1, 1}, {4, 3}, {8, 8}});
  auto s = net.add("shape", ShapeParams{}, {x});
  auto ones =
      net.add("ones", FillParams{FillMode::kConstant, DataType::kF32, {kDynamic, 3}, 1}, {s});
  EXPECT_EQ(net.tensor(ones).shape, (Shape{kDynamic, 3}));
  ShuffleParams to_x;
  to_x.has_reshape = true;
  to_x.reshape = {kDynamic, 3};
  auto reshaped = net.add("reshaped", to_x, {ones, s});
  EXPECT_EQ(net.tensor(reshaped).shape, (Shape{kDynamic, 3}));
  net.mark_output(reshaped);
  ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
  auto out = ctx.run({random_tensor(DataType::kF32, {5, 3}, 3)})[0];
  EXPECT_EQ(out.shape(), (Shape{5, 3}));
  try {
    ctx.run({random_tensor(DataType::kF32, {5, 4}, 3)});
    ADD_FAILURE() << "a [5, 4] input ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShapeMismatch) << e.what();
    EXPECT_NE(std::string(e.what()).find("the layer was built for"), std::string::npos) << e.what();
  }
  // Known dims of another rank than the shape input's are refused while building.
  Network bad;
  auto y = bad.add_input("y", DataType::kF32, {kDynamic, 3}, Profile{{1, 3}, {4, 3}, {8, 3}});
  auto ys = bad.add("shape", ShapeParams{}, {y});
  EXPECT_THROW(bad.add("fill", FillParams{FillMode::kConstant, DataType::kF32, {3}, 1}, {ys}),
               InvalidArgument);
  ShuffleParams three;
  three.has_reshape = true;
  three.reshape = {kDynamic, 3, 1};
  EXPECT_THROW(bad.add("reshape", three, {y, ys}), InvalidArgument);
  three.reshape = {-2, 3};
  EXPECT_THROW(bad.add("reshape", three, {y, ys}), InvalidArgument);
}

TEST(Fill, ConstantInEveryDtype) {
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kI64,
                     DataType::kI32, DataType::kI8, DataType::kU8, DataType::kBool}) {
    auto out = testing::run_network({}, [&](Network& n, const std::vector<TensorId>&) {
      return n.add_layer("fill", FillParams{FillMode::kConstant, t, {2, 3}, 3}, {});
    })[0];
    EXPECT_EQ(out.dtype(), t);
    EXPECT_EQ(out.shape(), (Shape{2, 3}));
    EXPECT_TRUE(near(out, std::vector<double>(6, t == DataType::kBool ? 1 : 3), 0, 0))
        << dtype_name(t);
  }
}

TEST(Fill, RangeLikeArange) {
  auto run = [](FillParams p) {
    return testing::run_network({}, [&](Network& n, const std::vector<TensorId>&) {
      return n.add_layer("arange", p, {});
    })[0];
  };
  FillParams f{FillMode::kRange, DataType::kF32, {7}, 0, 2, 0.5};
  EXPECT_TRUE(near(run(f), {2, 2.5, 3, 3.5, 4, 4.5, 5}, 0, 0));
  FillParams i{FillMode::kRange, DataType::kI64, {5}, 0, -3, 2};
  EXPECT_TRUE(near(run(i), {-3, -1, 1, 3, 5}, 0, 0));
  FillParams big{FillMode::kRange, DataType::kI64, {2}, 0, 5e9, 3};
  auto b = run(big);
  EXPECT_EQ(b.as<int64_t>()[1], 5000000003);
  FillParams h{FillMode::kRange, DataType::kF16, {3, 2}, 0, -1, 0.25};
  EXPECT_TRUE(near(run(h), {-1, -0.75, -0.5, -0.25, 0, 0.25}, 0, 0));
  FillParams empty{FillMode::kRange, DataType::kF32, {0}, 0, 0, 1};
  EXPECT_EQ(run(empty).numel(), 0);
}

TEST(Fill, ShapeFromShapeTensorValues) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 4});
  auto s = net.add("shape", ShapeParams{}, {x});
  auto f = net.add("fill", FillParams{FillMode::kConstant, DataType::kF16, {}, 1.5}, {s});
  EXPECT_EQ(net.tensor(f).shape, (Shape{2, 4}));
  net.mark_output(f);
  auto out = run_built(std::move(net), {random_tensor(DataType::kF32, {2, 4}, 3)})[0];
  EXPECT_TRUE(near(out, std::vector<double>(8, 1.5), 0, 0));
}

TEST(Fill, BadInputsNameTheLayer) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 4});
  auto wrong = net.add_input("wrong", DataType::kI32, {2});
  auto negative = net.add_constant("neg", Weights::from_ints({2}, {2, -3}));
  for (auto [name, input] : {std::pair<const char*, TensorId>{"from_float", x},
                             {"from_i32", wrong},
                             {"negative", negative}}) {
    try {
      net.add(name, FillParams{}, {input});
      ADD_FAILURE() << name << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(e.message().find(name), std::string::npos) << e.message();
    }
  }
  EXPECT_THROW(net.add("dyn", FillParams{FillMode::kConstant, DataType::kF32, {kDynamic}}, {}),
               InvalidArgument);
  EXPECT_THROW(net.add("bool_range", FillParams{FillMode::kRange, DataType::kBool, {3}}, {}),
               InvalidArgument);
  EXPECT_THROW(net.add("two", ShapeParams{}, {x, x}), InvalidArgument);
}

}  // namespace
}  // namespace kiln::engine
