// kiln-run as a user runs it: runs a saved plan, reports latency; bad plans and flags exit 2.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "engine/builder.h"
#include "engine/cuda/backend.h"
#include "engine/plan.h"
#include "harness/process.h"
#include "kiln_test_paths.h"

namespace kiln {
namespace {

using namespace engine;

std::string save_small_plan() {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 3}, Profile{{1, 3}, {2, 3}, {4, 3}});
  net.mark_output(net.add("relu", ActivationParams{ActivationKind::kRelu}, {x}), "y");
  const std::string path = testing::write_temp_file("small.plan", "");
  save_plan(build(net, BuilderConfig{}), path);
  return path;
}

TEST(KilnRun, RunsAPlanAndReportsLatency) {
  auto r = testing::run_process(
      {KILN_RUN_PATH, save_small_plan(), "--shapes", "x:4x3", "--iterations", "5", "--profile"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("input x: f32[4, 3]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("output y: f32[4, 3] min 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("latency ms over 5 runs: min"), std::string::npos);
  EXPECT_NE(r.out.find("relu"), std::string::npos);  // the profile names the layer
}

// --warmup-shapes runs at other shapes first (what a new shape then costs): the timed run is at
// --shapes and answers as a plain run; a warm-up shape outside the profile or of an unknown input
// is the same clear error as in --shapes.
TEST(KilnRun, WarmsUpAtOtherShapesFirst) {
  const std::string plan = save_small_plan();
  auto r = testing::run_process({KILN_RUN_PATH, plan, "--warmup-shapes", "x:1x3;x:4x3", "--shapes",
                                 "x:2x3", "--warmup", "0", "--iterations", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("input x: f32[2, 3]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("output y: f32[2, 3] min 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("latency ms over 1 runs"), std::string::npos) << r.out;
  auto outside = testing::run_process({KILN_RUN_PATH, plan, "--warmup-shapes", "x:1x3;x:9x3"});
  EXPECT_EQ(outside.exit_code, 2);
  EXPECT_NE(outside.err.find("outside the profile"), std::string::npos) << outside.err;
  auto unknown = testing::run_process({KILN_RUN_PATH, plan, "--warmup-shapes", "nope:1x3"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("no input `nope`"), std::string::npos) << unknown.err;
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Save here, load and run in a fresh process, and compare with a run here: bit-identical.
TEST(KilnRun, PlanRunInAFreshProcessIsBitIdentical) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 5});
  auto w = net.add_constant(
      "w", Weights::from_floats({5, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  auto m = net.add("mm", MatMulParams{}, {x, w});
  auto s = net.add("soft", SoftmaxParams{-1, false}, {m});
  net.mark_output(net.add("gelu", ActivationParams{ActivationKind::kGelu}, {s}), "y");
  Plan plan = build(net, BuilderConfig{});
  const std::string path = testing::write_temp_file("fresh.plan", "");
  save_plan(plan, path);
  const std::string dir = path.substr(0, path.rfind('/'));
  auto r = testing::run_process({KILN_RUN_PATH, path, "--iterations", "1", "--dump", dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const auto input_bytes = read_bytes(dir + "/input0.bin");
  ASSERT_EQ(input_bytes.size(), 2u * 5 * 4);
  HostTensor in(DataType::kF32, {2, 5});
  std::memcpy(in.data(), input_bytes.data(), input_bytes.size());
  ExecutionContext ctx(std::make_shared<const Engine>(plan.network));
  const HostTensor here = ctx.run({in})[0];
  const auto there = read_bytes(dir + "/output0.bin");
  ASSERT_EQ(there.size(), here.nbytes());
  EXPECT_EQ(std::memcmp(there.data(), here.data(), here.nbytes()), 0);
}

// --inspect prints a plan's layers before the engine is made: a cuda plan built without a device
// (cuda_arch=90) is inspected on a machine without one, and the tool says it did only that.
TEST(KilnRun, InspectsACudaPlanWithoutADevice) {
  if (!cuda::built()) GTEST_SKIP() << "this build has no CUDA backend";
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is here: kiln-run would run it";
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 8});
  auto w = net.add_constant("w", Weights::from_floats({8, 4}, std::vector<float>(32, 0.5f)));
  net.mark_output(net.add("mm", MatMulParams{}, {x, w}), "y");
  BuilderConfig config;
  config.device = "cuda";
  apply_switch(config, "cuda_arch=90");
  const std::string path = testing::write_temp_file("cuda.plan", "");
  save_plan(build(net, config), path);
  auto r = testing::run_process({KILN_RUN_PATH, path, "--inspect"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["target"], "cuda");
  EXPECT_EQ(j["summary"]["layers"], j["layers"].size());
  bool named = false;
  for (const auto& l : j["layers"]) named = named || l["name"] == "mm";
  EXPECT_TRUE(named) << r.out;
  EXPECT_NE(r.err.find("inspected only"), std::string::npos) << r.err;
  // Without --inspect the same plan is the device error it always was.
  auto run = testing::run_process({KILN_RUN_PATH, path});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("no CUDA device"), std::string::npos) << run.err;
}

TEST(KilnRun, BadPlansShapesAndFlagsExit2) {
  const std::string junk = testing::write_temp_file("junk.plan", "not a plan at all, clearly");
  auto bad = testing::run_process({KILN_RUN_PATH, junk});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad magic"), std::string::npos) << bad.err;
  const std::string plan = save_small_plan();
  auto outside = testing::run_process({KILN_RUN_PATH, plan, "--shapes", "x:9x3"});
  EXPECT_EQ(outside.exit_code, 2);
  EXPECT_NE(outside.err.find("outside the profile"), std::string::npos) << outside.err;
  auto unknown = testing::run_process({KILN_RUN_PATH, plan, "--shapes", "nope:1x3"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("no input `nope`"), std::string::npos) << unknown.err;
  EXPECT_EQ(testing::run_process({KILN_RUN_PATH, plan, "--shapes", "x:1xq"}).exit_code, 2);
  EXPECT_EQ(testing::run_process({KILN_RUN_PATH, plan, "--iterations", "0"}).exit_code, 2);
  EXPECT_EQ(testing::run_process({KILN_RUN_PATH, "/nonexistent.plan"}).exit_code, 2);
}

}  // namespace
}  // namespace kiln
