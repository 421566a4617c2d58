// kiln-opt as a user runs it: prints graphs back, fails on bad input with one line and exit 2.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "harness/process.h"
#include "kiln_test_paths.h"

namespace kiln {
namespace {

const std::string kLgamma = std::string(KILN_TEST_DATA_DIR) + "/lgamma.ir";

TEST(KilnOpt, PrintsTheLgammaGraphBack) {
  auto r = testing::run_process({KILN_OPT_PATH, kLgamma});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  // What it prints parses again to the same graph.
  auto reparsed = testing::parse(r.out);
  auto original =
      testing::parse(testing::run_process({KILN_OPT_PATH, kLgamma}).out);  // stable across runs
  std::ostringstream a, b;
  a << *reparsed;
  b << *original;
  EXPECT_EQ(a.str(), b.str());
  EXPECT_TRUE(testing::file_check(R"(
    CHECK: graph(%x : Tensor,
    CHECK-NEXT: %y : Tensor):
    CHECK: aten::add(%x, %y
    CHECK: aten::lgamma(%x)
    CHECK: aten::mul(%x, %y)
    CHECK: aten::lgamma(%y)
    CHECK: aten::div(%x, %y)
    CHECK: aten::lgamma(%div)
    CHECK: prim::ListConstruct(%x_lgamma, %y_lgamma, %div_lgamma, %add, %mul)
    CHECK: aten::cat
    CHECK: return)",
                                  *reparsed));
  auto values = testing::random_inputs({{2, 3}, {2, 3}});
  for (auto& v : values) v = v.toTensor().abs() + 0.5;
  EXPECT_TRUE(testing::same_values(*testing::parse(r.out), *reparsed, values));
}

TEST(KilnOpt, MalformedIrIsOneLineWithPositionAndExit2) {
  const std::string path =
      testing::write_temp_file("malformed.ir",
                               "graph(%x : Tensor):\n  %1 : int = prim::Constant[value=1]()\n"
                               "  %2 : Tensor = aten::add(%x, %x %1)\n  return (%2)\n");
  auto r = testing::run_process({KILN_OPT_PATH, path});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "kiln-opt: error: " + path + ":3:34: expected ) but found '%'\n");
}

TEST(KilnOpt, BadFlagsAndMissingFilesExit2) {
  auto missing = testing::run_process({KILN_OPT_PATH, "/nonexistent.ir"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/nonexistent.ir: cannot open file"), std::string::npos)
      << missing.err;
  auto bad_flag = testing::run_process({KILN_OPT_PATH, kLgamma, "--no-such-flag"});
  EXPECT_EQ(bad_flag.exit_code, 2);
  EXPECT_NE(bad_flag.err.find("--no-such-flag"), std::string::npos) << bad_flag.err;
  auto bad_pass = testing::run_process({KILN_OPT_PATH, kLgamma, "--pass", "nope"});
  EXPECT_EQ(bad_pass.exit_code, 2);
  EXPECT_NE(bad_pass.err.find("unknown pass `nope`"), std::string::npos) << bad_pass.err;
  auto bad_level = testing::run_process({KILN_OPT_PATH, kLgamma, "--log-level", "loud"});
  EXPECT_EQ(bad_level.exit_code, 2);
}

TEST(KilnOpt, PrintAfterAllShowsEachPass) {
  const std::string path = testing::write_temp_file(
      "dead.ir", "graph(%x : Tensor):\n  %d : Tensor = aten::tanh(%x)\n  return (%x)\n");
  auto r = testing::run_process({KILN_OPT_PATH, path, "--lower", "--print-after-all"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("// after eliminate_dead_code\ngraph(%x : Tensor):\n  return (%x)"),
            std::string::npos)
      << r.out;
}

TEST(KilnOpt, ReadsASavedModule) {
  auto r =
      testing::run_process({KILN_OPT_PATH, std::string(KILN_TEST_MODELS_DIR) + "/resnet18.ts"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("prim::CallMethod"), std::string::npos);
  EXPECT_NE(r.out.find("prim::GetAttr"), std::string::npos);
}

TEST(KilnOpt, ReadsAnExportedProgram) {
  // Core ATen in, the forms kiln converts out: the lowering folds the batch norms into the
  // convolutions, and --support sees every op supported.
  const std::string pt2 = std::string(KILN_TEST_MODELS_DIR) + "/resnet18.core.pt2";
  auto r = testing::run_process({KILN_OPT_PATH, pt2});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("aten::_native_batch_norm_legit_no_training"), std::string::npos);
  r = testing::run_process({KILN_OPT_PATH, pt2, "--lower"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("batch_norm"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("aten::conv2d"), std::string::npos) << r.out;
  r = testing::run_process({KILN_OPT_PATH, pt2, "--support"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("52/52 ops supported by the engine"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln
