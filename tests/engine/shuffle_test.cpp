// Shuffle family (shuffle, concat, slice, pad, gather, scatter) on the CPU backend against loop
// references: exact data movement for every dtype, shape tensors, dynamic shapes, bad input.
#include <algorithm>

#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::flat_index;
using testing::near;
using testing::random_tensor;
using testing::run_one_layer;
using testing::to_doubles;
using testing::unflatten;

// Values of `x` (shape `s`) transposed by `perm`; `s` becomes the transposed shape.
std::vector<double> permute_ref(const std::vector<double>& x, Shape& s,
                                const std::vector<int64_t>& perm) {
  Shape out(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) out[i] = s[static_cast<size_t>(perm[i])];
  std::vector<double> r(x.size());
  for (int64_t i = 0; i < volume(out); ++i) {
    const auto o = unflatten(out, i);
    std::vector<int64_t> src(o.size());
    for (size_t d = 0; d < perm.size(); ++d) src[static_cast<size_t>(perm[d])] = o[d];
    r[static_cast<size_t>(i)] = x[static_cast<size_t>(flat_index(s, src))];
  }
  s = out;
  return r;
}

template <class E>
void expect_error(const std::function<void()>& fn, const std::string& name) {
  try {
    fn();
    ADD_FAILURE() << "no error for " << name;
  } catch (const E& e) {
    EXPECT_NE(e.message().find(name), std::string::npos) << e.message();
  }
}

const DataType kAllTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kI64,
                              DataType::kI32, DataType::kI8,  DataType::kU8,   DataType::kBool};

// A shuffle that casts (the builder's fusion of a float cast into the shuffle it fed) moves the
// elements as the plain shuffle does and converts them: each float pair, both permutations and
// none; a cast to or from another dtype is an error that names the layer.
TEST(Shuffle, CastsBetweenFloatTypes) {
  const DataType floats[] = {DataType::kF32, DataType::kF16, DataType::kBF16};
  for (DataType from : floats) {
    for (DataType to : floats) {
      for (const ShuffleParams& base :
           {ShuffleParams{{0, 2, 3, 1}, false, {}, {}}, ShuffleParams{{}, true, {6, 20}, {}},
            ShuffleParams{{2, 0, 3, 1}, true, {0, -1, 3}, {2, 0, 1}}}) {
        SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
        const auto x = random_tensor(from, {2, 3, 4, 5}, 3);
        ShuffleParams cast = base;
        cast.cast = true;
        cast.to = to;
        const auto plain = run_one_layer(base, {x})[0];
        const auto got = run_one_layer(cast, {x})[0];
        EXPECT_EQ(got.dtype(), to);
        EXPECT_EQ(got.shape(), plain.shape());
        // The plain shuffle's values, rounded once to `to`.
        const auto want = to_doubles(testing::tensor_from(to, plain.shape(), to_doubles(plain)));
        EXPECT_TRUE(near(got, want, 0, 0));
      }
    }
  }
  Network net;
  const TensorId x = net.add_input("x", DataType::kF32, {2, 3});
  const TensorId i = net.add_input("i", DataType::kI64, {2, 3});
  ShuffleParams to_int{{1, 0}, false, {}, {}};
  to_int.cast = true;
  to_int.to = DataType::kI64;
  expect_error<InvalidArgument>([&] { net.add("cast_to_int", to_int, {x}); }, "cast_to_int");
  ShuffleParams from_int = to_int;
  from_int.to = DataType::kF16;
  expect_error<InvalidArgument>([&] { net.add("cast_from_int", from_int, {i}); }, "cast_from_int");
}

