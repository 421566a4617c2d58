// Indexing converters (slice, select, narrow, index_select, gather, embedding, index, scatter,
// scatter_reduce, slice_scatter, select_scatter)
// against libtorch on the CPU backend.
#include "conversion/converter_testing.h"
#include "conversion/dtypes.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

std::string c(const std::string& name, int64_t v) {
  return "  %" + name + " : int = prim::Constant[value=" + std::to_string(v) + "]()\n";
}

TEST(ConvertIndexing, SlicesWithPythonSemantics) {
  const auto x = torch::randn({5, 8, 3});
  struct Case {
    int64_t dim, start, end, step;
  };
  for (const Case& k : std::vector<Case>{{1, 1, 3, 1},
                                         {1, -3, 100, 1},
                                         {0, 0, -1, 2},
                                         {-1, 1, 9223372036854775807, 1},
                                         {1, 6, 2, 1},
                                         {1, -100, 5, 3}}) {
    const std::string ir = "graph(%x : Tensor):\n" + c("d", k.dim) + c("s", k.start) +
                           c("e", k.end) + c("t", k.step) +
                           "  %y : Tensor = aten::slice(%x, %d, %s, %e, %t)\n  return (%y)";
    EXPECT_TRUE(matches_torch(ir, {x}, 0, 0)) << k.dim << " " << k.start << ":" << k.end;
  }
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor):
  %none : NoneType = prim::Constant()
  %c1 : int = prim::Constant[value=1]()
  %y : Tensor = aten::slice(%x, %c1, %none, %none, %c1)
  return (%y))IR",
                            {torch::randint(0, 100, {3, 4}, torch::kLong)}, 0, 0));
}

// x[:, start:end:step] with end = x.size(0) (BERT's position ids cut to the sequence length):
// a gather of a range whose length the engine computes from shapes, clamped to the dim.
TEST(ConvertIndexing, SliceToAnEndOnlyKnownAtRunTime) {
  for (const auto& [start, step] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 2}}) {
    const std::string ir = "graph(%x : Tensor):\n" + c("c0", 0) + c("c1", 1) + c("start", start) +
                           c("step", step) +
                           "  %n : int = aten::size(%x, %c0)\n"
                           "  %y : Tensor = aten::slice(%x, %c1, %start, %n, %step)\n"
                           "  return (%y)";
    for (int64_t batch : {1, 4, 9}) {  // 9: past the dim of 6, so the end clamps
      const at::Tensor x = torch::randn({batch, 6});
      EXPECT_TRUE(at::equal(testing::run_dynamic_batch(ir, x), x.slice(1, start, batch, step)))
          << "start " << start << " step " << step << " batch " << batch;
    }
  }
}

TEST(ConvertIndexing, SelectAndNarrowWithNegativeIndices) {
  const auto x = torch::randn({4, 5, 6});
  for (auto [d, i] : std::vector<std::pair<int, int>>{{0, 0}, {1, -1}, {-1, 5}, {2, -6}, {1, 2}}) {
    const std::string ir = "graph(%x : Tensor):\n" + c("d", d) + c("i", i) +
                           "  %y : Tensor = aten::select(%x, %d, %i)\n  return (%y)";
    EXPECT_TRUE(matches_torch(ir, {x}, 0, 0)) << d << " " << i;
  }
  for (auto [s, l] : std::vector<std::pair<int, int>>{{0, 2}, {-3, 3}, {4, 1}}) {
    const std::string ir = "graph(%x : Tensor):\n" + c("d", -1) + c("s", s) + c("l", l) +
                           "  %y : Tensor = aten::narrow(%x, %d, %s, %l)\n  return (%y)";
    EXPECT_TRUE(matches_torch(ir, {x}, 0, 0)) << s << " " << l;
  }
}

// An int[] value %name of `values`, as a list of constants.
std::string int_list(const std::string& name, const std::vector<int64_t>& values) {
  std::string ir, items;
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string v = name + std::to_string(i);
    ir += c(v, values[i]);
    items += (i ? ", %" : "%") + v;
  }
  return ir + "  %" + name + " : int[] = prim::ListConstruct(" + items + ")\n";
}

