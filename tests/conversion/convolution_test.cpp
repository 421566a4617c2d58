// Convolution converters against libtorch: 1-3-D, groups, dilation, string padding, transposed,
// traced _convolution, unbatched inputs, frozen weights, and validator rejections.
#include <algorithm>

#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "engine/builder.h"
#include "engine/plan.h"
#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

std::string list_ir(const std::string& name, const std::vector<int64_t>& v) {
  std::string s = "  %" + name + " : int[] = prim::ListConstruct(";
  std::string consts;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string c = name + "_" + std::to_string(i);
    consts += "  %" + c + " : int = prim::Constant[value=" + std::to_string(v[i]) + "]()\n";
    s += (i ? ", %" : "%") + c;
  }
  return consts + s + ")\n";
}

// convNd(x, w, b?, stride, padding, dilation, groups); `b` "" means no bias.
std::string conv_ir(const std::string& op, bool bias, const std::vector<int64_t>& stride,
                    const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                    int64_t groups) {
  return std::string("graph(%x : Tensor, %w : Tensor") + (bias ? ", %b : Tensor" : "") + "):\n" +
         (bias ? "" : "  %b : NoneType = prim::Constant()\n") + list_ir("s", stride) +
         list_ir("p", padding) + list_ir("d", dilation) +
         "  %g : int = prim::Constant[value=" + std::to_string(groups) + "]()\n" +
         "  %y : Tensor = " + op + "(%x, %w, %b, %s, %p, %d, %g)\n  return (%y)\n";
}

TEST(ConvertConvolution, Conv2dBatchStridePaddingBias) {
  torch::manual_seed(0);
  const auto w = torch::randn({8, 3, 3, 3}), b = torch::randn({8});
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 3, 11, 9});
    EXPECT_TRUE(matches_torch(conv_ir("aten::conv2d", true, {1, 1}, {0, 0}, {1, 1}, 1), {x, w, b}));
    EXPECT_TRUE(matches_torch(conv_ir("aten::conv2d", true, {2, 1}, {1, 2}, {1, 1}, 1), {x, w, b}));
    EXPECT_TRUE(matches_torch(conv_ir("aten::conv2d", false, {2}, {1}, {1}, 1), {x, w}));
  }
}

TEST(ConvertConvolution, GroupsDilationDepthwise) {
  torch::manual_seed(1);
  const auto x = torch::randn({2, 6, 12, 10});
  EXPECT_TRUE(matches_torch(conv_ir("aten::conv2d", true, {1, 1}, {2, 2}, {2, 3}, 2),
                            {x, torch::randn({4, 3, 3, 3}), torch::randn({4})}));
  EXPECT_TRUE(matches_torch(conv_ir("aten::conv2d", false, {1, 1}, {1, 1}, {1, 1}, 6),
                            {x, torch::randn({12, 1, 3, 3})}));
}

TEST(ConvertConvolution, Conv1dAndConv3d) {
  torch::manual_seed(2);
  for (int64_t batch : {1, 4}) {
    EXPECT_TRUE(
        matches_torch(conv_ir("aten::conv1d", true, {2}, {1}, {1}, 1),
                      {torch::randn({batch, 4, 17}), torch::randn({5, 4, 3}), torch::randn({5})}));
    EXPECT_TRUE(matches_torch(
        conv_ir("aten::conv3d", true, {1, 2, 1}, {1, 0, 1}, {1, 1, 2}, 1),
        {torch::randn({batch, 2, 5, 6, 7}), torch::randn({3, 2, 3, 3, 2}), torch::randn({3})}));
  }
}

TEST(ConvertConvolution, StringPaddingSameAndValid) {
  torch::manual_seed(3);
  for (const char* mode : {"same", "valid"}) {
    const std::string ir = std::string(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %s : int[] = prim::ListConstruct(%one, %one)
  %d : int[] = prim::ListConstruct(%two, %one)
  %p : str = prim::Constant[value=")IR") +
                           mode + R"IR("]()
  %y : Tensor = aten::conv2d(%x, %w, %b, %s, %p, %d, %one)
  return (%y))IR";
    // An even kernel makes torch's "same" padding asymmetric.
    EXPECT_TRUE(matches_torch(
        ir, {torch::randn({2, 3, 10, 9}), torch::randn({4, 3, 4, 3}), torch::randn({4})}))
        << mode;
  }
}

