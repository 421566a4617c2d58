// Converter test helpers: run IR in the TorchScript interpreter and through convert + build +
// the engine on the same inputs, and compare.
#pragma once

#include <gtest/gtest.h>
#include <torch/script.h>

#include <string>
#include <vector>

#include "conversion/convert.h"
#include "engine/runtime.h"

namespace kiln::conversion::testing {

engine::HostTensor to_host(const at::Tensor& t);
at::Tensor to_torch(const engine::HostTensor& t);

// Converts the graph (all inputs tensors, static shapes from `inputs`), builds it for the CPU,
// runs it, and returns its outputs as torch tensors.
std::vector<at::Tensor> run_converted(const std::string& ir, const std::vector<at::Tensor>& inputs);

// Converts the one-input graph with x's first dim dynamic (1..16, opt: x's), builds it for the
// CPU and runs it on `x`; and the network's output shape while building.
at::Tensor run_dynamic_batch(const std::string& ir, const at::Tensor& x);
engine::Shape built_shape(const std::string& ir, const at::Tensor& x);

// The tolerance: max|a-b| <= rtol * max|b| + atol, dtypes and shapes equal.
::testing::AssertionResult matches_torch(const std::string& ir,
                                         const std::vector<at::Tensor>& inputs, double rtol = 1e-4,
                                         double atol = 1e-5);

}  // namespace kiln::conversion::testing
