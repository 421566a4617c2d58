// IR text and saved-module loading; turns torch's multi-line parse errors into one line.
#include "ir/graph_io.h"

#include <torch/csrc/jit/ir/irparser.h>

#include <fstream>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "ir/verifier.h"
#include "util/errors.h"
#include "util/nesting.h"

namespace kiln::ir {
namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// torch reports a parse error as: "<message>:\n<context lines>\n<spaces>~~~ <--- HERE\n...".
// We find the highlighted line in the source by matching the context lines above the marker,
// and the column from the position of the first '~'.
std::string locate_parse_error(const std::string& report, const std::string& source,
                               const std::string& source_name) {
  std::vector<std::string> rep = split_lines(report);
  std::vector<std::string> src = split_lines(source);
  while (!rep.empty() && rep.front().empty()) rep.erase(rep.begin());
  std::string message = rep.empty() ? "parse error" : rep.front();
  while (!message.empty() && message.back() == ' ') message.pop_back();
  for (const char* suffix : {" here:", ":"}) {
    const std::string s(suffix);
    if (message.size() > s.size() && message.compare(message.size() - s.size(), s.size(), s) == 0) {
      message.resize(message.size() - s.size());
      break;
    }
  }

  size_t marker = 0;
  for (size_t i = 1; i < rep.size(); ++i) {
    if (rep[i].find("<--- HERE") != std::string::npos) {
      marker = i;
      break;
    }
  }
  size_t line = 0, col = 0;
  if (marker >= 2) {
    // Longest run of context lines (ending at the highlighted one) that matches the source.
    size_t best_len = 0;
    for (size_t end = 0; end < src.size(); ++end) {
      size_t len = 0;
      while (len < marker - 1 && len <= end && src[end - len] == rep[marker - 1 - len]) ++len;
      if (len > best_len) {
        best_len = len;
        line = end + 1;
      }
    }
    col = rep[marker].find('~') + 1;
  } else if (message.find("'eof'") != std::string::npos) {
    line = src.size();
    col = src.empty() ? 1 : src.back().size() + 1;
    message += " (the text ends too early)";
  }
  std::ostringstream os;
  os << source_name;
  if (line > 0) os << ':' << line << ':' << col;
  os << ": " << message;
  return os.str();
}

// Keeping every non-numeric name of the source (the parser may keep only graph-input names)
// makes printed graphs read like their source.
void keep_value_names(const std::unordered_map<std::string, torch::jit::Value*>& names) {
  for (const auto& [name, value] : names) {
    const bool numeric = name.find_first_not_of("0123456789") == std::string::npos;
    if (numeric || value->debugName() == name) continue;
    try {
      value->setDebugName(name);
    } catch (const c10::Error&) {
      // A name torch will not take (such as "1.2") keeps its generated one.
    }
  }
}

}  // namespace

std::shared_ptr<torch::jit::Graph> parse_graph(const std::string& text,
                                               const std::string& source_name) {
  // torch's parser recurses once per bracket with no bound of its own.
  check_nesting_depth(text, source_name);
  auto graph = std::make_shared<torch::jit::Graph>();
  try {
    std::unordered_map<std::string, torch::jit::Value*> names;
    torch::jit::parseIR(text, graph.get(), names);
    keep_value_names(names);
  } catch (const c10::Error& e) {
    KILN_THROW(CorruptInput, source_name, ": ", e.msg());
  } catch (const std::exception& e) {
    // ErrorReport and the lexer's std::runtime_error both carry the highlighted range.
    throw CorruptInput(locate_parse_error(e.what(), text, source_name));
  }
  try {
    verify_graph(*graph);
  } catch (const Error& e) {
    KILN_THROW(CorruptInput, source_name, ": ", e.message());
  }
  return graph;
}

bool looks_like_saved_module(const std::string& bytes) {
  return bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04") == 0;
}

LoadedGraph load_graph_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), InvalidArgument, path, ": cannot open file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();

  if (!looks_like_saved_module(bytes)) return {parse_graph(bytes, path), std::nullopt};

  LoadedGraph loaded;
  try {
    std::istringstream stream(bytes);
    loaded.module = torch::jit::load(stream);
  } catch (const c10::Error& e) {
    KILN_THROW(CorruptInput, path, ": not a loadable TorchScript module: ", e.msg());
  } catch (const std::exception& e) {
    KILN_THROW(CorruptInput, path, ": not a loadable TorchScript module: ", e.what());
  }
  auto method = loaded.module->find_method("forward");
  KILN_CHECK(method.has_value(), InvalidArgument, path, ": module has no forward method");
  loaded.graph = method->graph();
  return loaded;
}

}  // namespace kiln::ir
