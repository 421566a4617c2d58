// Shape analysis: exact segment shapes at min/opt/max, valid indices for index inputs, and one
// run per distinct profile.
#include <gtest/gtest.h>

#include "partition_testing.h"
#include "partitioning/shape_analysis.h"
#include "util/errors.h"

namespace kiln::partitioning {
namespace {

using testing::partition_ir;
using testing::with_min_block;
using Shape = std::vector<int64_t>;

const TableCapability kAllButLgamma = TableCapability::all_except({"aten::lgamma"});

std::vector<Shape> shapes(const std::vector<ValueDesc>& descs) {
  std::vector<Shape> out;
  for (const ValueDesc& d : descs) out.push_back(d.sizes);
  return out;
}

const char* kConvChain = R"IR(
graph(%x : Tensor, %w1 : Tensor, %w2 : Tensor):
  %none : NoneType = prim::Constant()
  %ones : int[] = prim::Constant[value=[1, 1]]()
  %twos : int[] = prim::Constant[value=[2, 2]]()
  %zeros : int[] = prim::Constant[value=[0, 0]]()
  %g : int = prim::Constant[value=1]()
  %c1 : Tensor = aten::conv2d(%x, %w1, %none, %ones, %ones, %ones, %g)
  %r1 : Tensor = aten::relu(%c1)
  %l : Tensor = aten::lgamma(%r1)
  %c2 : Tensor = aten::conv2d(%l, %w2, %none, %twos, %zeros, %ones, %g)
  %r2 : Tensor = aten::relu(%c2)
  %o : Tensor = aten::sigmoid(%r2)
  return (%o))IR";

TEST(ShapeAnalysis, ConvChainWithAFallbackInTheMiddle) {
  auto p = partition_ir(kConvChain, kAllButLgamma, with_min_block(2));
  ASSERT_EQ(format_segments(p),
            "segment 0 engine: %c1=aten::conv2d %r1=aten::relu\n"
            "segment 1 torch: %l=aten::lgamma\n"
            "segment 2 engine: %c2=aten::conv2d %r2=aten::relu %o=aten::sigmoid\n");
  // (On generated inputs: libtorch without Python has no meta kernel for convolutions.)
  analyze_shapes(p, {InputProfile::range({1, 3, 8, 8}, {2, 3, 16, 16}, {4, 3, 32, 32}),
                     InputProfile::fixed({8, 3, 3, 3}), InputProfile::fixed({16, 8, 3, 3})});
  const Segment& head = p.segments[0];
  const Segment& fallback = p.segments[1];
  const Segment& tail = p.segments[2];
  ASSERT_TRUE(head.has_shapes && fallback.has_shapes && tail.has_shapes);

  EXPECT_EQ(shapes(head.shapes[kMin].inputs), (std::vector<Shape>{{1, 3, 8, 8}, {8, 3, 3, 3}}));
  EXPECT_EQ(shapes(head.shapes[kOpt].inputs), (std::vector<Shape>{{2, 3, 16, 16}, {8, 3, 3, 3}}));
  EXPECT_EQ(shapes(head.shapes[kMax].inputs), (std::vector<Shape>{{4, 3, 32, 32}, {8, 3, 3, 3}}));

  EXPECT_EQ(shapes(fallback.shapes[kMin].inputs), (std::vector<Shape>{{1, 8, 8, 8}}));
  EXPECT_EQ(shapes(fallback.shapes[kOpt].inputs), (std::vector<Shape>{{2, 8, 16, 16}}));
  EXPECT_EQ(shapes(fallback.shapes[kMax].inputs), (std::vector<Shape>{{4, 8, 32, 32}}));

  EXPECT_EQ(shapes(tail.shapes[kMin].inputs), (std::vector<Shape>{{1, 8, 8, 8}, {16, 8, 3, 3}}));
  EXPECT_EQ(shapes(tail.shapes[kOpt].inputs), (std::vector<Shape>{{2, 8, 16, 16}, {16, 8, 3, 3}}));
  EXPECT_EQ(shapes(tail.shapes[kMax].inputs), (std::vector<Shape>{{4, 8, 32, 32}, {16, 8, 3, 3}}));
  // 3x3, stride 2, no padding: 8 -> 3, 16 -> 7, 32 -> 15.
  EXPECT_EQ(shapes(tail.shapes[kMin].outputs), (std::vector<Shape>{{1, 16, 3, 3}}));
  EXPECT_EQ(shapes(tail.shapes[kOpt].outputs), (std::vector<Shape>{{2, 16, 7, 7}}));
  EXPECT_EQ(shapes(tail.shapes[kMax].outputs), (std::vector<Shape>{{4, 16, 15, 15}}));
  EXPECT_EQ(tail.shapes[kOpt].inputs[0].dtype, c10::ScalarType::Float);
  EXPECT_EQ(tail.shapes[kOpt].inputs[0].type, "Tensor");
}

const char* kIndexOps = R"IR(
graph(%idx : Tensor, %table : Tensor, %sel : Tensor, %src : Tensor):
  %m1 : int = prim::Constant[value=-1]()
  %false : bool = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %e : Tensor = aten::embedding(%table, %idx, %m1, %false, %false)
  %l : Tensor = aten::lgamma(%e)
  %s : Tensor = aten::index_select(%src, %one, %sel)
  %r : Tensor = aten::relu(%l)
  return (%r, %s))IR";

