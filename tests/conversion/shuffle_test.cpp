// Shuffle-family converters (reshape, view, flatten, permute, squeeze, expand, ...) against
// libtorch on the CPU backend; data movement must be exact.
#include "conversion/converter_testing.h"
#include "conversion/dtypes.h"
#include "conversion/registry.h"
#include "engine/builder.h"
#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using testing::built_shape;
using testing::matches_torch;
using testing::run_dynamic_batch;

// A graph of one input %x whose body (constants and the op) ends in %y.
std::string ir1(const std::string& body) {
  return "graph(%x : Tensor):\n" + body + "\n  return (%y)\n";
}

TEST(ConvertShuffle, ReshapeAndViewWithInferredDims) {
  const auto x = torch::randn({2, 3, 4});
  for (const char* op : {"aten::reshape", "aten::view"}) {
    for (const char* dims : {"%m1, %c4", "%c2, %m1", "%c24", "%c4, %c3, %c2", "%c2, %c3, %c4"}) {
      const std::string ir = ir1(std::string(R"IR(
  %m1 : int = prim::Constant[value=-1]()
  %c2 : int = prim::Constant[value=2]()
  %c3 : int = prim::Constant[value=3]()
  %c4 : int = prim::Constant[value=4]()
  %c24 : int = prim::Constant[value=24]()
  %s : int[] = prim::ListConstruct()IR") +
                                 dims + ")\n  %y : Tensor = " + op + "(%x, %s)");
      EXPECT_TRUE(matches_torch(ir, {x}, 0, 0)) << op << " " << dims;
    }
  }
  const std::string ir = ir1(R"IR(
  %m1 : int = prim::Constant[value=-1]()
  %s : int[] = prim::ListConstruct(%m1)
  %y : Tensor = aten::reshape(%x, %s))IR");
  EXPECT_TRUE(matches_torch(ir, {torch::randint(-100, 100, {3, 5}, torch::kLong)}, 0, 0));
}

TEST(ConvertShuffle, ReshapeSizesFromEvaluatedStaticDims) {
  const std::string ir = ir1(R"IR(
  %c0 : int = prim::Constant[value=0]()
  %m1 : int = prim::Constant[value=-1]()
  %n : int = aten::size(%x, %c0)
  %s : int[] = prim::ListConstruct(%n, %m1)
  %y : Tensor = aten::view(%x, %s))IR");
  EXPECT_TRUE(matches_torch(ir, {torch::randn({3, 4, 5})}, 0, 0));
}

TEST(ConvertShuffle, Flatten) {
  const auto x = torch::randn({2, 3, 4, 5});
  for (auto [a, b] : std::vector<std::pair<int, int>>{{1, -1}, {0, 1}, {0, -1}, {-2, -1}, {2, 2}}) {
    const std::string ir = ir1("  %a : int = prim::Constant[value=" + std::to_string(a) +
                               "]()\n  %b : int = prim::Constant[value=" + std::to_string(b) +
                               "]()\n  %y : Tensor = aten::flatten(%x, %a, %b)");
    EXPECT_TRUE(matches_torch(ir, {x}, 0, 0)) << a << ", " << b;
  }
}

TEST(ConvertShuffle, PermuteAndTransposeWithNegativeDims) {
  const auto x = torch::randn({2, 3, 4});
  EXPECT_TRUE(matches_torch(ir1(R"IR(
  %a : int = prim::Constant[value=-1]()
  %b : int = prim::Constant[value=0]()
  %c : int = prim::Constant[value=1]()
  %p : int[] = prim::ListConstruct(%a, %b, %c)
  %y : Tensor = aten::permute(%x, %p))IR"),
                            {x}, 0, 0));
  EXPECT_TRUE(matches_torch(ir1(R"IR(
  %a : int = prim::Constant[value=0]()
  %b : int = prim::Constant[value=-1]()
  %y : Tensor = aten::transpose(%x, %a, %b))IR"),
                            {x}, 0, 0));
  EXPECT_TRUE(matches_torch(ir1("  %y : Tensor = aten::t(%x)"), {torch::randn({3, 5})}, 0, 0));
}

TEST(ConvertShuffle, SqueezeAndUnsqueeze) {
  const auto x = torch::randn({2, 1, 3, 1});
  EXPECT_TRUE(matches_torch(ir1("  %y : Tensor = aten::squeeze(%x)"), {x}, 0, 0));
  for (int d : {1, -1, 0, 2}) {
    const std::string c = "  %d : int = prim::Constant[value=" + std::to_string(d) + "]()\n";
    EXPECT_TRUE(matches_torch(ir1(c + "  %y : Tensor = aten::squeeze(%x, %d)"), {x}, 0, 0)) << d;
    EXPECT_TRUE(matches_torch(ir1(c + "  %y : Tensor = aten::unsqueeze(%x, %d)"), {x}, 0, 0)) << d;
  }
  const std::string last = "  %d : int = prim::Constant[value=-1]()\n";
  EXPECT_TRUE(matches_torch(ir1(last + "  %y : Tensor = aten::unsqueeze(%x, %d)"),
                            {torch::tensor(3.5)}, 0, 0));
}

TEST(ConvertShuffle, ExpandKeepsAndAddsDims) {
  const std::string ir = ir1(R"IR(
  %m1 : int = prim::Constant[value=-1]()
  %c3 : int = prim::Constant[value=3]()
  %c5 : int = prim::Constant[value=5]()
  %f : bool = prim::Constant[value=0]()
  %s : int[] = prim::ListConstruct(%c3, %m1, %c5, %m1)
  %y : Tensor = aten::expand(%x, %s, %f))IR");
  EXPECT_TRUE(matches_torch(ir, {torch::randn({2, 1, 4})}, 0, 0));
  EXPECT_TRUE(matches_torch(ir, {torch::randint(0, 9, {2, 1, 4}, torch::kLong)}, 0, 0));
  EXPECT_TRUE(matches_torch(ir, {torch::rand({2, 1, 4}) > 0.5}, 0, 0));
  const std::string as = R"IR(
graph(%x : Tensor, %o : Tensor):
  %y : Tensor = aten::expand_as(%x, %o)
  return (%y))IR";
  EXPECT_TRUE(matches_torch(as, {torch::randn({3, 1}), torch::randn({2, 3, 4})}, 0, 0));
}

