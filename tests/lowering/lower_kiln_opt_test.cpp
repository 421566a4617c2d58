// kiln-opt --lower on a saved module goes through lower_module, with --torch-executed-module.
#include <gtest/gtest.h>

#include "harness/process.h"
#include "kiln_test_paths.h"

namespace kiln {
namespace {

const std::string kResnet = std::string(KILN_TEST_MODELS_DIR) + "/resnet18.ts";

TEST(LowerKilnOpt, LowersASavedModuleByFreezingIt) {
  auto r = testing::run_process({KILN_OPT_PATH, kResnet, "--lower"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("prim::GetAttr"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("prim::CallMethod"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("kiln_torch_executed"), std::string::npos) << r.out;
  // Traced convolutions are written as conv2d, with their batch norms folded in.
  EXPECT_NE(r.out.find("aten::conv2d"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("aten::batch_norm"), std::string::npos) << r.out;
}

TEST(LowerKilnOpt, MarksTorchExecutedModules) {
  auto r = testing::run_process({KILN_OPT_PATH, kResnet, "--lower", "--torch-executed-module",
                                 "BasicBlock", "--torch-executed-module", "NoSuchModule"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("kiln_torch_executed=1"), std::string::npos) << r.out;
}

TEST(LowerKilnOpt, SinglePassOnASavedModuleStillFreezes) {
  auto r = testing::run_process({KILN_OPT_PATH, kResnet, "--pass", "remove_dropout"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("prim::GetAttr"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln
