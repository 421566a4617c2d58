// What torch.export says of a value: its sizes (integers, or expressions over the export's
// symbols in sympy's srepr form, "Mul(Integer(4), Symbol('s77', positive=True, integer=True))")
// and dtype, kept on the node that makes it,
// so that passes that keep the value keep them too.
#pragma once

#include <torch/script.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::ir {

struct ExportSizes {
  std::vector<std::string> sizes;  // one per dim: an integer or an expression
  c10::ScalarType dtype = c10::ScalarType::Undefined;
};

// Records `meta` for output `output` of `node` (node attributes, copied with the node).
void set_export_sizes(torch::jit::Node* node, size_t output, const ExportSizes& meta);

// What the node making `value` recorded for it, if anything.
std::optional<ExportSizes> export_sizes(const torch::jit::Value* value);

// Removes every recorded size from the nodes of `block` and its sub-blocks (a compiled module's
// graph shows none: they served shape analysis only).
void clear_export_sizes(torch::jit::Block* block);

// The value of a size (an integer, or an expression in sympy's srepr form) with the symbols
// ("s77") given their values: Symbol, Integer, Add, Mul, Max, Min, FloorDiv, CeilDiv, Mod,
// PythonMod and Pow to a non-negative integer power. Nothing (no exception) for a symbol without
// a value, another function (a true division, a float), a division by zero or text that does not
// parse.
std::optional<int64_t> evaluate_size(const std::string& expr,
                                     const std::map<std::string, int64_t>& symbols);

}  // namespace kiln::ir