std::vector<InputProfile> index_profiles() {
  return {InputProfile::range({1, 4}, {2, 8}, {4, 16}, c10::ScalarType::Long),
          InputProfile::fixed({100, 32}), InputProfile::fixed({5}, c10::ScalarType::Long),
          InputProfile::fixed({3, 50})};
}

TEST(ShapeAnalysis, IndexInputsGetValidIndices) {
  auto graph = kiln::testing::parse(kIndexOps);
  const auto profiles = index_profiles();
  for (Profile profile : {kMin, kOpt, kMax}) {
    const auto inputs = generate_inputs(*graph, profiles, profile, 7);
    const at::Tensor idx = inputs[0].toTensor();
    const at::Tensor sel = inputs[2].toTensor();
    EXPECT_EQ(idx.scalar_type(), c10::ScalarType::Long);
    EXPECT_GE(idx.min().item<int64_t>(), 0);
    EXPECT_LT(idx.max().item<int64_t>(), 100);
    EXPECT_GE(sel.min().item<int64_t>(), 0);
    EXPECT_LT(sel.max().item<int64_t>(), 50);
  }
  // Random over the valid range, not only zeros: the 16 * 4 maximum indices are not all 0.
  EXPECT_GT(generate_inputs(*graph, profiles, kMax, 7)[0].toTensor().max().item<int64_t>(), 0);
}

TEST(ShapeAnalysis, EmbeddingAndIndexSelectShapes) {
  auto p = partition_ir(kIndexOps, kAllButLgamma, with_min_block(1));
  ASSERT_EQ(format_segments(p),
            "segment 0 engine: %e=aten::embedding\n"
            "segment 1 torch: %l=aten::lgamma\n"
            "segment 2 engine: %s=aten::index_select %r=aten::relu\n");
  analyze_shapes(p, index_profiles());
  const Segment& lookup = p.segments[0];
  EXPECT_EQ(shapes(lookup.shapes[kMin].inputs), (std::vector<Shape>{{100, 32}, {1, 4}}));
  EXPECT_EQ(lookup.shapes[kMin].inputs[1].dtype, c10::ScalarType::Long);
  EXPECT_EQ(shapes(lookup.shapes[kMin].outputs), (std::vector<Shape>{{1, 4, 32}}));
  EXPECT_EQ(shapes(lookup.shapes[kOpt].outputs), (std::vector<Shape>{{2, 8, 32}}));
  EXPECT_EQ(shapes(lookup.shapes[kMax].outputs), (std::vector<Shape>{{4, 16, 32}}));
  const Segment& tail = p.segments[2];
  EXPECT_EQ(shapes(tail.shapes[kMax].inputs), (std::vector<Shape>{{3, 50}, {5}, {4, 16, 32}}));
  EXPECT_EQ(shapes(tail.shapes[kMax].outputs), (std::vector<Shape>{{3, 5}, {4, 16, 32}}));
}

