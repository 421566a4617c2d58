// Runtime: bad inputs at run time, sharing one engine between threads, the inspector, profiling.
#include "engine/runtime.h"

#include <nlohmann/json.hpp>

#include <thread>

#include "engine/builder.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

std::shared_ptr<const Engine> tanh_engine() {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 16}, Profile{{1, 16}, {4, 16}, {32, 16}});
  auto t = net.add("t", ActivationParams{ActivationKind::kTanh}, {x});
  auto two = net.add_constant("two", Weights::from_floats({1}, {2.f}));
  net.mark_output(net.add("y", ElementwiseParams{BinaryOp::kMul}, {t, two}), "y");
  return std::make_shared<const Engine>(build(net, BuilderConfig{}).network);
}

std::vector<double> expected(const HostTensor& x) {
  std::vector<double> r;
  for (double v : testing::to_doubles(x)) r.push_back(2 * std::tanh(v));
  return r;
}

TEST(Runtime, WrongShapesAndDtypesAreClearErrors) {
  auto engine = tanh_engine();
  ExecutionContext ctx(engine);
  try {
    ctx.run({testing::random_tensor(DataType::kF32, {64, 16}, 1)});
    FAIL();
  } catch (const ShapeMismatch& e) {
    EXPECT_NE(e.message().find("input `x`: shape [64, 16] is outside the profile"),
              std::string::npos)
        << e.message();
  }
  EXPECT_THROW(ctx.run({testing::random_tensor(DataType::kF32, {4, 15}, 1)}), ShapeMismatch);
  EXPECT_THROW(ctx.run({testing::random_tensor(DataType::kF32, {4}, 1)}), ShapeMismatch);
  EXPECT_THROW(ctx.run({testing::random_tensor(DataType::kI64, {4, 16}, 1)}), ShapeMismatch);
  EXPECT_THROW(ctx.run({}), InvalidArgument);
  ExecutionContext unset(engine);
  EXPECT_THROW(unset.output_shape(0), InvalidArgument);
  EXPECT_THROW(unset.bind_input(3, nullptr), InvalidArgument);
  // The context stays usable after errors.
  auto x = testing::random_tensor(DataType::kF32, {32, 16}, 2);
  EXPECT_TRUE(testing::near(ctx.run({x})[0], expected(x)));
}

