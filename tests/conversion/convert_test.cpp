// The block converter: evaluators, outputs that alias inputs, clear errors, and the refusal of
// dynamic input dims for converters that do not declare them.
#include "conversion/convert.h"

#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "engine/builder.h"
#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

TEST(Convert, StaticSizesAndArithmeticAreEvaluated) {
  // y = x * (x.size(1) // 2 + 1) : the scalar is computed at compile time.
  const std::string ir = R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %n : int = aten::size(%x, %one)
  %h : int = aten::floordiv(%n, %two)
  %k : int = aten::add(%h, %one)
  %y : Tensor = aten::mul(%x, %k)
  return (%y))IR";
  EXPECT_TRUE(testing::matches_torch(ir, {torch::randn({2, 6})}));
  auto out = testing::run_converted(ir, {torch::ones({2, 6})});
  EXPECT_EQ(out[0][0][0].item<float>(), 4.f);
}

TEST(Convert, OutputsThatAliasInputsOrRepeat) {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::relu(%x)
  return (%x, %y, %y))IR";
  auto x = torch::randn({3});
  auto out = testing::run_converted(ir, {x});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].equal(x));
  EXPECT_TRUE(out[1].equal(x.relu()));
  EXPECT_TRUE(out[2].equal(x.relu()));
}

TEST(Convert, UnconvertibleNodesAreNamed) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::conj_physical(%x)
  return (%y))IR");
  try {
    convert_graph(*g, {InputSpec::fixed(engine::DataType::kF32, {2})});
    FAIL();
  } catch (const InternalError& e) {
    EXPECT_NE(e.message().find("aten::conj_physical(%x)"), std::string::npos) << e.message();
  }
  EXPECT_FALSE(default_registry().supports(*g->nodes().begin()).supported);
  EXPECT_EQ(default_registry().supports(*g->nodes().begin()).reason,
            "no converter for aten::conj_physical");
}

TEST(Convert, BadInputSpecs) {
  auto g = kiln::testing::parse("graph(%x : Tensor, %n : int):\n  return (%x)\n");
  EXPECT_THROW(convert_graph(*g, {InputSpec::fixed(engine::DataType::kF32, {2})}), InvalidArgument);
  EXPECT_THROW(convert_graph(*g, {InputSpec::fixed(engine::DataType::kF32, {2}),
                                  InputSpec::fixed(engine::DataType::kI64, {})}),
               InvalidArgument);
}

TEST(Convert, DynamicBatchBecomesAProfile) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::sigmoid(%x)
  return (%y))IR");
  InputSpec spec{engine::DataType::kF32, {1, 4}, {2, 4}, {8, 4}};
  ConvertedSegment seg = convert_graph(*g, {spec});
  const auto& in = seg.network.tensor(seg.network.inputs()[0]);
  EXPECT_EQ(in.shape, (engine::Shape{engine::kDynamic, 4}));
  EXPECT_EQ(seg.network.profile(seg.network.inputs()[0]).max, (engine::Shape{8, 4}));
}

// A registry whose one converter (relu, as the engine's relu activation) does not declare
// support for dynamic shapes.
Registry relu_without_dynamic_shapes() {
  Registry r;
  r.add_converter({{"aten::relu"}, [](ConversionContext& ctx, const torch::jit::Node* n) {
                     ctx.set_tensor(n->output(), ctx.add(n, engine::ActivationParams{},
                                                         {ctx.tensor(n->input(0))}));
                   }});
  return r;
}

// Builds the network for the CPU and runs it on x.
at::Tensor run_network(const engine::Network& network, const at::Tensor& x) {
  engine::Plan plan = engine::build(network, engine::BuilderConfig{});
  engine::ExecutionContext ctx(std::make_shared<const engine::Engine>(plan.network));
  return testing::to_torch(ctx.run({testing::to_host(x)}).at(0));
}

constexpr const char* kReluIR = R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::relu(%x)
  return (%y))IR";

