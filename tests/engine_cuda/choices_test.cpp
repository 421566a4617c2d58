// Kernel choices (EngineTarget::choices): made while building at the profile points, kept in the
// plan, taken by a loaded engine's first calls there without asking cuDNN or cuBLASLt, shared by
// an engine's contexts, ignored where they were made with another device or libraries, and
// refused when a plan holds malformed ones.
#include <memory>
#include <vector>

#include "cuda_testing.h"
#include "engine/cuda/backend.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;

using cuda_testing::conv_gemm_network;

Plan cuda_plan(const Network& net, const std::vector<std::string>& switches = {}) {
  BuilderConfig config;
  config.device = "cuda";
  for (const std::string& s : switches) apply_switch(config, s);
  return build(net, config);
}

Plan round_trip(const Plan& plan) {
  const std::vector<uint8_t> bytes = serialize_plan(plan);
  return deserialize_plan(bytes.data(), bytes.size());
}

// The engine of `plan` run at every profile point and one shape between them, matching the CPU;
// returns how many algorithm searches the runs made.
int64_t searches_running(const Plan& plan, ExecutionContext* shared = nullptr) {
  ExecutionContext cpu(std::make_shared<const Engine>(build(conv_gemm_network(), {}).network));
  auto engine = std::make_shared<const Engine>(plan.network, plan.target);
  ExecutionContext own(engine);
  ExecutionContext& gpu = shared ? *shared : own;
  const int64_t before = cuda::algorithm_searches();
  uint64_t seed = 300;
  for (const Shape& shape : std::vector<Shape>{{1, 3, 4, 8}, {2, 3, 8, 8}, {8, 3, 16, 8}}) {
    const HostTensor x = random_tensor(DataType::kF32, shape, seed++);
    EXPECT_TRUE(testing::near(gpu.run({x})[0], testing::to_doubles(cpu.run({x})[0]), 2e-3, 1e-4))
        << shape_to_string(shape);
  }
  return cuda::algorithm_searches() - before;
}

// A plan built on its device holds the choices of its convolutions and GEMMs at the profile
// points; loaded, it runs there asking no heuristic and timing nothing, with the same answers.
TEST(CudaChoices, MadeWhileBuildingAreWhatALoadedPlansFirstCallsRun) {
  KILN_REQUIRE_GPU();
  BuildReport report;
  BuilderConfig config;
  config.device = "cuda";
  const Plan plan = build(conv_gemm_network(), config, &report);
  // Each operation at each of the three points: the convolution's, the GEMM's and the 1x1's.
  EXPECT_GE(plan.target.choices.size(), 6u);
  EXPECT_EQ(report.kernel_choices, static_cast<int>(plan.target.choices.size()));
  EXPECT_EQ(plan.target.choice_environment, cuda::choice_environment(0));
  const Plan loaded = round_trip(plan);
  ASSERT_EQ(loaded.target.choices.size(), plan.target.choices.size());
  for (size_t i = 0; i < plan.target.choices.size(); ++i) {
    EXPECT_EQ(loaded.target.choices[i].layer, plan.target.choices[i].layer);
    EXPECT_EQ(loaded.target.choices[i].key, plan.target.choices[i].key);
    EXPECT_EQ(loaded.target.choices[i].data, plan.target.choices[i].data);
  }
  EXPECT_EQ(searches_running(loaded), 0);

  // Without them the first calls at the profile points choose.
  const Plan unchosen = round_trip(cuda_plan(conv_gemm_network(), {"choose_at_build=off"}));
  EXPECT_TRUE(unchosen.target.choices.empty());
  EXPECT_TRUE(unchosen.target.choice_environment.empty());
  EXPECT_GT(searches_running(unchosen), 0);
}

// Choices made on another device or with other libraries are ignored (made again), not trusted.
TEST(CudaChoices, FromAnotherEnvironmentAreMadeAgain) {
  KILN_REQUIRE_GPU();
  Plan plan = cuda_plan(conv_gemm_network());
  ASSERT_FALSE(plan.target.choices.empty());
  plan.target.choice_environment = "another GPU sm_90, CUDA runtime 1, cuDNN 1, cuBLASLt 1";
  EXPECT_GT(searches_running(round_trip(plan)), 0);
  // Bytes no kernel wrote are as good as none: chosen again, still right.
  plan = cuda_plan(conv_gemm_network());
  for (KernelChoice& c : plan.target.choices) c.data.assign(3, 0xff);
  EXPECT_GT(searches_running(round_trip(plan)), 0);
}

// What one context of an engine chose, the others take: a second context's first calls at the
// same shapes choose nothing, and the engine hands its choices on (Engine::kernel_choices).
TEST(CudaChoices, SharedByAnEnginesContexts) {
  KILN_REQUIRE_GPU();
  const Plan plan = cuda_plan(conv_gemm_network(), {"choose_at_build=off"});
  auto engine = std::make_shared<const Engine>(plan.network, plan.target);
  ExecutionContext first(engine), second(engine);
  EXPECT_GT(searches_running(plan, &first), 0);
  EXPECT_EQ(searches_running(plan, &second), 0);
  EXPECT_GE(engine->kernel_choices().size(), 6u);
}

// No GPU needed: a plan built for an architecture without its device has no choices, and the
// plan format refuses malformed ones with an error that names them.
TEST(CudaChoices, PlansRefuseMalformedChoices) {
  BuilderConfig config;
  config.device = "cuda";
  apply_switch(config, "cuda_arch=87");
  Plan plan = build(conv_gemm_network(), config);
  EXPECT_TRUE(plan.target.choices.empty());
  plan.target.choice_environment = "a GPU";
  plan.target.choices = {{0, {1, 2, 3}, {4, 5}}, {2, {1, 2, 3}, {6}}, {2, {1, 2}, {7, 8, 9}}};
  const Plan loaded = round_trip(plan);
  ASSERT_EQ(loaded.target.choices.size(), 3u);
  EXPECT_EQ(loaded.target.choice_environment, "a GPU");
  EXPECT_EQ(loaded.target.choices[2].layer, 2u);
  EXPECT_EQ(loaded.target.choices[2].key, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(loaded.target.choices[2].data, (std::vector<uint8_t>{7, 8, 9}));

  const auto refused = [](const Plan& p, const std::string& says) {
    const std::vector<uint8_t> bytes = serialize_plan(p);
    try {
      deserialize_plan(bytes.data(), bytes.size());
      ADD_FAILURE() << "loaded a plan that " << says;
    } catch (const CorruptInput& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  Plan twice = plan;
  twice.target.choices.push_back(plan.target.choices[0]);
  refused(twice, "two kernel choices for one operation of layer 0");
  Plan past = plan;
  past.target.choices[1].layer = plan.network.layers().size();
  refused(past, "a kernel choice for layer " + std::to_string(plan.network.layers().size()));
  Plan huge = plan;
  huge.target.choices[0].data.assign(5000, 1);
  refused(huge, "a kernel choice of 5000 bytes");
  Plan on_cpu = plan;
  on_cpu.target.device = "cpu";
  on_cpu.target.kernels.clear();
  refused(on_cpu, "kernel choices in a plan for cpu");
}

}  // namespace
}  // namespace kiln::engine
