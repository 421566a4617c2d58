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
