// The CUDA shuffle and gather families against the CPU backend: transposes and reshapes, concat
// and stack, slices with steps, pads (constant, reflect, replicate), gather and scatter, and the
// builder's gathers of rolls and window partitions.
#include <utility>

#include "cuda_testing.h"

namespace kiln::engine {
namespace {

using cuda_testing::compare_layer;
using testing::random_tensor;

TEST(CudaShuffle, TransposeReshapeTranspose) {
  KILN_REQUIRE_GPU();
  const HostTensor x = random_tensor(DataType::kF32, {2, 3, 4, 5}, 1);
  compare_layer(ShuffleParams{{2, 0, 3, 1}, true, {0, -1, 3}, {2, 0, 1}}, {x});
  compare_layer(ShuffleParams{{}, true, {-1, 0}, {}}, {random_tensor(DataType::kI64, {6, 4}, 2)});
  compare_layer(ShuffleParams{{3, 1, 0, 2}, false, {}, {}}, {x});
  compare_layer(ShuffleParams{{}, true, {6, 20}, {1, 0}},
                {random_tensor(DataType::kF16, {2, 3, 4, 5}, 3)});
  compare_layer(ShuffleParams{{1, 0}, false, {}, {}},
                {random_tensor(DataType::kBool, {7, 9}, 4, 0, 1)});
}

// Shuffles that cast (ShuffleParams::cast): the converting strided copy (two permutations, a
// reshape alone), the planes-to-channels-last kernel (1 and 3 channels, planes of a multiple of 4
// pixels) and a plane that is not, and an empty batch. Both backends round once to the target.
TEST(CudaShuffle, ShufflesThatCast) {
  KILN_REQUIRE_GPU();
  const auto casting = [](ShuffleParams p, DataType to) {
    p.cast = true;
    p.to = to;
    return p;
  };
  const ShuffleParams to_last{{0, 2, 3, 1}, false, {}, {}};
  compare_layer(casting(ShuffleParams{{2, 0, 3, 1}, true, {0, -1, 3}, {2, 0, 1}}, DataType::kF16),
                {random_tensor(DataType::kF32, {2, 3, 4, 5}, 20)});
  compare_layer(casting(ShuffleParams{{}, true, {6, 20}, {}}, DataType::kF32),
                {random_tensor(DataType::kBF16, {2, 3, 4, 5}, 21)});
  compare_layer(casting(to_last, DataType::kF16),
                {random_tensor(DataType::kF32, {2, 3, 4, 8}, 22)});
  compare_layer(casting(to_last, DataType::kBF16),
                {random_tensor(DataType::kF32, {3, 1, 4, 4}, 23)});
  compare_layer(casting(to_last, DataType::kF32),
                {random_tensor(DataType::kF16, {2, 3, 3, 5}, 24)});
  compare_layer(to_last, {random_tensor(DataType::kF16, {2, 3, 6, 6}, 25)});  // no cast, 4 | 36
  compare_layer(casting(to_last, DataType::kF16),
                {random_tensor(DataType::kF32, {0, 3, 4, 4}, 26)});
}

TEST(CudaShuffle, ConcatSlicePad) {
  KILN_REQUIRE_GPU();
  compare_layer(ConcatParams{1, false}, {random_tensor(DataType::kF32, {2, 3, 4}, 5),
                                         random_tensor(DataType::kF32, {2, 1, 4}, 6),
                                         random_tensor(DataType::kF32, {2, 5, 4}, 7)});
  compare_layer(ConcatParams{-1, true}, {random_tensor(DataType::kI32, {3, 4}, 8),
                                         random_tensor(DataType::kI32, {3, 4}, 9)});
  const HostTensor x = random_tensor(DataType::kF32, {6, 7, 8}, 10);
  compare_layer(SliceParams{{0, -1, 1}, {-3, 1, -100}, {kSliceEnd, 100, -1}, {2, 3, 1}}, {x});
  compare_layer(SliceParams{{1}, {2}, {6}, {1}}, {x});
  for (PadMode mode : {PadMode::kConstant, PadMode::kReflect, PadMode::kReplicate}) {
    SCOPED_TRACE(static_cast<int>(mode));
    compare_layer(PadParams{{0, 2, 1}, {0, 3, 4}, mode, 7}, {x});
    compare_layer(PadParams{{1, 0}, {0, 2}, mode, -1},
                  {random_tensor(DataType::kI64, {3, 4}, 11, -9, 9)});
  }
  compare_layer(PadParams{{0, -2, 1}, {0, 1, -3}, PadMode::kConstant, 0}, {x});
}

// The concat kernel copies in the largest unit every chunk allows (16 bytes down to 1) and takes
// 64 inputs per launch: a densenet-like channels-last concat of many narrow inputs, 70 inputs
// with empty ones among them (two launches), odd byte widths, and a concat along the first axis.
TEST(CudaShuffle, ConcatOfManyInputsInEveryUnit) {
  KILN_REQUIRE_GPU();
  std::vector<HostTensor> dense = {random_tensor(DataType::kF16, {2, 5, 5, 64}, 40)};
  for (int k = 0; k < 12; ++k)
    dense.push_back(random_tensor(DataType::kF16, {2, 5, 5, 32}, 41 + k));
  compare_layer(ConcatParams{3, false}, dense);
  std::vector<HostTensor> many;
  for (int k = 0; k < 70; ++k) {
    many.push_back(random_tensor(DataType::kF32, {3, k % 7 == 0 ? 0 : 1 + k % 3, 2}, 60 + k));
  }
  compare_layer(ConcatParams{1, false}, many);
  for (DataType t : {DataType::kU8, DataType::kF16, DataType::kF32, DataType::kI64}) {
    SCOPED_TRACE(dtype_name(t));
    compare_layer(ConcatParams{1, false},
                  {random_tensor(t, {4, 3, 1}, 140, 0, 9), random_tensor(t, {4, 5, 1}, 141, 0, 9)});
    compare_layer(ConcatParams{0, false},
                  {random_tensor(t, {1, 8}, 142, 0, 9), random_tensor(t, {3, 8}, 143, 0, 9)});
  }
}

TEST(CudaGather, GatherAndScatter) {
  KILN_REQUIRE_GPU();
  const HostTensor data = random_tensor(DataType::kF32, {5, 6, 7}, 12);
  compare_layer(GatherParams{GatherMode::kDefault, 1},
                {data, random_tensor(DataType::kI64, {2, 4}, 13, -6, 5)});
  compare_layer(
      GatherParams{GatherMode::kDefault, 0},
      {random_tensor(DataType::kF16, {50, 16}, 14), random_tensor(DataType::kI32, {9}, 15, 0, 49)});
  // 16-byte chunks of output a thread: from 16-byte source rows (embedding-like, negative
  // indices), and element by element along the last axis (rotary's permutation, 2^19 elements:
  // enough for that path); a small gather of bools a thread an element.
  compare_layer(GatherParams{GatherMode::kDefault, 0},
                {random_tensor(DataType::kF16, {10, 24}, 30),
                 random_tensor(DataType::kI64, {3, 5}, 31, -10, 9)});
  compare_layer(GatherParams{GatherMode::kDefault, -1},
                {random_tensor(DataType::kBF16, {256, 32, 64}, 32),
                 random_tensor(DataType::kI64, {64}, 33, -64, 63)});
  compare_layer(GatherParams{GatherMode::kDefault, 1},
                {random_tensor(DataType::kBool, {2, 40, 3}, 34, 0, 1),
                 random_tensor(DataType::kI32, {16}, 35, 0, 39)});
  compare_layer(GatherParams{GatherMode::kElements, -1},
                {data, random_tensor(DataType::kI64, {5, 6, 3}, 16, 0, 6)});
  compare_layer(GatherParams{GatherMode::kElements, 0},
                {data, random_tensor(DataType::kI64, {2, 6, 7}, 17, -5, 4)});
  for (ScatterReduce reduce : {ScatterReduce::kNone, ScatterReduce::kAdd, ScatterReduce::kMul,
                               ScatterReduce::kMax, ScatterReduce::kMin}) {
    SCOPED_TRACE(static_cast<int>(reduce));
    // Many duplicates (the reductions combine in order), NaN in data and updates, f16.
    HostTensor d = random_tensor(DataType::kF32, {6, 5}, 24);
    HostTensor u = random_tensor(DataType::kF32, {8, 5}, 25);
    static_cast<float*>(d.data())[7] = NAN;
    static_cast<float*>(u.data())[12] = NAN;
    compare_layer(ScatterParams{0, reduce},
                  {d, random_tensor(DataType::kI64, {8, 4}, 26, 0, 2), u});
    compare_layer(ScatterParams{-1, reduce},
                  {random_tensor(DataType::kF16, {3, 9}, 27),
                   random_tensor(DataType::kI32, {3, 12}, 28, -9, 8),
                   random_tensor(DataType::kF16, {3, 12}, 29)},
                  1e-3, 1e-3);
    compare_layer(ScatterParams{0, reduce}, {random_tensor(DataType::kF32, {4, 5}, 18),
                                             random_tensor(DataType::kI64, {3, 5}, 19, 0, 3),
                                             random_tensor(DataType::kF32, {3, 5}, 20)});
    compare_layer(ScatterParams{1, reduce}, {random_tensor(DataType::kI64, {3, 6}, 21, -5, 5),
                                             random_tensor(DataType::kI64, {3, 4}, 22, 0, 5),
                                             random_tensor(DataType::kI64, {3, 4}, 23, -5, 5)});
  }
}

// Rotary embeddings' x * cos + rotate_half(x) * sin, rotate_half = cat(-x[..., E/2:], x[...,
// :E/2]): the builder's concat_slices makes the rotation one gather by constant indices and a sign
// multiply, and the generated kernel of the multiplies and the add reads the gather itself
// (gathered_inputs): one kernel in all; f32 and f16, against the CPU.
TEST(CudaGather, RotateHalfIsOneFusedKernel) {
  KILN_REQUIRE_GPU();
  const int64_t B = 2, L = 40, H = 4, E = 64;
  for (const auto& [dtype, tol] :
       {std::pair{DataType::kF32, 1e-6}, std::pair{DataType::kF16, 2e-3}}) {
    SCOPED_TRACE(dtype_name(dtype));
    const HostTensor x = random_tensor(dtype, {B, L, H, E}, 90);
    const auto r = cuda_testing::run_both({x}, [&, dt = dtype](Network& net,
                                                               const std::vector<TensorId>& in) {
      const auto table = [&](const std::string& name, uint64_t seed) {
        const HostTensor t = random_tensor(DataType::kF32, {L, 1, E}, seed);
        std::vector<float> v(static_cast<size_t>(L * E));
        for (size_t i = 0; i < v.size(); ++i) v[i] = t.as<float>()[i];
        const TensorId c = net.add_constant(name, Weights::from_floats({L, 1, E}, v));
        return dt == DataType::kF32 ? c : net.add(name + ".cast", CastParams{dt}, {c});
      };
      const auto upper = net.add("upper", SliceParams{{3}, {E / 2}, {kSliceEnd}, {1}}, {in[0]});
      const auto lower = net.add("lower", SliceParams{{-1}, {0}, {E / 2}, {1}}, {in[0]});
      const auto rotated = net.add("cat", ConcatParams{-1, false},
                                   {net.add("neg", UnaryParams{UnaryOp::kNeg}, {upper}), lower});
      const auto xc = net.add("xcos", ElementwiseParams{BinaryOp::kMul}, {in[0], table("cos", 91)});
      const auto rs =
          net.add("rsin", ElementwiseParams{BinaryOp::kMul}, {rotated, table("sin", 92)});
      return std::vector<TensorId>{net.add("add", ElementwiseParams{BinaryOp::kAdd}, {xc, rs})};
    });
    // The gather is read by the fused kernel that multiplies it by sin (gathered inputs).
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "gather"), 0);
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "fused_elementwise"), 1);
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "concat"), 0);
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "slice"), 0);
    cuda_testing::expect_match(r, tol, tol);
  }
}

