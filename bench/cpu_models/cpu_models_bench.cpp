// kiln_cpu_models_bench: the zoo models compiled by kiln against the same modules in libtorch on
// the CPU (median latency, ratio, largest difference); `compare` is make demo's last step.
#include <ATen/Parallel.h>
#include <omp.h>
#include <torch/script.h>
#include <torch/serialize.h>
#include <torch/version.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/plan.h"
#include "engine/runtime.h"
#include "kiln/kiln.h"

namespace {

// The models of tests/compiler/zoo_test.cpp, in its order (tests/models/make_models.py writes
// them).
const std::vector<std::string> kZoo = {"resnet18",
                                       "mobilenet_v2",
                                       "vit_tiny",
                                       "text_encoder",
                                       "zoo_resnet50",
                                       "zoo_mobilenet_v3_small",
                                       "zoo_efficientnet_b0",
                                       "zoo_regnet_y_400mf",
                                       "zoo_convnext",
                                       "zoo_densenet",
                                       "zoo_squeezenet1_1",
                                       "zoo_shufflenet_v2",
                                       "zoo_mnasnet",
                                       "zoo_googlenet"};

double thread_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct TimingOptions {
  int warmup = 3;
  int min_runs = 10, max_runs = 200;
  double budget_s = 1.5;  // per pair of sides, after warm-up
};

// Medians of wall-clock and main-thread CPU time of each side. The sides run interleaved
// (a, b, a, b, ...) so that a change in the machine's load hits both alike.
struct PairTiming {
  double a_ms = 0, b_ms = 0, a_cpu_ms = 0, b_cpu_ms = 0;
  int runs = 0;
};

PairTiming time_pair(const std::function<void()>& a, const std::function<void()>& b,
                     const TimingOptions& opt) {
  for (int i = 0; i < opt.warmup; ++i) {
    a();
    b();
  }
  std::vector<double> wall[2], cpu[2];
  const auto start = std::chrono::steady_clock::now();
  for (int run = 0; run < opt.max_runs; ++run) {
    const double spent =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (run >= opt.min_runs && spent > opt.budget_s) break;
    for (int side = 0; side < 2; ++side) {
      const double c0 = thread_cpu_ms();
      const auto t0 = std::chrono::steady_clock::now();
      (side == 0 ? a : b)();
      wall[side].push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      cpu[side].push_back(thread_cpu_ms() - c0);
    }
  }
  return {median(wall[0]), median(wall[1]), median(cpu[0]), median(cpu[1]),
          static_cast<int>(wall[0].size())};
}

void flatten(const torch::jit::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) flatten(e, out);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) flatten(e, out);
  }
}

// Largest |a - b| over every output tensor, and the largest |b| (the scale of the reference).
std::pair<double, double> max_abs_diff(const torch::jit::IValue& a, const torch::jit::IValue& b) {
  std::vector<at::Tensor> ta, tb;
  flatten(a, ta);
  flatten(b, tb);
  TORCH_CHECK(ta.size() == tb.size(), "outputs differ in number: ", ta.size(), " vs ", tb.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ta.size(); ++i) {
    TORCH_CHECK(ta[i].sizes() == tb[i].sizes(), "output ", i, " differs in shape: ", ta[i].sizes(),
                " vs ", tb[i].sizes());
    const at::Tensor x = ta[i].to(at::kDouble), y = tb[i].to(at::kDouble);
    if (x.numel() == 0) continue;
    diff = std::max(diff, (x - y).abs().max().item<double>());
    scale = std::max(scale, y.abs().max().item<double>());
  }
  return {diff, scale};
}

std::string shape_text(at::IntArrayRef sizes) {
  std::ostringstream os;
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? "x" : "") << sizes[i];
  return os.str();
}

// One OpenMP team size for kiln's kernels (OpenMP's default team, which oneDNN uses too) and for
// libtorch's intra-op pool.
int set_threads(int requested) {
  if (requested > 0) omp_set_num_threads(requested);
  const int threads = omp_get_max_threads();
  at::set_num_threads(threads);
  return threads;
}

std::string threads_line(int threads) {
  const char* env = std::getenv("OMP_NUM_THREADS");
  std::ostringstream os;
  os << threads << " (kiln: OpenMP team; libtorch: at::set_num_threads, now "
     << at::get_num_threads() << "; OMP_NUM_THREADS=" << (env ? env : "unset") << ")";
  return os.str();
}

