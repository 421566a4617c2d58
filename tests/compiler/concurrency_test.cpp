// Concurrency: one compiled module run from 16 threads at once on the CPU backend (and on the
// CUDA backend where there is a device), every output checked; two models compiled in parallel
// threads. KILN_STRESS_CALLS sets the calls per thread (default 10,000, as in issue #9; lower it on
// a slow machine, e.g. under sanitizers).
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "compiler/compiler_testing.h"
#include "kiln/kiln.h"
#include "runtime/engine_class.h"

namespace kiln {
namespace {

int calls_per_thread() {
  const char* env = std::getenv("KILN_STRESS_CALLS");
  return env != nullptr ? std::max(1, std::atoi(env)) : 10000;
}

// forward(x) = relu(x @ w + b) * 2 - x.sum(1, keepdim=True): matmul, elementwise, reduce.
torch::jit::Module small_mlp(int64_t features, uint64_t seed) {
  torch::manual_seed(seed);
  torch::jit::Module m("SmallMlp");
  m.register_parameter("w", torch::randn({features, features}), false);
  m.register_parameter("b", torch::randn({features}), false);
  m.define(R"(
def forward(self, x):
    y = torch.relu(torch.matmul(x, self.w) + self.b) * 2.0
    return y - x.sum(1, keepdim=True)
)");
  m.eval();
  return m;
}

torch::jit::Module compile_static(const torch::jit::Module& m, std::vector<int64_t> shape,
                                  CompileReport* report, const std::string& device = "cpu") {
  CompileSpec spec;
  spec.device = parse_device(device);
  spec.inputs.push_back(Input(std::move(shape)));
  spec.min_block_size = 1;
  spec.require_full_compilation = true;
  return compile(m, spec, report);
}

// One compiled module on `device` from 16 threads, every output checked against eager PyTorch.
void run_from_sixteen_threads(const std::string& device) {
  torch::NoGradGuard no_grad;
  const torch::jit::Module model = small_mlp(16, 1);
  CompileReport report;
  torch::jit::Module compiled = compile_static(model, {4, 16}, &report, device);
  ASSERT_EQ(testing::count_segments(report, "engine"), 1u) << report.summary();
  ASSERT_EQ(testing::count_segments(report, "torch"), 0u) << report.summary();

  constexpr int kThreads = 16;
  const int calls = calls_per_thread();
  // Each thread has its own inputs (different values, so a mix-up between threads shows) and
  // the eager module's outputs for them.
  std::vector<std::vector<at::Tensor>> inputs(kThreads), expected(kThreads);
  torch::jit::Module reference = model.clone();
  for (int t = 0; t < kThreads; ++t) {
    for (int k = 0; k < 4; ++k) {
      const at::Tensor x = at::randn({4, 16}) + t;
      expected[t].push_back(reference.forward({x}).toTensor());
      inputs[t].push_back(x.to(c10::Device(device)));
    }
  }
  std::atomic<int> wrong{0}, failed{0}, done{0};
  std::vector<std::string> first_error(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      torch::NoGradGuard guard;
      try {
        for (int i = 0; i < calls; ++i) {
          const int k = i % 4;
          const at::Tensor out = compiled.forward({inputs[t][k]}).toTensor().cpu();
          if (!at::allclose(out, expected[t][k], 1e-4, 1e-4)) {
            if (wrong++ == 0)
              first_error[t] =
                  "thread " + std::to_string(t) + " call " + std::to_string(i) + ": wrong output";
          }
          ++done;
        }
      } catch (const std::exception& e) {
        ++failed;
        first_error[t] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  std::string errors;
  for (const auto& e : first_error) errors += e.empty() ? "" : e + "\n";
  EXPECT_EQ(failed.load(), 0) << errors;
  EXPECT_EQ(wrong.load(), 0) << errors;
  EXPECT_EQ(done.load(), kThreads * calls);
}

TEST(Concurrency, OneCompiledModuleFromSixteenThreads) {
  run_from_sixteen_threads("cpu");
}

// The same on the CUDA backend: each thread on PyTorch's current stream (the default one), the
// engine's pool of contexts shared between them.
TEST(Concurrency, OneCudaModuleFromSixteenThreads) {
  if (!runtime::cuda_supported() || !torch::cuda::is_available()) {
    GTEST_SKIP() << "GPU tests skipped: no CUDA device, or no CUDA support in libkiln_runtime";
  }
  run_from_sixteen_threads("cuda:0");
}

TEST(Concurrency, TwoModelsCompileInParallelThreads) {
  torch::NoGradGuard no_grad;
  const torch::jit::Module a = small_mlp(8, 2), b = small_mlp(24, 3);
  torch::jit::Module compiled_a, compiled_b;
  std::string error_a, error_b;
  // Several rounds: a race that corrupts shared compiler state need not show the first time.
  for (int round = 0; round < 3; ++round) {
    std::thread ta([&] {
      try {
        compiled_a = compile_static(a, {3, 8}, nullptr);
      } catch (const std::exception& e) {
        error_a = e.what();
      }
    });
    std::thread tb([&] {
      try {
        compiled_b = compile_static(b, {5, 24}, nullptr);
      } catch (const std::exception& e) {
        error_b = e.what();
      }
    });
    ta.join();
    tb.join();
    ASSERT_EQ(error_a, "");
    ASSERT_EQ(error_b, "");
    const at::Tensor xa = at::randn({3, 8}), xb = at::randn({5, 24});
    torch::jit::Module ra = a.clone(), rb = b.clone();
    EXPECT_TRUE(testing::matches_reference(compiled_a.forward({xa}), ra.forward({xa})));
    EXPECT_TRUE(testing::matches_reference(compiled_b.forward({xb}), rb.forward({xb})));
  }
}

}  // namespace
}  // namespace kiln
