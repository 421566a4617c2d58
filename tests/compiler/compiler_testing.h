// Helpers for compiler tests: the tolerance, engine counts, new weights, and runs of a
// compiled module in fresh C++ and Python processes.
#pragma once

#include <gtest/gtest.h>
#include <torch/script.h>

#include "kiln/kiln.h"

namespace kiln::testing {

// Tensors (or tuples/lists of them) agree when max|a-b| <= 1e-4 * max|b| + 1e-5 per tensor.
::testing::AssertionResult matches_reference(const torch::jit::IValue& actual,
                                             const torch::jit::IValue& expected);

// A whole model's answer: `actual` agrees with module.forward(inputs) as matches_reference says,
// or, where two correct fp32 answers of a deep network differ by more (the order of its sums: the
// CPU's vector width picks oneDNN's kernels), is no further from the module's answer in fp64
// than twice PyTorch's fp32 answer is, and within 1e-3 * max|exact|. A module that cannot run in
// fp64 is held to matches_reference alone.
::testing::AssertionResult matches_model_reference(const torch::jit::IValue& actual,
                                                   const torch::jit::Module& module,
                                                   const std::vector<torch::jit::IValue>& inputs);

// The second test of matches_model_reference: `actual` (kiln's) and `fp32` (PyTorch's) against
// `exact` (the fp64 answer), per tensor of tuples and lists.
::testing::AssertionResult closer_to_exact(const torch::jit::IValue& actual,
                                           const torch::jit::IValue& fp32,
                                           const torch::jit::IValue& exact,
                                           const std::string& where = "output");

size_t count_segments(const CompileReport& report, const std::string& target);

// Saves the module, then runs forward(inputs) in a fresh process and returns its output.
torch::jit::IValue run_in_fresh_cpp_process(torch::jit::Module& module,
                                            const std::vector<torch::jit::IValue>& inputs,
                                            const std::string& tag);
torch::jit::IValue run_in_fresh_python_process(torch::jit::Module& module,
                                               const std::vector<torch::jit::IValue>& inputs,
                                               const std::string& tag);

// `m` with every floating parameter and buffer scaled by U(0.8, 1.2) and shifted a little: the
// weights of a fine-tuned model (larger changes compound through deep networks into activations
// f32 cannot compare). Variances stay positive. Equal constants freezing would merge (a fresh
// batch norm's weight and running variance) come apart.
torch::jit::Module with_new_weights(const torch::jit::Module& m, uint64_t seed);

// The message of the exception f throws, or "(no error)".
std::string error_of(const std::function<void()>& f);

}  // namespace kiln::testing
