// Benchmarks kiln's CPU engine against libtorch eager on ResNet-50 convs, BERT GEMMs, an
// elementwise chain and GoogLeNet's pools, on the same data and thread count; prints a
// kiln-vs-libtorch table.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <omp.h>
#include <torch/script.h>
#include <torch/utils.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/builder.h"
#include "engine/network.h"
#include "engine/runtime.h"

namespace {

namespace ke = kiln::engine;

// One case: an engine with bound buffers and the libtorch call it is compared with. Both sides
// read the same input values, so their outputs can be checked against each other.
struct Case {
  std::string name;
  std::shared_ptr<const ke::Engine> engine;
  std::unique_ptr<ke::ExecutionContext> ctx;
  std::vector<torch::Tensor> inputs;  // bound to the engine (weights are engine constants)
  torch::Tensor kiln_out;
  std::function<torch::Tensor()> torch_fn;
};

torch::Tensor randn(const std::vector<int64_t>& shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn(shape, torch::kFloat32);
}

ke::Weights as_weights(const torch::Tensor& t) {
  const auto* p = t.data_ptr<float>();
  return ke::Weights::from_floats(t.sizes().vec(), std::vector<float>(p, p + t.numel()));
}

// Builds with the default config (so the builder's fusions apply) and binds every buffer once:
// the timed loop is only ExecutionContext::execute.
void finish_case(Case& c, ke::Network net, const std::vector<int64_t>& out_shape) {
  ke::Plan plan = ke::build(net, ke::BuilderConfig{});
  c.engine = std::make_shared<ke::Engine>(std::move(plan.network), plan.target);
  c.ctx = std::make_unique<ke::ExecutionContext>(c.engine);
  for (size_t i = 0; i < c.inputs.size(); ++i) c.ctx->bind_input(i, c.inputs[i].data_ptr());
  c.kiln_out = torch::empty(out_shape, torch::kFloat32);
  c.ctx->bind_output(0, c.kiln_out.data_ptr());
}

struct ConvSpec {
  const char* name;
  int64_t cin, hw, cout, k, stride, pad;
  bool bias_relu = false;  // conv + bias + relu, as in a ResNet block (the builder fuses it)
};

Case make_conv(const ConvSpec& s) {
  Case c;
  c.name = s.name;
  torch::Tensor x = randn({1, s.cin, s.hw, s.hw}, 1);
  torch::Tensor w = randn({s.cout, s.cin, s.k, s.k}, 2) * (1.0 / std::sqrt(s.cin * s.k * s.k));
  ke::Network net;
  const auto xi = net.add_input("x", ke::DataType::kF32, x.sizes().vec());
  const auto wi = net.add_constant("w", as_weights(w));
  ke::ConvolutionParams p;
  p.strides = {s.stride, s.stride};
  p.padding_begin = p.padding_end = {s.pad, s.pad};
  c.inputs = {x};
  const int64_t o = (s.hw + 2 * s.pad - s.k) / s.stride + 1;
  if (!s.bias_relu) {
    net.mark_output(net.add("conv", p, {xi, wi}), "y");
    finish_case(c, std::move(net), {1, s.cout, o, o});
    c.torch_fn = [x, w, s] { return torch::conv2d(x, w, {}, s.stride, s.pad); };
    return c;
  }
  torch::Tensor b = randn({s.cout}, 10);
  p.post.has_bias = true;
  const auto conv = net.add("conv", p, {xi, wi, net.add_constant("bias", as_weights(b))});
  net.mark_output(net.add("relu", ke::ActivationParams{ke::ActivationKind::kRelu}, {conv}), "y");
  finish_case(c, std::move(net), {1, s.cout, o, o});
  c.torch_fn = [x, w, b, s] { return torch::relu(torch::conv2d(x, w, b, s.stride, s.pad)); };
  return c;
}

// a [batch..., M, K] @ b; b is an engine constant (a weight) unless `b_is_input`. With
// `bias_gelu`: gelu(a @ b + bias), BERT's FFN up-projection (bias and gelu fused by kiln).
Case make_gemm(const char* name, std::vector<int64_t> as, std::vector<int64_t> bs, bool b_is_input,
               bool bias_gelu = false) {
  Case c;
  c.name = name;
  torch::Tensor a = randn(as, 3), b = randn(bs, 4) * (1.0 / std::sqrt(as.back()));
  ke::Network net;
  const auto ai = net.add_input("a", ke::DataType::kF32, as);
  const auto bi = b_is_input ? net.add_input("b", ke::DataType::kF32, bs)
                             : net.add_constant("b", as_weights(b));
  c.inputs = b_is_input ? std::vector<torch::Tensor>{a, b} : std::vector<torch::Tensor>{a};
  if (!bias_gelu) {
    net.mark_output(net.add("matmul", ke::MatMulParams{}, {ai, bi}), "y");
    finish_case(c, std::move(net), torch::matmul(a, b).sizes().vec());
    c.torch_fn = [a, b] { return torch::matmul(a, b); };
    return c;
  }
  torch::Tensor bias = randn({bs.back()}, 11);
  ke::MatMulParams p;
  p.post.has_bias = true;
  const auto mm = net.add("matmul", p, {ai, bi, net.add_constant("bias", as_weights(bias))});
  ke::ActivationParams gelu;
  gelu.kind = ke::ActivationKind::kGelu;
  net.mark_output(net.add("gelu", gelu, {mm}), "y");
  finish_case(c, std::move(net), torch::matmul(a, b).sizes().vec());
  c.torch_fn = [a, b, bias] { return torch::gelu(torch::matmul(a, b) + bias); };
  return c;
}

// y = gelu((x*a + b) * c) - d with per-channel a, b, c, d: the builder fuses the five layers
// into one FusedElementwise; libtorch eager runs five kernels with four temporaries.
Case make_chain() {
  Case c;
  c.name = "eltwise_chain_5ops_4M";
  const std::vector<int64_t> shape = {1, 768, 128, 42}, ch = {1, 768, 1, 1};
  torch::Tensor x = randn(shape, 5), a = randn(ch, 6), b = randn(ch, 7), cc = randn(ch, 8),
                d = randn(ch, 9);
  ke::Network net;
  const auto xi = net.add_input("x", ke::DataType::kF32, shape);
  auto binary = [&](const char* n, ke::BinaryOp op, ke::TensorId l, ke::TensorId r) {
    return net.add(n, ke::ElementwiseParams{op}, {l, r});
  };
  auto t = binary("mul_a", ke::BinaryOp::kMul, xi, net.add_constant("a", as_weights(a)));
  t = binary("add_b", ke::BinaryOp::kAdd, t, net.add_constant("b", as_weights(b)));
  t = binary("mul_c", ke::BinaryOp::kMul, t, net.add_constant("c", as_weights(cc)));
  ke::ActivationParams gelu;
  gelu.kind = ke::ActivationKind::kGelu;
  t = net.add("gelu", gelu, {t});
  net.mark_output(binary("sub_d", ke::BinaryOp::kSub, t, net.add_constant("d", as_weights(d))),
                  "y");
  c.inputs = {x};
  finish_case(c, std::move(net), shape);
  c.torch_fn = [x, a, b, cc, d] { return torch::gelu((x * a + b) * cc) - d; };
  return c;
}

// 2-d max or average pooling (k x k, stride s, padding pad, torch's ceil_mode) of x.
Case make_pool(const char* name, std::vector<int64_t> shape, bool is_max, int64_t k, int64_t stride,
               int64_t pad, bool ceil_mode) {
  Case c;
  c.name = name;
  torch::Tensor x = randn(shape, 12);
  ke::Network net;
  const auto xi = net.add_input("x", ke::DataType::kF32, shape);
  ke::PoolingParams p;
  p.kind = is_max ? ke::PoolingKind::kMax : ke::PoolingKind::kAverage;
  p.kernel = {k, k};
  p.strides = {stride, stride};
  p.padding_begin = {pad, pad};
  p.ceil_mode = ceil_mode;
  p.padding_end = {pad, pad};
  const torch::Tensor ref =
      is_max ? torch::max_pool2d(x, k, stride, pad, 1, ceil_mode)
             : torch::avg_pool2d(x, k, stride, pad, ceil_mode, /*count_include_pad=*/true);
  net.mark_output(net.add("pool", p, {xi}), "y");
  c.inputs = {x};
  finish_case(c, std::move(net), ref.sizes().vec());
  c.torch_fn = [x, is_max, k, stride, pad, ceil_mode] {
    return is_max ? torch::max_pool2d(x, k, stride, pad, 1, ceil_mode)
                  : torch::avg_pool2d(x, k, stride, pad, ceil_mode, true);
  };
  return c;
}

std::vector<Case>& cases() {
  static std::vector<Case> all = [] {
    std::vector<Case> v;
    const ConvSpec convs[] = {
        {"conv_stem_7x7s2_3-64_224", 3, 224, 64, 7, 2, 3},
        {"conv_1x1_256-64_56", 256, 56, 64, 1, 1, 0},
        {"conv_3x3_64-64_56", 64, 56, 64, 3, 1, 1},
        {"conv_3x3s2_128-128_56", 128, 56, 128, 3, 2, 1},
        {"conv_1x1_1024-256_14", 1024, 14, 256, 1, 1, 0},
        {"conv_3x3_512-512_7", 512, 7, 512, 3, 1, 1},
        {"conv_3x3_64-64_56+bias+relu", 64, 56, 64, 3, 1, 1, true},
    };
    for (const auto& s : convs) v.push_back(make_conv(s));
    v.push_back(make_gemm("gemm_128x768x768", {128, 768}, {768, 768}, false));
    v.push_back(make_gemm("gemm_128x768x3072", {128, 768}, {768, 3072}, false));
    v.push_back(make_gemm("gemm_128x3072x768", {128, 3072}, {3072, 768}, false));
    v.push_back(make_gemm("bmm_12x128x64x128", {12, 128, 64}, {12, 64, 128}, true));
    v.push_back(make_gemm("gemm_128x768x3072+bias+gelu", {128, 768}, {768, 3072}, false, true));
    v.push_back(make_chain());
    // GoogLeNet's pools at a 64x64 input, batch 8: the stem's stride-2 pool and an inception
    // branch's 3x3 stride-1 pool.
    v.push_back(make_pool("maxpool_3x3s2_8x64x32", {8, 64, 32, 32}, true, 3, 2, 0, true));
    v.push_back(make_pool("maxpool_3x3s1p1_8x480x8", {8, 480, 8, 8}, true, 3, 1, 1, false));
    v.push_back(make_pool("avgpool_3x3s1p1_8x480x8", {8, 480, 8, 8}, false, 3, 1, 1, false));
    return v;
  }();
  return all;
}

void bench_kiln(benchmark::State& state, Case* c) {
  for (auto _ : state) c->ctx->execute();
}

void bench_torch(benchmark::State& state, Case* c) {
  torch::NoGradGuard no_grad;
  for (auto _ : state) benchmark::DoNotOptimize(c->torch_fn());
}

// Keeps the console output and remembers each benchmark's median real time for the table.
class TableReporter : public benchmark::ConsoleReporter {
 public:
  // Per benchmark: {real ms, main-thread CPU ms}, medians when repeated.
  std::map<std::string, std::pair<double, double>> median_ms, mean_ms;
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      const double to_ms = 1e3 / benchmark::GetTimeUnitMultiplier(r.time_unit);
      const std::pair<double, double> ms = {r.GetAdjustedRealTime() * to_ms,
                                            r.GetAdjustedCPUTime() * to_ms};
      const std::string name = r.run_name.function_name;
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median") median_ms[name] = ms;
      if (r.run_type == Run::RT_Iteration) mean_ms[name] = ms;  // without repetitions
    }
  }
  std::pair<double, double> get(const std::string& name) const {
    auto it = median_ms.find(name);
    if (it != median_ms.end()) return it->second;
    it = mean_ms.find(name);
    return it != mean_ms.end() ? it->second : std::pair<double, double>{NAN, NAN};
  }
};