TEST(ConvertConvolution, SamePaddingOfADynamicKernelIsRefused) {
  // "same" pads by the kernel's size: a weight whose kernel dim is only known at run time has no
  // padding to build.
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %w : Tensor):
  %none : NoneType = prim::Constant()
  %one : int = prim::Constant[value=1]()
  %s : int[] = prim::ListConstruct(%one, %one)
  %p : str = prim::Constant[value="same"]()
  %y : Tensor = aten::conv2d(%x, %w, %none, %s, %p, %s, %one)
  return (%y))IR");
  const InputSpec x = InputSpec::fixed(engine::DataType::kF32, {1, 3, 8, 8});
  const InputSpec w{engine::DataType::kF32, {4, 3, 1, 3}, {4, 3, 3, 3}, {4, 3, 5, 3}};
  try {
    convert_graph(*g, {x, w});
    FAIL() << "converted 'same' padding of a dynamic kernel";
  } catch (const Error& e) {  // the converter's error, with the node named
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(e.message().find("padding='same' with a weight whose spatial dim 0 is dynamic"),
              std::string::npos)
        << e.message();
  }
  // A dynamic batch keeps its padding.
  const InputSpec batch{engine::DataType::kF32, {1, 3, 8, 8}, {2, 3, 8, 8}, {4, 3, 8, 8}};
  ConvertedSegment seg =
      convert_graph(*g, {batch, InputSpec::fixed(engine::DataType::kF32, {4, 3, 3, 3})});
  EXPECT_EQ(seg.network.tensor(seg.network.outputs().at(0)).shape,
            (engine::Shape{engine::kDynamic, 4, 8, 8}));
}

// conv_transposeNd(x, w, b?, stride, padding, output_padding, groups, dilation)
std::string conv_transpose_ir(const std::string& op, const std::vector<int64_t>& stride,
                              const std::vector<int64_t>& padding,
                              const std::vector<int64_t>& output_padding, int64_t groups,
                              const std::vector<int64_t>& dilation) {
  return "graph(%x : Tensor, %w : Tensor, %b : Tensor):\n" + list_ir("s", stride) +
         list_ir("p", padding) + list_ir("o", output_padding) + list_ir("d", dilation) +
         "  %g : int = prim::Constant[value=" + std::to_string(groups) + "]()\n" +
         "  %y : Tensor = " + op + "(%x, %w, %b, %s, %p, %o, %g, %d)\n  return (%y)\n";
}

TEST(ConvertConvolution, TransposedWithOutputPaddingGroupsDilation) {
  torch::manual_seed(4);
  for (int64_t batch : {1, 4}) {
    EXPECT_TRUE(matches_torch(
        conv_transpose_ir("aten::conv_transpose2d", {2, 2}, {1, 0}, {1, 1}, 1, {1, 1}),
        {torch::randn({batch, 4, 5, 6}), torch::randn({4, 3, 3, 3}), torch::randn({3})}));
    EXPECT_TRUE(matches_torch(
        conv_transpose_ir("aten::conv_transpose2d", {2, 3}, {1, 1}, {0, 1}, 2, {2, 1}),
        {torch::randn({batch, 4, 5, 6}), torch::randn({4, 2, 3, 2}), torch::randn({4})}));
  }
  EXPECT_TRUE(matches_torch(conv_transpose_ir("aten::conv_transpose1d", {3}, {1}, {2}, 1, {1}),
                            {torch::randn({2, 3, 7}), torch::randn({3, 5, 4}), torch::randn({5})}));
  EXPECT_TRUE(matches_torch(
      conv_transpose_ir("aten::conv_transpose3d", {2, 1, 2}, {0, 1, 1}, {1, 0, 0}, 1, {1, 1, 1}),
      {torch::randn({1, 2, 3, 4, 3}), torch::randn({2, 3, 2, 3, 3}), torch::randn({3})}));
}

