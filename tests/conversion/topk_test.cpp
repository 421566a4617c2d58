// topk, sort, argsort, the scan converters (cumsum, cumprod, cummax, cummin, logcumsumexp) and
// unique (_unique2, _unique, unique_consecutive) against libtorch on the CPU backend.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using kiln::Error;
using kiln::ErrorKind;
using testing::matches_torch;

TEST(ConvertTopK, TopKBothOutputsEveryFlag) {
  // A permutation has no ties, so the indices are unique too.
  const auto x = torch::randperm(60).to(torch::kFloat).reshape({3, 4, 5});
  for (int dim : {-1, 0, 1}) {
    for (const char* largest : {"1", "0"}) {
      const std::string ir =
          "graph(%x : Tensor):\n  %k : int = prim::Constant[value=2]()\n"
          "  %d : int = prim::Constant[value=" +
          std::to_string(dim) + "]()\n  %l : bool = prim::Constant[value=" + largest +
          "]()\n  %s : bool = prim::Constant[value=1]()\n"
          "  %v : Tensor, %i : Tensor = aten::topk(%x, %k, %d, %l, %s)\n"
          "  return (%v, %i)";
      EXPECT_TRUE(matches_torch(ir, {x}, 0, 0)) << dim << " " << largest;
      EXPECT_TRUE(matches_torch(ir, {x.to(torch::kLong)}, 0, 0)) << dim << " " << largest;
    }
  }
}

TEST(ConvertTopK, SortAndArgsort) {
  const auto x = torch::randperm(24).to(torch::kFloat).reshape({4, 6});
  for (const char* desc : {"0", "1"}) {
    const std::string consts =
        "graph(%x : Tensor):\n  %d : int = prim::Constant[value=-1]()\n"
        "  %desc : bool = prim::Constant[value=" +
        std::string(desc) + "]()\n";
    EXPECT_TRUE(matches_torch(
        consts + "  %v : Tensor, %i : Tensor = aten::sort(%x, %d, %desc)\n  return (%v, %i)", {x},
        0, 0));
    EXPECT_TRUE(matches_torch(consts + "  %i : Tensor = aten::argsort(%x, %d, %desc)\n"
                                       "  return (%i)",
                              {x}, 0, 0));
  }
}

TEST(ConvertTopK, CumsumWithAndWithoutDtype) {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=-1]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::cumsum(%x, %d, %none)
  return (%y))IR";
  EXPECT_TRUE(matches_torch(ir, {torch::randn({3, 7})}, 1e-5, 1e-5));
  EXPECT_TRUE(matches_torch(ir, {torch::randint(-9, 9, {3, 7}, torch::kInt)}, 0, 0));
  EXPECT_TRUE(matches_torch(ir, {torch::rand({3, 7}) > 0.5}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=0]()
  %dt : int = prim::Constant[value=6]()
  %y : Tensor = aten::cumsum(%x, %d, %dt)
  return (%y))IR",
                            {torch::randint(-9, 9, {5, 2}, torch::kLong)}, 0, 0));
}

TEST(ConvertTopK, CumprodWithAndWithoutDtype) {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=1]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::cumprod(%x, %d, %none)
  return (%y))IR";
  EXPECT_TRUE(matches_torch(ir, {torch::rand({3, 7}) + 0.5}, 1e-5, 1e-6));
  EXPECT_TRUE(matches_torch(ir, {torch::randn({2, 6}).to(torch::kHalf)}, 1e-3, 1e-3));
  // Integers become int64 (int32 would overflow here); bools too.
  EXPECT_TRUE(matches_torch(ir, {torch::randint(-30, 30, {3, 9}, torch::kInt)}, 0, 0));
  EXPECT_TRUE(matches_torch(ir, {torch::rand({3, 7}) > 0.3}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=0]()
  %dt : int = prim::Constant[value=6]()
  %y : Tensor = aten::cumprod(%x, %d, %dt)
  return (%y))IR",
                            {torch::rand({5, 2}) + 0.5}, 1e-12, 0));
  // A 0-d tensor scans as one element.
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=-1]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::cumprod(%x, %d, %none)
  return (%y))IR",
                            {torch::tensor(2.5)}, 0, 0));
}

// cummax/cummin: values and indices, with ties (integers, f16) and NaN as torch has them.
TEST(ConvertTopK, CummaxCumminBothOutputs) {
  auto x = torch::randint(-3, 3, {4, 9}).to(torch::kFloat);
  x[1][3] = NAN;
  x[2][0] = NAN;
  x[2][5] = NAN;
  for (const char* op : {"cummax", "cummin"}) {
    for (int dim : {0, 1, -1}) {
      const std::string ir =
          "graph(%x : Tensor):\n  %d : int = prim::Constant[value=" + std::to_string(dim) +
          "]()\n  %v : Tensor, %i : Tensor = aten::" + op + "(%x, %d)\n  return (%v, %i)";
      EXPECT_TRUE(matches_torch(ir, {x}, 0, 0)) << op << dim;
      EXPECT_TRUE(matches_torch(ir, {x.to(torch::kHalf)}, 0, 0)) << op << dim;
      EXPECT_TRUE(matches_torch(ir, {torch::randint(-2, 2, {4, 9}, torch::kLong)}, 0, 0))
          << op << dim;
    }
  }
}