TEST(ShapeAnalysis, IndexIntoAComputedTensorUsesZeros) {
  const char* ir = R"IR(
graph(%sel : Tensor, %src : Tensor):
  %zero : int = prim::Constant[value=0]()
  %t : Tensor = aten::relu(%src)
  %s : Tensor = aten::index_select(%t, %zero, %sel)
  return (%s))IR";
  auto graph = kiln::testing::parse(ir);
  const auto inputs = generate_inputs(
      *graph, {InputProfile::fixed({6}, c10::ScalarType::Long), InputProfile::fixed({2, 3})}, kOpt);
  EXPECT_EQ(inputs[0].toTensor().abs().sum().item<int64_t>(), 0);
}

// Factory ops on the device the graph names (here the CPU) give meta tensors in a run on meta
// tensors; a size that only data can tell (nonzero's) makes the graph run on generated inputs,
// with the same shapes where they do not depend on the data.
TEST(ShapeAnalysis, MetaTensorsUnlessASizeDependsOnData) {
  const char* ir = R"IR(
graph(%x : Tensor):
  %none : NoneType = prim::Constant()
  %cpu : Device = prim::Constant[value="cpu"]()
  %one : int = prim::Constant[value=1]()
  %f32 : int = prim::Constant[value=6]()
  %n : int = aten::size(%x, %one)
  %a : Tensor = aten::arange(%n, %f32, %none, %cpu, %none)
  %l : Tensor = aten::lgamma(%a)
  %y : Tensor = aten::add(%x, %l, %one)
  return (%y))IR";
  const std::vector<InputProfile> profiles = {InputProfile::range({1, 2}, {3, 5}, {4, 9})};
  auto p = partition_ir(ir, kAllButLgamma, with_min_block(1));
  ASSERT_EQ(analyze_shapes(p, profiles), ShapeSource::kMetaTensors);
  const Segment& tail = p.segments.back();
  ASSERT_EQ(tail.target, Target::kEngine);
  EXPECT_EQ(shapes(tail.shapes[kMin].outputs), (std::vector<Shape>{{1, 2}}));
  EXPECT_EQ(shapes(tail.shapes[kMax].outputs), (std::vector<Shape>{{4, 9}}));
  EXPECT_EQ(tail.shapes[kOpt].inputs.back().sizes, (Shape{5}));

  const char* data_dependent = R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %nz : Tensor = aten::nonzero(%x)
  %l : Tensor = aten::lgamma(%x)
  %y : Tensor = aten::add(%l, %one, %one)
  %z : Tensor = aten::mul(%nz, %one)
  return (%y, %z))IR";
  auto q = partition_ir(data_dependent, kAllButLgamma, with_min_block(1));
  ASSERT_EQ(analyze_shapes(q, profiles), ShapeSource::kGeneratedInputs);
  const Segment& last = q.segments.back();
  ASSERT_TRUE(last.has_shapes);
  EXPECT_EQ(shapes(last.shapes[kMax].outputs).front(), (Shape{4, 9}));
}

// Counts its calls: how often shape analysis runs the graph.
int g_count_calls = 0;
TORCH_LIBRARY(kiln_shape_test, m) {
  m.def("count_calls(Tensor x) -> Tensor", [](const at::Tensor& x) {
    ++g_count_calls;
    return x;
  });
}

// An engine segment, an If whose second branch falls back, an engine segment.
const char* kIfBetweenEngines = R"IR(
graph(%x : Tensor, %c : bool):
  %a : Tensor = kiln_shape_test::count_calls(%x)
  %r : Tensor = prim::If(%c)
    block0():
      %t : Tensor = aten::sigmoid(%a)
      -> (%t)
    block1():
      %l : Tensor = aten::lgamma(%a)
      -> (%l)
  %o : Tensor = aten::tanh(%r)
  return (%o))IR";

TEST(ShapeAnalysis, IfBranchesAndNonTensorInputs) {
  auto p = partition_ir(kIfBetweenEngines, kAllButLgamma, with_min_block(1));
  analyze_shapes(p, {InputProfile::range({1, 2}, {3, 2}, {5, 2}), InputProfile::of_value(false)});
  ASSERT_EQ(p.segments.size(), 3u);
  const Segment& branch = p.segments[1].blocks.at(0).segments.at(0);
  ASSERT_TRUE(branch.has_shapes);
  EXPECT_EQ(shapes(branch.shapes[kOpt].outputs), (std::vector<Shape>{{3, 2}}));
  EXPECT_EQ(shapes(p.segments[2].shapes[kMax].inputs), (std::vector<Shape>{{5, 2}}));
  EXPECT_FALSE(p.segments[1].shapes[kMin].inputs.at(0).is_tensor);
  EXPECT_EQ(p.segments[1].shapes[kMin].inputs.at(0).type, "bool");
}