// swin's shifted windows on the GPU: roll (two concats of slices), window partition, a per-token
// multiply, window merge and roll back; the builder's gather_chains makes each direction one
// gather of whole token rows (gathers of 16-byte pieces), which the elementwise layers after them
// then read in place; f32 and f16, against the CPU.
TEST(CudaGather, ShiftedWindowsAreOneGatherEachWay) {
  KILN_REQUIRE_GPU();
  const int64_t B = 3, S = 28, W = 7, C = 96;
  for (const auto& [dtype, tol] :
       {std::pair{DataType::kF32, 1e-6}, std::pair{DataType::kF16, 2e-3}}) {
    SCOPED_TRACE(dtype_name(dtype));
    const HostTensor x = random_tensor(dtype, {B, S, S, C}, 93);
    const auto r = cuda_testing::run_both({x}, [&](Network& net, const std::vector<TensorId>& in) {
      const auto roll = [&](TensorId t, int64_t axis, int64_t shift, const std::string& name) {
        auto tail = net.add(name + ".tail", SliceParams{{axis}, {shift}, {kSliceEnd}, {1}}, {t});
        auto head = net.add(name + ".head", SliceParams{{axis}, {0}, {shift}, {1}}, {t});
        return net.add(name, ConcatParams{axis, false}, {tail, head});
      };
      const int64_t n = S / W;
      auto t = roll(roll(in[0], 1, 3, "roll_h"), 2, 3, "roll_w");
      t = net.add("split", ShuffleParams{{}, true, {B, n, W, n, W, C}, {}}, {t});
      t = net.add("windows", ShuffleParams{{0, 1, 3, 2, 4, 5}, true, {B * n * n, W * W, C}, {}},
                  {t});
      t = net.add("relu", ActivationParams{ActivationKind::kRelu}, {t});
      t = net.add("grid", ShuffleParams{{}, true, {B, n, n, W, W, C}, {}}, {t});
      t = net.add("merge", ShuffleParams{{0, 1, 3, 2, 4, 5}, true, {B, S, S, C}, {}}, {t});
      t = roll(roll(t, 1, S - 3, "back_h"), 2, S - 3, "back_w");
      return std::vector<TensorId>{net.add("add", ElementwiseParams{BinaryOp::kAdd}, {t, in[0]})};
    });
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "concat"), 0);
    // Gather layers, and gathers the elementwise layer after them reads in place
    // (gathered_inputs: the ReLU and the residual add).
    size_t gathers = static_cast<size_t>(cuda_testing::count_layers(r.gpu_plan, "gather"));
    for (const Layer& l : r.gpu_plan.network.layers()) {
      if (const auto* f = std::get_if<FusedElementwiseParams>(&l.params)) {
        gathers += f->gathers.size() / 3;
      }
    }
    EXPECT_EQ(gathers, 2u);
    cuda_testing::expect_match(r, tol, tol);
  }
}

