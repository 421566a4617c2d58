// Loading the test models that tests/models/make_models.py writes: module, inputs, expected output.
#pragma once

#include <torch/script.h>

#include <string>
#include <vector>

namespace kiln::testing {

struct TestModel {
  torch::jit::Module module;
  std::vector<torch::jit::IValue> args;  // forward's arguments (without self)
  torch::jit::IValue expected;           // what Python's forward returned
};

// Loads NAME.ts and NAME.io.pt from the models folder; fails the test if they are missing.
TestModel load_test_model(const std::string& name);

}  // namespace kiln::testing