TEST(Convert, DynamicDimsNeedAConverterThatDeclaresThem) {
  const Registry registry = relu_without_dynamic_shapes();
  auto g = kiln::testing::parse(kReluIR);
  const torch::jit::Node* relu = *g->nodes().begin();
  const InputSpec dynamic{engine::DataType::kF32, {1, 4}, {2, 4}, {8, 4}};
  const torch::jit::Node* failed = nullptr;
  try {
    convert_graph(*g, {dynamic}, registry, {}, &failed);
    FAIL() << "converted a dynamic input without the converter's support";
  } catch (const Unsupported& e) {
    EXPECT_EQ(e.message(),
              "`%y : Tensor = aten::relu(%x)`: its input %x has dynamic dims [?, 4] and its "
              "converter does not declare support for dynamic shapes "
              "(assume_dynamic_shape_support skips this check)");
  }
  EXPECT_EQ(failed, relu);  // the compiler refuses this node and runs it in PyTorch

  // Static shapes convert as before.
  const at::Tensor x = torch::randn({3, 4});
  ConvertedSegment fixed =
      convert_graph(*g, {InputSpec::fixed(engine::DataType::kF32, {3, 4})}, registry);
  EXPECT_TRUE(run_network(fixed.network, x).equal(x.relu()));

  // assume_dynamic_shape_support skips the check: one network for every batch in the profile.
  ConversionSettings assume;
  assume.assume_dynamic_shape_support = true;
  ConvertedSegment any = convert_graph(*g, {dynamic}, registry, assume);
  EXPECT_EQ(any.network.tensor(any.network.outputs().at(0)).shape,
            (engine::Shape{engine::kDynamic, 4}));
  for (int64_t batch : {1, 5, 8}) {
    const at::Tensor b = torch::randn({batch, 4});
    EXPECT_TRUE(run_network(any.network, b).equal(b.relu())) << "batch " << batch;
  }

  // A converter that declares them takes the dynamic input without the setting.
  Registry declared;
  declared.add_converter(with_dynamic_shapes(*registry.find_converter(relu)));
  ConvertedSegment with = convert_graph(*g, {dynamic}, declared);
  const at::Tensor b = torch::randn({6, 4});
  EXPECT_TRUE(run_network(with.network, b).equal(b.relu()));
}

TEST(Convert, DynamicDimsOfTensorListItemsAreSeen) {
  // cat's input is a Tensor[]: the check looks at the list's items.
  Registry r;
  register_prim_evaluators(r);
  r.add_converter({{"aten::cat"}, [](ConversionContext& ctx, const torch::jit::Node* n) {
                     ctx.set_tensor(n->output(), ctx.add(n, engine::ConcatParams{0, false},
                                                         ctx.tensor_list(n->input(0))));
                   }});
  auto g = kiln::testing::parse(R"IR(
graph(%a : Tensor, %b : Tensor):
  %zero : int = prim::Constant[value=0]()
  %list : Tensor[] = prim::ListConstruct(%a, %b)
  %y : Tensor = aten::cat(%list, %zero)
  return (%y))IR");
  const InputSpec fixed = InputSpec::fixed(engine::DataType::kF32, {2, 3});
  const InputSpec dynamic{engine::DataType::kF32, {1, 3}, {2, 3}, {4, 3}};
  try {
    convert_graph(*g, {fixed, dynamic}, r);
    FAIL() << "converted a dynamic list item without the converter's support";
  } catch (const Unsupported& e) {
    EXPECT_NE(e.message().find("its input %b has dynamic dims [?, 3]"), std::string::npos)
        << e.message();
  }
  ConvertedSegment both = convert_graph(*g, {fixed, fixed}, r);
  EXPECT_EQ(both.network.tensor(both.network.outputs().at(0)).shape, (engine::Shape{4, 3}));
}

}  // namespace
}  // namespace kiln::conversion