// repeat tiles every dim, more counts than dims adding leading ones, for floats, integers and
// bools; a count list shorter than the rank is a clear error, a count of 0 (an empty result) is
// left to PyTorch with the reason, and a dynamic dim is refused.
TEST(ConvertShuffle, RepeatTilesEveryDim) {
  const auto repeat = [](const std::string& counts) {
    return ir1("  %r : int[] = prim::Constant[value=[" + counts +
               "]]()\n  %y : Tensor = aten::repeat(%x, %r)");
  };
  for (const char* counts : {"2, 3", "1, 1", "3, 1, 2", "1, 2, 1, 3"}) {
    SCOPED_TRACE(counts);
    EXPECT_TRUE(matches_torch(repeat(counts), {torch::randn({2, 3})}, 0, 0));
    EXPECT_TRUE(matches_torch(repeat(counts), {torch::randint(0, 9, {1, 4}, torch::kLong)}, 0, 0));
    EXPECT_TRUE(matches_torch(repeat(counts), {torch::rand({3, 1}) > 0.5}, 0, 0));
  }
  EXPECT_THROW(testing::run_converted(repeat("2"), {torch::randn({2, 3})}), Error);
  // A dim known only at run time: refused (compile() then leaves the node to PyTorch).
  try {
    run_dynamic_batch(repeat("2, 3"), torch::randn({4, 3}));
    ADD_FAILURE() << "a repeat of a dynamic dim converted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    EXPECT_NE(e.message().find("known only at run time"), std::string::npos) << e.what();
  }
  const auto g = kiln::testing::parse(repeat("2, 0"));
  const Support empty = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(empty.supported);
  EXPECT_NE(empty.reason.find("repeat count of 0"), std::string::npos) << empty.reason;
}

