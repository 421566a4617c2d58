// The model zoo: each torchvision architecture (and the test models without fallback) compiles
// with require_full_compilation into one engine, matches PyTorch at batch 1 and 4, and runs after
// save and load in fresh C++ and Python processes (matches_model_reference: within the issue's
// tolerance of PyTorch's answer, or as close to the fp64 answer as PyTorch's fp32 one). Each
// compiles once with a dynamic batch (1..4), also those whose traced shape arithmetic reads the
// batch (vit_tiny's class token expanded to x.size(0), shufflenet's channel shuffle views).
#include <gtest/gtest.h>

#include "compiler/compiler_testing.h"
#include "harness/test_models.h"

namespace kiln {
namespace {

class Zoo : public ::testing::TestWithParam<std::string> {};

TEST_P(Zoo, CompilesIntoOneEngineAndMatchesAtBatch1And4) {
  const std::string name = GetParam();
  testing::TestModel m = testing::load_test_model(name);
  m.module.eval();
  ASSERT_EQ(m.args.size(), 1u);
  const at::Tensor example = m.args[0].toTensor();
  std::vector<int64_t> one = example.sizes().vec(), four = one;
  one[0] = 1;
  four[0] = 4;
  const DType dtype = example.scalar_type() == at::kLong ? DType::kI64 : DType::kF32;

  auto input_of = [&](int64_t batch) {
    std::vector<int64_t> shape = example.sizes().vec();
    shape[0] = batch;
    if (dtype == DType::kI64) return at::randint(0, 100, shape, at::kLong);
    return at::randn(shape);
  };
  CompileSpec spec;
  spec.inputs = {Input(one, four, four, dtype)};
  spec.require_full_compilation = true;
  CompileReport report;
  torch::NoGradGuard no_grad;
  torch::jit::Module compiled = compile(m.module, spec, &report);
  EXPECT_EQ(testing::count_segments(report, "engine"), 1u) << report.summary();
  EXPECT_EQ(report.torch_ops, 0u) << report.summary();
  for (int64_t batch : {1, 4}) {
    const at::Tensor x = input_of(batch);
    EXPECT_TRUE(testing::matches_model_reference(compiled.forward({x}), m.module, {x}))
        << name << " at batch " << batch;
  }
  const at::Tensor x4 = input_of(4), x1 = input_of(1);
  EXPECT_TRUE(testing::matches_model_reference(
      testing::run_in_fresh_cpp_process(compiled, {x4}, "zoo_" + name), m.module, {x4}))
      << name << ": fresh C++ process";
  EXPECT_TRUE(testing::matches_model_reference(
      testing::run_in_fresh_python_process(compiled, {x1}, "zoo_" + name), m.module, {x1}))
      << name << ": fresh Python process";
}

INSTANTIATE_TEST_SUITE_P(
    Models, Zoo,
    ::testing::Values("resnet18", "mobilenet_v2", "vit_tiny", "text_encoder", "zoo_resnet50",
                      "zoo_mobilenet_v3_small", "zoo_efficientnet_b0", "zoo_regnet_y_400mf",
                      "zoo_convnext", "zoo_densenet", "zoo_squeezenet1_1", "zoo_shufflenet_v2",
                      "zoo_mnasnet", "zoo_googlenet", "zoo_swin", "transformer_fast_path",
                      "vit_tiny_fast_path"),
    [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace kiln