TEST(ShapeAnalysis, WrongProfileCountOrFailingSegmentIsAClearError) {
  auto p = partition_ir(kConvChain, kAllButLgamma, with_min_block(2));
  EXPECT_THROW(analyze_shapes(p, {InputProfile::fixed({1, 3, 8, 8})}), InvalidArgument);
  try {
    // 4 input channels do not fit weights made for 3.
    analyze_shapes(p, {InputProfile::fixed({1, 4, 8, 8}), InputProfile::fixed({8, 3, 3, 3}),
                       InputProfile::fixed({16, 8, 3, 3})});
    FAIL() << "expected ShapeMismatch";
  } catch (const ShapeMismatch& e) {
    EXPECT_NE(e.message().find("segment 0 (engine) failed on the generated inputs"),
              std::string::npos)
        << e.message();
  }
}

TEST(ShapeAnalysis, ProfilesWithTheSameInputsRunOnce) {
  const char* ir = R"IR(
graph(%x : Tensor, %w : Tensor):
  %c : Tensor = kiln_shape_test::count_calls(%x)
  %y : Tensor = aten::matmul(%c, %w)
  return (%y))IR";
  auto p = partition_ir(ir, kAllButLgamma, with_min_block(1));
  g_count_calls = 0;
  analyze_shapes(p, {InputProfile::fixed({4, 8}), InputProfile::fixed({8, 3})});
  EXPECT_EQ(g_count_calls, 1);
  for (Profile profile : {kMin, kOpt, kMax}) {
    EXPECT_EQ(shapes(p.segments.back().shapes[profile].outputs), (std::vector<Shape>{{4, 3}}));
  }
  // min = opt: two runs, and min's shapes are opt's.
  g_count_calls = 0;
  analyze_shapes(p, {InputProfile::range({2, 8}, {2, 8}, {6, 8}), InputProfile::fixed({8, 3})});
  EXPECT_EQ(g_count_calls, 2);
  EXPECT_EQ(shapes(p.segments.back().shapes[kMin].outputs), (std::vector<Shape>{{2, 3}}));
  EXPECT_EQ(shapes(p.segments.back().shapes[kOpt].outputs), (std::vector<Shape>{{2, 3}}));
  EXPECT_EQ(shapes(p.segments.back().shapes[kMax].outputs), (std::vector<Shape>{{6, 3}}));
  // opt = max, with an If segment: its branches' shapes are copied too.
  auto q = partition_ir(kIfBetweenEngines, kAllButLgamma, with_min_block(1));
  g_count_calls = 0;
  analyze_shapes(q, {InputProfile::range({1, 2}, {3, 2}, {3, 2}), InputProfile::of_value(true)});
  EXPECT_EQ(g_count_calls, 2);
  const Segment& branch = q.segments.at(1).blocks.at(0).segments.at(0);
  ASSERT_TRUE(branch.has_shapes);
  EXPECT_EQ(shapes(branch.shapes[kMin].outputs), (std::vector<Shape>{{1, 2}}));
  EXPECT_EQ(shapes(branch.shapes[kMax].outputs), (std::vector<Shape>{{3, 2}}));
}

