// Plan format: round trips, weightless plans, and every kind of corruption rejected clearly.
#include "engine/plan.h"

#include <fstream>

#include "engine/builder.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

// y = relu(x * w + b), z = x - 1 : two outputs, weights, a dynamic batch dim.
Network small_network() {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 4}, Profile{{1, 4}, {2, 4}, {8, 4}});
  auto w = net.add_constant("w", Weights::from_floats({4}, {0.5f, -1.f, 2.f, 0.25f}));
  auto b = net.add_constant("b", Weights::from_floats({1}, {0.1f}));
  auto one = net.add_constant("one", Weights::from_floats({}, {1.f}));
  auto m = net.add("mul", ElementwiseParams{BinaryOp::kMul}, {x, w});
  auto s = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {m, b});
  net.mark_output(net.add("relu", ActivationParams{ActivationKind::kRelu}, {s}), "y");
  net.mark_output(net.add("sub", ElementwiseParams{BinaryOp::kSub}, {x, one}), "z");
  return net;
}

std::vector<HostTensor> run_plan(const Plan& plan, const HostTensor& x) {
  auto engine = std::make_shared<const Engine>(plan.network, plan.target);
  ExecutionContext ctx(engine);
  return ctx.run({x});
}

std::string expect_corrupt(const std::vector<uint8_t>& bytes) {
  try {
    deserialize_plan(bytes.data(), bytes.size());
  } catch (const CorruptInput& e) {
    return e.message();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong error type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "corrupt plan loaded";
  return "";
}

TEST(Plan, RoundTripGivesBitIdenticalOutputs) {
  Plan plan = build(small_network(), BuilderConfig{});
  const auto bytes = serialize_plan(plan);
  Plan loaded = deserialize_plan(bytes.data(), bytes.size());
  EXPECT_EQ(serialize_plan(loaded), bytes);  // the format is canonical
  auto x = testing::random_tensor(DataType::kF32, {3, 4}, 11);
  auto a = run_plan(plan, x), b = run_plan(loaded, x);
  ASSERT_EQ(a.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].nbytes(), b[i].nbytes());
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].nbytes()), 0);
  }
  const auto xs = testing::to_doubles(x);
  const double w[] = {0.5, -1, 2, 0.25};
  std::vector<double> y, z;
  for (size_t i = 0; i < xs.size(); ++i) {
    y.push_back(std::max(0.0, xs[i] * w[i % 4] + 0.1));
    z.push_back(xs[i] - 1);
  }
  EXPECT_TRUE(testing::near(a[0], y));
  EXPECT_TRUE(testing::near(a[1], z));
}

TEST(Plan, APlanReadInPlaceViewsItsBytesAndKeepsThemAlive) {
  Plan plan = build(small_network(), BuilderConfig{});
  auto bytes = std::make_shared<const Bytes>(serialize_plan(plan));
  const uint8_t* begin = bytes->data();
  const uint8_t* end = begin + bytes->size();
  std::weak_ptr<const Bytes> watch = bytes;
  Plan viewed = deserialize_plan(bytes);
  ASSERT_FALSE(viewed.network.weights().empty());
  for (const auto& [name, w] : viewed.network.weights()) {
    ASSERT_TRUE(w.data) << name;
    EXPECT_GE(w.data->data(), begin) << name << ": a view, not a copy";
    EXPECT_LE(w.data->data() + w.data->size(), end) << name;
    EXPECT_EQ((w.data->data() - begin) % 64, 0) << name;
  }
  bytes.reset();
  EXPECT_FALSE(watch.expired()) << "the weights keep the plan's bytes alive";
  auto x = testing::random_tensor(DataType::kF32, {3, 4}, 12);
  auto a = run_plan(plan, x), b = run_plan(viewed, x);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].nbytes(), b[i].nbytes());
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].nbytes()), 0);
  }
  viewed = Plan{};
  EXPECT_TRUE(watch.expired());
}

TEST(Plan, FileRoundTripAndMissingFile) {
  Plan plan = build(small_network(), BuilderConfig{});
  const std::string path = ::testing::TempDir() + "/small.plan";
  save_plan(plan, path);
  Plan loaded = load_plan(path);
  EXPECT_EQ(loaded.network.layers().size(), plan.network.layers().size());
  EXPECT_THROW(load_plan("/nonexistent/dir/x.plan"), InvalidArgument);
}

TEST(Plan, WeightlessPlanLoadsButRefusesToRun) {
  Plan plan = build(small_network(), BuilderConfig{});
  const auto full = serialize_plan(plan), light = serialize_plan(plan, false);
  EXPECT_LT(light.size(), full.size());
  Plan loaded = deserialize_plan(light.data(), light.size());
  try {
    run_plan(loaded, testing::random_tensor(DataType::kF32, {2, 4}, 1));
    FAIL() << "ran without weights";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(e.message().find("stripped"), std::string::npos) << e.message();
  }
}

TEST(Plan, CorruptionIsRejectedNamingTheCheck) {
  const auto good = serialize_plan(build(small_network(), BuilderConfig{}));
  auto bad = good;
  bad[0] = 'X';
  EXPECT_NE(expect_corrupt(bad).find("bad magic"), std::string::npos);

  bad = good;
  bad[8] = 99;  // format version 99
  EXPECT_NE(expect_corrupt(bad).find("format version 99 is newer"), std::string::npos);

  for (size_t cut : {size_t{0}, size_t{5}, size_t{20}, good.size() / 2, good.size() - 1}) {
    std::vector<uint8_t> truncated(good.begin(), good.begin() + static_cast<long>(cut));
    EXPECT_FALSE(expect_corrupt(truncated).empty()) << "truncated at " << cut;
  }
  // Flipping any byte after the header is caught (by the checksum, or a field check).
  for (size_t i = 12; i < good.size(); i += std::max<size_t>(1, good.size() / 97)) {
    bad = good;
    bad[i] ^= 0x5a;
    EXPECT_FALSE(expect_corrupt(bad).empty()) << "flipped byte " << i;
  }
  bad = good;
  bad[good.size() / 2] ^= 1;
  EXPECT_NE(expect_corrupt(bad).find("checksum"), std::string::npos);
  EXPECT_NE(expect_corrupt({}).find("too short"), std::string::npos);
}

TEST(Plan, LayerThatDisagreesWithItsTensorsIsRejected) {
  // A structurally valid plan (good checksum) whose layer output is stored with a wrong shape.
  Plan plan = build(small_network(), BuilderConfig{});
  Network& net = plan.network;
  net.mutable_tensor(net.outputs()[1]).shape = {kDynamic, 5};
  const auto bytes = serialize_plan(plan);
  EXPECT_NE(expect_corrupt(bytes).find("is stored as"), std::string::npos);
}

}  // namespace
}  // namespace kiln::engine
