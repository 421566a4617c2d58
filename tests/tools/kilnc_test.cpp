// kilnc as a user runs it: compiles a model, writes the report, the compiled module runs in a
// fresh process; --refit; --check-method-support and --save-engine; bad flags and specs exit 2
// naming them.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "harness/process.h"
#include "kiln_test_paths.h"

namespace kiln {
namespace {

std::string model(const std::string& name) {
  return std::string(KILN_TEST_MODELS_DIR) + "/" + name + ".ts";
}

TEST(Kilnc, CompilesWritesAReportAndTheModuleRuns) {
  const std::string out = testing::write_temp_file("kilnc_resnet18.ts", "");
  const std::string report = testing::write_temp_file("kilnc_resnet18.json", "");
  auto r = testing::run_process({KILNC_PATH, model("resnet18"), out,
                                 "[(1,3,64,64);(2,3,64,64);(4,3,64,64)]", "--report", report,
                                 "--require-full-compilation"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("kilnc: build: engine 1 of 1"), std::string::npos) << r.err;  // progress
  EXPECT_NE(r.out.find("segments: 1 (1 engine, 0 torch)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("% in engines"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote " + out), std::string::npos) << r.out;
  std::ifstream in(report);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["segments"].size(), 1u);
  EXPECT_EQ(j["segments"][0]["target"], "engine");
  EXPECT_EQ(j["segments"][0]["input_shapes"][0], "(2,3,64,64)");
  EXPECT_EQ(j["torch_ops"], 0);
  // resnet18: 20 convolutions (batch norms folded in), relus, adds, pooling, linear.
  EXPECT_GT(j["engine_ops"].get<int>(), 40);
  std::vector<std::string> phases;
  for (const auto& p : j["phases"]) phases.push_back(p["phase"]);
  EXPECT_EQ(phases, (std::vector<std::string>{"lower", "partition", "shape analysis", "convert",
                                              "stitch"}));
  // The compiled file loads and runs where the runtime library is linked.
  const std::string script =
      testing::write_temp_file("kilnc_run.py",
                               "import sys, torch\n"
                               "torch.ops.load_library(sys.argv[1])\n"
                               "m = torch.jit.load(sys.argv[2])\n"
                               "print(tuple(m(torch.randn(3, 3, 64, 64)).shape))\n");
  auto py = testing::run_process({KILN_PYTHON_PATH, script, KILN_RUNTIME_LIB_PATH, out});
  ASSERT_EQ(py.exit_code, 0) << py.err;
  EXPECT_EQ(py.out, "(3, 10)\n");
}

TEST(Kilnc, CompilesAnExportedProgramWithTheShapesOfItsExport) {
  // No input spec: the export's dynamic batch (1..4, example 2) gives min, opt and max.
  const std::string pt2 = std::string(KILN_TEST_MODELS_DIR) + "/resnet18.pt2";
  const std::string out = testing::write_temp_file("kilnc_resnet18_pt2.ts", "");
  const std::string report = testing::write_temp_file("kilnc_resnet18_pt2.json", "");
  auto r = testing::run_process({KILNC_PATH, pt2, out, "--report", report});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("segments: 1 (1 engine, 0 torch)"), std::string::npos) << r.out;
  std::ifstream in(report);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["segments"].size(), 1u);
  EXPECT_EQ(j["segments"][0]["input_shapes"][0], "(2,3,64,64)");
  // A spec given on the command line wins over the export's (--assume-dynamic-shape-support
  // changes nothing for static shapes).
  r = testing::run_process(
      {KILNC_PATH, pt2, out, "(3,3,64,64)", "--report", report, "--assume-dynamic-shape-support"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in3(report);
  EXPECT_EQ(nlohmann::json::parse(in3)["segments"][0]["input_shapes"][0], "(3,3,64,64)");
  // A bad archive exits 2 with the reader's message.
  r = testing::run_process(
      {KILNC_PATH, std::string(KILN_TEST_MODELS_DIR) + "/bad_schema.pt2", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("export schema version 99."), std::string::npos) << r.err;
}

TEST(Kilnc, RefitGivesACompiledModuleNewWeights) {
  const std::string compiled = testing::write_temp_file("kilnc_refit_a.ts", "");
  const std::string tuned = testing::write_temp_file("kilnc_refit_tuned.ts", "");
  const std::string out = testing::write_temp_file("kilnc_refit_b.ts", "");
  const std::string report = testing::write_temp_file("kilnc_refit.json", "");
  auto r = testing::run_process(
      {KILNC_PATH, model("resnet18"), compiled, "(2,3,64,64)", "--refittable", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The same architecture with new weights, as a fine-tune leaves it.
  const std::string tune = testing::write_temp_file(
      "kilnc_tune.py",
      "import sys, torch\n"
      "m = torch.jit.load(sys.argv[1])\n"
      "torch.manual_seed(3)\n"
      "with torch.no_grad():\n"
      "    for t in list(m.parameters()) + [b for b in m.buffers() if b.is_floating_point()]:\n"
      "        t.mul_(torch.rand_like(t) * 0.4 + 0.8)\n"
      "m.save(sys.argv[2])\n");
  auto py = testing::run_process({KILN_PYTHON_PATH, tune, model("resnet18"), tuned});
  ASSERT_EQ(py.exit_code, 0) << py.err;
  r = testing::run_process({KILNC_PATH, "--refit", tuned, compiled, out, "--report", report});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("refit in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("refit " + compiled + " with " + tuned), std::string::npos) << r.out;
  std::ifstream in(report);
  EXPECT_EQ(nlohmann::json::parse(in)["segments"][0]["plan"], "refit");
  // The refit module answers as the tuned model does, the compiled one as the original.
  const std::string check =
      testing::write_temp_file("kilnc_refit_check.py",
                               "import sys, torch\n"
                               "torch.ops.load_library(sys.argv[1])\n"
                               "x = torch.randn(2, 3, 64, 64)\n"
                               "with torch.no_grad():\n"
                               "    want = torch.jit.load(sys.argv[3])(x)\n"
                               "    for path in sys.argv[4:]:\n"
                               "        d = (torch.jit.load(path)(x) - want).abs().max().item()\n"
                               "        print(d <= 1e-4 * want.abs().max().item() + 1e-5)\n");
  py = testing::run_process(
      {KILN_PYTHON_PATH, check, KILN_RUNTIME_LIB_PATH, tuned, tuned, out, compiled});
  ASSERT_EQ(py.exit_code, 0) << py.err;
  EXPECT_EQ(py.out, "True\nFalse\n");
  // Another architecture, input specs with --refit, a module compiled without --refittable.
  r = testing::run_process({KILNC_PATH, "--refit", model("mobilenet_v2"), compiled, out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("kilnc: error: invalid argument: refit: "), std::string::npos) << r.err;
  r = testing::run_process({KILNC_PATH, "--refit", tuned, model("resnet18"), out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no `kiln_spec` attribute"), std::string::npos) << r.err;
  r = testing::run_process({KILNC_PATH, "--refit", tuned, report, out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not a TorchScript module"), std::string::npos) << r.err;
  r = testing::run_process({KILNC_PATH, "--refit", tuned, compiled, out, "(2,3,64,64)"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("carries its input specs"), std::string::npos) << r.err;
  r = testing::run_process({KILNC_PATH, model("resnet18"), compiled, "(2,3,64,64)", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = testing::run_process({KILNC_PATH, "--refit", tuned, compiled, out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("without refittable"), std::string::npos) << r.err;
}

TEST(Kilnc, CheckMethodSupportAndSaveEngine) {
  auto r = testing::run_process({KILNC_PATH, model("lgamma"), "--check-method-support", "forward"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("aten::lgamma"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("method `forward` is not fully supported"), std::string::npos) << r.out;
  r = testing::run_process({KILNC_PATH, model("resnet18"), "--check-method-support", "forward"});
  EXPECT_EQ(r.exit_code, 0) << r.out;

  const std::string plan = testing::write_temp_file("kilnc_resnet18.plan", "");
  r = testing::run_process(
      {KILNC_PATH, model("resnet18"), plan, "(1,3,64,64)", "--save-engine", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto run = testing::run_process({KILN_RUN_PATH, plan, "--iterations", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("f32[1, 10]"), std::string::npos) << run.out;
}

TEST(Kilnc, BackendsAndResourcePartitioningFromFlags) {
  const std::string out = testing::write_temp_file("kilnc_backends.ts", "");
  const std::string report = testing::write_temp_file("kilnc_backends.json", "");
  auto r = testing::run_process({KILNC_PATH, model("lgamma"), out, "(2,3)", "(2,3)",
                                 "--min-block-size", "1", "--backend-priority", "cpu",
                                 "--backend-ops", "cpu=aten::add,aten::cat", "--report", report});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(report);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["segments"].size(), 2u) << j.dump(1);
  EXPECT_EQ(j["segments"][0]["target"], "torch");
  EXPECT_EQ(j["segments"][1]["device"], "cpu");
  EXPECT_NE(
      j["segments"][0]["fallback_reason"].get<std::string>().find("not in backend_support_map x2"),
      std::string::npos);
  // A budget of one byte: every op with weights is an engine of its own.
  r = testing::run_process({KILNC_PATH, model("resnet18"), out, "(1,3,64,64)",
                            "--cpu-memory-budget", "1", "--report", report});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in2(report);
  const auto k = nlohmann::json::parse(in2);
  size_t engines = 0;
  for (const auto& s : k["segments"]) engines += s["target"] == "engine";
  EXPECT_GE(engines, 10u) << r.out;
}

TEST(Kilnc, BadFlagsAndSpecsExit2NamingThem) {
  const std::string out = testing::write_temp_file("kilnc_bad.ts", "");
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{model("resnet18"), out, "(1,3,64"}, "input spec `(1,3,64`"},
      {{model("resnet18"), out, "(1,3,64,64)@f64"}, "unknown dtype `f64`"},
      {{model("resnet18"), out, "(1,3,64,64)", "--device", "tpu"}, "unknown device `tpu`"},
      {{model("resnet18"), out, "(1,3,64,64)", "-p", "i8"}, "--enabled-precision"},
      {{model("resnet18"), out, "(1,3,64,64)", "--min-block-size", "0"}, "--min-block-size"},
      {{model("resnet18"), out, "(1,3,64,64)", "(1,3,64,64)"}, "forward takes 1 argument"},
      {{model("resnet18"), out}, "inputs"},
      {{model("lgamma"), out, "(2,3)", "(2,3)", "--require-full-compilation"}, "aten::lgamma"},
      {{"/nonexistent.ts", out, "(1)"}, "/nonexistent.ts: cannot open"},
      {{KILN_TEST_DATA_DIR "/lgamma.ir", out, "(1)"}, "not a TorchScript module"},
      {{model("resnet18"), out, "(1,3,64,64)", "--bogus"}, "--bogus"},
      {{model("resnet18"), out, "(1,3,64,64)", "--backend-ops", "cpu"},
       "--backend-ops: `cpu` is not BACKEND=OP[,OP...]"},
      {{model("resnet18"), out, "(1,3,64,64)", "--backend-priority", "tpu"},
       "unknown backend `tpu`"},
      {{model("resnet18"), out, "(1,3,64,64)", "--backend-ops", "cpu=aten::relu"},
       "backend `cpu` is not in backend_priority"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {KILNC_PATH};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    auto r = testing::run_process(argv);
    EXPECT_EQ(r.exit_code, 2) << c.expected << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace kiln
