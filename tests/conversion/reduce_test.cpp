// Reduce converters against libtorch: dim lists (negative, keepdim, none), torch's result dtypes,
// max/min with indices, argmax/argmin, any/all, var/std corrections and norms.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

// A graph of one x input; `body` uses %x, the constants below, and defines %y.
std::string ir(const std::string& body, const std::string& outputs = "%y") {
  return "graph(%x : Tensor):\n"
         "  %none : NoneType = prim::Constant()\n"
         "  %t : bool = prim::Constant[value=1]()\n"
         "  %f : bool = prim::Constant[value=0]()\n"
         "  %m2 : int = prim::Constant[value=-2]()\n"
         "  %m1 : int = prim::Constant[value=-1]()\n"
         "  %zero : int = prim::Constant[value=0]()\n"
         "  %one : int = prim::Constant[value=1]()\n"
         "  %two : int = prim::Constant[value=2]()\n"
         "  %d1 : int[] = prim::ListConstruct(%one)\n"
         "  %d02 : int[] = prim::ListConstruct(%zero, %m1)\n"
         "  %empty : int[] = prim::ListConstruct()\n" +
         body + "\n  return (" + outputs + ")\n";
}

TEST(ConvertReduce, SumMeanProdDimsAndKeepdim) {
  torch::manual_seed(0);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 3, 5});
    for (const char* op : {"aten::sum", "aten::mean"}) {
      const std::string o = op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %none)"), {x})) << op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %d1, %f, %none)"), {x})) << op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %d02, %t, %none)"), {x})) << op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %none, %f, %none)"), {x})) << op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %empty, %t, %none)"), {x})) << op;
    }
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::prod(%x, %m1, %t, %none)"), {x}));
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::prod(%x, %none)"), {x.abs() + 0.5}));
  }
}

TEST(ConvertReduce, TorchResultDtypes) {
  torch::manual_seed(1);
  const auto i = torch::randint(-50, 50, {4, 6}, torch::kInt);
  const auto b = torch::rand({4, 6}) > 0.5;
  // Integer and bool sums/products are int64; a dtype argument casts first and is kept.
  EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::sum(%x, %none)"), {i}, 0, 0));
  EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::sum(%x, %d1, %f, %none)"), {b}, 0, 0));
  EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::prod(%x, %zero, %f, %none)"),
                            {torch::randint(-3, 3, {3, 4}, torch::kInt)}, 0, 0));
  const std::string int32 = "  %dt : int = prim::Constant[value=3]()\n";
  EXPECT_TRUE(matches_torch(ir(int32 + "  %y : Tensor = aten::sum(%x, %d1, %t, %dt)"), {i}, 0, 0));
  const std::string f32 = "  %dt : int = prim::Constant[value=6]()\n";
  EXPECT_TRUE(matches_torch(ir(f32 + "  %y : Tensor = aten::mean(%x, %d1, %f, %dt)"), {i}));
  EXPECT_TRUE(matches_torch(ir(f32 + "  %y : Tensor = aten::sum(%x, %dt)"), {b}));
}

TEST(ConvertReduce, AmaxAminAndFullMaxMin) {
  torch::manual_seed(2);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 3, 5});
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::amax(%x, %d02, %f)"), {x}));
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::amin(%x, %d1, %t)"), {x}));
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::amax(%x, %empty, %f)"), {x}));
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::max(%x)"), {x}));
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::min(%x)"), {x}));
  }
  EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::max(%x)"),
                            {torch::randint(-9, 9, {3, 4}, torch::kLong)}, 0, 0));
}

TEST(ConvertReduce, MaxMinDimGiveValuesAndIndices) {
  torch::manual_seed(3);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 6, 5});
    for (const char* op : {"aten::max", "aten::min"}) {
      const std::string o = op;
      EXPECT_TRUE(
          matches_torch(ir("  %y : Tensor, %i : Tensor = " + o + "(%x, %one, %f)", "%y, %i"), {x}))
          << op;
      EXPECT_TRUE(
          matches_torch(ir("  %y : Tensor, %i : Tensor = " + o + "(%x, %m1, %t)", "%y, %i"), {x}))
          << op;
    }
  }
}