// --- models: the zoo table ------------------------------------------------------------------

struct Row {
  std::string model, input;
  int64_t batch = 0;
  size_t engines = 0, torch_ops = 0;
  PairTiming t;
  double diff = 0, scale = 0;
  double ratio() const { return t.a_ms / t.b_ms; }
  double cpu_ratio() const { return t.a_cpu_ms / t.b_cpu_ms; }
};

torch::jit::IValue example_argument(const std::string& io_path) {
  std::ifstream in(io_path, std::ios::binary);
  TORCH_CHECK(in.good(), io_path, ": cannot open (run tests/models/make_models.py --out DIR)");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::pickle_load(bytes).toTupleRef().elements()[0].toTupleRef().elements()[0];
}

at::Tensor input_of(const at::Tensor& example, int64_t batch) {
  std::vector<int64_t> shape = example.sizes().vec();
  shape[0] = batch;
  if (example.scalar_type() == at::kLong) return torch::randint(0, 100, shape, at::kLong);
  return torch::randn(shape);
}

kiln::CompileSpec static_spec(const at::Tensor& x) {
  kiln::CompileSpec spec;
  spec.inputs = {kiln::Input(x.sizes().vec(),
                             x.scalar_type() == at::kLong ? kiln::DType::kI64 : kiln::DType::kF32)};
  return spec;
}

