// An ordered list of named graph passes, with verification and --print-after-all between them.
#pragma once

#include <torch/script.h>

#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace kiln::ir {

// A pass rewrites the graph in place and returns whether it changed anything.
using GraphPass = std::function<bool(std::shared_ptr<torch::jit::Graph>&)>;

struct PassRunOptions {
  bool verify = true;                       // run verify_graph after each pass
  std::ostream* print_after_all = nullptr;  // print the graph after each pass here
  std::vector<std::string> only;            // when non-empty, run just these passes (in list order)
};

class PassPipeline {
 public:
  PassPipeline& add(std::string name, GraphPass pass);
  // Runs the passes in order; returns the names of those that changed the graph.
  // A failing pass or verification throws an Error naming the pass.
  std::vector<std::string> run(std::shared_ptr<torch::jit::Graph>& graph,
                               const PassRunOptions& options = {}) const;
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;

 private:
  struct Entry {
    std::string name;
    GraphPass pass;
  };
  std::vector<Entry> passes_;
};

}  // namespace kiln::ir
