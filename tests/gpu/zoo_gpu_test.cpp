// The model zoo on a CUDA device (issue #7): each model compiles with device cuda into one engine,
// matches libtorch's CUDA eager run in fp32 (TF32 off; kRel below) and runs the same after save and
// load; and the runtime's device rules. Without a CUDA device, or with a CPU-only libtorch, these
// skip.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>

#ifdef KILN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "compiler/compiler_testing.h"
#include "engine/cuda/backend.h"
#include "engine/plan.h"
#include "harness/process.h"
#include "harness/test_models.h"
#include "kiln/kiln.h"
#include "kiln_test_paths.h"
#include "runtime/engine_class.h"
#include "util/errors.h"

namespace kiln {
namespace {

// Empty when CUDA models can run here; otherwise why not, in one line.
std::string why_no_cuda() {
  if (!runtime::cuda_supported()) {
    return "libkiln_runtime has no CUDA support (no CUDA backend, or a CPU-only libtorch)";
  }
  if (!torch::cuda::is_available() || engine::cuda::device_count() == 0) return "no CUDA device";
  return "";
}

#define SKIP_WITHOUT_CUDA()                                         \
  do {                                                              \
    const std::string why = why_no_cuda();                          \
    if (!why.empty()) GTEST_SKIP() << "GPU tests skipped: " << why; \
  } while (0)

// Whole models in fp32 against libtorch's fp32 (TF32 off), the bound of the CPU zoo: other
// convolution algorithms on each side leave ~1e-5 relative differences in deep stacks. Layers
// alone are held to 1e-5 relative (tests/engine_cuda).
constexpr double kRel = 1e-4, kAbs = 1e-5;

struct Diff {
  double max_abs = 0, scale = 0;
  double relative() const { return scale > 0 ? max_abs / scale : max_abs; }
};

// Max |a-b| and max |b| over every tensor of (nested tuples/lists of) outputs.
Diff diff_of(const c10::IValue& a, const c10::IValue& b) {
  Diff d;
  if (b.isTensor()) {
    const at::Tensor x = a.toTensor().cpu().to(at::kDouble), y = b.toTensor().cpu().to(at::kDouble);
    EXPECT_EQ(x.sizes(), y.sizes());
    if (y.numel() == 0 || x.sizes() != y.sizes()) return d;
    d.max_abs = (x - y).abs().max().item<double>();
    d.scale = y.abs().max().item<double>();
    return d;
  }
  const auto xs = a.isTuple() ? a.toTupleRef().elements().vec() : a.toListRef().vec();
  const auto ys = b.isTuple() ? b.toTupleRef().elements().vec() : b.toListRef().vec();
  EXPECT_EQ(xs.size(), ys.size());
  for (size_t i = 0; i < std::min(xs.size(), ys.size()); ++i) {
    const Diff e = diff_of(xs[i], ys[i]);
    d.max_abs = std::max(d.max_abs, e.max_abs);
    d.scale = std::max(d.scale, e.scale);
  }
  return d;
}

bool all_on_cuda(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor().is_cuda();
  const auto xs = v.isTuple() ? v.toTupleRef().elements().vec() : v.toListRef().vec();
  return std::all_of(xs.begin(), xs.end(), all_on_cuda);
}

// Where compiled modules go for tools/device/gpu_zoo_bench.py (KILN_GPU_ZOO_OUT), else a temp dir.
std::string output_path(const std::string& name) {
  const char* dir = std::getenv("KILN_GPU_ZOO_OUT");
  if (dir != nullptr && *dir) return std::string(dir) + "/" + name + ".kiln.ts";
  return testing::write_temp_file(name + ".kiln.ts", "");
}

// Median latency in ms of one call, synchronized, timed by CUDA events on the legacy default
// stream (PyTorch's current stream here) after warm-up; -1 in a build without CUDA.
double latency_ms(const std::function<void()>& call, int warmup = 20, int iters = 100) {
#ifdef KILN_WITH_CUDA
  for (int i = 0; i < warmup; ++i) call();
  cudaEvent_t start = nullptr, end = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&end);
  std::vector<float> times;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(start, nullptr);
    call();
    cudaEventRecord(end, nullptr);
    cudaEventSynchronize(end);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, end);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  std::nth_element(times.begin(), times.begin() + iters / 2, times.end());
  return times[iters / 2];
#else
  return -1;
#endif
}

class GpuZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuZoo, MatchesCudaEagerInFp32AndAfterSaveAndLoad) {
  SKIP_WITHOUT_CUDA();
  // PyTorch's reference in true fp32: cuDNN convolutions default to TF32 on Ampere and later.
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  const std::string name = GetParam();
  testing::TestModel m = testing::load_test_model(name);
  m.module.eval();
  ASSERT_EQ(m.args.size(), 1u);
  const at::Tensor example = m.args[0].toTensor();
  const DType dtype = example.scalar_type() == at::kLong ? DType::kI64 : DType::kF32;
  torch::NoGradGuard no_grad;

  CompileSpec spec;
  spec.inputs = {Input(example.sizes().vec(), dtype)};  // static: the engine uses CUDA graphs
  spec.device = parse_device("cuda:0");
  spec.require_full_compilation = true;
  spec.disable_tf32 = true;  // fp32 against fp32 (GpuCompile.Tf32UnlessDisabled covers TF32)
  CompileReport report;
  torch::jit::Module compiled = compile(m.module, spec, &report);
  EXPECT_EQ(testing::count_segments(report, "engine"), 1u) << report.summary();

  const at::Tensor x = (dtype == DType::kI64 ? at::randint(0, 100, example.sizes(), at::kLong)
                                             : at::randn(example.sizes()))
                           .to(at::kCUDA);
  torch::jit::Module reference = m.module.clone();
  reference.to(at::kCUDA);
  c10::IValue expected;
  try {
    expected = reference.forward({x});
  } catch (const c10::Error& e) {  // a traced graph may hold CPU-only constants
    std::cout << "[ gpu-zoo ] " << name << ": reference on the CPU (" << e.msg().substr(0, 120)
              << ")\n";
    expected = m.module.forward({x.cpu()});
  }
  // Twice: the first call runs eagerly and the second replays a captured CUDA graph.
  for (int run = 0; run < 3; ++run) {
    const c10::IValue actual = compiled.forward({x});
    ASSERT_TRUE(all_on_cuda(actual)) << name;
    const Diff d = diff_of(actual, expected);
    std::cout << "[ gpu-zoo ] " << name << " run " << run << ": max|kiln-torch| " << d.max_abs
              << ", max|torch| " << d.scale << ", relative " << d.relative() << "\n";
    EXPECT_LE(d.max_abs, kRel * d.scale + kAbs) << name << " run " << run;
  }

  const std::string path = output_path(name);
  compiled.save(path);
  torch::jit::Module loaded = torch::jit::load(path);
  const c10::IValue again = loaded.forward({x});
  ASSERT_TRUE(all_on_cuda(again)) << name;
  const Diff d = diff_of(again, expected);
  EXPECT_LE(d.max_abs, kRel * d.scale + kAbs) << name << " after save and load";
  // The zoo table of tools/device/gpu-test.sh (KILN_GPU_ZOO_TIMING=1): kiln with CUDA graphs,
  // without them (KILN_CUDA_GRAPHS=0 when the engine loads), and eager PyTorch.
  if (std::getenv("KILN_GPU_ZOO_TIMING") != nullptr && expected.isTensor() &&
      expected.toTensor().is_cuda()) {
    setenv("KILN_CUDA_GRAPHS", "0", 1);
    torch::jit::Module no_graphs = torch::jit::load(path);
    unsetenv("KILN_CUDA_GRAPHS");
    const double t_graphs = latency_ms([&] { loaded.forward({x}); });
    const double t_eager = latency_ms([&] { no_graphs.forward({x}); });
    const double t_torch = latency_ms([&] { reference.forward({x}); });
    std::string shape;
    for (int64_t v : x.sizes()) shape += (shape.empty() ? "" : "x") + std::to_string(v);
    char line[256];
    std::snprintf(line, sizeof(line), "%-24s %-12s %10.2e %9.1e %11.3f %8.3f %8.3f %7.2fx",
                  name.c_str(), shape.c_str(), d.max_abs, d.relative(), t_graphs, t_eager, t_torch,
                  t_torch / std::min(t_graphs, t_eager));
    std::cout << "[ zoo-table ] " << line << "\n";
  }
  // CPU inputs are moved to the engine's device (with a warning once).
  const Diff host = diff_of(loaded.forward({x.cpu()}), expected);
  EXPECT_LE(host.max_abs, kRel * host.scale + kAbs) << name << " with a CPU input";
}

