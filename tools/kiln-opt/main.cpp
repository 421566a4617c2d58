// kiln-opt: reads TorchScript IR text or a saved module, runs lowering steps, prints the graph.
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>

#include "ir/graph_io.h"
#include "ir/torch_compat.h"
#include "kiln/logging.h"
#include "lowering/lower.h"
#include "util/errors.h"

namespace {

constexpr int kExitInputError = 2;  // bad flags, unreadable or malformed input
constexpr int kExitInternalError = 3;

// Errors are one line, so scripts can grep them and editors can jump to FILE:LINE:COL.
int fail(int code, std::string message) {
  while (!message.empty() && message.back() == '\n') message.pop_back();
  for (char& c : message) c = c == '\n' ? ' ' : c;
  std::cerr << "kiln-opt: error: " << message << '\n';
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kiln-opt: read TorchScript IR (text or a saved module), run passes, print the graph"};
  std::string input;
  std::string output;
  bool lower = false;
  bool print_after_all = false;
  std::vector<std::string> passes;
  std::vector<std::string> torch_executed_modules;
  std::string log_level;
  app.add_option("input", input, "IR text file or torch.jit.save'd module")->required();
  app.add_option("-o,--output", output, "write the final graph here instead of stdout");
  app.add_flag("--lower", lower, "run the whole lowering pipeline");
  app.add_option("--pass", passes, "run only this lowering pass (repeatable, pipeline order)");
  app.add_flag("--print-after-all", print_after_all, "print the graph after every pass");
  app.add_option("--torch-executed-module", torch_executed_modules,
                 "keep this module type in PyTorch (repeatable; saved modules)");
  app.add_option("--log-level", log_level, "error|warning|info|debug|graph (or KILN_LOG_LEVEL)");
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
    kiln::ir::LoadedGraph loaded = kiln::ir::load_graph_file(input);
    auto graph = loaded.graph;

    if (lower || !passes.empty()) {
      kiln::lowering::LoweringOptions options;
      options.torch_executed_modules = torch_executed_modules;
      options.passes.only = passes;
      options.passes.print_after_all = print_after_all ? &std::cout : nullptr;
      graph = loaded.module ? kiln::lowering::lower_module(*loaded.module, options)
                            : kiln::lowering::lower_graph(*graph, options);
    }

    if (output.empty()) {
      std::cout << *graph;
    } else {
      std::ofstream out(output);
      if (!out) return fail(kExitInputError, output + ": cannot open for writing");
      out << *graph;
    }
    return 0;
  } catch (const kiln::Error& e) {
    const bool internal = e.kind() == kiln::ErrorKind::kInternal;
    return fail(internal ? kExitInternalError : kExitInputError, e.message());
  } catch (const c10::Error& e) {
    return fail(kExitInternalError, kiln::ir::compat::error_message(e));
  } catch (const std::exception& e) {
    return fail(kExitInternalError, e.what());
  }
}