TEST(Shuffle, TransposeReshapeTransposeEveryDtype) {
  for (DataType t : kAllTypes) {
    auto x = random_tensor(t, {2, 3, 4, 5}, 1, -100, 100);
    ShuffleParams p{{2, 0, 3, 1}, true, {0, -1, 3}, {2, 0, 1}};
    auto out = run_one_layer(p, {x})[0];
    Shape s = x.shape();
    auto ref = permute_ref(to_doubles(x), s, p.first_perm);  // [4, 2, 5, 3]
    s = {4, 10, 3};
    ref = permute_ref(ref, s, p.second_perm);
    ASSERT_EQ(out.shape(), (Shape{3, 4, 10}));
    EXPECT_EQ(out.dtype(), t);
    EXPECT_TRUE(near(out, ref, 0, 0)) << dtype_name(t);
  }
  // Reshape alone and a large transpose (the parallel path).
  auto x = random_tensor(DataType::kF32, {64, 48, 40}, 2);
  auto r = run_one_layer(ShuffleParams{{}, true, {-1, 0}, {}}, {x})[0];
  EXPECT_EQ(r.shape(), (Shape{2560, 48}));  // 0 copies dim 1
  EXPECT_TRUE(near(r, to_doubles(x), 0, 0));
  Shape s = x.shape();
  auto ref = permute_ref(to_doubles(x), s, {2, 0, 1});
  EXPECT_TRUE(near(run_one_layer(ShuffleParams{{2, 0, 1}, false, {}, {}}, {x})[0], ref, 0, 0));
}

// Transposes whose source is contiguous along an outer output dim run in tiles: each dtype size,
// shapes that are not multiples of the tile, size-1 dims that the copy drops, dims it merges
// (NCHW -> NHWC is [H*W, C] <- [C, H*W]), the tiled dim with dims on both of its sides, and tiles
// stretched along one side where the other is short.
TEST(Shuffle, TiledTransposesOfEveryShape) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{1, 3, 37, 41}, {0, 2, 3, 1}},  // NCHW -> NHWC, C = 3: tiles of 341 x 3, one partial
      {{2, 700, 3}, {0, 2, 1}},        // 3 rows of 700: tiles of 3 x 341, one partial
      {{2, 70, 9, 5}, {0, 2, 3, 1}},   // C larger than a tile
      {{2, 9, 5, 70}, {0, 3, 1, 2}},   // NHWC -> NCHW
      {{3, 1, 33, 34}, {3, 1, 0, 2}},  // a size-1 dim; the tiled dim is the output's last-but-one
      {{4, 35, 3, 33}, {1, 3, 0, 2}},  // dims on both sides of the tiled one
      {{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}},  // rank 5, tiles smaller than a tile
      {{65, 66}, {1, 0}}};
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kI8, DataType::kI64}) {
    for (const auto& [shape, perm] : cases) {
      auto x = random_tensor(t, shape, 7, -100, 100);
      Shape s = shape;
      const auto ref = permute_ref(to_doubles(x), s, perm);
      const auto out = run_one_layer(ShuffleParams{perm, false, {}, {}}, {x})[0];
      ASSERT_EQ(out.shape(), s);
      EXPECT_TRUE(near(out, ref, 0, 0)) << dtype_name(t) << " " << ::testing::PrintToString(shape);
    }
  }
}

TEST(Shuffle, ReshapeDrivenByShapeTensor) {
  auto x = random_tensor(DataType::kF32, {2, 3, 4}, 3);
  Network net;
  auto in = net.add_input("x", DataType::kF32, {2, 3, 4});
  auto shape = net.add("shape", ShapeParams{}, {in});
  auto first = net.add("first", GatherParams{GatherMode::kDefault, 0},
                       {shape, net.add_constant("zero", Weights::from_ints({1}, {0}))});
  auto dims = net.add("dims", ConcatParams{0, false},
                      {first, net.add_constant("rest", Weights::from_ints({1}, {-1}))});
  ASSERT_TRUE(net.tensor(dims).values.has_value());
  EXPECT_EQ(*net.tensor(dims).values, (std::vector<int64_t>{2, -1}));
  auto y = net.add("reshape", ShuffleParams{{}, true, {}, {}}, {in, dims});
  EXPECT_EQ(net.tensor(y).shape, (Shape{2, 12}));
  net.mark_output(y);
  ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
  auto out = ctx.run({x})[0];
  EXPECT_EQ(out.shape(), (Shape{2, 12}));
  EXPECT_TRUE(near(out, to_doubles(x), 0, 0));
}