// Max |kiln - torch| relative to max |torch|: catches a benchmark timing a wrong result.
double relative_error(Case& c) {
  c.ctx->execute();
  torch::NoGradGuard no_grad;
  const torch::Tensor ref = c.torch_fn();
  const double scale = std::max(ref.abs().max().item<double>(), 1e-30);
  return (c.kiln_out - ref).abs().max().item<double>() / scale;
}

}  // namespace

int main(int argc, char** argv) {
  // The engine's kernels run on OpenMP's default team; libtorch gets the same number of threads.
  const int threads = omp_get_max_threads();
  at::set_num_threads(threads);
  // Medians of several repetitions unless the command line says otherwise: machines are shared.
  std::vector<char*> args(argv, argv + argc);
  // Interleaving spreads load changes over both sides instead of biasing whichever ran then.
  std::string reps = "--benchmark_repetitions=7", aggr = "--benchmark_report_aggregates_only=true",
              mix = "--benchmark_enable_random_interleaving=true";
  bool has_reps = false;
  for (int i = 1; i < argc; ++i)
    has_reps |= std::strstr(argv[i], "benchmark_repetitions") != nullptr;
  if (!has_reps) {
    args.push_back(reps.data());
    args.push_back(aggr.data());
    args.push_back(mix.data());
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;

  for (Case& c : cases()) {
    benchmark::RegisterBenchmark(("kiln/" + c.name).c_str(), bench_kiln, &c)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("libtorch/" + c.name).c_str(), bench_torch, &c)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  TableReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  std::printf("\nthreads: %d (kiln OpenMP default, at::set_num_threads), libtorch %s, mkldnn %d\n",
              threads, TORCH_VERSION, static_cast<int>(at::hasMKLDNN()));
  // CPU columns count the main thread only: with one thread they show the work done, unlike
  // real time, free of waiting for a core on a loaded machine.
  std::printf("%-28s %9s %12s %7s %9s %11s %7s %8s\n", "case", "kiln ms", "libtorch ms", "ratio",
              "kiln cpu", "torch cpu", "ratio", "rel.err");
  for (Case& c : cases()) {
    const auto k = reporter.get("kiln/" + c.name), t = reporter.get("libtorch/" + c.name);
    if (std::isnan(k.first) && std::isnan(t.first)) continue;  // filtered out
    std::printf("%-28s %9.3f %12.3f %7.2f %9.3f %11.3f %7.2f %8.1e\n", c.name.c_str(), k.first,
                t.first, t.first / k.first, k.second, t.second, t.second / k.second,
                relative_error(c));
  }
  std::printf("ratio = libtorch/kiln (>1: kiln faster); times are medians of repetitions\n");
  benchmark::Shutdown();
  return 0;
}
