// Reading graphs: TorchScript IR text or a saved module, with one-line errors that give positions.
#pragma once

#include <torch/script.h>

#include <memory>
#include <optional>
#include <string>

namespace kiln::ir {

// Parses IR text (the `graph(...)` form printed by torch). `source_name` names the text in
// errors. Malformed text throws CorruptInput: "<source>:<line>:<col>: <what is wrong>".
// The parsed graph is verified (see verifier.h) before it is returned.
std::shared_ptr<torch::jit::Graph> parse_graph(const std::string& text,
                                               const std::string& source_name = "<ir>");

struct LoadedGraph {
  std::shared_ptr<torch::jit::Graph> graph;
  std::optional<torch::jit::Module> module;  // set when the file was a saved module
};

// Reads `path`: a saved TorchScript module (zip archive; its forward graph is returned) or IR text.
LoadedGraph load_graph_file(const std::string& path);

// True if `bytes` start like a torch.jit.save archive.
bool looks_like_saved_module(const std::string& bytes);

}  // namespace kiln::ir