// The whole forward as one plan, run by an ExecutionContext with the per-layer profiler on: where
// kiln's time goes, per layer kind and for the slowest layers.
void profile_engine(const torch::jit::Module& module, const at::Tensor& x, const Row& row,
                    const TimingOptions& timing, int top) {
  namespace ke = kiln::engine;
  const std::vector<uint8_t> bytes =
      kiln::convert_method_to_engine(module, "forward", static_spec(x));
  ke::Plan plan = ke::deserialize_plan(bytes.data(), bytes.size());
  auto engine = std::make_shared<const ke::Engine>(std::move(plan.network), plan.target);
  ke::ExecutionContext ctx(engine);
  const at::Tensor in = x.contiguous();
  ctx.set_input_shape(0, in.sizes().vec());
  ctx.bind_input(0, in.data_ptr());
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < engine->num_outputs(); ++i) {
    outs.push_back(at::empty(ctx.output_shape(i), in.options().dtype(at::kFloat)));
    ctx.bind_output(i, outs.back().data_ptr());
  }
  for (int i = 0; i < timing.warmup; ++i) ctx.execute();
  std::vector<double> plain;
  for (int i = 0; i < std::max(timing.min_runs, row.t.runs); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ctx.execute();
    plain.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  ctx.enable_profiling(true);
  for (int i = 0; i < std::max(timing.min_runs, row.t.runs); ++i) ctx.execute();

  std::map<std::string, std::pair<double, int>> by_kind;  // avg ms per run, layer count
  double layers_ms = 0;
  for (const ke::LayerTiming& l : ctx.profile()) {
    if (l.runs == 0) continue;
    auto& k = by_kind[l.kind];
    k.first += l.total_ms / l.runs;
    k.second += 1;
    layers_ms += l.total_ms / l.runs;
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> kinds(by_kind.begin(), by_kind.end());
  std::sort(kinds.begin(), kinds.end(),
            [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::printf("\n### profile: %s %s (ratio %.2f)\n\n", row.model.c_str(), row.input.c_str(),
              row.ratio());
  std::printf(
      "libtorch %.3f ms; compiled module %.3f ms; its engine alone %.3f ms "
      "(ExecutionContext::execute, median); layers sum to %.3f ms when profiled\n\n",
      row.t.a_ms, row.t.b_ms, median(plain), layers_ms);
  std::printf("| layer kind | layers | ms per run | share |\n| --- | --- | --- | --- |\n");
  for (const auto& [kind, v] : kinds) {
    std::printf("| %s | %d | %.3f | %.1f%% |\n", kind.c_str(), v.second, v.first,
                100.0 * v.first / layers_ms);
  }
  std::printf("\nslowest layers:\n```\n");
  std::istringstream table(ctx.profile_table());
  int line_no = 0;
  for (std::string line; std::getline(table, line) && line_no <= top; ++line_no)
    std::printf("%s\n", line.c_str());
  std::printf("```\n");
}

// --- compare: make demo's run of the original and the compiled module -----------------------

int compare(const std::string& original_path, const std::string& compiled_path,
            const std::string& shape_spec, const TimingOptions& timing, int threads, bool profile,
            int top) {
  std::vector<int64_t> shape;
  {
    std::string s = shape_spec;
    for (char& c : s)
      if (c == '(' || c == ')' || c == 'x') c = ',';
    std::stringstream ss(s);
    for (std::string d; std::getline(ss, d, ',');)
      if (!d.empty()) shape.push_back(std::stoll(d));
  }
  torch::jit::Module original = torch::jit::load(original_path);
  torch::jit::Module compiled = torch::jit::load(compiled_path);
  original.eval();
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const at::Tensor x = torch::randn(shape);
  const torch::jit::IValue ref = original.forward({x}), got = compiled.forward({x});
  const auto [diff, scale] = max_abs_diff(got, ref);
  const PairTiming t =
      time_pair([&] { original.forward({x}); }, [&] { compiled.forward({x}); }, timing);
  const bool close = diff <= 1e-3 * std::max(1.0, scale);
  std::printf("\ninput: f32 %s, random normal; threads: %s\n", shape_text(shape).c_str(),
              threads_line(threads).c_str());
  std::printf("largest |kiln - PyTorch| over the output: %.3g (outputs reach %.3g): %s\n", diff,
              scale, close ? "match" : "MISMATCH");
  std::printf("median latency, %d interleaved runs each after %d warm-up runs:\n", t.runs,
              timing.warmup);
  const std::string torch_label =
      std::string("PyTorch (libtorch ") + TORCH_VERSION + ", the TorchScript module):";
  const int width = static_cast<int>(torch_label.size());
  std::printf("  %-*s %8.2f ms\n", width, torch_label.c_str(), t.a_ms);
  std::printf("  %-*s %8.2f ms\n", width, "kiln (the compiled module):", t.b_ms);
  std::printf("speed ratio PyTorch / kiln: %.2fx (%s)\n", t.a_ms / t.b_ms,
              t.a_ms >= t.b_ms ? "kiln faster" : "kiln slower");
  if (profile) {
    Row row;
    row.model = original_path;
    row.input = "f32 " + shape_text(shape);
    row.t = t;
    profile_engine(original, x, row, timing, top);
  }
  return close ? 0 : 1;
}

int bench_models(const std::string& dir, const std::vector<std::string>& names,
                 const std::vector<int64_t>& batches, const TimingOptions& timing, int threads,
                 bool profile_slower, bool profile_all, int top) {
  torch::NoGradGuard no_grad;
  std::vector<Row> rows;
  std::vector<std::function<void()>> profiles;
  for (const std::string& name : names) {
    torch::jit::Module module = torch::jit::load(dir + "/" + name + ".ts");
    module.eval();
    const torch::jit::IValue example = example_argument(dir + "/" + name + ".io.pt");
    TORCH_CHECK(example.isTensor(), name, ": the bench takes models with one tensor argument");
    for (const int64_t batch : batches) {
      torch::manual_seed(static_cast<uint64_t>(batch));
      const at::Tensor x = input_of(example.toTensor(), batch);
      Row row;
      row.model = name;
      row.batch = batch;
      row.input = (x.scalar_type() == at::kLong ? "i64 " : "f32 ") + shape_text(x.sizes());
      std::fprintf(stderr, "cpu_models: %s %s: compiling\n", name.c_str(), row.input.c_str());
      kiln::CompileReport report;
      torch::jit::Module compiled = kiln::compile(module, static_spec(x), &report);
      for (const auto& s : report.segments) row.engines += s.target == "engine";
      row.torch_ops = report.torch_ops;
      std::tie(row.diff, row.scale) = max_abs_diff(compiled.forward({x}), module.forward({x}));
      std::fprintf(stderr, "cpu_models: %s %s: timing\n", name.c_str(), row.input.c_str());
      row.t = time_pair([&] { module.forward({x}); }, [&] { compiled.forward({x}); }, timing);
      if (profile_all || (profile_slower && row.ratio() < 1.0)) {
        profiles.push_back(
            [module, x, row, timing, top] { profile_engine(module, x, row, timing, top); });
      }
      rows.push_back(row);
    }
  }

  std::printf("\nlibtorch %s (mkldnn %d), threads: %s\n", TORCH_VERSION,
              static_cast<int>(at::hasMKLDNN()), threads_line(threads).c_str());
  std::printf(
      "times: medians of interleaved runs after %d warm-up runs each; ratio = libtorch / "
      "kiln (> 1: kiln faster); cpu ratio: the same with main-thread CPU time\n\n",
      timing.warmup);
  std::printf(
      "| model | input | engines | libtorch ms | kiln ms | ratio | cpu ratio | runs "
      "| max abs diff |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::map<int64_t, std::vector<double>> by_batch;
  std::vector<double> all;
  for (const Row& r : rows) {
    std::printf("| %s | %s | %zu%s | %.3f | %.3f | %.2f | %.2f | %d | %.2g |\n", r.model.c_str(),
                r.input.c_str(), r.engines, r.torch_ops ? " (+torch ops)" : "", r.t.a_ms, r.t.b_ms,
                r.ratio(), r.cpu_ratio(), r.t.runs, r.diff);
    all.push_back(r.ratio());
    by_batch[r.batch].push_back(r.ratio());
  }
  std::printf("\nmedian ratio: %.2f over %zu rows", median(all), all.size());
  for (const auto& [batch, ratios] : by_batch)
    std::printf("; batch %lld: %.2f", static_cast<long long>(batch), median(ratios));
  const auto slower = std::count_if(all.begin(), all.end(), [](double r) { return r < 1.0; });
  std::printf("; rows below 1.0: %lld\n", static_cast<long long>(slower));
  for (const auto& p : profiles) p();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln_cpu_models_bench: zoo models compiled by kiln vs libtorch on the CPU"};
  std::string models_dir;
  std::vector<std::string> only;
  std::vector<int64_t> batches = {1, 8};
  TimingOptions timing;
  int threads = 0, top = 12;
  bool profile = false, profile_all = false;
  app.add_option("--models", models_dir, "folder of tests/models/make_models.py's output");
  app.add_option("--model", only, "only this zoo model (repeatable)");
  app.add_option("--batch", batches, "batch sizes (repeatable; default 1 and 8)");
  app.add_option("--threads", threads, "threads for both (default: OpenMP's, OMP_NUM_THREADS)");
  app.add_option("--warmup", timing.warmup, "untimed runs of each side first");
  app.add_option("--min-runs", timing.min_runs, "timed runs of each side, at least");
  app.add_option("--max-runs", timing.max_runs, "timed runs of each side, at most");
  app.add_option("--budget", timing.budget_s, "seconds of timed runs per row, once min-runs ran");
  app.add_flag("--profile", profile,
               "profile kiln's engine for rows where kiln is slower (compare: always)");
  app.add_flag("--profile-all", profile_all, "profile kiln's engine for every row");
  app.add_option("--top", top, "slowest layers to list in a profile");
  app.fallthrough();  // the timing options may follow `compare` too
  CLI::App* cmp = app.add_subcommand(
      "compare", "run an original and a compiled module on one random input: difference, speed");
  std::string original, compiled, shape;
  cmp->add_option("original", original, "the TorchScript module")->required();
  cmp->add_option("compiled", compiled, "the module kilnc wrote")->required();
  cmp->add_option("--shape", shape, "input shape, e.g. 1,3,224,224")->required();
  CLI11_PARSE(app, argc, argv);

  try {
    threads = set_threads(threads);
    if (cmp->parsed())
      return compare(original, compiled, shape, timing, threads, profile || profile_all, top);
    if (models_dir.empty()) {
      std::fprintf(stderr, "kiln_cpu_models_bench: --models DIR is required\n");
      return 2;
    }
    for (const std::string& name : only) {
      if (std::find(kZoo.begin(), kZoo.end(), name) == kZoo.end()) {
        std::string known;
        for (const std::string& z : kZoo) known += " " + z;
        std::fprintf(stderr, "kiln_cpu_models_bench: --model %s is not a zoo model (known:%s)\n",
                     name.c_str(), known.c_str());
        return 2;
      }
    }
    return bench_models(models_dir, only.empty() ? kZoo : only, batches, timing, threads, profile,
                        profile_all, top);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_cpu_models_bench: error: %s\n", e.what());
    return 1;
  }
}
