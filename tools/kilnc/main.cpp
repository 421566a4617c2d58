// kilnc: compile a TorchScript module or a torch.export program (.pt2) from the command line
// (torchtrtc's interface).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "kiln/kiln.h"
#include "kiln/logging.h"
#include "util/errors.h"

namespace {

constexpr int kExitInputError = 2;  // bad flags or specs, unreadable or unsupported model
constexpr int kExitInternalError = 3;

int fail(int code, std::string message) {
  while (!message.empty() && message.back() == '\n') message.pop_back();
  std::cerr << "kilnc: error: " << message << '\n';
  return code;
}

torch::jit::Module load_module(const std::string& path) {
  std::ifstream probe(path);
  KILN_CHECK(probe.good(), InvalidArgument, path, ": cannot open");
  try {
    return torch::jit::load(path);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    if (what.find("kiln") != std::string::npos && what.find("Unknown") != std::string::npos) {
      KILN_THROW(InvalidArgument, path,
                 ": it holds kiln engines; it is already compiled (load libkiln_runtime.so to "
                 "run it)");
    }
    KILN_THROW(InvalidArgument, path,
               ": not a TorchScript module: ", what.substr(0, what.find('\n')));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kilnc: compile a TorchScript module or a torch.export program (.pt2) with kiln"};
  std::string input_path, output_path;
  std::vector<std::string> input_specs;
  std::string device = "cpu";
  std::vector<std::string> precisions;
  size_t min_block_size = 3;
  std::vector<std::string> torch_ops, torch_modules;
  std::vector<std::string> backend_priority, backend_ops;
  bool resource_partitioning = false;
  uint64_t memory_budget = 0;
  bool full = false, truncate = false, save_engine = false, debug = false, quiet = false,
       disable_tf32 = false, exact_gelu = false, print_after_all = false, refittable = false,
       assume_dynamic = false;
  std::string refit_path, cache_dir;
  bool engine_cache = false;
  uint64_t cache_size = kiln::CompileSpec{}.engine_cache_size;
  std::vector<std::string> switches;
  std::string check_method;
  std::string report_path;
  size_t workspace = 0;
  app.add_option(
         "input", input_path,
         "TorchScript module (torch.jit.save) or exported program (torch.export.save, .pt2)")
      ->required();
  app.add_option("output", output_path, "where to write the compiled module (or plan)");
  app.add_option("inputs", input_specs,
                 "one spec per forward argument: (N,C,H,W)[@dtype] or "
                 "[(min);(opt);(max)][@dtype], dtype f32|f16|bf16|i32|i64|i8|u8|bool");
  app.add_option("--device", device, "cpu | cuda | cuda:N");
  app.add_option("-p,--enabled-precision", precisions, "f32 | f16 | bf16 (repeatable)");
  app.add_option("--min-block-size", min_block_size, "fewest ops in an engine segment")
      ->check(CLI::PositiveNumber);
  app.add_option("--torch-executed-op", torch_ops, "keep this op in PyTorch (repeatable)");
  app.add_option("--torch-executed-module", torch_modules,
                 "keep this module type in PyTorch (repeatable)");
  app.add_flag("--require-full-compilation", full, "fail unless the whole graph is one engine");
  app.add_option("--backend-priority", backend_priority,
                 "engine backends in priority order, cuda | cpu (repeatable; default: --device's)")
      ->delimiter(',');
  app.add_option(
      "--backend-ops", backend_ops,
      "BACKEND=OP[,OP...]: the ops a backend of --backend-priority may take (repeatable; "
      "a backend without it takes every op kiln converts)");
  app.add_flag("--resource-partitioning", resource_partitioning,
               "split engine segments until each one's build fits --cpu-memory-budget");
  app.add_option("--cpu-memory-budget", memory_budget,
                 "bytes an engine build may take (implies --resource-partitioning; default: the "
                 "machine's available memory)");
  app.add_flag("--truncate-long-double", truncate, "accepted for compatibility (int64 is native)");
  app.add_flag("--assume-dynamic-shape-support", assume_dynamic,
               "convert nodes with dynamic input dims also where their converter does not declare "
               "support for dynamic shapes (default: those run in PyTorch)");
  app.add_option("--workspace-size", workspace,
                 "the most bytes an engine's activations may take at the opt shapes (0, the "
                 "default: no limit)");
  app.add_flag("--disable-tf32", disable_tf32,
               "cuda: f32 convolutions, matmuls and attention in full f32 math (default: TF32 "
               "tensor cores)");
  app.add_flag("--exact-gelu", exact_gelu,
               "cuda: keep erf GELU after f16/bf16 matmuls (default: tanh form in the epilogue)");
  app.add_option("--switch", switches,
                 "measurement switch NAME=VALUE (repeatable; for A/B timings): the builder's "
                 "conv_layout=auto|channels_first|channels_last, squeeze_excitation=on|off, "
                 "excitation_projection=on|off, cast_into_shuffle=on|off, concat_in_place=on|off, "
                 "decompose_attention=on|off, attention_mask_biases=on|off, "
                 "choose_at_build=on|off; the CUDA kernels' "
                 "cuda_pointwise=auto|cudnn, "
                 "cuda_depthwise=auto|strip, cuda_grouped=auto|cudnn|kernel, gemm_fold, "
                 "gemm_timing, gemm_split_k, attention_key_split, cuda_codegen, "
                 "reuse_algorithms, first_call_gemm, repeat_tuning (=on|off); "
                 "attention_cudnn=auto|on|off; cuda_arch=NN");
  app.add_flag("--refittable", refittable,
               "engines whose weights --refit can replace without a rebuild");
  app.add_option("--refit", refit_path,
                 "NEW_WEIGHTS (.ts or .pt2, the same architecture): write `input` (a module "
                 "compiled --refittable) with these weights to `output`, without rebuilding "
                 "its engines");
  app.add_flag("--engine-cache", engine_cache,
               "load the compiled module, or else its built engines, from the engine cache; store "
               "what it lacks");
  app.add_option("--engine-cache-dir", cache_dir,
                 "the engine cache's directory (implies --engine-cache; default "
                 "$KILN_ENGINE_CACHE_DIR, else ~/.cache/kiln/engines)");
  app.add_option("--engine-cache-size", cache_size,
                 "the most bytes the engine cache may hold (default 5 GiB; least recently used "
                 "entries go first)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--print-after-all", print_after_all,
               "print each engine's network after every builder pass (stderr)");
  app.add_option("--check-method-support", check_method,
                 "only report whether every op of this method is supported");
  app.add_flag("--save-engine", save_engine,
               "write the standalone engine plan instead of a module");
  app.add_option("--report", report_path,
                 "write segments, fallback reasons, shapes, times as JSON");
  app.add_flag("-v,--debug", debug, "log every phase (and graphs) to stderr");
  app.add_flag("-q,--quiet", quiet, "no progress or summary");
  // CLI11 reads an argument written "[...]" as its own list syntax and splits it at the commas;
  // a leading space (which the spec parser trims) keeps range specs whole.
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::string& a : args) {
    if (!a.empty() && a.front() == '[') a.insert(a.begin(), ' ');
  }
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitInputError;
  }

