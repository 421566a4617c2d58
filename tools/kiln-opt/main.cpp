// kiln-opt: reads TorchScript IR text, a saved module or a torch.export program (.pt2), runs
// lowering steps, prints the graph, its partition into engine and torch segments, or the engine's
// coverage of its ops.
#include <torch/csrc/jit/runtime/operator.h>
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <sstream>

#include "compiler/capability.h"
#include "ir/graph_io.h"
#include "kiln/kiln.h"
#include "kiln/logging.h"
#include "lowering/lower.h"
#include "partitioning/coverage.h"
#include "partitioning/partitioning.h"
#include "util/errors.h"

namespace {

constexpr int kExitInputError = 2;  // bad flags, unreadable or malformed input, unsupported graph
constexpr int kExitInternalError = 3;

// Errors are one line, so scripts can grep them and editors can jump to FILE:LINE:COL.
int fail(int code, std::string message) {
  while (!message.empty() && message.back() == '\n') message.pop_back();
  for (char& c : message) c = c == '\n' ? ' ' : c;
  std::cerr << "kiln-opt: error: " << message << '\n';
  return code;
}

// CLI11 validators return an error message (prefixed with the flag's name by CLI11) or "".
std::string check_block_size(const std::string& value) {
  const std::string usage = "expected a whole number of at least 1, got `" + value + "`";
  if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos) return usage;
  try {
    return std::stoull(value) >= 1 ? "" : usage;
  } catch (const std::out_of_range&) {
    return usage;
  }
}

// torch_executed_ops names an op ("aten::mul") or one overload ("aten::add.Tensor"). A typo would
// silently match nothing, so aten ops are checked against the operators libtorch registers.
std::string check_op_name(const std::string& value) {
  const std::string usage = "`" + value + "` is not an op name like aten::mul or aten::add.Tensor";
  const size_t sep = value.find("::");
  if (sep == std::string::npos || sep == 0 || sep + 2 == value.size()) return usage;
  const size_t dot = value.find('.', sep + 2);
  const std::string name = value.substr(0, dot);
  if (name.compare(0, sep + 2, "aten::") != 0) return "";
  const auto ops = torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(name));
  if (ops.empty()) return "no operator is named `" + name + "`";
  if (dot == std::string::npos) return "";
  const std::string overload = value.substr(dot + 1);
  for (const auto& op : ops) {
    if (op->schema().overload_name() == overload) return "";
  }
  return "`" + name + "` has no overload `" + overload + "`";
}

