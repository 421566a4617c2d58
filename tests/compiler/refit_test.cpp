// Refit (issue #33): a module compiled refittable takes the weights of the same architecture with
// new ones, without rebuilding its engines, and then answers as a fresh compile of the new weights
// does, through save and load too; weights that do not fit are refused with the engine and the
// weight named, and nothing changes then.
#include <gtest/gtest.h>

#include <filesystem>

#include "compiler/compiler_testing.h"
#include "compiler/spec_json.h"
#include "harness/process.h"
#include "harness/test_models.h"
#include "kiln/kiln.h"
#include "util/errors.h"

namespace kiln {
namespace {

struct Compiled {
  testing::TestModel model;
  CompileSpec spec;
  std::vector<c10::IValue> x;  // new arguments of the test model's shapes and dtypes
};

Compiled setup(const std::string& name) {
  Compiled c{testing::load_test_model(name), {}, {}};
  c.model.module.eval();
  torch::manual_seed(0);  // the same inputs every run
  for (const c10::IValue& arg : c.model.args) {
    const at::Tensor example = arg.toTensor();
    const bool ids = example.scalar_type() == at::kLong;
    c.spec.inputs.push_back(Input(example.sizes().vec(), ids ? DType::kI64 : DType::kF32));
    c.x.push_back(ids ? at::randint(0, 100, example.sizes(), at::kLong)
                      : at::randn(example.sizes()));
  }
  c.spec.refittable = true;
  return c;
}

double max_diff(const c10::IValue& a, const c10::IValue& b) {
  return (a.toTensor() - b.toTensor()).abs().max().item<double>();
}

class Refit : public ::testing::TestWithParam<std::string> {};

TEST_P(Refit, AnswersAsAFreshCompileOfTheNewWeights) {
  Compiled c = setup(GetParam());
  torch::NoGradGuard no_grad;
  torch::jit::Module tuned = testing::with_new_weights(c.model.module, 17);
  CompileReport compiled_report, refit_report, fresh_report;
  torch::jit::Module compiled = compile(c.model.module, c.spec, &compiled_report);
  torch::jit::Module refitted = refit(compiled, tuned, &refit_report);
  torch::jit::Module fresh = compile(tuned, c.spec, &fresh_report);

  const c10::IValue want = tuned.forward(c.x);
  const c10::IValue before = c.model.module.forward(c.x);
  // The weights changed enough to tell apart, the compiled module kept its own, and the refit
  // engines run the plans a fresh compile builds: the same answers to the bit.
  ASSERT_GT(max_diff(want, before), 1e-3);
  EXPECT_TRUE(testing::matches_reference(compiled.forward(c.x), before));
  // Against eager, within 1e-3 of the output's scale: the perturbed weights make deep models'
  // outputs large (zoo_efficientnet_b0: ~1000), and the engine's summation order differs from
  // libtorch's; the old weights' answers lie far outside that.
  const double scale = max_diff(want, at::zeros_like(want.toTensor()));
  const double bound = 1e-3 * scale + 1e-5;
  EXPECT_LE(max_diff(refitted.forward(c.x), want), bound) << GetParam();
  EXPECT_GT(max_diff(want, before), 10 * bound) << GetParam();
  EXPECT_EQ(max_diff(refitted.forward(c.x), fresh.forward(c.x)), 0.0) << GetParam();
  ASSERT_EQ(refit_report.segments.size(), compiled_report.segments.size());
  for (const SegmentReport& s : refit_report.segments) {
    if (s.target == "engine") {
      EXPECT_EQ(s.plan, "refit") << s.engine_name;
    }
  }
  for (const SegmentReport& s : compiled_report.segments) {
    if (s.target == "engine") {
      EXPECT_EQ(s.plan, "built") << s.engine_name;
    }
  }
  EXPECT_NE(refit_report.summary().find("refit in"), std::string::npos);

  // A saved and loaded compiled module refits the same, and its refit saves and loads.
  const std::string path = testing::write_temp_file("refit_" + GetParam() + ".kiln.ts", "");
  compiled.save(path);
  torch::jit::Module reloaded = refit(torch::jit::load(path), tuned);
  reloaded.save(path);
  EXPECT_EQ(max_diff(torch::jit::load(path).forward(c.x), fresh.forward(c.x)), 0.0);
}

// Convolutions with batch norms, depthwise and squeeze-excitation blocks, attention (with a mask
// buffer), layer norms and embeddings.
INSTANTIATE_TEST_SUITE_P(Models, Refit,
                         ::testing::Values("resnet18", "mobilenet_v2", "vit_tiny", "text_encoder",
                                           "zoo_efficientnet_b0", "zoo_convnext", "zoo_swin"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(Refit, PyTorchSegmentsTakeTheNewWeightsToo) {
  torch::jit::Module m("M");
  m.register_parameter("w1", at::randn({8, 8}), false);
  m.register_parameter("w2", at::randn({8}), false);
  m.register_parameter("w3", at::randn({8, 8}), false);
  m.define(R"(
def forward(self, x):
    y = torch.relu(torch.matmul(x, self.w1))
    y = torch.lgamma(y + 1.0) * self.w2
    return torch.sigmoid(torch.matmul(y, self.w3))
)");
  m.eval();
  CompileSpec spec;
  spec.inputs = {Input({4, 8})};
  spec.min_block_size = 1;
  spec.refittable = true;
  torch::NoGradGuard no_grad;
  CompileReport report;
  torch::jit::Module compiled = compile(m, spec, &report);
  ASSERT_GE(testing::count_segments(report, "torch"), 1u) << report.summary();
  ASSERT_GE(testing::count_segments(report, "engine"), 2u) << report.summary();
  torch::jit::Module tuned = testing::with_new_weights(m, 5);
  const at::Tensor x = at::randn({4, 8});
  ASSERT_GT((tuned.forward({x}).toTensor() - m.forward({x}).toTensor()).abs().max().item<double>(),
            1e-3);
  EXPECT_TRUE(testing::matches_reference(refit(compiled, tuned).forward({x}), tuned.forward({x})));
}

TEST(Refit, WeightsThatDoNotFitAreRefusedNamingTheWeight) {
  Compiled c = setup("resnet18");
  torch::NoGradGuard no_grad;
  torch::jit::Module compiled = compile(c.model.module, c.spec);
  const at::Tensor before = compiled.forward(c.x).toTensor();

  // One weight of another shape: its name and both shapes.
  torch::jit::Module other = c.model.module.clone();
  other.attr("fc").toModule().register_parameter("weight", at::randn({7, 512}), false);
  other.attr("fc").toModule().register_parameter("bias", at::randn({7}), false);
  try {
    refit(compiled, other);
    ADD_FAILURE() << "refit took a weight of another shape";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("fc.weight"), std::string::npos) << what;
    EXPECT_NE(what.find("[7, 512]"), std::string::npos) << what;
    EXPECT_NE(what.find("engine"), std::string::npos) << what;
  }
  // Another architecture altogether.
  EXPECT_THROW(refit(compiled, testing::load_test_model("mobilenet_v2").module), InvalidArgument);
  // The compiled module is as it was.
  EXPECT_EQ((compiled.forward(c.x).toTensor() - before).abs().max().item<double>(), 0.0);
}

TEST(Refit, OnlyRefittableKilnModulesRefit) {
  Compiled c = setup("resnet18");
  torch::NoGradGuard no_grad;
  CompileSpec fixed = c.spec;
  fixed.refittable = false;
  torch::jit::Module compiled = compile(c.model.module, fixed);
  try {
    refit(compiled, c.model.module);
    ADD_FAILURE() << "refit took an engine built without refittable";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("without refittable"), std::string::npos) << e.what();
  }
  // Not made by kiln: no spec to partition the new module by.
  EXPECT_THROW(refit(c.model.module, c.model.module), InvalidArgument);
  // A spec attribute that is not one.
  torch::jit::Module forged = compile(c.model.module, c.spec);
  forged.setattr(compiler::kSpecAttribute, std::string("{\"version\": 1}"));
  EXPECT_THROW(refit(forged, c.model.module), CorruptInput);
}

TEST(Refit, TheSpecTravelsWithTheModule) {
  CompileSpec spec;
  spec.inputs = {Input({1, 3, 8, 8}, {2, 3, 8, 8}, {4, 3, 8, 8}, DType::kF16)};
  spec.inputs[0].format = TensorFormat::kChannelsLast;
  spec.enabled_precisions = {DType::kF32, DType::kF16};
  spec.min_block_size = 2;
  spec.torch_executed_ops = {"aten::relu"};
  spec.torch_executed_modules = {"M"};
  spec.require_full_compilation = true;
  spec.workspace_size = 1 << 20;
  spec.disable_tf32 = true;
  spec.exact_gelu = true;
  spec.switches = {"conv_layout=channels_first"};
  spec.refittable = true;
  spec.assume_dynamic_shape_support = true;
  const CompileSpec back = compiler::spec_from_json(compiler::spec_to_json(spec), "the spec");
  EXPECT_EQ(compiler::spec_to_json(back), compiler::spec_to_json(spec));
  EXPECT_EQ(back.inputs[0].max_shape, spec.inputs[0].max_shape);
  EXPECT_EQ(back.inputs[0].format, TensorFormat::kChannelsLast);
  EXPECT_EQ(back.torch_executed_ops, spec.torch_executed_ops);
  EXPECT_TRUE(back.refittable);
  EXPECT_TRUE(back.assume_dynamic_shape_support);
  // A spec saved before assume_dynamic_shape_support existed reads it as unset.
  std::string older = compiler::spec_to_json(spec);
  const std::string key = "\"assume_dynamic_shape_support\":true,";
  ASSERT_NE(older.find(key), std::string::npos) << older;
  older.erase(older.find(key), key.size());
  EXPECT_FALSE(compiler::spec_from_json(older, "the spec").assume_dynamic_shape_support);
  EXPECT_THROW(compiler::spec_from_json("not json", "the spec"), CorruptInput);
  EXPECT_THROW(compiler::spec_from_json("{\"version\": 2}", "the spec"), CorruptInput);
}

}  // namespace
}  // namespace kiln