INSTANTIATE_TEST_SUITE_P(Models, GpuZoo,
                         ::testing::Values("resnet18", "mobilenet_v2", "vit_tiny", "text_encoder",
                                           "zoo_resnet50", "zoo_efficientnet_b0", "zoo_convnext",
                                           "zoo_densenet", "zoo_mobilenet_v3_small",
                                           "zoo_shufflenet_v2"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(GpuCompile, WeightsOfPyTorchSegmentsMoveToTheDevice) {
  SKIP_WITHOUT_CUDA();
  torch::jit::Module m("M");
  m.register_parameter("w", torch::randn({8}), false);
  m.define(R"(
def forward(self, x):
    y = torch.relu(x) * self.w
    return torch.sigmoid(y) + 1.0
)");
  m.eval();
  torch::NoGradGuard no_grad;
  CompileSpec spec;
  spec.inputs = {Input({4, 8}, DType::kF32)};
  spec.device = parse_device("cuda:0");
  spec.torch_executed_ops = {"aten::mul"};  // w stays in a PyTorch segment
  spec.min_block_size = 1;
  CompileReport report;
  torch::jit::Module compiled = compile(m, spec, &report);
  ASSERT_EQ(testing::count_segments(report, "torch"), 1u) << report.summary();
  ASSERT_GE(testing::count_segments(report, "engine"), 1u) << report.summary();
  const at::Tensor x = at::randn({4, 8});
  const at::Tensor expected = m.forward({x}).toTensor();
  const std::string path = testing::write_temp_file("torch_segment_weights.kiln.ts", "");
  compiled.save(path);
  const at::Tensor y = compiled.forward({x.cuda()}).toTensor();
  ASSERT_TRUE(y.is_cuda());
  EXPECT_TRUE(at::allclose(y.cpu(), expected, 1e-5, 1e-6));
  torch::jit::Module loaded = torch::jit::load(path);
  EXPECT_TRUE(at::allclose(loaded.forward({x.cuda()}).toTensor().cpu(), expected, 1e-5, 1e-6));
}

TEST(GpuCompile, SupportMapSplitsAModelAcrossCudaCpuAndPyTorch) {
  SKIP_WITHOUT_CUDA();
  torch::jit::Module m("M");
  m.register_parameter("w", torch::randn({8}), false);
  m.define(R"(
def forward(self, x):
    a = torch.relu(x) * self.w
    b = torch.sigmoid(a) + 1.0
    c = torch.lgamma(b)
    return torch.tanh(c) * 2.0
)");
  m.eval();
  torch::NoGradGuard no_grad;
  CompileSpec spec;
  spec.inputs = {Input({4, 8}, DType::kF32)};
  spec.device = parse_device("cuda:0");
  spec.min_block_size = 1;
  spec.backend_priority = {"cuda", "cpu"};
  spec.backend_support_map = {{"cuda", {"aten::relu", "aten::mul", "aten::tanh"}},
                              {"cpu", {"aten::sigmoid", "aten::add"}}};
  CompileReport report;
  torch::jit::Module compiled = compile(m, spec, &report);
  std::vector<std::string> where;
  for (const SegmentReport& s : report.segments) where.push_back(s.target + " " + s.device);
  EXPECT_EQ(where, (std::vector<std::string>{"engine cuda:0", "engine cpu", "torch cuda:0",
                                             "engine cuda:0"}))
      << report.summary();
  const at::Tensor x = at::randn({4, 8});
  const at::Tensor expected = m.forward({x}).toTensor();
  const at::Tensor y = compiled.forward({x.cuda()}).toTensor();
  ASSERT_TRUE(y.is_cuda());
  EXPECT_TRUE(at::allclose(y.cpu(), expected, 1e-5, 1e-5));
  const std::string path = testing::write_temp_file("three_backends.kiln.ts", "");
  compiled.save(path);
  torch::jit::Module loaded = torch::jit::load(path);
  EXPECT_TRUE(at::allclose(loaded.forward({x.cuda()}).toTensor().cpu(), expected, 1e-5, 1e-5));
}

TEST(GpuCompile, ModulesWhoseWeightsAreOnTheGpuCompileToEngines) {
  // A model moved to the GPU before tracing or compiling, as users have it.
  SKIP_WITHOUT_CUDA();
  testing::TestModel m = testing::load_test_model("resnet18");
  torch::jit::Module on_gpu = m.module.clone();
  on_gpu.to(at::kCUDA);
  torch::NoGradGuard no_grad;
  const at::Tensor x = m.args[0].toTensor().cuda();
  CompileSpec spec;
  spec.inputs = {Input(x.sizes().vec(), DType::kF32)};
  spec.device = parse_device("cuda:0");
  spec.disable_tf32 = true;
  CompileReport report;
  torch::jit::Module compiled = compile(on_gpu, spec, &report);
  EXPECT_EQ(report.torch_ops, 0u) << report.summary();
  EXPECT_EQ(testing::count_segments(report, "engine"), 1u) << report.summary();
  const Diff d = diff_of(compiled.forward({x}), on_gpu.forward({x}));
  EXPECT_LE(d.max_abs, kRel * d.scale + kAbs) << "relative " << d.relative();
  // The module given stays where it was.
  for (const auto& p : on_gpu.parameters()) EXPECT_TRUE(p.is_cuda());

  // Ops given the GPU as their device (traces record `device=x.device` so) join engines too.
  torch::jit::Module dev("D");
  dev.register_parameter("w", torch::randn({8}).cuda(), false);
  dev.define(R"(
def forward(self, x):
    pos = torch.arange(8, device=torch.device("cuda:0")).float()
    return torch.relu(x * self.w + pos) - torch.sigmoid(x)
)");
  dev.eval();
  spec.inputs = {Input({4, 8}, DType::kF32)};
  spec.min_block_size = 1;
  torch::jit::Module compiled_d = compile(dev, spec, &report);
  EXPECT_EQ(report.torch_ops, 0u) << report.summary();
  const at::Tensor y = at::randn({4, 8}, at::kCUDA);
  EXPECT_TRUE(
      at::allclose(compiled_d.forward({y}).toTensor(), dev.forward({y}).toTensor(), 1e-5, 1e-5));
}

TEST(GpuRuntime, DynamicBatchRunsOnCudaAtEveryBatch) {
  SKIP_WITHOUT_CUDA();
  at::globalContext().setAllowTF32CuDNN(false);
  testing::TestModel m = testing::load_test_model("resnet18");
  m.module.eval();
  torch::NoGradGuard no_grad;
  CompileSpec spec;
  spec.inputs = {Input({1, 3, 64, 64}, {4, 3, 64, 64}, {8, 3, 64, 64})};
  spec.device = parse_device("cuda");
  spec.disable_tf32 = true;
  torch::jit::Module compiled = compile(m.module, spec);
  torch::jit::Module reference = m.module.clone();
  reference.to(at::kCUDA);
  for (int64_t batch : {1, 8, 3, 8}) {
    const at::Tensor x = at::randn({batch, 3, 64, 64}, at::kCUDA);
    const Diff d = diff_of(compiled.forward({x}), reference.forward({x}));
    EXPECT_LE(d.max_abs, kRel * d.scale + kAbs) << "batch " << batch;
  }
}

// Sizes known only at run time on the device: vit_tiny expands its class token to the batch,
// core ATen's matmuls reshape to [batch * heads, ...], zoo_swin fills its mask by slices. Shape
// inputs, reshapes and fills by run-time sizes run on CUDA at every batch the export allows.
TEST(GpuRuntime, ExportedProgramsWithADynamicBatchRunOnCuda) {
  SKIP_WITHOUT_CUDA();
  at::globalContext().setAllowTF32CuDNN(false);
  torch::NoGradGuard no_grad;
  for (const std::string name : {"vit_tiny", "text_encoder", "zoo_swin"}) {
    for (const std::string form : {"", ".core"}) {
      const ExportedModule exported =
          load_exported_program(std::string(KILN_TEST_MODELS_DIR) + "/" + name + form + ".pt2");
      CompileSpec spec;
      spec.inputs = exported.specs();
      spec.device = parse_device("cuda");
      spec.disable_tf32 = true;
      CompileReport report;
      torch::jit::Module compiled = compile(exported.module, spec, &report);
      EXPECT_EQ(testing::count_segments(report, "engine"), 1u) << name << form << report.summary();
      testing::TestModel reference = testing::load_test_model(name);
      reference.module.eval();
      reference.module.to(at::kCUDA);
      const ExportedInput& in = exported.inputs[0];
      for (int64_t batch : {1, 4, 3}) {
        std::vector<int64_t> shape = in.opt;
        shape[0] = batch;
        const at::Tensor x =
            in.dtype == DType::kI64
                ? at::randint(0, 100, shape, at::TensorOptions(at::kLong).device(at::kCUDA))
                : at::randn(shape, at::kCUDA);
        const c10::IValue y = compiled.forward({x});
        EXPECT_TRUE(all_on_cuda(y)) << name << form;
        const Diff d = diff_of(y, reference.module.forward({x}));
        EXPECT_LE(d.max_abs, kRel * d.scale + kAbs) << name << form << " at batch " << batch;
      }
    }
  }
}

TEST(GpuRuntime, EngineBoundToAMissingDeviceIsAClearError) {
  SKIP_WITHOUT_CUDA();
  testing::TestModel m = testing::load_test_model("resnet18");
  CompileSpec spec;
  spec.inputs = {Input({1, 3, 64, 64})};
  spec.device = parse_device("cuda:0");
  const std::vector<uint8_t> plan = convert_method_to_engine(m.module, "forward", spec);
  const int n = engine::cuda::device_count();
  const std::string missing = "cuda:" + std::to_string(n);
  std::string err =
      testing::error_of([&] { c10::make_intrusive<runtime::EngineHolder>("e", plan, missing); });
  EXPECT_NE(err.find("is bound to CUDA device " + std::to_string(n)), std::string::npos) << err;
  err = testing::error_of([&] { c10::make_intrusive<runtime::EngineHolder>("e", plan, "cpu"); });
  EXPECT_NE(err.find("its plan targets cuda, so it cannot run on cpu"), std::string::npos) << err;
  // The state names the device; a holder made from it runs there.
  auto holder = c10::make_intrusive<runtime::EngineHolder>("e", plan, "cuda:0");
  EXPECT_EQ(std::get<2>(holder->state()), "cuda:0");
  EXPECT_EQ(runtime::EngineHolder::from_state(holder->state())->device(), "cuda:0");
  if (n >= 2) {  // a tensor on another GPU is an error naming both devices
    const std::string e2 = testing::error_of([&] {
      holder->execute({at::randn({1, 3, 64, 64}, at::Device(at::kCUDA, 1))});
    });
    EXPECT_NE(e2.find("is on cuda:1 but the engine runs on cuda:0"), std::string::npos) << e2;
  }
}

// cuda engines run their f32 convolutions and matmuls in TF32 unless the spec disables it (as
// Torch-TensorRT's disable_tf32): the model matches libtorch's fp32 within TF32's rounding, and
// without TF32 within fp32's. (Run without NVIDIA_TF32_OVERRIDE=0 to exercise TF32 itself.)
TEST(GpuCompile, Tf32UnlessDisabled) {
  SKIP_WITHOUT_CUDA();
  testing::TestModel m = testing::load_test_model("resnet18");
  m.module.eval();
  torch::NoGradGuard no_grad;
  // The reference in fp32 on the CPU: libtorch's own CUDA convolutions may use TF32.
  const at::Tensor x_cpu = at::randn({2, 3, 64, 64});
  const c10::IValue expected = m.module.forward({x_cpu});
  const at::Tensor x = x_cpu.cuda();
  for (bool disable : {false, true}) {
    SCOPED_TRACE(disable ? "disable_tf32" : "tf32");
    CompileSpec spec;
    spec.inputs = {Input({2, 3, 64, 64})};
    spec.device = parse_device("cuda:0");
    spec.disable_tf32 = disable;
    const std::vector<uint8_t> bytes = convert_method_to_engine(m.module, "forward", spec);
    const engine::Plan plan = engine::deserialize_plan(bytes.data(), bytes.size());
    int convolutions = 0, tf32 = 0;
    for (const engine::Layer& l : plan.network.layers()) {
      if (const auto* c = std::get_if<engine::ConvolutionParams>(&l.params)) {
        ++convolutions;
        tf32 += c->tf32;
      }
    }
    EXPECT_GT(convolutions, 0);
    EXPECT_EQ(tf32, disable ? 0 : convolutions);
    const Diff d = diff_of(compile(m.module, spec).forward({x}), expected);
    // TF32 keeps 10 mantissa bits: ~1e-3 relative per product, a few 1e-3 through resnet18.
    const double rel = disable ? kRel : 1e-2;
    EXPECT_LE(d.max_abs, rel * d.scale + kAbs) << "max |diff| " << d.max_abs << " of " << d.scale;
  }
}

// Refit and the engine cache on the device (issue #33). A refittable engine built for CUDA takes
// new weights in place; a compile of the new weights with a warm cache loads the weightless entry
// and refits it; a default plan (weights inside) is served to a second compile of the same
// weights. Each answers as CUDA eager does with its weights.
class GpuRefit : public ::testing::TestWithParam<std::string> {};

std::vector<std::string> engine_plans(const CompileReport& report) {
  std::vector<std::string> plans;
  for (const SegmentReport& s : report.segments) {
    if (s.target == "engine") plans.push_back(s.plan);
  }
  return plans;
}

TEST_P(GpuRefit, RefitAndCachedEnginesAnswerAsEagerWithTheirWeights) {
  SKIP_WITHOUT_CUDA();
  at::globalContext().setAllowTF32CuDNN(false);
  torch::NoGradGuard no_grad;
  testing::TestModel m = testing::load_test_model(GetParam());
  m.module.eval();
  const torch::jit::Module tuned = testing::with_new_weights(m.module, 3);
  CompileSpec spec;
  std::vector<c10::IValue> x;
  for (const c10::IValue& arg : m.args) {
    const at::Tensor example = arg.toTensor();
    const bool ids = example.scalar_type() == at::kLong;
    spec.inputs.push_back(Input(example.sizes().vec(), ids ? DType::kI64 : DType::kF32));
    x.push_back(
        ids ? at::randint(0, 100, example.sizes(), at::TensorOptions(at::kLong).device(at::kCUDA))
            : at::randn(example.sizes(), at::kCUDA));
  }
  spec.device = parse_device("cuda:0");
  spec.disable_tf32 = true;
  spec.refittable = true;
  spec.engine_cache = true;
  // A fresh directory in the test process's own temporary folder (removed at exit; not with
  // std::filesystem::remove_all, which the torch wheel's libtorch.so breaks).
  spec.engine_cache_dir =
      testing::write_temp_file("gpu_refit_" + GetParam() + ".marker", "") + ".cache";
  auto eager = [&](const torch::jit::Module& module) {
    torch::jit::Module on_device = module.clone();
    on_device.to(at::kCUDA);
    return on_device.forward(x);
  };
  auto expect_matches = [&](const c10::IValue& y, const c10::IValue& want,
                            const std::string& what) {
    EXPECT_TRUE(all_on_cuda(y)) << what;
    const Diff d = diff_of(y, want);
    EXPECT_LE(d.max_abs, kRel * d.scale + kAbs) << what << ": max |diff| " << d.max_abs;
  };
  const c10::IValue want = eager(m.module), want_tuned = eager(tuned);
  ASSERT_GT(diff_of(want, want_tuned).max_abs, 1e-3) << "the new weights change the answer";

  CompileReport first, refit_report, hit;
  torch::jit::Module compiled = compile(m.module, spec, &first);
  ASSERT_FALSE(engine_plans(first).empty()) << first.summary();
  for (const std::string& plan : engine_plans(first)) EXPECT_EQ(plan, "cache miss");
  expect_matches(compiled.forward(x), want, "refittable compile");
  torch::jit::Module refitted = refit(compiled, tuned, &refit_report);
  for (const std::string& plan : engine_plans(refit_report)) EXPECT_EQ(plan, "refit");
  expect_matches(refitted.forward(x), want_tuned, "refit");
  torch::jit::Module from_cache = compile(tuned, spec, &hit);
  for (const std::string& plan : engine_plans(hit)) EXPECT_EQ(plan, "cache hit");
  expect_matches(from_cache.forward(x), want_tuned, "refittable cache hit with new weights");

  spec.refittable = false;
  CompileReport whole_first, whole_second;
  compile(tuned, spec, &whole_first);
  torch::jit::Module second = compile(tuned, spec, &whole_second);
  for (const std::string& plan : engine_plans(whole_second)) {
    EXPECT_TRUE(plan == "cache hit" || plan == "cache skip") << plan;
  }
  expect_matches(second.forward(x), want_tuned, "default plan from the cache");
}

// Convolutions with batch norms, attention and layer norms, embeddings with a mask.
INSTANTIATE_TEST_SUITE_P(Models, GpuRefit,
                         ::testing::Values("resnet18", "vit_tiny", "text_encoder"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(GpuCompile, CudaCompileWithoutCudaSupportIsAClearError) {
  if (why_no_cuda().empty()) GTEST_SKIP() << "this machine runs CUDA models";
  testing::TestModel m = testing::load_test_model("resnet18");
  CompileSpec spec;
  spec.inputs = {Input({1, 3, 64, 64})};
  spec.device = parse_device("cuda:0");
  const std::string err = testing::error_of([&] { compile(m.module, spec); });
  EXPECT_NE(err.find("compile: device cuda:0"), std::string::npos) << err;
  EXPECT_THROW(compile(m.module, spec), Error);
}

}  // namespace
}  // namespace kiln