  try {
    if (debug) kiln::set_log_level(kiln::LogLevel::kDebug);
    const auto start = std::chrono::steady_clock::now();
    // A .pt2 archive goes through the ATen frontend; its export gives the input shapes.
    const auto load_any = [](const std::string& path, std::optional<kiln::ExportedModule>& ep) {
      const bool pt2_name = path.size() > 4 && path.compare(path.size() - 4, 4, ".pt2") == 0;
      if (pt2_name || kiln::is_exported_program(path)) ep = kiln::load_exported_program(path);
      return ep ? ep->module : load_module(path);
    };
    std::optional<kiln::ExportedModule> exported;
    // Writes --report and, unless quiet, the summary and `done` (what was written) with the time.
    const auto finish = [&](const kiln::CompileReport& report, const std::string& done) {
      if (!report_path.empty()) {
        std::ofstream out(report_path);
        if (!out) return fail(kExitInputError, report_path + ": cannot open for writing");
        out << report.to_json() << "\n";
      }
      if (!quiet) {
        const double total =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::cout << report.summary() << done << " in " << std::fixed << std::setprecision(2)
                  << total << " s\n";
      }
      return 0;
    };

    if (!refit_path.empty()) {
      if (output_path.empty()) return fail(kExitInputError, "output: a path is required");
      if (!input_specs.empty()) {
        return fail(kExitInputError,
                    "--refit: the compiled module carries its input specs; give none");
      }
      const torch::jit::Module compiled = load_module(input_path);
      const torch::jit::Module weights = load_any(refit_path, exported);
      kiln::CompileReport report;
      torch::jit::Module refitted = kiln::refit(compiled, weights, &report);
      refitted.save(output_path);
      return finish(report, "refit " + input_path + " with " + refit_path + " into " + output_path);
    }
    torch::jit::Module module = load_any(input_path, exported);

    if (!check_method.empty()) {
      std::string text;
      const bool ok = kiln::check_method_op_support(module, check_method, &text);
      std::cout << text;
      std::cout << "method `" << check_method << "` is " << (ok ? "" : "not ")
                << "fully supported\n";
      return ok ? 0 : 1;
    }
    if (output_path.empty()) return fail(kExitInputError, "output: a path is required");
    if (input_specs.empty() && !exported) {
      return fail(kExitInputError, "inputs: give one input spec per forward argument");
    }

    kiln::CompileSpec spec;
    for (const std::string& s : input_specs) spec.inputs.push_back(kiln::parse_input_spec(s));
    if (input_specs.empty()) spec.inputs = exported->specs();
    spec.device = kiln::parse_device(device);
    if (!precisions.empty()) {
      spec.enabled_precisions.clear();
      for (const std::string& p : precisions) {
        const kiln::DType d = kiln::parse_dtype(p);
        if (d != kiln::DType::kF32 && d != kiln::DType::kF16 && d != kiln::DType::kBF16) {
          return fail(kExitInputError, "--enabled-precision: `" + p +
                                           "` is not a floating precision (f32, f16, bf16)");
        }
        spec.enabled_precisions.push_back(d);
      }
    }
    spec.min_block_size = min_block_size;
    spec.torch_executed_ops = torch_ops;
    spec.torch_executed_modules = torch_modules;
    spec.require_full_compilation = full;
    spec.backend_priority = backend_priority;
    for (const std::string& entry : backend_ops) {
      const size_t eq = entry.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size()) {
        return fail(kExitInputError, "--backend-ops: `" + entry +
                                         "` is not BACKEND=OP[,OP...], e.g. cpu=aten::lgamma");
      }
      std::vector<std::string>& ops = spec.backend_support_map[entry.substr(0, eq)];
      std::stringstream list(entry.substr(eq + 1));
      for (std::string op; std::getline(list, op, ',');) {
        if (!op.empty()) ops.push_back(op);
      }
    }
    spec.enable_resource_partitioning = resource_partitioning || memory_budget > 0;
    spec.cpu_memory_budget = memory_budget;
    spec.truncate_long_and_double = truncate;
    spec.assume_dynamic_shape_support = assume_dynamic;
    spec.workspace_size = workspace;
    spec.disable_tf32 = disable_tf32;
    spec.exact_gelu = exact_gelu;
    spec.switches = switches;
    spec.refittable = refittable;
    spec.engine_cache = engine_cache || !cache_dir.empty();
    spec.engine_cache_dir = cache_dir;
    spec.engine_cache_size = cache_size;
    spec.print_after_all = print_after_all;
    spec.debug = debug;
    if (!quiet) {
      spec.progress = [](kiln::Phase phase, const std::string& detail) {
        std::cerr << "kilnc: " << kiln::phase_name(phase) << (detail.empty() ? "" : ": ") << detail
                  << std::endl;
      };
    }

    if (save_engine) {
      const auto plan = kiln::convert_method_to_engine(module, "forward", spec);
      std::ofstream out(output_path, std::ios::binary);
      if (!out) return fail(kExitInputError, output_path + ": cannot open for writing");
      out.write(reinterpret_cast<const char*>(plan.data()),
                static_cast<std::streamsize>(plan.size()));
      if (!quiet)
        std::cerr << "kilnc: wrote engine plan " << output_path << " (" << plan.size()
                  << " bytes)\n";
      return 0;
    }

    kiln::CompileReport report;
    torch::jit::Module compiled = kiln::compile(module, spec, &report);
    compiled.save(output_path);
    return finish(report, "wrote " + output_path);
  } catch (const kiln::Error& e) {
    const bool internal = e.kind() == kiln::ErrorKind::kInternal;
    return fail(internal ? kExitInternalError : kExitInputError, e.what());
  } catch (const c10::Error& e) {
    return fail(kExitInternalError, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(kExitInternalError, e.what());
  }
}
