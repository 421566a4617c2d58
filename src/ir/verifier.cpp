// Verifier: lint + schema and constant invariants over every block, recursively.
#include "ir/verifier.h"

#include <torch/csrc/jit/runtime/operator.h>

#include <sstream>

#include "util/errors.h"

namespace kiln::ir {
namespace {

void check_block(const torch::jit::Block* block, const std::string& prefix) {
  for (const torch::jit::Node* node : block->nodes()) {
    const auto kind = node->kind();
    if (kind.is_aten()) {
      bool matched = false;
      for (const auto& op : torch::jit::getAllOperatorsFor(kind)) {
        if (node->matches(op->schema())) {
          matched = true;
          break;
        }
      }
      KILN_CHECK(matched, InternalError, prefix, "node `", node_to_string(node), "`: ",
                 torch::jit::getAllOperatorsFor(kind).empty()
                     ? "no operator has this name"
                     : "its inputs match no schema of this operator");
    }
    if (kind == torch::jit::prim::Constant && node->outputs().size() == 1) {
      const bool is_none = node->output()->type()->kind() == c10::TypeKind::NoneType;
      KILN_CHECK(is_none || node->hasAttribute(torch::jit::attr::value), InternalError, prefix,
                 "node `", node_to_string(node), "`: constant without a value");
    }
    for (const torch::jit::Block* sub : node->blocks()) check_block(sub, prefix);
  }
}

}  // namespace

std::string node_to_string(const torch::jit::Node* node) {
  std::ostringstream os;
  os << *node;
  std::string s = os.str();
  s = s.substr(0, s.find('\n'));  // a node with blocks prints them on further lines
  while (!s.empty() && s.back() == ' ') s.pop_back();
  const auto start = s.find_first_not_of(' ');
  return start == std::string::npos ? s : s.substr(start);
}

void verify_graph(const torch::jit::Graph& graph, const std::string& context) {
  const std::string prefix = context.empty() ? "" : context + ": ";
  try {
    graph.lint();
  } catch (const c10::Error& e) {
    KILN_THROW(InternalError, prefix, "graph fails lint: ", e.msg());
  }
  check_block(graph.block(), prefix);
}

}  // namespace kiln::ir