TEST(ConvertShuffle, IdentitiesAndShapesOfOthers) {
  const auto x = torch::randn({2, 6});
  EXPECT_TRUE(matches_torch(ir1(R"IR(
  %mf : int = prim::Constant[value=0]()
  %y : Tensor = aten::contiguous(%x, %mf))IR"),
                            {x}, 0, 0));
  EXPECT_TRUE(matches_torch(ir1(R"IR(
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::clone(%x, %none))IR"),
                            {x}, 0, 0));
  EXPECT_TRUE(matches_torch(ir1("  %y : Tensor = aten::detach(%x)"), {x}, 0, 0));
  for (const char* op : {"aten::view_as", "aten::reshape_as"}) {
    const std::string ir = std::string(R"IR(
graph(%x : Tensor, %o : Tensor):
  %y : Tensor = )IR") + op +
                           "(%x, %o)\n  return (%y)";
    EXPECT_TRUE(matches_torch(ir, {x, torch::randn({3, 2, 2})}, 0, 0)) << op;
  }
  EXPECT_TRUE(matches_torch(ir1(R"IR(
  %c1 : int = prim::Constant[value=1]()
  %c2 : int = prim::Constant[value=2]()
  %m1 : int = prim::Constant[value=-1]()
  %s : int[] = prim::ListConstruct(%c2, %m1)
  %y : Tensor = aten::unflatten(%x, %c1, %s))IR"),
                            {x}, 0, 0));
}

TEST(ConvertShuffle, DynamicBatchWithStaticLists) {
  const std::string ir = ir1(R"IR(
  %m1 : int = prim::Constant[value=-1]()
  %c12 : int = prim::Constant[value=12]()
  %s : int[] = prim::ListConstruct(%m1, %c12)
  %v : Tensor = aten::view(%x, %s)
  %c0 : int = prim::Constant[value=0]()
  %y : Tensor = aten::unsqueeze(%v, %c0))IR");
  const auto x = torch::randn({5, 3, 4});
  EXPECT_TRUE(at::equal(run_dynamic_batch(ir, x), x.view({-1, 12}).unsqueeze(0)));
  const std::string flat = ir1(R"IR(
  %c1 : int = prim::Constant[value=1]()
  %m1 : int = prim::Constant[value=-1]()
  %y : Tensor = aten::flatten(%x, %c1, %m1))IR");
  EXPECT_TRUE(at::equal(run_dynamic_batch(flat, x), x.flatten(1)));
}

TEST(ConvertShuffle, DynamicSizesInAShapeList) {
  // x.view(x.size(0), -1): the run-time size copies the input's dim in place.
  const std::string own = ir1(R"IR(
  %c0 : int = prim::Constant[value=0]()
  %m1 : int = prim::Constant[value=-1]()
  %n : int = aten::size(%x, %c0)
  %s : int[] = prim::ListConstruct(%n, %m1)
  %y : Tensor = aten::view(%x, %s))IR");
  for (int64_t batch : {1, 5, 16}) {
    const at::Tensor x = torch::randn({batch, 3, 4});
    EXPECT_TRUE(at::equal(run_dynamic_batch(own, x), x.view({batch, -1})));
  }
  // x.reshape(x.size(0) * 3, 4): the one run-time dim is inferred from the others.
  const std::string product = ir1(R"IR(
  %c0 : int = prim::Constant[value=0]()
  %c3 : int = prim::Constant[value=3]()
  %c4 : int = prim::Constant[value=4]()
  %n : int = aten::size(%x, %c0)
  %n3 : int = aten::mul(%n, %c3)
  %s : int[] = prim::ListConstruct(%n3, %c4)
  %y : Tensor = aten::reshape(%x, %s))IR");
  const at::Tensor x = torch::randn({5, 3, 4});
  EXPECT_TRUE(at::equal(run_dynamic_batch(product, x), x.reshape({15, 4})));
}

TEST(ConvertShuffle, SeveralRunTimeDimsInAShapeListBecomeAShapeTensor) {
  // x.view(x.size(0) * 3, -1): two dims only known at run time.
  const std::string two = ir1(R"IR(
  %c0 : int = prim::Constant[value=0]()
  %c3 : int = prim::Constant[value=3]()
  %m1 : int = prim::Constant[value=-1]()
  %n : int = aten::size(%x, %c0)
  %n3 : int = aten::mul(%n, %c3)
  %s : int[] = prim::ListConstruct(%n3, %m1)
  %y : Tensor = aten::view(%x, %s))IR");
  for (int64_t batch : {1, 5, 16}) {
    const at::Tensor x = torch::randn({batch, 3, 4});
    EXPECT_TRUE(at::equal(run_dynamic_batch(two, x), x.view({batch * 3, -1}))) << batch;
  }
  // x.reshape(x.size(0) // 2 * 2, 3, -1) of [B, 6, 4]: the static 3 stays known for the layers
  // after it.
  const std::string kept = ir1(R"IR(
  %c0 : int = prim::Constant[value=0]()
  %c2 : int = prim::Constant[value=2]()
  %c3 : int = prim::Constant[value=3]()
  %m1 : int = prim::Constant[value=-1]()
  %n : int = aten::size(%x, %c0)
  %h : int = aten::floordiv(%n, %c2)
  %h2 : int = aten::mul(%h, %c2)
  %s : int[] = prim::ListConstruct(%h2, %c3, %m1)
  %y : Tensor = aten::reshape(%x, %s))IR");
  for (int64_t batch : {2, 6}) {
    const at::Tensor x = torch::randn({batch, 6, 4});
    EXPECT_TRUE(at::equal(run_dynamic_batch(kept, x), x.reshape({batch, 3, -1}))) << batch;
  }
  EXPECT_EQ(built_shape(kept, torch::randn({2, 6, 4})),
            (engine::Shape{engine::kDynamic, 3, engine::kDynamic}));
}