// swin's shifted windows: roll over two dims, negative and oversized shifts, a zero shift, and
// the flat form without dims.
TEST(ConvertIndexing, RollAlongDimsAndFlat) {
  const auto x = torch::randn({2, 5, 6, 3});
  using Ints = std::vector<int64_t>;
  for (const auto& [shifts, dims] : std::vector<std::pair<Ints, Ints>>{
           {{-2, -3}, {1, 2}}, {{3, 13}, {1, -2}}, {{0}, {0}}, {{7}, {}}}) {
    const std::string ir = "graph(%x : Tensor):\n" + int_list("s", shifts) + int_list("d", dims) +
                           "  %y : Tensor = aten::roll(%x, %s, %d)\n  return (%y)";
    EXPECT_TRUE(matches_torch(ir, {x}, 0, 0)) << ir;
  }
}

TEST(ConvertIndexing, IndexSelectGatherEmbedding) {
  const auto x = torch::randn({4, 5, 6});
  const auto idx = torch::tensor({3, 0, 3, 1}, torch::kLong);
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %i : Tensor):
  %d : int = prim::Constant[value=-2]()
  %y : Tensor = aten::index_select(%x, %d, %i)
  return (%y))IR",
                            {x, idx}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %i : Tensor):
  %d : int = prim::Constant[value=0]()
  %y : Tensor = aten::index_select(%x, %d, %i)
  return (%y))IR",
                            {x, torch::tensor(2, torch::kLong)}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %i : Tensor):
  %d : int = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %y : Tensor = aten::gather(%x, %d, %i, %f)
  return (%y))IR",
                            {x, torch::randint(0, 5, {4, 3, 6}, torch::kLong)}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%w : Tensor, %i : Tensor):
  %p : int = prim::Constant[value=-1]()
  %f : bool = prim::Constant[value=0]()
  %y : Tensor = aten::embedding(%w, %i, %p, %f, %f)
  return (%y))IR",
                            {torch::randn({10, 8}), torch::randint(0, 10, {2, 7}, torch::kLong)}, 0,
                            0));
  EXPECT_TRUE(matches_torch(
      R"IR(
graph(%w : Tensor, %i : Tensor):
  %p : int = prim::Constant[value=-1]()
  %f : bool = prim::Constant[value=0]()
  %y : Tensor = aten::embedding(%w, %i, %p, %f, %f)
  return (%y))IR",
      {torch::randint(-9, 9, {10, 8}, torch::kLong), torch::randint(0, 10, {5}, torch::kInt)}, 0,
      0));
}

TEST(ConvertIndexing, AdvancedIndexWithOneTensor) {
  const auto x = torch::randn({4, 5, 6});
  const auto idx = torch::tensor({{4, 0}, {-1, 2}}, torch::kLong);
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %i : Tensor):
  %l : Tensor?[] = prim::ListConstruct(%i)
  %y : Tensor = aten::index(%x, %l)
  return (%y))IR",
                            {x, torch::tensor({3, 0, -2}, torch::kLong)}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %i : Tensor):
  %none : NoneType = prim::Constant()
  %l : Tensor?[] = prim::ListConstruct(%none, %i)
  %y : Tensor = aten::index(%x, %l)
  return (%y))IR",
                            {x, idx}, 0, 0));
}

// x[i, j] and x[:, i, j] with index tensors that broadcast against each other (GPT-2's mask
// built from batch and position index grids), negative indices counting from the end.
TEST(ConvertIndexing, AdvancedIndexWithAdjacentTensors) {
  const auto x = torch::randn({4, 5, 6});
  const auto i = torch::tensor({{3}, {0}, {-1}}, torch::kLong);  // [3, 1]
  const auto j = torch::tensor({{4, -2, 0, 1}}, torch::kLong);   // [1, 4]
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %i : Tensor, %j : Tensor):
  %l : Tensor?[] = prim::ListConstruct(%i, %j)
  %y : Tensor = aten::index(%x, %l)
  return (%y))IR",
                            {x, i, j}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %i : Tensor, %j : Tensor):
  %none : NoneType = prim::Constant()
  %l : Tensor?[] = prim::ListConstruct(%none, %i, %j)
  %y : Tensor = aten::index(%x, %l)
  return (%y))IR",
                            {x, i.clamp(-5, 4), j}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %i : Tensor, %j : Tensor, %k : Tensor):
  %l : Tensor?[] = prim::ListConstruct(%i, %j, %k)
  %y : Tensor = aten::index(%x, %l)
  return (%y))IR",
                            {x, i, j, torch::tensor({5, -6, 2, 0}, torch::kLong)}, 0, 0));
}