TEST(ConvertTopK, LogcumsumexpWithInfinitiesAndNaN) {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %d : int = prim::Constant[value=1]()
  %y : Tensor = aten::logcumsumexp(%x, %d)
  return (%y))IR";
  auto x = torch::randn({4, 8}) * 30;
  x[0][0] = -INFINITY;
  x[0][1] = -INFINITY;
  x[1][2] = INFINITY;
  x[1][4] = INFINITY;
  x[2][3] = NAN;
  x[3][5] = -INFINITY;
  EXPECT_TRUE(matches_torch(ir, {x}, 1e-6, 1e-6));
  EXPECT_TRUE(matches_torch(ir, {x.to(torch::kHalf)}, 1e-3, 1e-3));
}

TEST(ConvertTopK, ValidatorRejectsRuntimeK) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %t : Tensor):
  %n : int = aten::Int(%t)
  %d : int = prim::Constant[value=-1]()
  %b : bool = prim::Constant[value=1]()
  %v : Tensor, %i : Tensor = aten::topk(%x, %n, %d, %b, %b)
  return (%v, %i))IR");
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("graph input"), std::string::npos) << s.reason;
}

// Inputs for unique: duplicates everywhere, a NaN, +-0 and +-inf, every element equal, bools,
// halves, a 0-d tensor and empty ones. (Several NaNs are each their own value, as in torch, but
// which of them comes first is unspecified there: they are tested without the inverse.)
std::vector<at::Tensor> unique_inputs() {
  auto f = torch::randint(-4, 4, {3, 5, 7}).to(torch::kFloat);
  f[1][2][3] = NAN;
  f[2][4][6] = -0.0;
  f[0][1][1] = INFINITY;
  f[0][1][2] = -INFINITY;
  return {f,
          torch::randint(-3, 50, {40}),
          torch::full({6, 2}, 7, torch::kInt),
          torch::rand({4, 9}) > 0.5,
          torch::zeros({5}, torch::kBool),
          torch::ones({2, 3}, torch::kBool),
          torch::randint(0, 5, {33}).to(torch::kHalf),
          torch::tensor(3.5),
          torch::empty({0}),
          torch::empty({2, 0}, torch::kLong)};
}

TEST(ConvertTopK, UniqueEveryOutputAndFlag) {
  for (const at::Tensor& x : unique_inputs()) {
    for (const char* inverse : {"0", "1"}) {
      for (const char* counts : {"0", "1"}) {
        SCOPED_TRACE(std::string(toString(x.scalar_type())) + " " + std::to_string(x.dim()) +
                     "-d inverse " + inverse + " counts " + counts);
        const std::string flags = std::string("  %s : bool = prim::Constant[value=1]()\n") +
                                  "  %inv : bool = prim::Constant[value=" + inverse + "]()\n" +
                                  "  %cnt : bool = prim::Constant[value=" + counts + "]()\n";
        EXPECT_TRUE(matches_torch("graph(%x : Tensor):\n" + flags +
                                      "  %v : Tensor, %i : Tensor, %c : Tensor = "
                                      "aten::_unique2(%x, %s, %inv, %cnt)\n  return (%v, %i, %c)",
                                  {x}, 0, 0));
        EXPECT_TRUE(matches_torch("graph(%x : Tensor):\n" + flags +
                                      "  %none : NoneType = prim::Constant()\n"
                                      "  %v : Tensor, %i : Tensor, %c : Tensor = "
                                      "aten::unique_consecutive(%x, %inv, %cnt, %none)\n"
                                      "  return (%v, %i, %c)",
                                  {x}, 0, 0));
      }
    }
    EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %s : bool = prim::Constant[value=1]()
  %v : Tensor, %i : Tensor = aten::_unique(%x, %s, %s)
  return (%v, %i))IR",
                              {x}, 0, 0));
  }
  auto nans = torch::randint(0, 3, {20}).to(torch::kFloat);
  nans[0] = nans[7] = nans[19] = NAN;
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %v : Tensor, %i : Tensor, %c : Tensor = aten::_unique2(%x, %t, %f, %t)
  return (%v, %c))IR",
                            {nans}, 0, 0));
}

// unique_consecutive of a dynamic length (sizes from 1 to 16 in one engine); unique itself sorts,
// which needs a static number of elements, and along a dim is not converted: both say so.
TEST(ConvertTopK, UniqueOfDynamicLengthsAndWhatIsRefused) {
  for (const char* out : {"%v", "%i", "%c"}) {
    const std::string ir = std::string(R"IR(
graph(%x : Tensor):
  %t : bool = prim::Constant[value=1]()
  %none : NoneType = prim::Constant()
  %v : Tensor, %i : Tensor, %c : Tensor = aten::unique_consecutive(%x, %t, %t, %none)
  return ()IR") + out + ")";
    for (int64_t n : {1, 5, 16, 9}) {
      SCOPED_TRACE(std::string(out) + " n " + std::to_string(n));
      const auto x = torch::randint(0, 3, {n});
      const auto [v, i, c] = torch::unique_consecutive(x, true, true);
      const at::Tensor want = out == std::string("%v") ? v : out == std::string("%i") ? i : c;
      const at::Tensor got = testing::run_dynamic_batch(ir, x);
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_TRUE(torch::equal(got, want)) << got << want;
    }
  }
  try {
    testing::run_dynamic_batch(R"IR(
graph(%x : Tensor):
  %t : bool = prim::Constant[value=1]()
  %v : Tensor, %i : Tensor, %c : Tensor = aten::_unique2(%x, %t, %t, %t)
  return (%v))IR",
                               torch::randn({4}));
    FAIL() << "sorted a dynamic number of elements";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("static number of elements"), std::string::npos)
        << e.what();
  }
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %t : bool = prim::Constant[value=1]()
  %d : int = prim::Constant[value=0]()
  %v : Tensor, %i : Tensor, %c : Tensor = aten::unique_consecutive(%x, %t, %t, %d)
  return (%v))IR");
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("along a dim"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
