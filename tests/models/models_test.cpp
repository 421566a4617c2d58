// The test models: each loads in C++, verifies, and reproduces the outputs Python recorded.
#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <fstream>
#include <iterator>

#include "harness/ir_testing.h"
#include "harness/test_models.h"
#include "ir/graph_io.h"
#include "ir/verifier.h"
#include "kiln_test_paths.h"

namespace kiln {
namespace {

class TestModel : public ::testing::TestWithParam<std::string> {};

TEST_P(TestModel, LoadsVerifiesAndMatchesPython) {
  const std::string base = std::string(KILN_TEST_MODELS_DIR) + "/" + GetParam();
  auto loaded = ir::load_graph_file(base + ".ts");
  ASSERT_TRUE(loaded.module.has_value());
  EXPECT_NO_THROW(ir::verify_graph(*loaded.graph));

  const testing::TestModel io = testing::load_test_model(GetParam());
  const auto& args = io.args;
  const torch::jit::IValue& expected = io.expected;

  torch::NoGradGuard no_grad;
  loaded.module->eval();
  auto actual = loaded.module->forward(std::vector<torch::jit::IValue>(args.begin(), args.end()));
  EXPECT_TRUE(testing::all_close(actual, expected, 1e-4, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Models, TestModel,
                         ::testing::Values("resnet18", "mobilenet_v2", "vit_tiny", "text_encoder",
                                           "lgamma", "control_flow", "tuple_list",
                                           "transformer_fast_path", "vit_tiny_fast_path"));

}  // namespace
}  // namespace kiln