// diff along a dim, with prepend and append, of order 0 to 2, and of bools (!=).
TEST(ConvertIndexing, DiffWithPrependAndAppend) {
  const auto x = torch::randn({3, 6});
  for (int64_t order : {0, 1, 2}) {
    EXPECT_TRUE(matches_torch("graph(%x : Tensor, %p : Tensor, %a : Tensor):\n" + c("n", order) +
                                  c("d", -1) +
                                  "  %y : Tensor = aten::diff(%x, %n, %d, %p, %a)\n"
                                  "  return (%y)",
                              {x, torch::randn({3, 1}), torch::randn({3, 2})}, 1e-6, 1e-6))
        << order;
  }
  EXPECT_TRUE(matches_torch("graph(%x : Tensor):\n" + c("n", 1) + c("d", 0) +
                                "  %none : NoneType = prim::Constant()\n"
                                "  %y : Tensor = aten::diff(%x, %n, %d, %none, %none)\n"
                                "  return (%y)",
                            {torch::rand({5, 3}) > 0.5}, 0, 0));
}

TEST(ConvertIndexing, Scatter) {
  const auto x = torch::randn({3, 5});
  // Distinct indices per row so the result does not depend on write order.
  const auto idx = torch::stack({torch::randperm(5), torch::randperm(5)}).slice(1, 0, 4);
  const auto src = torch::randn({2, 4});
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %i : Tensor, %s : Tensor):
  %d : int = prim::Constant[value=1]()
  %y : Tensor = aten::scatter(%x, %d, %i, %s)
  return (%y))IR",
                            {x, idx, src}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %i : Tensor):
  %d : int = prim::Constant[value=-1]()
  %v : float = prim::Constant[value=7.5]()
  %y : Tensor = aten::scatter(%x, %d, %i, %v)
  return (%y))IR",
                            {x, idx}, 0, 0));
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %i : Tensor, %s : Tensor):
  %d : int = prim::Constant[value=0]()
  %y : Tensor = aten::scatter_add(%x, %d, %i, %s)
  return (%y))IR",
                            {x, torch::randint(0, 3, {4, 5}, torch::kLong), torch::randn({4, 5})},
                            1e-6, 1e-6));
}

// scatter_reduce.two with include_self: sum, prod, amax, amin (duplicates, NaN, integers, f16, an
// index smaller than the source); the rest is the lowering's (decompose_scatter) and falls back.
TEST(ConvertIndexing, ScatterReduceWithSelf) {
  auto x = torch::randn({4, 5});
  x[1][2] = NAN;
  auto src = torch::randn({6, 5});
  src[3][0] = NAN;
  const auto idx = torch::randint(0, 4, {5, 5}, torch::kLong);
  for (const char* how : {"sum", "prod", "amax", "amin"}) {
    const std::string ir = std::string(R"IR(
graph(%x : Tensor, %i : Tensor, %s : Tensor):
  %d : int = prim::Constant[value=0]()
  %r : str = prim::Constant[value=")IR") +
                           how + R"IR("]()
  %t : bool = prim::Constant[value=1]()
  %y : Tensor = aten::scatter_reduce(%x, %d, %i, %s, %r, %t)
  return (%y))IR";
    EXPECT_TRUE(matches_torch(ir, {x, idx, src}, 1e-6, 1e-6)) << how;
    EXPECT_TRUE(matches_torch(ir, {x.to(torch::kHalf), idx, src.to(torch::kHalf)}, 1e-3, 1e-3))
        << how;
    EXPECT_TRUE(matches_torch(ir,
                              {torch::randint(-5, 5, {4, 5}, torch::kLong), idx,
                               torch::randint(-5, 5, {6, 5}, torch::kLong)},
                              0, 0))
        << how;
  }
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %i : Tensor, %s : Tensor):
  %d : int = prim::Constant[value=0]()
  %r : str = prim::Constant[value="mean"]()
  %t : bool = prim::Constant[value=1]()
  %y : Tensor = aten::scatter_reduce(%x, %d, %i, %s, %r, %t)
  return (%y))IR");
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("reduce \"mean\""), std::string::npos) << s.reason;
}

