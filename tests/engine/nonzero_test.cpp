// The nonzero layer and data-dependent shapes: its rows are counted while the engine runs, memory
// is planned at the bound (every element nonzero), and what follows it is sized by the count.
// Values against a reference written here, on empty, full and random masks.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/builder.h"
#include "engine/plan.h"
#include "engine/runtime.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;

// torch.nonzero of `x`: the row-major indices of its nonzero elements.
std::vector<double> reference_nonzero(const HostTensor& x) {
  const auto v = testing::to_doubles(x);
  const Shape& s = x.shape();
  std::vector<double> out;
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    if (v[static_cast<size_t>(i)] == 0) continue;
    std::vector<double> index(s.size());
    int64_t rest = i;
    for (size_t d = s.size(); d-- > 0;) {
      index[d] = static_cast<double>(rest % s[d]);
      rest /= s[d];
    }
    out.insert(out.end(), index.begin(), index.end());
  }
  return out;
}

TEST(NonZero, IndicesOfEmptyFullAndRandomMasks) {
  for (DataType dtype : {DataType::kBool, DataType::kF32, DataType::kI64}) {
    for (const Shape& shape : {Shape{}, Shape{7}, Shape{2, 3, 4}, Shape{0, 3}}) {
      Network net;
      const auto x = net.add_input("x", dtype, shape);
      const auto nz = net.add_layer("nz", NonZeroParams{}, {x});
      ASSERT_EQ(net.tensor(nz[0]).shape, (Shape{kDynamic, static_cast<int64_t>(shape.size())}));
      ASSERT_EQ(net.tensor(nz[1]).shape, Shape{});
      net.mark_output(nz[0], "indices");
      const Plan plan = build(net, BuilderConfig{});
      ExecutionContext ctx(std::make_shared<const Engine>(plan.network, plan.target));
      // The bound: every element.
      EXPECT_EQ(ctx.output_shape(0)[0], volume(shape));
      for (int kind : {0, 1, 2, 2, 0}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + shape_to_string(shape) + " kind " +
                     std::to_string(kind));
        const HostTensor in = testing::mask_of(dtype, shape, kind, 3 + static_cast<uint64_t>(kind));
        const auto want = reference_nonzero(in);
        const auto got = ctx.run({in})[0];
        const int64_t rank = static_cast<int64_t>(shape.size());
        int64_t rows = 0;  // (a scalar's index is empty: count its nonzeros)
        for (double v : testing::to_doubles(in)) rows += v != 0;
        ASSERT_EQ(got.shape(), (Shape{rows, rank}));
        EXPECT_EQ(ctx.executed_output_shape(0), got.shape());
        EXPECT_TRUE(testing::near(got, want, 0, 0));
        EXPECT_EQ(ctx.output_shape(0)[0], volume(shape));  // the bound again for the next call
      }
    }
  }
}

// masked_select as the converters write it: x[mask] = gather(x flattened to rows, nonzero(mask)
// as a vector); then layers sized by the count (an activation, a sum over the rows, the count as
// a shape). A dynamic batch; counts of 0, all and some, changing from call to call.
TEST(NonZero, LayersAfterACountAreSizedByIt) {
  const int64_t D = 5;
  const Network net = testing::masked_rows_network(D, 4, 16);
  const Plan plan = build(net, BuilderConfig{});
  const auto bytes = serialize_plan(plan);  // and back: the layer is in the plan format
  const Plan loaded = deserialize_plan(bytes.data(), bytes.size());
  ExecutionContext ctx(std::make_shared<const Engine>(loaded.network, loaded.target));
  int call = 0;
  for (const auto& [n, kind] : std::vector<std::pair<int64_t, int>>{
           {4, 2}, {16, 0}, {16, 1}, {1, 1}, {9, 2}, {1, 0}, {16, 2}}) {
    SCOPED_TRACE("n " + std::to_string(n) + " kind " + std::to_string(kind));
    const HostTensor xs = random_tensor(DataType::kF32, {n, D}, static_cast<uint64_t>(++call));
    const HostTensor k = testing::mask_of(DataType::kBool, {n}, kind, static_cast<uint64_t>(call));
    const auto xv = testing::to_doubles(xs);
    const auto kv = testing::to_doubles(k);
    std::vector<double> y, total(D, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      if (kv[static_cast<size_t>(i)] == 0) continue;
      for (int64_t j = 0; j < D; ++j) {
        const double v = std::max(xv[static_cast<size_t>(i * D + j)], 0.0);
        y.push_back(v);
        total[static_cast<size_t>(j)] += v;
      }
    }
    const int64_t count = static_cast<int64_t>(y.size()) / D;
    const auto out = ctx.run({xs, k});
    EXPECT_EQ(ctx.output_shape(0), (Shape{n, D}));  // what to allocate: the bound
    EXPECT_EQ(ctx.executed_output_shape(0), (Shape{count, D}));
    ASSERT_EQ(out[0].shape(), (Shape{count, D}));
    EXPECT_TRUE(testing::near(out[0], y, 1e-6, 1e-7));
    EXPECT_TRUE(testing::near(out[1], total, 1e-5, 1e-6));
    EXPECT_TRUE(testing::near(out[2], {static_cast<double>(count), static_cast<double>(D)}, 0, 0));
  }
  EXPECT_THROW(ctx.run({random_tensor(DataType::kF32, {17, D}, 1),
                        testing::mask_of(DataType::kBool, {17}, 1, 1)}),
               ShapeMismatch);
}

}  // namespace
}  // namespace kiln::engine