TEST(Dynamic, ProfileShapesRunAndOutsideIsRejected) {
  Network net;
  auto in = net.add_input("x", DataType::kF32, {kDynamic, 3, 4},
                          Profile{{1, 3, 4}, {2, 3, 4}, {4, 3, 4}});
  auto shape = net.add("shape", ShapeParams{}, {in});
  EXPECT_EQ(net.tensor(shape).shape, (Shape{3}));
  auto batch = net.add("batch", SliceParams{{0}, {0}, {1}, {1}}, {shape});
  auto dims = net.add("dims", ConcatParams{-1, false},
                      {batch, net.add_constant("twelve", Weights::from_ints({1}, {12}))});
  auto flat = net.add("flat", ShuffleParams{{}, true, {}, {1, 0}}, {in, dims});
  EXPECT_EQ(net.tensor(flat).shape, (Shape{kDynamic, kDynamic}));
  auto both = net.add("both", ConcatParams{-1, false}, {in, in});
  auto same = net.add("same", ShuffleParams{{}, true, {0, -1}, {}}, {in});
  EXPECT_EQ(net.tensor(same).shape, (Shape{kDynamic, 12}));
  net.mark_output(flat);
  net.mark_output(both);
  net.mark_output(same);
  ExecutionContext ctx(std::make_shared<const Engine>(std::move(net)));
  for (int64_t n : {1, 2, 4}) {
    auto x = random_tensor(DataType::kF32, {n, 3, 4}, static_cast<uint64_t>(n));
    auto outs = ctx.run({x});
    Shape s{n, 12};
    EXPECT_EQ(outs[0].shape(), (Shape{12, n}));
    EXPECT_TRUE(near(outs[0], permute_ref(to_doubles(x), s, {1, 0}), 0, 0));
    ASSERT_EQ(outs[1].shape(), (Shape{n, 3, 8}));
    const auto xs = to_doubles(x), b = to_doubles(outs[1]);
    for (int64_t i = 0; i < volume({n, 3, 8}); ++i) {
      auto o = unflatten({n, 3, 8}, i);
      o[2] %= 4;
      ASSERT_EQ(b[static_cast<size_t>(i)], xs[static_cast<size_t>(flat_index({n, 3, 4}, o))]);
    }
    EXPECT_EQ(outs[2].shape(), (Shape{n, 12}));
  }
  try {
    ctx.set_input_shape(0, {5, 3, 4});
    FAIL() << "shape outside the profile accepted";
  } catch (const ShapeMismatch& e) {
    EXPECT_NE(e.message().find("profile"), std::string::npos) << e.message();
  }
}

TEST(Concat, NegativeAxisZeroSizeAndStack) {
  for (DataType t : {DataType::kI32, DataType::kF16, DataType::kBool}) {
    auto a = random_tensor(t, {2, 0, 4}, 4), b = random_tensor(t, {2, 3, 4}, 5),
         c = random_tensor(t, {2, 1, 4}, 6);
    auto out = run_one_layer(ConcatParams{-2, false}, {a, b, c})[0];
    ASSERT_EQ(out.shape(), (Shape{2, 4, 4}));
    const auto bv = to_doubles(b), cv = to_doubles(c);
    std::vector<double> ref;
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        for (int64_t k = 0; k < 4; ++k) {
          ref.push_back(j < 3 ? bv[static_cast<size_t>((i * 3 + j) * 4 + k)]
                              : cv[static_cast<size_t>(i * 4 + k)]);
        }
      }
    }
    EXPECT_TRUE(near(out, ref, 0, 0)) << dtype_name(t);
  }
  auto x = random_tensor(DataType::kF32, {2, 3}, 7), y = random_tensor(DataType::kF32, {2, 3}, 8);
  const auto xv = to_doubles(x), yv = to_doubles(y);
  for (int64_t axis : {0, -1, 1}) {
    auto out = run_one_layer(ConcatParams{axis, true}, {x, y})[0];
    Shape want = {2, 3};
    const size_t a = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
    want.insert(want.begin() + static_cast<std::ptrdiff_t>(a), 2);
    ASSERT_EQ(out.shape(), want);
    std::vector<double> ref;
    for (int64_t i = 0; i < 12; ++i) {
      auto o = unflatten(want, i);
      const int64_t which = o[a];
      o.erase(o.begin() + static_cast<std::ptrdiff_t>(a));
      ref.push_back((which ? yv : xv)[static_cast<size_t>(flat_index({2, 3}, o))]);
    }
    EXPECT_TRUE(near(out, ref, 0, 0)) << axis;
  }
}

