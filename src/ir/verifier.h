// Graph verifier: torch's lint plus kiln's own invariants; run after every pass in tests/debug.
#pragma once

#include <torch/script.h>

#include <string>

namespace kiln::ir {

// Throws InternalError naming the offending node if the graph is not well-formed:
// - torch::jit::Graph::lint() (defs before uses, block structure, unique names);
// - every aten:: node matches the schema of a registered operator;
// - every prim::Constant with an output has a value (or is None).
// `context` (e.g. "after pass remove_dropout") is prefixed to the message.
void verify_graph(const torch::jit::Graph& graph, const std::string& context = "");

// The node as one line of IR, for error messages.
std::string node_to_string(const torch::jit::Node* node);

}  // namespace kiln::ir