// swin's patch merging, cat(x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2,
// 1::2], -1), then a ReLU: the builder's strided_concats makes it one shuffle (no slice or concat
// left, at most one shuffle that moves data), at an odd batch; f32 and f16, against the CPU.
TEST(CudaShuffle, PatchMergingIsOneShuffle) {
  KILN_REQUIRE_GPU();
  const int64_t B = 3, S = 28, C = 96;
  for (const auto& [dtype, tol] :
       {std::pair{DataType::kF32, 1e-6}, std::pair{DataType::kF16, 2e-3}}) {
    SCOPED_TRACE(dtype_name(dtype));
    const HostTensor x = random_tensor(dtype, {B, S, S, C}, 94);
    const auto r = cuda_testing::run_both({x}, [&](Network& net, const std::vector<TensorId>& in) {
      std::vector<TensorId> parts;
      for (const auto& [h, w] : {std::pair{0, 0}, {1, 0}, {0, 1}, {1, 1}}) {
        const auto rows = net.add("rows" + std::to_string(h) + std::to_string(w),
                                  SliceParams{{1}, {h}, {kSliceEnd}, {2}}, {in[0]});
        parts.push_back(net.add("cols" + std::to_string(h) + std::to_string(w),
                                SliceParams{{2}, {w}, {kSliceEnd}, {2}}, {rows}));
      }
      const auto merged = net.add("merge", ConcatParams{-1, false}, parts);
      return std::vector<TensorId>{
          net.add("relu", ActivationParams{ActivationKind::kRelu}, {merged})};
    });
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "concat"), 0);
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "slice"), 0);
    EXPECT_LE(count_moving_shuffles(r.gpu_plan.network.layers()), 1);
    cuda_testing::expect_match(r, tol, tol);
  }
}

TEST(CudaFill, FillAndShape) {
  KILN_REQUIRE_GPU();
  auto r = cuda_testing::run_both(
      {random_tensor(DataType::kF32, {3, 4}, 24)},
      [](Network& net, const std::vector<TensorId>& in) {
        FillParams range{FillMode::kRange, DataType::kF32, {3, 4}, 0, -1.5, 0.25};
        FillParams ones{FillMode::kConstant, DataType::kI64, {5}, 7};
        auto a = net.add("range", range, {});
        auto s = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {in[0], a});
        return std::vector<TensorId>{s, net.add("ones", ones, {}),
                                     net.add("shape", ShapeParams{}, {in[0]})};
      });
  cuda_testing::expect_match(r);
}

}  // namespace
}  // namespace kiln::engine