kiln::partitioning::Strategy parse_strategy(const std::string& name) {
  return name == "global" ? kiln::partitioning::Strategy::kGlobal
                          : kiln::partitioning::Strategy::kDependencyAware;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kiln-opt: read TorchScript IR (text or a saved module) or a torch.export program (.pt2), "
      "run passes, print the graph"};
  std::string input;
  std::string output;
  bool lower = false;
  bool print_after_all = false;
  std::vector<std::string> passes;
  std::vector<std::string> torch_executed_modules;
  std::string log_level;
  bool print_partition = false;
  bool print_support = false;
  std::string support_json;
  kiln::partitioning::PartitionSettings settings;
  std::vector<std::string> torch_executed_ops;
  std::string strategy = "dependency-aware";
  app.add_option("input", input, "IR text file or torch.jit.save'd module")->required();
  app.add_option("-o,--output", output, "write what is printed here instead of stdout");
  app.add_flag("--lower", lower, "run the whole lowering pipeline");
  app.add_option("--pass", passes, "run only this lowering pass (repeatable, pipeline order)");
  app.add_flag("--print-after-all", print_after_all, "print the graph after every pass");
  app.add_option("--torch-executed-module", torch_executed_modules,
                 "keep this module type in PyTorch (repeatable; saved modules)");
  app.add_option("--log-level", log_level, "error|warning|info|debug|graph (or KILN_LOG_LEVEL)");
  app.add_flag("--partition", print_partition,
               "print the engine and torch segments, one line each (a saved module is lowered)");
  app.add_flag("--support", print_support,
               "print how many ops the engine takes, per op with the reasons for the rest");
  app.add_option("--support-json", support_json, "write the --support report here as JSON");
  app.add_option("--min-block-size", settings.min_block_size,
                 "engine segments with fewer ops fall back to PyTorch (default 3)")
      ->check(CLI::Validator(check_block_size, "N>=1"));
  app.add_option("--torch-executed-op", torch_executed_ops,
                 "keep this op (aten::mul) or overload (aten::add.Tensor) in PyTorch (repeatable)")
      ->check(CLI::Validator(check_op_name, "OP"));
  app.add_flag("--require-full-compilation", settings.require_full_compilation,
               "fail, naming every node the engine cannot take, instead of falling back");
  app.add_option("--strategy", strategy, "partitioning strategy (default dependency-aware)")
      ->check(CLI::IsMember({"dependency-aware", "global"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitInputError;
  }

  try {
    if (!log_level.empty()) {
      auto level = kiln::parse_log_level(log_level);
      if (!level) return fail(kExitInputError, "--log-level: unknown level `" + log_level + "`");
      kiln::set_log_level(*level);
    }
    // A torch.export program (.pt2) through the ATen frontend; else IR text or a saved module.
    kiln::ir::LoadedGraph loaded;
    if (kiln::is_exported_program(input)) {
      loaded.module = kiln::load_exported_program(input).module;
      loaded.graph = loaded.module->get_method("forward").graph();
    } else {
      loaded = kiln::ir::load_graph_file(input);
    }
    auto graph = loaded.graph;

    const bool partition = print_partition || print_support || !support_json.empty();
    // A saved module's forward graph calls its submodules' methods; only lowering (freezing and
    // inlining) gives a graph of ops to partition.
    if (lower || !passes.empty() || (partition && loaded.module)) {
      kiln::lowering::LoweringOptions options;
      options.torch_executed_modules = torch_executed_modules;
      options.passes.only = passes;
      options.passes.print_after_all = print_after_all ? &std::cout : nullptr;
      graph = loaded.module ? kiln::lowering::lower_module(*loaded.module, options)
                            : kiln::lowering::lower_graph(*graph, options);
    }

    std::ostringstream text;
    if (!partition) {
      text << *graph;
    } else {
      settings.torch_executed_ops = {torch_executed_ops.begin(), torch_executed_ops.end()};
      settings.torch_executed_modules = {torch_executed_modules.begin(),
                                         torch_executed_modules.end()};
      settings.strategy = parse_strategy(strategy);
      const kiln::compiler::RegistryCapability capability(kiln::conversion::default_registry());
      const auto partitioned = kiln::partitioning::partition(graph, capability, settings);
      if (print_partition) text << kiln::partitioning::format_segments(partitioned);
      const auto report = kiln::partitioning::coverage(partitioned);
      // --support-json alone still prints something: the same report as text.
      if (print_support || !print_partition) text << kiln::partitioning::to_text(report);
      if (!support_json.empty()) {
        std::ofstream json(support_json);
        if (!json) return fail(kExitInputError, support_json + ": cannot open for writing");
        json << kiln::partitioning::to_json(report).dump(2) << '\n';
      }
    }

    if (output.empty()) {
      std::cout << text.str();
    } else {
      std::ofstream out(output);
      if (!out) return fail(kExitInputError, output + ": cannot open for writing");
      out << text.str();
    }
    return 0;
  } catch (const kiln::Error& e) {
    const bool internal = e.kind() == kiln::ErrorKind::kInternal;
    return fail(internal ? kExitInternalError : kExitInputError, e.message());
  } catch (const c10::Error& e) {
    return fail(kExitInternalError, e.msg());
  } catch (const std::exception& e) {
    return fail(kExitInternalError, e.what());
  }
}