TEST(Slice, NegativeClampedAndStepped) {
  auto x = random_tensor(DataType::kI64, {5, 6, 7}, 9, -1000, 1000);
  SliceParams p{{0, -1, 1}, {-3, 1, -100}, {kSliceEnd, 100, -1}, {2, 3, 1}};
  auto out = run_one_layer(p, {x})[0];
  // dim 0: 2, 4; dim 2: 1, 4; dim 1: 0..4.
  ASSERT_EQ(out.shape(), (Shape{2, 5, 2}));
  const auto xv = to_doubles(x);
  std::vector<double> ref;
  for (int64_t i = 2; i < 5; i += 2) {
    for (int64_t j = 0; j < 5; ++j) {
      for (int64_t k = 1; k < 7; k += 3)
        ref.push_back(xv[static_cast<size_t>((i * 6 + j) * 7 + k)]);
    }
  }
  EXPECT_TRUE(near(out, ref, 0, 0));
  auto empty = run_one_layer(SliceParams{{1}, {4}, {2}, {1}}, {x})[0];
  EXPECT_EQ(empty.shape(), (Shape{5, 0, 7}));
}

TEST(Pad, ConstantReflectReplicateWithCrops) {
  const std::vector<int64_t> begin{0, 1, 2, -1}, end{1, 2, -1, 3};
  for (PadMode mode : {PadMode::kConstant, PadMode::kReflect, PadMode::kReplicate}) {
    for (DataType t : {DataType::kF32, DataType::kI64, DataType::kF16}) {
      const Shape s{2, 3, 4, 5};
      auto x = random_tensor(t, s, 10, -50, 50);
      auto out = run_one_layer(PadParams{begin, end, mode, 7}, {x})[0];
      const Shape os{3, 6, 5, 7};
      ASSERT_EQ(out.shape(), os);
      const auto xv = to_doubles(x);
      std::vector<double> ref;
      for (int64_t e = 0; e < volume(os); ++e) {
        auto idx = unflatten(os, e);
        bool outside = false;
        for (size_t d = 0; d < 4; ++d) {
          int64_t i = idx[d] - begin[d];
          if (i < 0 || i >= s[d]) {
            outside = true;
            if (mode == PadMode::kReflect) i = i < 0 ? -i : 2 * (s[d] - 1) - i;
            if (mode == PadMode::kReplicate) i = std::clamp<int64_t>(i, 0, s[d] - 1);
          }
          idx[d] = i;
        }
        ref.push_back(outside && mode == PadMode::kConstant
                          ? 7.0
                          : xv[static_cast<size_t>(flat_index(s, idx))]);
      }
      EXPECT_TRUE(near(out, ref, 0, 0)) << static_cast<int>(mode) << " " << dtype_name(t);
    }
  }
}

TEST(Gather, DefaultModeWithNegativeIndices) {
  for (DataType t : {DataType::kF32, DataType::kU8}) {
    auto data = random_tensor(t, {4, 5, 3}, 11, 0, 200);
    auto idx = random_tensor(DataType::kI64, {2, 3}, 12, -5, 4);
    auto out = run_one_layer(GatherParams{GatherMode::kDefault, -2}, {data, idx})[0];
    ASSERT_EQ(out.shape(), (Shape{4, 2, 3, 3}));
    const auto dv = to_doubles(data), iv = to_doubles(idx);
    std::vector<double> ref;
    for (int64_t e = 0; e < 72; ++e) {
      const auto o = unflatten({4, 2, 3, 3}, e);
      int64_t k = static_cast<int64_t>(iv[static_cast<size_t>(o[1] * 3 + o[2])]);
      if (k < 0) k += 5;
      ref.push_back(dv[static_cast<size_t>(flat_index({4, 5, 3}, {o[0], k, o[3]}))]);
    }
    EXPECT_TRUE(near(out, ref, 0, 0));
  }
  // A scalar index selects (drops the axis), as data[:, -1].
  auto data = random_tensor(DataType::kF32, {3, 4}, 13);
  HostTensor one(DataType::kI32, {});
  one.as<int32_t>()[0] = -1;
  auto out = run_one_layer(GatherParams{GatherMode::kDefault, 1}, {data, one})[0];
  const auto dv = to_doubles(data);
  EXPECT_EQ(out.shape(), (Shape{3}));
  EXPECT_TRUE(near(out, {dv[3], dv[7], dv[11]}, 0, 0));
}