TEST(ConvertIndexing, ValidatorRejectsSeparatedIndexTensorsAndRuntimeDims) {
  auto g = kiln::testing::parse(R"IR(
graph(%x : Tensor, %i : Tensor, %j : Tensor):
  %none : NoneType = prim::Constant()
  %l : Tensor?[] = prim::ListConstruct(%i, %none, %j)
  %y : Tensor = aten::index(%x, %l)
  return (%y))IR");
  const Support s = default_registry().supports(g->outputs()[0]->node());
  EXPECT_FALSE(s.supported);
  EXPECT_NE(s.reason.find("separated by a full slice"), std::string::npos) << s.reason;

  auto g2 = kiln::testing::parse(R"IR(
graph(%x : Tensor, %t : Tensor):
  %c1 : int = prim::Constant[value=1]()
  %n : int = aten::Int(%t)
  %y : Tensor = aten::select(%x, %c1, %n)
  return (%y))IR");
  const Support s2 = default_registry().supports(g2->outputs()[0]->node());
  EXPECT_FALSE(s2.supported);
  EXPECT_NE(s2.reason.find("graph input"), std::string::npos) << s2.reason;
}

// slice_scatter over every kind of bound (negative, past the end, None, empty region, the
// whole dim) and step; select_scatter at negative and last indices; a source that does not fit
// the region is an error that says so.
TEST(ConvertIndexing, SliceAndSelectScatterWriteTheirRegion) {
  const auto x = torch::randn({5, 8, 3});
  struct Case {
    int64_t dim, start, end, step;
  };
  for (const Case& k : std::vector<Case>{{1, 1, 3, 1},
                                         {1, -3, 100, 1},
                                         {0, 0, -1, 2},
                                         {-1, 1, 9223372036854775807, 1},
                                         {1, 6, 2, 1},
                                         {1, 0, 8, 1},
                                         {1, -100, 7, 3}}) {
    const auto region = x.slice(k.dim, k.start, k.end, k.step);
    const std::string ir = "graph(%x : Tensor, %src : Tensor):\n" + c("d", k.dim) +
                           c("s", k.start) + c("e", k.end) + c("t", k.step) +
                           "  %y : Tensor = aten::slice_scatter(%x, %src, %d, %s, %e, %t)\n"
                           "  return (%y)";
    EXPECT_TRUE(matches_torch(ir, {x, torch::randn(region.sizes())}, 0, 0))
        << k.dim << " " << k.start << ":" << k.end << ":" << k.step;
  }
  EXPECT_TRUE(matches_torch(R"IR(
graph(%x : Tensor, %src : Tensor):
  %none : NoneType = prim::Constant()
  %c0 : int = prim::Constant[value=0]()
  %c1 : int = prim::Constant[value=1]()
  %y : Tensor = aten::slice_scatter(%x, %src, %c0, %c1, %none, %c1)
  return (%y))IR",
                            {torch::randn({4, 3}), torch::randn({3, 3})}, 0, 0));
  for (int64_t index : {-1, 0, 2, -5}) {
    const std::string ir = "graph(%x : Tensor, %src : Tensor):\n" + c("d", 1) + c("i", index) +
                           "  %y : Tensor = aten::select_scatter(%x, %src, %d, %i)\n"
                           "  return (%y)";
    EXPECT_TRUE(matches_torch(ir, {x, torch::randn({5, 3})}, 0, 0)) << index;
  }
  try {
    testing::run_converted(R"IR(
graph(%x : Tensor, %src : Tensor):
  %c0 : int = prim::Constant[value=0]()
  %c1 : int = prim::Constant[value=1]()
  %c3 : int = prim::Constant[value=3]()
  %y : Tensor = aten::slice_scatter(%x, %src, %c0, %c1, %c3, %c1)
  return (%y))IR",
                           {torch::randn({4, 3}), torch::randn({3, 3})});
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not fit"), std::string::npos) << e.what();
  }
}