TEST(Runtime, OneEngineFromEightThreads) {
  auto engine = tanh_engine();
  std::vector<std::thread> threads;
  std::vector<int> failures(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      ExecutionContext ctx(engine);
      for (int i = 0; i < 50; ++i) {
        auto x = testing::random_tensor(DataType::kF32, {1 + (t * 7 + i) % 32, 16}, t * 1000 + i);
        if (!testing::near(ctx.run({x})[0], expected(x))) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

TEST(Runtime, InspectorAndProfiler) {
  auto engine = tanh_engine();
  auto j = nlohmann::json::parse(engine->inspect_json());
  EXPECT_EQ(j["target"], "cpu");
  EXPECT_EQ(j["io"]["inputs"][0]["profile"]["max"], nlohmann::json({32, 16}));
  bool saw_fused = false;
  for (const auto& l : j["layers"]) saw_fused = saw_fused || l["kind"] == "fused_elementwise";
  EXPECT_TRUE(saw_fused) << j.dump(1);
  ExecutionContext ctx(engine);
  ctx.enable_profiling(true);
  for (int i = 0; i < 3; ++i) ctx.run({testing::random_tensor(DataType::kF32, {4, 16}, i)});
  int runs = 0;
  for (const auto& t : ctx.profile()) runs += t.runs;
  EXPECT_EQ(runs, 3);  // one fused layer (the constant runs no kernel), three runs
  EXPECT_NE(ctx.profile_table().find("fused_elementwise"), std::string::npos);
  // Each line names the shapes the layer ran on (the first profiled run's).
  EXPECT_NE(ctx.profile_table().find("f32[4, 16] f32[1] -> f32[4, 16]"), std::string::npos)
      << ctx.profile_table();
  EXPECT_EQ(engine->input_index("x"), 0u);
  EXPECT_THROW(engine->output_index("nope"), InvalidArgument);
}

// Input shapes that come back are not resolved again (shape inference and memory planning once
// per shape, the 16 most recent kept), and every call's answer is its own shape's.
TEST(Runtime, ShapesThatComeBackAreNotResolvedAgain) {
  ExecutionContext ctx(tanh_engine());
  ctx.enable_profiling(true);
  const auto resolutions = [&] {
    const std::string table = ctx.profile_table();
    const size_t at = table.find("shapes resolved ");
    return at == std::string::npos ? 0 : std::stoi(table.substr(at + 16));
  };
  uint64_t seed = 0;
  const auto run_at = [&](int64_t n) {
    const HostTensor x = testing::random_tensor(DataType::kF32, {n, 16}, ++seed);
    const auto out = ctx.run({x});
    ASSERT_EQ(out[0].shape(), (Shape{n, 16}));
    EXPECT_TRUE(testing::near(out[0], expected(x), 1e-5, 1e-6)) << "n " << n;
    EXPECT_EQ(ctx.output_shape(0), (Shape{n, 16}));
  };
  for (int64_t n : {2, 5, 2, 5, 7, 2, 7}) run_at(n);
  EXPECT_EQ(resolutions(), 3);
  // 17 other shapes push 2, 5 and 7 out of the 16 kept: 2 is resolved again; 9 is not.
  for (int64_t n = 8; n <= 24; ++n) run_at(n);
  EXPECT_EQ(resolutions(), 20);
  run_at(24);
  run_at(9);
  EXPECT_EQ(resolutions(), 20);
  run_at(2);
  EXPECT_EQ(resolutions(), 21);
}

// run_profile_points runs each distinct profile point once (min, opt, max), the max last: what a
// loaded cuda engine's first context does, and the builder's choose_at_build.
TEST(Runtime, ProfilePointsRunOnceEach) {
  ExecutionContext ctx(tanh_engine());
  ctx.enable_profiling(true);
  EXPECT_EQ(ctx.run_profile_points(), 3);
  EXPECT_EQ(ctx.output_shape(0), (Shape{32, 16}));
  EXPECT_NE(ctx.profile_table().find("shapes resolved 3 "), std::string::npos)
      << ctx.profile_table();
  // A static engine has one point.
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 4});
  net.mark_output(net.add("t", ActivationParams{ActivationKind::kTanh}, {x}), "y");
  ExecutionContext fixed(std::make_shared<const Engine>(build(net, BuilderConfig{}).network));
  EXPECT_EQ(fixed.run_profile_points(), 1);
  EXPECT_EQ(fixed.output_shape(0), (Shape{2, 4}));
}

TEST(Runtime, OutputThatIsAnInputIsCopied) {
  Network net;
  auto x = net.add_input("x", DataType::kI32, {3});
  net.mark_output(x, "same");
  net.mark_output(net.add("n", UnaryParams{UnaryOp::kNeg}, {x}), "neg");
  auto engine = std::make_shared<const Engine>(net);
  ExecutionContext ctx(engine);
  auto out = ctx.run({testing::tensor_from(DataType::kI32, {3}, {1, -2, 3})});
  EXPECT_TRUE(testing::near(out[0], {1, -2, 3}, 0, 0));
  EXPECT_TRUE(testing::near(out[1], {-1, 2, -3}, 0, 0));
}

// Reshapes move no data: their outputs share their inputs' bytes (a view of a view shares the
// first's), the layers never run, and the shared bytes stay reserved until the last reader of any
// view, even while larger tensors come and go meanwhile. A reshape that is a network output still
// fills the caller's buffer, and a reshape of a network input reads it in place.
TEST(Runtime, ReshapesAreViewsThatKeepTheirBytesAlive) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {4, 6});
  auto a = net.add("a", ActivationParams{ActivationKind::kRelu}, {x});
  ShuffleParams flat;
  flat.has_reshape = true;
  flat.reshape = {24};
  ShuffleParams back = flat;
  back.reshape = {4, 6};
  auto v = net.add("v", flat, {a});
  auto vv = net.add("vv", back, {v});
  // Meanwhile: intermediates that would take a's bytes if a's lifetime ended at v.
  auto b = net.add("b", UnaryParams{UnaryOp::kExp}, {x});
  auto c = net.add("c", UnaryParams{UnaryOp::kNeg}, {b});
  auto d = net.add("d", ElementwiseParams{BinaryOp::kAdd}, {vv, c});
  net.mark_output(d, "d");
  net.mark_output(net.add("flat_out", flat, {c}), "flat");
  net.mark_output(net.add("x_flat", flat, {x}), "x_flat");
  auto engine = std::make_shared<const Engine>(net);  // unbuilt: the layers as written
  ExecutionContext ctx(engine);
  ctx.enable_profiling(true);
  const auto in = testing::random_tensor(DataType::kF32, {4, 6}, 9);
  const auto xs = testing::to_doubles(in);
  std::vector<double> want_d, want_c;
  for (double e : xs) {
    want_d.push_back(std::max(e, 0.0) - std::exp(e));
    want_c.push_back(-std::exp(e));
  }
  for (int run = 0; run < 2; ++run) {
    const auto out = ctx.run({in});
    EXPECT_EQ(out[0].shape(), (Shape{4, 6}));
    EXPECT_TRUE(testing::near(out[0], want_d, 1e-6, 1e-6));
    EXPECT_EQ(out[1].shape(), (Shape{24}));
    EXPECT_TRUE(testing::near(out[1], want_c, 1e-6, 1e-6));
    EXPECT_TRUE(testing::near(out[2], xs, 0, 0));
  }
  for (const auto& t : ctx.profile()) {
    // Only the reshapes that are network outputs copy; the views never run.
    EXPECT_EQ(t.runs, t.name == "v" || t.name == "vv" ? 0 : 2) << t.name;
  }
}

