// kiln-run: loads a plan, runs it on random or given-shape inputs, prints outputs and latency.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "engine/cpu/convert.h"
#include "engine/cuda/backend.h"
#include "engine/plan.h"
#include "engine/runtime.h"
#include "util/errors.h"

namespace {

using namespace kiln::engine;

constexpr int kExitInputError = 2;

// "x:1x3x224x224,mask:1x128" -> per-input shapes.
std::map<std::string, Shape> parse_shapes(const std::string& spec) {
  std::map<std::string, Shape> shapes;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto colon = item.rfind(':');
    KILN_CHECK(colon != std::string::npos && colon > 0, InvalidArgument, "--shapes: `", item,
               "` is not NAME:DxDx...");
    Shape shape;
    std::stringstream dims(item.substr(colon + 1));
    for (std::string d; std::getline(dims, d, 'x');) {
      KILN_CHECK(!d.empty() && d.find_first_not_of("0123456789") == std::string::npos,
                 InvalidArgument, "--shapes: `", item, "`: `", d, "` is not a dimension");
      shape.push_back(std::stoll(d));
    }
    shapes[item.substr(0, colon)] = shape;
  }
  return shapes;
}

void summarize(const std::string& name, const HostTensor& t) {
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = kiln::engine::load_as<float>(t.dtype(), t.data(), i);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  std::cout << "output " << name << ": " << dtype_name(t.dtype()) << shape_to_string(t.shape());
  if (t.numel() > 0) {
    std::cout << " min " << lo << " max " << hi << " mean " << sum / static_cast<double>(t.numel());
    std::cout << " first [";
    for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 5); ++i) {
      std::cout << (i ? ", " : "") << kiln::engine::load_as<float>(t.dtype(), t.data(), i);
    }
    std::cout << "]";
  }
  std::cout << "\n";
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i =
      std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-run: load a kiln plan, run it, print outputs and latency"};
  std::string plan_path, shapes_spec, warmup_shapes_spec, dump_dir, device;
  int iterations = 20, warmup = 3;
  bool profile = false, inspect = false, warm_profile_points = false;
  app.add_option("plan", plan_path, "plan file (from kilnc --save-engine or the builder)")
      ->required();
  app.add_option("--shapes", shapes_spec, "input shapes for dynamic inputs: NAME:DxD,...");
  app.add_option("--iterations", iterations, "timed runs")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-shapes", warmup_shapes_spec,
                 "runs once at each of these shapes (NAME:DxD,...;NAME:DxD,...) before anything "
                 "else: with --warmup 0 --iterations 1 --profile, what a new shape costs");
  app.add_flag("--warm-profile-points", warm_profile_points,
               "runs once at each profile point first, as a loaded kiln.Engine does "
               "(KILN_WARM_AT_LOAD), then as asked");
  app.add_option("--device", device,
                 "cpu, or cuda[:N] for a cuda plan (the CUDA device to run it on; default cuda:0)");
  app.add_flag("--profile", profile, "print a per-layer profile");
  app.add_flag("--inspect", inspect,
               "print the engine's layers as JSON first (a cuda plan on a machine without a CUDA "
               "device: only that)");
  app.add_option("--dump", dump_dir,
                 "write inputN.bin and outputN.bin (raw bytes) into this folder");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitInputError;
  }
  try {
    Plan plan = load_plan(plan_path);
    if (!device.empty()) {
      const bool want_cuda = device != "cpu";
      KILN_CHECK(want_cuda == (plan.target.device == "cuda"), InvalidArgument, "--device ", device,
                 ": the plan was built for ", plan.target.device,
                 " (plans run on the device kind they were built for)");
      if (want_cuda) plan.target.device_index = kiln::engine::cuda::parse_device(device);
    }
    if (inspect) {
      // Before the engine is made: a plan can be inspected where it cannot run.
      std::cout << inspect_json(plan.network, plan.target) << "\n";
      if (plan.target.device == "cuda" &&
          (!kiln::engine::cuda::built() || kiln::engine::cuda::device_count() == 0)) {
        std::cerr << "kiln-run: inspected only: the plan is for cuda and this machine has no CUDA "
                     "device\n";
        return 0;
      }
    }
    auto engine = std::make_shared<const Engine>(std::move(plan.network), plan.target);
    if (!plan.target.choices.empty()) {
      // Taken only where made with this device and these libraries (EngineTarget::choices).
      std::cout << "kernel choices: " << plan.target.choices.size() << " in the plan, "
                << engine->kernel_choices().size() << " taken (made on "
                << plan.target.choice_environment << ")\n";
    }
    const auto shapes = parse_shapes(shapes_spec);
    for (const auto& [name, shape] : shapes) engine->input_index(name);  // unknown names throw

    std::mt19937_64 rng(0);
    // Random inputs at `given` shapes, the profile's opt for inputs not named.
    auto make_inputs = [&](const std::map<std::string, Shape>& given, bool print) {
      std::vector<HostTensor> made;
      for (size_t i = 0; i < engine->num_inputs(); ++i) {
        const TensorDesc& in = engine->input(i);
        const Profile& p = engine->network().profile(engine->network().inputs()[i]);
        const auto it = given.find(in.name);
        const Shape shape = it != given.end() ? it->second : p.opt;
        if (print) {
          std::cout << "input " << in.name << ": " << dtype_name(in.dtype) << shape_to_string(shape)
                    << "\n";
        }
        made.push_back(random_host_tensor(in.dtype, shape, rng));
      }
      return made;
    };
    ExecutionContext ctx(engine);
    if (warm_profile_points) ctx.run_profile_points();
    std::vector<HostTensor> outputs;
    std::stringstream warm(warmup_shapes_spec);
    for (std::string item; std::getline(warm, item, ';');) {
      const auto at = parse_shapes(item);
      for (const auto& [name, shape] : at) engine->input_index(name);
      ctx.run(make_inputs(at, false));
    }
    const std::vector<HostTensor> inputs = make_inputs(shapes, true);
    for (int i = 0; i < warmup; ++i) outputs = ctx.run(inputs);
    ctx.enable_profiling(profile);
    std::vector<double> ms;
    for (int i = 0; i < iterations; ++i) {
      const auto start = std::chrono::steady_clock::now();
      outputs = ctx.run(inputs);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    for (size_t i = 0; i < outputs.size(); ++i) summarize(engine->output(i).name, outputs[i]);
    std::printf("latency ms over %d runs: min %.4f median %.4f p90 %.4f p99 %.4f\n", iterations,
                percentile(ms, 0), percentile(ms, 50), percentile(ms, 90), percentile(ms, 99));
    std::printf("activation arena: %zu bytes\n", ctx.arena_bytes());
    if (profile) std::cout << ctx.profile_table();
    if (!dump_dir.empty()) {
      auto dump = [&](const std::string& name, const HostTensor& t) {
        const std::string path = dump_dir + "/" + name + ".bin";
        std::ofstream out(path, std::ios::binary);
        KILN_CHECK(out.good(), InvalidArgument, path, ": cannot open for writing");
        out.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
      };
      for (size_t i = 0; i < inputs.size(); ++i) dump("input" + std::to_string(i), inputs[i]);
      for (size_t i = 0; i < outputs.size(); ++i) dump("output" + std::to_string(i), outputs[i]);
    }
    return 0;
  } catch (const kiln::Error& e) {
    std::cerr << "kiln-run: error: " << e.what() << "\n";
    return e.kind() == kiln::ErrorKind::kInternal ? 3 : kExitInputError;
  } catch (const std::exception& e) {
    std::cerr << "kiln-run: error: " << e.what() << "\n";
    return 3;
  }
}