// A graph whose engines read only graph inputs needs no run: the shapes are the profiles'.
TEST(ShapeAnalysis, EnginesOverGraphInputsTakeTheProfilesShapes) {
  const char* ir = R"IR(
graph(%x : Tensor, %w : Tensor):
  %c : Tensor = kiln_shape_test::count_calls(%x)
  %y : Tensor = aten::matmul(%c, %w)
  %l : Tensor = aten::lgamma(%y)
  return (%l))IR";
  auto p = partition_ir(ir, kAllButLgamma, with_min_block(1));
  ASSERT_EQ(p.segments.size(), 2u);
  g_count_calls = 0;
  ASSERT_TRUE(shapes_from_profiles(
      p, {InputProfile::range({1, 8}, {4, 8}, {9, 8}), InputProfile::fixed({8, 3})}));
  EXPECT_EQ(g_count_calls, 0);
  const Segment& engine = p.segments[0];
  ASSERT_TRUE(engine.has_shapes);
  EXPECT_EQ(shapes(engine.shapes[kMin].inputs), (std::vector<Shape>{{1, 8}, {8, 3}}));
  EXPECT_EQ(shapes(engine.shapes[kOpt].inputs), (std::vector<Shape>{{4, 8}, {8, 3}}));
  EXPECT_EQ(shapes(engine.shapes[kMax].inputs), (std::vector<Shape>{{9, 8}, {8, 3}}));
  EXPECT_EQ(engine.shapes[kOpt].inputs[0].dtype, c10::ScalarType::Float);
  EXPECT_TRUE(engine.shapes[kOpt].outputs.empty());
  // The PyTorch segment after it is not described: stitching needs nothing of it.
  EXPECT_FALSE(p.segments[1].has_shapes);
}

TEST(ShapeAnalysis, WhatMayNeedARunIsNotTakenFromTheProfiles) {
  const std::vector<InputProfile> profiles = {InputProfile::fixed({2, 3}),
                                              InputProfile::fixed({3, 3})};
  const auto from_profiles = [&](const std::string& ir) {
    auto p = partition_ir(ir, kAllButLgamma, with_min_block(1));
    const bool taken = shapes_from_profiles(p, profiles);
    for (const Segment& s : p.segments) {
      if (s.target == Target::kEngine) {
        EXPECT_EQ(s.has_shapes, taken) << ir;
      }
    }
    return taken;
  };
  // An engine reading what PyTorch computed.
  EXPECT_FALSE(from_profiles(R"IR(
graph(%x : Tensor, %w : Tensor):
  %l : Tensor = aten::lgamma(%x)
  %y : Tensor = aten::matmul(%l, %w)
  return (%y))IR"));
  // f64 the graph asks for: a dtype argument, a float made a tensor, an f64 constant or input.
  EXPECT_FALSE(from_profiles(R"IR(
graph(%x : Tensor, %w : Tensor):
  %f64 : int = prim::Constant[value=7]()
  %false : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %d : Tensor = aten::to(%x, %f64, %false, %false, %none)
  %y : Tensor = aten::matmul(%d, %w)
  return (%y))IR"));
  EXPECT_FALSE(from_profiles(R"IR(
graph(%x : Tensor, %w : Tensor):
  %half : float = prim::Constant[value=0.5]()
  %t : Tensor = prim::NumToTensor(%half)
  %y : Tensor = aten::mul(%x, %t)
  return (%y))IR"));
  {
    auto graph = kiln::testing::parse(R"IR(
graph(%x : Tensor, %w : Tensor):
  %y : Tensor = aten::mul(%x, %w)
  return (%y))IR");
    torch::jit::Node* mul = graph->outputs()[0]->node();
    torch::jit::WithInsertPoint here(mul);
    mul->replaceInput(1, graph->insertConstant(at::ones({3}, at::kDouble)));
    auto p = partition(graph, kAllButLgamma, with_min_block(1));
    EXPECT_FALSE(shapes_from_profiles(p, profiles));
  }
  {
    auto p = partition_ir(R"IR(
graph(%x : Tensor, %w : Tensor):
  %y : Tensor = aten::matmul(%x, %w)
  return (%y))IR",
                          kAllButLgamma, with_min_block(1));
    EXPECT_FALSE(shapes_from_profiles(
        p, {InputProfile::fixed({2, 3}, c10::ScalarType::Double), InputProfile::fixed({3, 3})}));
    EXPECT_TRUE(shapes_from_profiles(p, profiles));
  }
  // A dtype read off a tensor, and f32 asked for, are not f64.
  EXPECT_TRUE(from_profiles(R"IR(
graph(%x : Tensor, %w : Tensor):
  %f32 : int = prim::Constant[value=6]()
  %false : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %t : int = prim::dtype(%w)
  %d : Tensor = aten::to(%x, %t, %false, %false, %none)
  %e : Tensor = aten::to(%d, %f32, %false, %false, %none)
  %y : Tensor = aten::matmul(%e, %w)
  return (%y))IR"));
}

}  // namespace
}  // namespace kiln::partitioning