TEST(ConvertShuffle, ExpandToRunTimeSizes) {
  // cls.expand(x.size(0), -1, -1), cls = x[:1] (vit's class token expanded to the batch).
  const std::string cls = ir1(R"IR(
  %c0 : int = prim::Constant[value=0]()
  %c1 : int = prim::Constant[value=1]()
  %m1 : int = prim::Constant[value=-1]()
  %t : Tensor = aten::slice(%x, %c0, %c0, %c1, %c1)
  %n : int = aten::size(%x, %c0)
  %s : int[] = prim::ListConstruct(%n, %m1, %m1)
  %f : bool = prim::Constant[value=0]()
  %y : Tensor = aten::expand(%t, %s, %f))IR");
  for (int64_t batch : {1, 3, 16}) {
    const at::Tensor x = torch::randn({batch, 3, 4});
    EXPECT_TRUE(at::equal(run_dynamic_batch(cls, x), x.slice(0, 0, 1).expand({batch, -1, -1})))
        << batch;
  }
  EXPECT_EQ(built_shape(cls, torch::randn({2, 3, 4})), (engine::Shape{engine::kDynamic, 3, 4}));
  // x.expand(2, x.size(0), 3, 4): a new leading dim, and a run-time size where x's dim is only
  // known at run time (-1 there would keep it).
  const std::string lead = ir1(R"IR(
  %c0 : int = prim::Constant[value=0]()
  %c2 : int = prim::Constant[value=2]()
  %c3 : int = prim::Constant[value=3]()
  %c4 : int = prim::Constant[value=4]()
  %n : int = aten::size(%x, %c0)
  %s : int[] = prim::ListConstruct(%c2, %n, %c3, %c4)
  %f : bool = prim::Constant[value=0]()
  %y : Tensor = aten::expand(%x, %s, %f))IR");
  for (int64_t batch : {1, 5}) {
    const at::Tensor x = torch::randn({batch, 3, 4});
    EXPECT_TRUE(at::equal(run_dynamic_batch(lead, x), x.expand({2, batch, 3, 4}))) << batch;
  }
  EXPECT_EQ(built_shape(lead, torch::randn({2, 3, 4})), (engine::Shape{2, engine::kDynamic, 3, 4}));
}

TEST(ConvertShuffle, RunTimeSizesKilnCannotComputeAreUnsupported) {
  // A size read from a tensor's values, not its shape.
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %c0 : int = prim::Constant[value=0]()
  %c3 : int = prim::Constant[value=3]()
  %m1 : int = prim::Constant[value=-1]()
  %n : int = aten::size(%x, %c0)
  %r : int = aten::remainder(%n, %c3)
  %s : int[] = prim::ListConstruct(%r, %n, %m1)
  %y : Tensor = aten::reshape(%x, %s)
  return (%y))IR");
  try {
    convert_graph(*g, {InputSpec{engine::DataType::kF32, {1, 3, 4}, {5, 3, 4}, {16, 3, 4}}});
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("aten::remainder"), std::string::npos) << e.what();
  }
}

TEST(ConvertShuffle, ValidatorRejectsRuntimeShapeLists) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %t : Tensor):
  %m1 : int = prim::Constant[value=-1]()
  %n : int = aten::Int(%t)
  %s : int[] = prim::ListConstruct(%n, %m1)
  %y : Tensor = aten::reshape(%x, %s)
  return (%y))IR");
  const torch::jit::Node* reshape = g->outputs()[0]->node();
  const Support s = default_registry().supports(reshape);
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("known at compile time"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
