// Converting one engine segment (a graph whose inputs and outputs are tensors) to a Network.
#pragma once

#include <torch/script.h>

#include <map>
#include <string>
#include <vector>

#include "conversion/context.h"
#include "conversion/registry.h"

namespace kiln::conversion {

// One graph input: dtype and shape range (min == opt == max for static shapes).
struct InputSpec {
  engine::DataType dtype = engine::DataType::kF32;
  engine::Shape min, opt, max;
  static InputSpec fixed(engine::DataType dtype, const engine::Shape& shape) {
    return {dtype, shape, shape, shape};
  }
};

struct ConvertedSegment {
  engine::Network network;
};

// Throws Unsupported naming the node for anything the registry cannot convert (also a node with
// a dynamic input dim whose converter does not declare supports_dynamic_shapes, unless
// settings.assume_dynamic_shape_support), and InternalError for a node that is neither converted
// nor evaluable inside an engine segment. When a node's validator or converter fails (any error but
// InternalError), `failed` (when given) is set to that node before the error is thrown.
ConvertedSegment convert_graph(const torch::jit::Graph& graph, const std::vector<InputSpec>& inputs,
                               const Registry& registry = default_registry(),
                               const ConversionSettings& settings = {},
                               const torch::jit::Node** failed = nullptr);

}  // namespace kiln::conversion