// As torch.jit.trace prints nn.Conv2d / nn.ConvTranspose2d.
std::string traced_ir(bool transposed) {
  return std::string(R"IR(
graph(%x : Tensor, %w : Tensor, %b : Tensor):
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %s : int[] = prim::ListConstruct(%two, %two)
  %p : int[] = prim::ListConstruct(%one, %zero)
  %d : int[] = prim::ListConstruct(%one, %one)
  %o : int[] = prim::ListConstruct(%one, %zero)
  %tr : bool = prim::Constant[value=)IR") +
         (transposed ? "1" : "0") + R"IR(]()
  %y : Tensor = aten::_convolution(%x, %w, %b, %s, %p, %d, %tr, %o, %one, %f, %f, %t, %t)
  return (%y))IR";
}

TEST(ConvertConvolution, TracedConvolutionBothDirections) {
  torch::manual_seed(5);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 3, 9, 8});
    // output_padding is ignored by torch for the direct form, as here.
    EXPECT_TRUE(
        matches_torch(traced_ir(false), {x, torch::randn({5, 3, 3, 3}), torch::randn({5})}));
    EXPECT_TRUE(matches_torch(traced_ir(true), {x, torch::randn({3, 5, 3, 3}), torch::randn({5})}));
  }
}

TEST(ConvertConvolution, UnbatchedInput) {
  torch::manual_seed(6);
  EXPECT_TRUE(
      matches_torch(conv_ir("aten::conv2d", true, {1, 1}, {1, 1}, {1, 1}, 1),
                    {torch::randn({3, 7, 6}), torch::randn({4, 3, 3, 3}), torch::randn({4})}));
  EXPECT_TRUE(matches_torch(conv_ir("aten::conv1d", false, {1}, {0}, {1}, 1),
                            {torch::randn({3, 7}), torch::randn({4, 3, 2})}));
}

TEST(ConvertConvolution, FrozenWeightsBecomeNamedConstants) {
  torch::manual_seed(7);
  auto g = kiln::testing::parse(conv_ir("aten::conv2d", true, {1, 1}, {1, 1}, {1, 1}, 1));
  const auto x = torch::randn({2, 3, 6, 6}), w = torch::randn({4, 3, 3, 3}), b = torch::randn({4});
  const auto expected = torch::conv2d(x, w, b, 1, 1);
  // Freeze w and b into constants, as lowering does for module parameters.
  {
    torch::jit::WithInsertPoint guard(*g->nodes().begin());
    for (const auto& [index, value] : {std::pair<size_t, at::Tensor>{2, b}, {1, w}}) {
      torch::jit::Value* c = g->insertConstant(value);
      c->setDebugName(index == 1 ? "conv.weight" : "conv.bias");
      g->inputs()[index]->replaceAllUsesWith(c);
      g->eraseInput(index);
    }
  }
  ConvertedSegment seg =
      convert_graph(*g, {InputSpec::fixed(engine::DataType::kF32, {2, 3, 6, 6})});
  // Refit slots, named after the values they came from.
  const std::vector<std::string> slots = engine::constant_slots(seg.network);
  EXPECT_EQ(std::count(slots.begin(), slots.end(), "conv.weight"), 1) << slots.size();
  EXPECT_EQ(std::count(slots.begin(), slots.end(), "conv.bias"), 1) << slots.size();
  engine::Plan plan = engine::build(seg.network, engine::BuilderConfig{});
  engine::ExecutionContext ctx(std::make_shared<const engine::Engine>(plan.network));
  const auto out = testing::to_torch(ctx.run({testing::to_host(x)}).at(0));
  EXPECT_LE((out - expected).abs().max().item<double>(),
            1e-4 * expected.abs().max().item<double>() + 1e-5);
}

TEST(ConvertConvolution, NonConstantParametersAreRejected) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %w : Tensor, %s : int[]):
  %b : NoneType = prim::Constant()
  %one : int = prim::Constant[value=1]()
  %p : int[] = prim::ListConstruct(%one, %one)
  %y : Tensor = aten::conv2d(%x, %w, %b, %s, %p, %p, %one)
  return (%y))IR");
  const torch::jit::Node* conv = g->outputs()[0]->node();
  const Support s = default_registry().supports(conv);
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("stride"), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find("must be a constant"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