TEST(ConvertReduce, ArgmaxArgminOverADim) {
  torch::manual_seed(4);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 6, 5});
    for (const char* op : {"aten::argmax", "aten::argmin"}) {
      const std::string o = op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %one, %f)"), {x}, 0, 0)) << op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %m2, %t)"), {x}, 0, 0)) << op;
    }
  }
}

TEST(ConvertReduce, ArgmaxArgminFlattened) {
  torch::manual_seed(5);
  const auto x = torch::randn({4, 6, 5});
  for (const char* op : {"aten::argmax", "aten::argmin"}) {
    const std::string o = op;
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %none, %f)"), {x}, 0, 0)) << op;
  }
}

TEST(ConvertReduce, ArgmaxArgminFlattenedKeepdim) {
  torch::manual_seed(6);
  const auto x = torch::randn({4, 6, 5});
  for (const char* op : {"aten::argmax", "aten::argmin"}) {
    const std::string o = op;
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %none, %t)"), {x}, 0, 0)) << op;
  }
}

TEST(ConvertReduce, AnyAll) {
  torch::manual_seed(5);
  const auto b = torch::rand({3, 4}) > 0.7;
  for (const char* op : {"aten::any", "aten::all"}) {
    const std::string o = op;
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x)"), {b}, 0, 0)) << op;
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %one, %f)"), {b}, 0, 0)) << op;
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %m2, %t)"), {b}, 0, 0)) << op;
    // uint8 keeps its dtype; other inputs give bool.
    EXPECT_TRUE(
        matches_torch(ir("  %y : Tensor = " + o + "(%x, %one, %f)"), {b.to(torch::kByte)}, 0, 0))
        << op;
    EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x)"), {torch::randn({3, 4})}, 0, 0))
        << op;
  }
}

TEST(ConvertReduce, VarStdCorrections) {
  torch::manual_seed(6);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 6, 5}) * 3 + 2;
    for (const char* op : {"aten::var", "aten::std"}) {
      const std::string o = op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %t)"), {x})) << op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %f)"), {x})) << op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %d02, %t, %t)"), {x})) << op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %d1, %f, %f)"), {x})) << op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %d1, %two, %t)"), {x})) << op;
      EXPECT_TRUE(matches_torch(ir("  %y : Tensor = " + o + "(%x, %none, %none, %f)"), {x})) << op;
    }
  }
}

TEST(ConvertReduce, Norms) {
  torch::manual_seed(7);
  const auto x = torch::randn({4, 6, 5});
  EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::norm(%x, %two)"), {x}));
  // p = +-inf (amax/amin of abs) cannot be written as an IR constant; not covered here.
  for (const char* p : {"1.", "2.", "3.5"}) {
    const std::string pc = std::string("  %p : float = prim::Constant[value=") + p + "]()\n";
    EXPECT_TRUE(matches_torch(ir(pc + "  %y : Tensor = aten::norm(%x, %p, %d1, %t)"), {x})) << p;
    EXPECT_TRUE(matches_torch(
        ir(pc + "  %y : Tensor = aten::linalg_vector_norm(%x, %p, %d02, %f, %none)"), {x}))
        << p;
  }
  EXPECT_TRUE(matches_torch(ir("  %y : Tensor = aten::frobenius_norm(%x, %d02, %f)"), {x}));
}

TEST(ConvertReduce, NonConstantDimAndZeroNormAreRejected) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %d : int[]):
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::sum(%x, %d, %f, %none)
  return (%y))IR");
  Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("dim"), std::string::npos) << s.reason;
  auto zero = kiln::testing::parse(R"IR(
graph(%x : Tensor):
  %p : int = prim::Constant[value=0]()
  %y : Tensor = aten::norm(%x, %p)
  return (%y))IR");
  s = default_registry().supports(zero->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("p = 0"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace kiln::conversion
