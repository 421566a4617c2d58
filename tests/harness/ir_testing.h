// Test helpers: parse IR, check it with FileCheck, and run graphs on data for numeric checks.
#pragma once

#include <gtest/gtest.h>
#include <torch/script.h>

#include <memory>
#include <string>
#include <vector>

namespace kiln::testing {

using GraphPtr = std::shared_ptr<torch::jit::Graph>;

// Parses IR text through kiln's reader (so it is verified too); fails the test on error.
GraphPtr parse(const std::string& ir);

// Runs torch's FileCheck over the printed graph. Returns a gtest failure with the check error
// and the graph when a CHECK does not hold, e.g. EXPECT_TRUE(file_check("CHECK: aten::add", *g)).
::testing::AssertionResult file_check(const std::string& checks, const torch::jit::Graph& graph);

// Random inputs for a graph whose inputs are all tensors: one float tensor per shape.
std::vector<torch::jit::IValue> random_inputs(const std::vector<std::vector<int64_t>>& shapes,
                                              uint64_t seed = 0);

// Runs the graph in the TorchScript interpreter (on a copy) and returns its outputs.
std::vector<torch::jit::IValue> run_graph(const torch::jit::Graph& graph,
                                          const std::vector<torch::jit::IValue>& inputs);

// Compares two values (tensors, or tuples/lists of them, or scalars) elementwise:
// |a - b| <= atol + rtol * |b|. Dtypes and shapes must agree.
::testing::AssertionResult all_close(const torch::jit::IValue& actual,
                                     const torch::jit::IValue& expected, double rtol = 1e-5,
                                     double atol = 1e-6);

// Runs `before` and `after` on the same inputs and checks their outputs agree
// (Glow's checkNumericalEquivalence).
::testing::AssertionResult same_values(const torch::jit::Graph& before,
                                       const torch::jit::Graph& after,
                                       const std::vector<torch::jit::IValue>& inputs,
                                       double rtol = 1e-5, double atol = 1e-6);

}  // namespace kiln::testing