// Rows of one element (gathers along the last axis) copy typed words: 1-, 2-, 4- and 8-byte
// elements, indices past the 256-element runs the threads share, negative ones, and enough outer
// rows to run in parallel.
TEST(Gather, SingleElementRowsOfEverySize) {
  for (DataType t : {DataType::kU8, DataType::kF16, DataType::kF32, DataType::kI64}) {
    SCOPED_TRACE(dtype_name(t));
    auto data = random_tensor(t, {40, 30, 700}, 16, 0, 100);
    std::vector<double> picks;
    for (int64_t j = 0; j < 600; ++j) picks.push_back(static_cast<double>((j * 37) % 700 - 350));
    auto idx = testing::tensor_from(DataType::kI64, {600}, picks);
    auto out = run_one_layer(GatherParams{GatherMode::kDefault, -1}, {data, idx})[0];
    ASSERT_EQ(out.shape(), (Shape{40, 30, 600}));
    const auto dv = to_doubles(data);
    std::vector<double> ref;
    for (int64_t o = 0; o < 40 * 30; ++o) {
      for (double p : picks) {
        const int64_t k =
            static_cast<int64_t>(p) < 0 ? static_cast<int64_t>(p) + 700 : static_cast<int64_t>(p);
        ref.push_back(dv[static_cast<size_t>(o * 700 + k)]);
      }
    }
    EXPECT_TRUE(near(out, ref, 0, 0));
  }
}

TEST(Gather, ElementsModeLikeTorchGather) {
  auto data = random_tensor(DataType::kBF16, {3, 4, 5}, 14);
  auto idx = random_tensor(DataType::kI64, {2, 4, 6}, 15, -5, 4);
  auto out = run_one_layer(GatherParams{GatherMode::kElements, -1}, {data, idx})[0];
  ASSERT_EQ(out.shape(), (Shape{2, 4, 6}));
  const auto dv = to_doubles(data), iv = to_doubles(idx);
  std::vector<double> ref;
  for (int64_t e = 0; e < 48; ++e) {
    auto o = unflatten({2, 4, 6}, e);
    int64_t k = static_cast<int64_t>(iv[static_cast<size_t>(e)]);
    o[2] = k < 0 ? k + 5 : k;
    ref.push_back(dv[static_cast<size_t>(flat_index({3, 4, 5}, o))]);
  }
  EXPECT_TRUE(near(out, ref, 0, 0));
}

TEST(Scatter, ReplaceAndAdd) {
  auto data = random_tensor(DataType::kF32, {4, 3}, 16);
  auto upd = random_tensor(DataType::kF32, {3, 3}, 17);
  // Replace: rows of a permutation (no duplicates, so the order of writes does not matter).
  auto idx = testing::tensor_from(DataType::kI64, {2, 3}, {3, 0, -2, 1, -1, 0});
  auto out = run_one_layer(ScatterParams{0, ScatterReduce::kNone}, {data, idx, upd})[0];
  auto ref = to_doubles(data);
  const auto uv = to_doubles(upd), iv = to_doubles(idx);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      int64_t k = static_cast<int64_t>(iv[static_cast<size_t>(i * 3 + j)]);
      if (k < 0) k += 4;
      ref[static_cast<size_t>(k * 3 + j)] = uv[static_cast<size_t>(i * 3 + j)];
    }
  }
  EXPECT_TRUE(near(out, ref, 0, 0));
  // Add, with duplicates, along the last axis and in integers.
  auto di = random_tensor(DataType::kI32, {2, 5}, 18, -9, 9);
  auto ui = random_tensor(DataType::kI32, {2, 4}, 19, -9, 9);
  auto ii = testing::tensor_from(DataType::kI32, {2, 3}, {0, 0, -1, 2, 2, 2});
  auto sum = run_one_layer(ScatterParams{1, ScatterReduce::kAdd}, {di, ii, ui})[0];
  auto want = to_doubles(di);
  const auto uiv = to_doubles(ui), iiv = to_doubles(ii);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      int64_t k = static_cast<int64_t>(iiv[static_cast<size_t>(i * 3 + j)]);
      if (k < 0) k += 5;
      want[static_cast<size_t>(i * 5 + k)] += uiv[static_cast<size_t>(i * 4 + j)];
    }
  }
  EXPECT_TRUE(near(sum, want, 0, 0));
}

