// The test models: each loads in C++, verifies, and reproduces the outputs Python recorded.
#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <fstream>
#include <iterator>

#include "harness/ir_testing.h"
#include "ir/graph_io.h"
#include "ir/verifier.h"
#include "kiln_test_paths.h"

namespace kiln {
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

class TestModel : public ::testing::TestWithParam<std::string> {};

TEST_P(TestModel, LoadsVerifiesAndMatchesPython) {
  const std::string base = std::string(KILN_TEST_MODELS_DIR) + "/" + GetParam();
  auto loaded = ir::load_graph_file(base + ".ts");
  ASSERT_TRUE(loaded.module.has_value());
  EXPECT_NO_THROW(ir::verify_graph(*loaded.graph));

  std::ifstream in(base + ".io.pt", std::ios::binary);
  ASSERT_TRUE(in.good()) << base << ".io.pt missing";
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto io = with_typed_lists(torch::pickle_load(bytes)).toTuple();
  const auto& args = io->elements()[0].toTupleRef().elements();
  const torch::jit::IValue& expected = io->elements()[1];

  torch::NoGradGuard no_grad;
  loaded.module->eval();
  auto actual = loaded.module->forward(std::vector<torch::jit::IValue>(args.begin(), args.end()));
  EXPECT_TRUE(testing::all_close(actual, expected, 1e-4, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Models, TestModel,
                         ::testing::Values("resnet18", "mobilenet_v2", "vit_tiny", "text_encoder",
                                           "lgamma", "control_flow", "tuple_list"));

}  // namespace
}  // namespace kiln
