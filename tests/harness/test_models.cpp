// Test model loader: torch.save'd inputs and outputs, with lists retyped for module methods.
#include "harness/test_models.h"

#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <fstream>
#include <iterator>

#include "kiln_test_paths.h"

namespace kiln::testing {
namespace {

// torch.load gives untyped lists (List[Any]); module methods want List[Tensor].
torch::jit::IValue with_typed_lists(const torch::jit::IValue& v) {
  if (v.isTuple()) {
    std::vector<torch::jit::IValue> items;
    for (const auto& e : v.toTupleRef().elements()) items.push_back(with_typed_lists(e));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  if (v.isList()) {
    c10::List<at::Tensor> tensors;
    for (const auto& e : v.toListRef()) {
      if (!e.isTensor()) return v;
      tensors.push_back(e.toTensor());
    }
    return tensors;
  }
  return v;
}

}  // namespace

TestModel load_test_model(const std::string& name) {
  const std::string base = std::string(KILN_TEST_MODELS_DIR) + "/" + name;
  TestModel m{torch::jit::load(base + ".ts"), {}, {}};
  std::ifstream in(base + ".io.pt", std::ios::binary);
  EXPECT_TRUE(in.good()) << base << ".io.pt missing";
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto io = with_typed_lists(torch::pickle_load(bytes)).toTuple();
  const auto& args = io->elements()[0].toTupleRef().elements();
  m.args.assign(args.begin(), args.end());
  m.expected = io->elements()[1];
  return m;
}

}  // namespace kiln::testing
