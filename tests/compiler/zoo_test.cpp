// The model zoo: each torchvision architecture (and the test models without fallback) compiles
// with require_full_compilation into one engine, matches PyTorch at batch 1 and 4, and runs after
// save and load in fresh C++ and Python processes. Most compile once with a dynamic batch (1..4);
// those whose traced shape arithmetic needs a static batch compile once per batch.
#include <gtest/gtest.h>

#include "compiler/compiler_testing.h"
#include "harness/test_models.h"

#include <map>

namespace kiln {
namespace {

struct ZooModel {
  std::string name;
  bool dynamic_batch = true;
};

void PrintTo(const ZooModel& m, std::ostream* os) {
  *os << m.name;
}

class Zoo : public ::testing::TestWithParam<ZooModel> {};

TEST_P(Zoo, CompilesIntoOneEngineAndMatchesAtBatch1And4) {
  const std::string name = GetParam().name;
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
  auto compile_for = [&](std::vector<int64_t> min, std::vector<int64_t> max) {
    CompileSpec spec;
    spec.inputs = {Input(min, max, max, dtype)};
    spec.require_full_compilation = true;
    CompileReport report;
    torch::jit::Module compiled = compile(m.module, spec, &report);
    EXPECT_EQ(testing::count_segments(report, "engine"), 1u) << report.summary();
    EXPECT_EQ(report.torch_ops, 0u) << report.summary();
    return compiled;
  };
  torch::NoGradGuard no_grad;
  std::map<int64_t, torch::jit::Module> by_batch;
  if (GetParam().dynamic_batch) {
    torch::jit::Module compiled = compile_for(one, four);
    by_batch.emplace(1, compiled);
    by_batch.emplace(4, compiled);
  } else {
    by_batch.emplace(1, compile_for(one, one));
    by_batch.emplace(4, compile_for(four, four));
  }
  for (auto& [batch, compiled] : by_batch) {
    const at::Tensor x = input_of(batch);
    EXPECT_TRUE(testing::matches_reference(compiled.forward({x}), m.module.forward({x})))
        << name << " at batch " << batch;
  }
  const at::Tensor x4 = input_of(4), x1 = input_of(1);
  EXPECT_TRUE(testing::matches_reference(
      testing::run_in_fresh_cpp_process(by_batch.at(4), {x4}, "zoo_" + name),
      m.module.forward({x4})))
      << name << ": fresh C++ process";
  EXPECT_TRUE(testing::matches_reference(
      testing::run_in_fresh_python_process(by_batch.at(1), {x1}, "zoo_" + name),
      m.module.forward({x1})))
      << name << ": fresh Python process";
}

INSTANTIATE_TEST_SUITE_P(
    Models, Zoo,
    ::testing::Values(ZooModel{"resnet18"}, ZooModel{"mobilenet_v2"}, ZooModel{"vit_tiny", false},
                      ZooModel{"text_encoder"}, ZooModel{"zoo_resnet50"},
                      ZooModel{"zoo_mobilenet_v3_small"}, ZooModel{"zoo_efficientnet_b0"},
                      ZooModel{"zoo_regnet_y_400mf"}, ZooModel{"zoo_convnext"},
                      ZooModel{"zoo_densenet"}, ZooModel{"zoo_squeezenet1_1"},
                      ZooModel{"zoo_shufflenet_v2", false}, ZooModel{"zoo_mnasnet"},
                      ZooModel{"zoo_googlenet"}, ZooModel{"zoo_swin"},
                      ZooModel{"transformer_fast_path"}, ZooModel{"vit_tiny_fast_path", false}),
    [](const ::testing::TestParamInfo<ZooModel>& info) { return info.param.name; });

}  // namespace
}  // namespace kiln