// Boolean masks pick the positions where they are true (nonzero in the engine, its count known
// once it runs): over dim 0, over two dims, after a full slice, uint8 masks; nonzero and
// argwhere (nonzero's other name) and masked_select (broadcast) too; empty, full and random
// masks.
TEST(ConvertIndexing, BooleanMasksPickWhereTheyAreTrue) {
  const std::string one = R"IR(
graph(%x : Tensor, %m : Tensor):
  %l : Tensor?[] = prim::ListConstruct(%m)
  %y : Tensor = aten::index(%x, %l)
  return (%y))IR";
  const std::string after_slice = R"IR(
graph(%x : Tensor, %m : Tensor):
  %none : NoneType = prim::Constant()
  %l : Tensor?[] = prim::ListConstruct(%none, %m)
  %y : Tensor = aten::index(%x, %l)
  return (%y))IR";
  const std::string nonzero = R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::nonzero(%x)
  return (%y))IR";
  const std::string argwhere = R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::argwhere(%x)
  return (%y))IR";
  const std::string masked_select = R"IR(
graph(%x : Tensor, %m : Tensor):
  %y : Tensor = aten::masked_select(%x, %m)
  return (%y))IR";
  torch::manual_seed(5);
  for (int kind = 0; kind < 3; ++kind) {
    SCOPED_TRACE(kind);
    const auto mask = [&](at::IntArrayRef shape) {
      return kind == 0   ? torch::zeros(shape, torch::kBool)
             : kind == 1 ? torch::ones(shape, torch::kBool)
                         : torch::rand(shape) > 0.5;
    };
    EXPECT_TRUE(testing::matches_torch(one, {torch::randn({5, 3}), mask({5})}));
    EXPECT_TRUE(testing::matches_torch(one, {torch::randn({4, 3, 2}), mask({4, 3})}));
    EXPECT_TRUE(
        testing::matches_torch(one, {torch::randn({4, 3}), mask({4, 3}).to(torch::kUInt8)}));
    EXPECT_TRUE(testing::matches_torch(after_slice, {torch::randn({2, 5, 3}), mask({5})}));
    EXPECT_TRUE(testing::matches_torch(nonzero, {mask({3, 4}).to(torch::kFloat)}));
    EXPECT_TRUE(testing::matches_torch(nonzero, {mask({6}).to(torch::kLong)}));
    EXPECT_TRUE(testing::matches_torch(argwhere, {mask({2, 3, 2}).to(torch::kFloat)}));
    EXPECT_TRUE(testing::matches_torch(masked_select, {torch::randn({3, 4}), mask({4})}));
  }
}

// A target without an output allocator (ConversionSettings::output_allocator false) refuses such
// nodes with the reason, so that partitioning leaves them to PyTorch; a mask whose dims do not
// match the indexed tensor's is a clear error.
TEST(ConvertIndexing, DataDependentShapesNeedAnOutputAllocator) {
  const std::vector<std::pair<std::string, std::vector<at::Tensor>>> cases = {
      {R"IR(
graph(%x : Tensor, %m : Tensor):
  %l : Tensor?[] = prim::ListConstruct(%m)
  %y : Tensor = aten::index(%x, %l)
  return (%y))IR",
       {torch::randn({4}), torch::rand({4}) > 0.5}},
      {R"IR(
graph(%x : Tensor):
  %y : Tensor = aten::nonzero(%x)
  return (%y))IR",
       {torch::randn({4})}}};
  for (const auto& [ir, inputs] : cases) {
    auto graph = kiln::testing::parse(ir);
    std::vector<InputSpec> specs;
    for (const auto& t : inputs) {
      specs.push_back(InputSpec::fixed(to_engine_dtype(t.scalar_type(), "input"), t.sizes().vec()));
    }
    ConversionSettings settings;
    settings.output_allocator = false;
    try {
      convert_graph(*graph, specs, default_registry(), settings);
      FAIL() << "converted without an output allocator";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("output allocator"), std::string::npos) << e.what();
    }
  }
  try {
    testing::run_converted(R"IR(
graph(%x : Tensor, %m : Tensor):
  %l : Tensor?[] = prim::ListConstruct(%m)
  %y : Tensor = aten::index(%x, %l)
  return (%y))IR",
                           {torch::randn({4, 3}), torch::rand({5}) > 0.5});
    FAIL() << "a [5] mask indexed a [4, 3] tensor";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShapeMismatch) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not match"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::conversion