// A slice that keeps one contiguous range of its input at an aligned offset (q, k and v of a
// packed [3, ...] projection) is a view too, also of a view; unaligned or strided ranges run.
TEST(Runtime, ContiguousAlignedSlicesAreViews) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {3, 4, 16});  // one [4, 16] block is 256 bytes
  auto a = net.add("a", ActivationParams{ActivationKind::kRelu}, {x});
  auto k = net.add("k", SliceParams{{0}, {1}, {2}, {1}}, {a});
  auto v = net.add("v", SliceParams{{0}, {-1}, {kSliceEnd}, {1}}, {a});
  auto row = net.add("row", SliceParams{{0, 1}, {0, 1}, {1, 2}, {1, 1}}, {v});  // 64 bytes in
  auto odd = net.add("odd", SliceParams{{2}, {0}, {15}, {1}}, {k});             // not contiguous
  auto half = net.add("half", SliceParams{{1}, {0}, {4}, {2}}, {k});            // strided
  auto b = net.add("b", ElementwiseParams{BinaryOp::kAdd}, {k, v});
  auto c = net.add("c", ElementwiseParams{BinaryOp::kMul}, {row, row});
  net.mark_output(b, "b");
  net.mark_output(c, "c");
  net.mark_output(net.add("odd_neg", UnaryParams{UnaryOp::kNeg}, {odd}), "odd");
  net.mark_output(net.add("half_neg", UnaryParams{UnaryOp::kNeg}, {half}), "half");
  auto engine = std::make_shared<const Engine>(net);
  ExecutionContext ctx(engine);
  ctx.enable_profiling(true);
  const auto in = testing::random_tensor(DataType::kF32, {3, 4, 16}, 11);
  const auto xs = testing::to_doubles(in);
  const auto relu = [&](size_t i) { return std::max(xs[i], 0.0); };
  std::vector<double> want_b, want_c, want_odd, want_half;
  for (size_t i = 0; i < 64; ++i) want_b.push_back(relu(64 + i) + relu(128 + i));
  for (size_t i = 0; i < 16; ++i) want_c.push_back(relu(128 + 16 + i) * relu(128 + 16 + i));
  for (size_t r = 0; r < 4; ++r) {
    for (size_t i = 0; i < 15; ++i) want_odd.push_back(-relu(64 + r * 16 + i));
  }
  for (size_t r = 0; r < 4; r += 2) {
    for (size_t i = 0; i < 16; ++i) want_half.push_back(-relu(64 + r * 16 + i));
  }
  for (int run = 0; run < 2; ++run) {
    const auto out = ctx.run({in});
    EXPECT_TRUE(testing::near(out[0], want_b, 1e-6, 1e-7));  // f32 sums against doubles
    EXPECT_TRUE(testing::near(out[1], want_c, 1e-6, 1e-7));
    EXPECT_TRUE(testing::near(out[2], want_odd, 0, 0));
    EXPECT_TRUE(testing::near(out[3], want_half, 0, 0));
  }
  for (const auto& t : ctx.profile()) {
    const bool view = t.name == "k" || t.name == "v" || t.name == "row";
    EXPECT_EQ(t.runs, view ? 0 : 2) << t.name;
  }
}

}  // namespace
}  // namespace kiln::engine