TEST(Shuffle, BadInputsNameTheLayer) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 3, 4});
  expect_error<InvalidArgument>(
      [&] {
        net.add("bad_perm", ShuffleParams{{0, 0, 1}, false, {}, {}}, {x});
      },
      "bad_perm");
  expect_error<InvalidArgument>(
      [&] {
        net.add("short_perm", ShuffleParams{{1, 0}, false, {}, {}}, {x});
      },
      "short_perm");
  expect_error<InvalidArgument>(
      [&] {
        net.add("two_infer", ShuffleParams{{}, true, {-1, -1}, {}}, {x});
      },
      "two_infer");
  expect_error<ShapeMismatch>(
      [&] {
        net.add("volume", ShuffleParams{{}, true, {5, -1}, {}}, {x});
      },
      "volume");
  expect_error<ShapeMismatch>(
      [&] {
        net.add("volume2", ShuffleParams{{}, true, {2, 3, 5}, {}}, {x});
      },
      "volume2");
  expect_error<ShapeMismatch>(
      [&] {
        net.add("cat", ConcatParams{1, false}, {x, net.add_input("y", DataType::kF32, {3, 3, 4})});
      },
      "cat");
  expect_error<InvalidArgument>(
      [&] {
        net.add("step", SliceParams{{0}, {0}, {2}, {0}}, {x});
      },
      "step");
  expect_error<InvalidArgument>(
      [&] {
        net.add("reflect", PadParams{{0, 0, 4}, {0, 0, 0}, PadMode::kReflect, 0}, {x});
      },
      "reflect");
  auto f = net.add_input("f", DataType::kF32, {2});
  expect_error<InvalidArgument>(
      [&] {
        net.add("float_idx", GatherParams{GatherMode::kDefault, 0}, {x, f});
      },
      "float_idx");
  // Out-of-range indices are only known at run time: the kernel throws.
  for (auto mode : {GatherMode::kDefault, GatherMode::kElements}) {
    auto data = random_tensor(DataType::kF32, {3, 4}, 20);
    auto idx = testing::tensor_from(DataType::kI64, {1, 2},
                                    {1, mode == GatherMode::kDefault ? 4.0 : -5.0});
    expect_error<InvalidArgument>(
        [&] {
          testing::run_network({data, idx}, [&](Network& n, const std::vector<TensorId>& in) {
            return n.add_layer("lookup", GatherParams{mode, 1}, in);
          });
        },
        "lookup");
  }
  auto data = random_tensor(DataType::kF32, {3, 4}, 21);
  auto idx = testing::tensor_from(DataType::kI64, {1, 2}, {0, 3});
  expect_error<InvalidArgument>(
      [&] {
        testing::run_network({data, idx, data}, [&](Network& n, const std::vector<TensorId>& in) {
          return n.add_layer("put", ScatterParams{0, ScatterReduce::kAdd}, in);
        });
      },
      "put");
}

}  // namespace
}  // namespace kiln::engine

namespace kiln::engine {
namespace {

// A reshape to more dims than the input has (including from a 0-d tensor) infers correctly.
TEST(Shuffle, ReshapeToHigherRankAndFromScalar) {
  auto s = testing::tensor_from(DataType::kF32, {}, {2.5});
  ShuffleParams p;
  p.has_reshape = true;
  p.reshape = {1, 1, -1};
  auto out = testing::run_one_layer(p, {s})[0];
  EXPECT_EQ(out.shape(), (Shape{1, 1, 1}));
  EXPECT_TRUE(testing::near(out, {2.5}, 0, 0));
  auto x = testing::random_tensor(DataType::kF32, {6}, 3);
  p.reshape = {0, 2, 1, 1};  // [6, 2, 1, 1] holds 12 elements, not 6
  EXPECT_THROW(testing::run_one_layer(p, {x}), ShapeMismatch);
  p.reshape = {2, 3, 1, 1};
  EXPECT_TRUE(testing::near(testing::run_one_layer(p, {x})[0], testing::to_doubles(x), 0, 0));
}

}  // namespace
}  // namespace kiln::engine
