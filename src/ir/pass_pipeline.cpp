// Runs passes in order; each is verified and may be printed, and errors name the pass.
#include "ir/pass_pipeline.h"

#include <algorithm>

#include "ir/verifier.h"
#include "util/errors.h"
#include "util/logging.h"

namespace kiln::ir {

PassPipeline& PassPipeline::add(std::string name, GraphPass pass) {
  KILN_CHECK(!contains(name), InternalError, "pass `", name, "` added twice to a pipeline");
  passes_.push_back({std::move(name), std::move(pass)});
  return *this;
}

std::vector<std::string> PassPipeline::names() const {
  std::vector<std::string> out;
  for (const auto& e : passes_) out.push_back(e.name);
  return out;
}

bool PassPipeline::contains(const std::string& name) const {
  return std::any_of(passes_.begin(), passes_.end(),
                     [&](const Entry& e) { return e.name == name; });
}

std::vector<std::string> PassPipeline::run(std::shared_ptr<torch::jit::Graph>& graph,
                                           const PassRunOptions& options) const {
  for (const auto& name : options.only) {
    KILN_CHECK(contains(name), InvalidArgument, "unknown pass `", name, "`");
  }
  std::vector<std::string> changed;
  for (const auto& entry : passes_) {
    if (!options.only.empty() &&
        std::find(options.only.begin(), options.only.end(), entry.name) == options.only.end()) {
      continue;
    }
    bool did_change = false;
    try {
      did_change = entry.pass(graph);
    } catch (const Error&) {
      throw;
    } catch (const c10::Error& e) {
      KILN_THROW(InternalError, "pass `", entry.name,
                 "` failed: ", e.msg().empty() ? e.what_without_backtrace() : e.msg());
    } catch (const std::exception& e) {
      KILN_THROW(InternalError, "pass `", entry.name, "` failed: ", e.what());
    }
    if (did_change) changed.push_back(entry.name);
    KILN_LOG(kDebug, "pass ", entry.name, did_change ? ": changed the graph" : ": no change");
    if (options.verify) verify_graph(*graph, "after pass `" + entry.name + "`");
    if (options.print_after_all) {
      *options.print_after_all << "// after " << entry.name << (did_change ? "" : " (no change)")
                               << "\n"
                               << *graph;
    }
  }
  return changed;
}

}  // namespace kiln::ir
