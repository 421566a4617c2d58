// Gathered inputs of fused elementwise layers (FusedElementwiseParams::gathers): the
// gathered_inputs pass folds a gather by constant indices into the fused layer that reads it, the
// CPU kernel computes what the gather and the fused layer computed, and the verifier refuses
// index lists a kernel could not trust.
#include <cstring>
#include <string>
#include <vector>

#include "engine/builder.h"
#include "engine/cuda/backend.h"
#include "engine/layers/elementwise_rules.h"
#include "engine/layers/infer.h"
#include "engine/passes/passes.h"
#include "engine/verify.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::run_engine;

// y = exp(gather(x, idx, axis) * other) + other: the fused layer reads x at the indices. Cases:
// rotate_half's indices along the last axis (runs of 8), wrapped and repeated indices along a
// middle axis that lengthen it, and a source broadcast over the batch (pairs swapped: runs of 1).
TEST(GatheredInputs, AGatherFoldsIntoTheFusedLayer) {
  struct Case {
    Shape x, other;
    int64_t axis;
    std::vector<int64_t> indices;
    int64_t run;
  };
  std::vector<int64_t> rotate;
  for (int64_t i = 0; i < 16; ++i) rotate.push_back((i + 8) % 16);
  for (const Case& c : {Case{{2, 3, 5, 16}, {2, 3, 5, 16}, 3, rotate, 8},
                        Case{{2, 3, 4}, {2, 4, 4}, 1, {2, -1, 0, 0}, 1},
                        Case{{1, 6, 8}, {3, 6, 8}, -1, {1, 0, 3, 2, 5, 4, 7, 6}, 1}}) {
    SCOPED_TRACE(shape_to_string(c.x));
    Network net;
    auto x = net.add_input("x", DataType::kF32, c.x);
    auto other = net.add_input("other", DataType::kF32, c.other);
    const auto n = static_cast<int64_t>(c.indices.size());
    auto idx = net.add_constant("idx", Weights::from_ints({n}, c.indices));
    auto g = net.add("gather", GatherParams{GatherMode::kDefault, c.axis}, {x, idx});
    auto t = net.add("exp", UnaryParams{UnaryOp::kExp},
                     {net.add("mul", ElementwiseParams{BinaryOp::kMul}, {g, other})});
    net.mark_output(net.add("add", ElementwiseParams{BinaryOp::kAdd}, {t, other}), "y");

    Network folded = net;
    std::vector<std::string> lines;
    EXPECT_EQ(fuse_elementwise(folded, lines), 1);
    EXPECT_EQ(fold_gathers_into_elementwise(folded), 1);
    verify_network(folded, "folded", VerifyFailure::kCorrupt);
    int gathers = 0, fused = 0;
    for (const Layer& l : folded.layers()) {
      gathers += std::holds_alternative<GatherParams>(l.params);
      if (const auto* f = std::get_if<FusedElementwiseParams>(&l.params)) {
        ++fused;
        const int64_t axis = c.axis < 0 ? c.axis + static_cast<int64_t>(c.x.size()) : c.axis;
        EXPECT_EQ(f->gathers, (std::vector<int64_t>{0, axis, c.run}));
        EXPECT_EQ(l.inputs.size(), 3u);  // x, other, the index list
        EXPECT_EQ(l.inputs[0], x);
      }
    }
    EXPECT_EQ(gathers, 0);
    EXPECT_EQ(fused, 1);
    const std::vector<HostTensor> in = {testing::random_tensor(DataType::kF32, c.x, 71),
                                        testing::random_tensor(DataType::kF32, c.other, 72)};
    EXPECT_TRUE(testing::near(run_engine(folded, in)[0],
                              testing::to_doubles(run_engine(net, in)[0]), 0, 0));
  }
}

// Gathers the pass leaves: indices that are an input (not constants), a gathered tensor that
// another layer reads too, an index out of range (the gather layer reports it at run time), and
// a fused layer at its input limit.
TEST(GatheredInputs, GathersThePassLeaves) {
  enum Kind { kInputIndices, kTwoReaders, kOutOfRange, kInputLimit };
  for (Kind kind : {kInputIndices, kTwoReaders, kOutOfRange, kInputLimit}) {
    SCOPED_TRACE(static_cast<int>(kind));
    Network net;
    auto x = net.add_input("x", DataType::kF32, {2, 4});
    auto other = net.add_input("other", DataType::kF32, {2, 4});
    auto idx = kind == kInputIndices
                   ? net.add_input("idx", DataType::kI64, {4})
                   : net.add_constant(
                         "idx", Weights::from_ints({4}, {3, 2, kind == kOutOfRange ? 4 : 1, 0}));
    auto g = net.add("gather", GatherParams{GatherMode::kDefault, 1}, {x, idx});
    auto y = net.add("exp", UnaryParams{UnaryOp::kExp},
                     {net.add("mul", ElementwiseParams{BinaryOp::kMul}, {g, other})});
    net.mark_output(y, "y");
    if (kind == kTwoReaders) net.mark_output(g, "g");
    std::vector<std::string> lines;
    EXPECT_EQ(fuse_elementwise(net, lines), 1);
    EXPECT_EQ(fold_gathers_into_elementwise(net, kind == kInputLimit ? 2 : 0), 0);
  }
}

// A lone add (no fused layer around it) reading a gather behind a view, as Swin's window reverse
// after a shifted window's attention: `residual + rows.gather(1, roll).view(B, H, W, C)`. The add
// becomes a fused layer that runs at the gather's shape, the residual and the sum viewed; the
// same without the view, and a lone unary layer. Values against the unbuilt network.
TEST(GatheredInputs, LoneLayersTakeGathersBehindViews) {
  struct Case {
    bool view, unary;
  };
  for (const Case& c : {Case{true, false}, Case{false, false}, Case{true, true}}) {
    SCOPED_TRACE(std::to_string(c.view) + std::to_string(c.unary));
    Network net;
    const Shape rows = {2, 12, 5}, image = {2, 3, 4, 5};
    auto x = net.add_input("rows", DataType::kF32, rows);
    auto residual = net.add_input("residual", DataType::kF32, c.view ? image : rows);
    std::vector<int64_t> roll;
    for (int64_t i = 0; i < 12; ++i) roll.push_back((i + 5) % 12);
    auto idx = net.add_constant("idx", Weights::from_ints({12}, roll));
    auto g = net.add("gather", GatherParams{GatherMode::kDefault, 1}, {x, idx});
    if (c.view) {
      ShuffleParams v;
      v.has_reshape = true;
      v.reshape = image;
      g = net.add("view", v, {g});
    }
    auto y = c.unary ? net.add("neg", UnaryParams{UnaryOp::kNeg}, {g})
                     : net.add("add", ElementwiseParams{BinaryOp::kAdd}, {residual, g});
    net.mark_output(y, "y");

    Network folded = net;
    EXPECT_EQ(fold_gathers_into_elementwise(folded), 1);
    verify_network(folded, "folded", VerifyFailure::kCorrupt);
    int gathers = 0, fused = 0, moving = 0;
    for (const Layer& l : folded.layers()) {
      gathers += std::holds_alternative<GatherParams>(l.params);
      if (const auto* s = std::get_if<ShuffleParams>(&l.params)) moving += shuffle_moves_data(*s);
      if (const auto* f = std::get_if<FusedElementwiseParams>(&l.params)) {
        ++fused;
        const int64_t reg = c.unary ? 0 : 1;
        EXPECT_EQ(f->gathers, (std::vector<int64_t>{reg, 1, 1}));
        EXPECT_EQ(l.inputs[static_cast<size_t>(reg)], x);
        EXPECT_EQ(folded.tensor(l.outputs[0]).shape, rows);
      }
    }
    EXPECT_EQ(gathers, 0);
    EXPECT_EQ(fused, 1);
    EXPECT_EQ(moving, 0);
    EXPECT_EQ(folded.tensor(folded.outputs()[0]).shape, c.view ? image : rows);
    const std::vector<HostTensor> in = {
        testing::random_tensor(DataType::kF32, rows, 73),
        testing::random_tensor(DataType::kF32, c.view ? image : rows, 74)};
    EXPECT_TRUE(testing::near(run_engine(folded, in)[0],
                              testing::to_doubles(run_engine(net, in)[0]), 0, 0));
  }
}

// Behind a view, the reader must have one shape throughout: an add that broadcasts a bias over
// the viewed gather stays as it is (its layers untouched, no fused layer made).
TEST(GatheredInputs, ViewedGathersNeedReadersOfOneShape) {
  Network net;
  auto x = net.add_input("rows", DataType::kF32, {2, 12, 5});
  auto bias = net.add_input("bias", DataType::kF32, {5});
  auto idx =
      net.add_constant("idx", Weights::from_ints({12}, {11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  ShuffleParams v;
  v.has_reshape = true;
  v.reshape = {2, 3, 4, 5};
  auto g = net.add("view", v, {net.add("gather", GatherParams{GatherMode::kDefault, 1}, {x, idx})});
  net.mark_output(net.add("add", ElementwiseParams{BinaryOp::kAdd}, {g, bias}), "y");
  const size_t before = net.layers().size();
  EXPECT_EQ(fold_gathers_into_elementwise(net), 0);
  EXPECT_EQ(net.layers().size(), before);
  for (const Layer& l : net.layers()) {
    EXPECT_FALSE(std::holds_alternative<FusedElementwiseParams>(l.params)) << l.name;
  }
}

// A shuffle that moves whole rows is a gather of rows: Swin's window reverse without a shift,
// windows [B, 2, 2, 3, 3, C] permuted (0, 1, 3, 2, 4, 5) and viewed as the image [B, 6, 6, C] in
// two views, then the residual add: one fused layer reading the windows' rows at the indices, at
// [rows, C]. Also a permute of the leading dims read by a fused chain (exp then mul), and f16.
// Rows of under 16 bytes stay a shuffle. Values against the unbuilt network.
TEST(GatheredInputs, ShufflesOfWholeRowsAreGathers) {
  struct Case {
    Shape windows;
    std::vector<int64_t> perm;
    Shape image;
    DataType dtype;
    bool chain;
    bool folds;
  };
  for (const Case& c :
       {Case{{2, 2, 2, 3, 3, 8}, {0, 1, 3, 2, 4, 5}, {2, 6, 6, 8}, DataType::kF32, false, true},
        Case{{3, 4, 8}, {1, 0, 2}, {4, 3, 8}, DataType::kF32, true, true},
        Case{{2, 2, 2, 3, 3, 8}, {0, 1, 3, 2, 4, 5}, {2, 6, 6, 8}, DataType::kF16, true, true},
        Case{{3, 4, 2}, {1, 0, 2}, {4, 3, 2}, DataType::kF32, false, false}}) {
    SCOPED_TRACE(shape_to_string(c.windows) + (c.chain ? " chain" : ""));
    Network net;
    auto x = net.add_input("windows", c.dtype, c.windows);
    auto residual = net.add_input("residual", c.dtype, c.image);
    Shape permuted;
    for (int64_t p : c.perm) permuted.push_back(c.windows[static_cast<size_t>(p)]);
    auto moved = net.add("permute", ShuffleParams{c.perm, false, {}, {}}, {x});
    ShuffleParams v1;
    v1.has_reshape = true;
    v1.reshape = {volume(c.image) / c.image.back(), c.image.back()};
    ShuffleParams v2;
    v2.has_reshape = true;
    v2.reshape = c.image;
    auto image = net.add("view2", v2, {net.add("view1", v1, {moved})});
    TensorId y;
    if (c.chain) {
      y = net.add("mul", ElementwiseParams{BinaryOp::kMul},
                  {net.add("exp", UnaryParams{UnaryOp::kExp}, {image}), residual});
      std::vector<std::string> lines;
      ASSERT_EQ(fuse_elementwise(net, lines), 1);
    } else {
      y = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {residual, image});
    }
    net.mark_output(y, "y");

    Network folded = net;
    EXPECT_EQ(fold_gathers_into_elementwise(folded), c.folds ? 1 : 0);
    verify_network(folded, "folded", VerifyFailure::kCorrupt);
    int moving = 0, fused = 0;
    for (const Layer& l : folded.layers()) {
      if (const auto* s = std::get_if<ShuffleParams>(&l.params)) moving += shuffle_moves_data(*s);
      if (const auto* f = std::get_if<FusedElementwiseParams>(&l.params)) {
        ++fused;
        ASSERT_EQ(f->gathers.size(), 3u);
        EXPECT_EQ(f->gathers[1], 0);  // the rows' axis
        EXPECT_EQ(folded.tensor(l.outputs[0]).shape,
                  (Shape{volume(c.image) / c.image.back(), c.image.back()}));
      }
    }
    EXPECT_EQ(moving, c.folds ? 0 : 1);
    EXPECT_EQ(fused, c.folds ? 1 : (c.chain ? 1 : 0));
    EXPECT_EQ(folded.tensor(folded.outputs()[0]).shape, c.image);
    const std::vector<HostTensor> in = {testing::random_tensor(c.dtype, c.windows, 75),
                                        testing::random_tensor(c.dtype, c.image, 76)};
    EXPECT_TRUE(testing::near(run_engine(folded, in)[0],
                              testing::to_doubles(run_engine(net, in)[0]), 0, 0));
  }
}

// The same in the builder's pipeline: a cuda plan (sm_90, f32, built without a device) of a
// window reverse, its residual add and a layer norm keeps no moving shuffle and no gather, and its
// network computes what the unbuilt one does.
TEST(GatheredInputs, CudaPlansReadWindowsInPlace) {
  if (!cuda::built()) GTEST_SKIP() << "this build has no CUDA backend";
  Network net;
  const Shape windows = {2, 2, 2, 3, 3, 16}, image = {2, 6, 6, 16};
  auto x = net.add_input("windows", DataType::kF32, windows);
  auto residual = net.add_input("residual", DataType::kF32, image);
  ShuffleParams view;
  view.has_reshape = true;
  view.reshape = image;
  auto moved = net.add("view", view,
                       {net.add("permute", ShuffleParams{{0, 1, 3, 2, 4, 5}, false, {}, {}}, {x})});
  auto sum = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {residual, moved});
  NormalizationParams ln;
  ln.kind = NormalizationKind::kLayer;
  ln.normalized_dims = 1;
  ln.has_affine = false;
  net.mark_output(net.add("norm", ln, {sum}), "y");
  BuilderConfig config;
  config.device = "cuda";
  apply_switch(config, "cuda_arch=90");
  BuildReport report;
  const Plan plan = build(net, config, &report);
  EXPECT_EQ(report.changes("gathered_inputs"), 1) << report.to_string();
  for (const Layer& l : plan.network.layers()) {
    const auto* sh = std::get_if<ShuffleParams>(&l.params);
    EXPECT_FALSE(sh && shuffle_moves_data(*sh)) << l.name;
    EXPECT_FALSE(std::holds_alternative<GatherParams>(l.params)) << l.name;
  }
  const std::vector<HostTensor> in = {testing::random_tensor(DataType::kF32, windows, 77),
                                      testing::random_tensor(DataType::kF32, image, 78)};
  EXPECT_TRUE(testing::near(run_engine(plan.network, in)[0],
                            testing::to_doubles(run_engine(net, in)[0]), 1e-5, 1e-5));
}

// A fused layer with a gathered input, written by hand as a plan could hold it, against the
// verifier (kCorrupt: what loading a plan runs): indices that are no constant, outside the axis,
// or not in the runs the layer claims are refused, naming the layer.
TEST(GatheredInputs, TheVerifierRefusesUntrustworthyIndices) {
  struct Case {
    bool constant;
    std::vector<int32_t> indices;
    int64_t run;
    std::string message;
  };
  for (const Case& c : {Case{true, {4, 5, 6, 7, 0, 1, 2, 3}, 4, ""},
                        Case{false, {0, 1, 2, 3, 4, 5, 6, 7}, 1, "not a constant"},
                        Case{true, {0, 1, 2, 3, 4, 5, 6, 8}, 1, "outside its axis"},
                        Case{true, {4, 5, 6, 7, 1, 2, 3, 4}, 4, "aligned runs of 4"},
                        Case{true, {2, 3, 4, 5, 6, 7, 0, 1}, 4, "aligned runs of 4"}}) {
    SCOPED_TRACE(c.message);
    Network net;
    auto x = net.add_input("x", DataType::kF32, {3, 8});
    std::vector<uint8_t> bytes(c.indices.size() * 4);
    std::memcpy(bytes.data(), c.indices.data(), bytes.size());
    auto idx = c.constant ? net.add_constant("idx", Weights::from_bytes(DataType::kI32, {8}, bytes))
                          : net.add_input("idx", DataType::kI32, {8});
    FusedElementwiseParams p;
    p.program = {1, static_cast<int64_t>(UnaryOp::kNeg), 0, 0};
    p.constants = {0, 0};
    p.gathers = {0, 1, c.run};
    net.mark_output(net.add("fused", p, {x, idx}), "y");
    if (c.message.empty()) {
      verify_network(net, "plan", VerifyFailure::kCorrupt);
      const HostTensor in = testing::random_tensor(DataType::kF32, {3, 8}, 81);
      const HostTensor out = run_engine(net, {in})[0];
      for (int64_t r = 0; r < 3; ++r) {
        for (int64_t k = 0; k < 8; ++k) {
          EXPECT_EQ(out.as<float>()[r * 8 + k], -in.as<float>()[r * 8 + c.indices[k]]);
        }
      }
      continue;
    }
    try {
      verify_network(net, "plan", VerifyFailure::kCorrupt);
      ADD_FAILURE() << "accepted";
    } catch (const CorruptInput& e) {
      EXPECT_NE(e.message().find(c.message), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("`fused`"), std::string::npos) << e.message();
    }
  }
}

// Malformed gathers (a register that is not one, an axis outside the input, a run that is not a
// power of two up to 16, an index list of another dtype or of one index) are invalid layers.
TEST(GatheredInputs, MalformedGathersAreInvalidLayers) {
  struct Case {
    std::vector<int64_t> gathers;
    DataType index_dtype;
    std::string message;
    int64_t indices = 8;
  };
  for (const Case& c : {Case{{1, 0, 1}, DataType::kI32, "reads register 1"},
                        Case{{0, 2, 1}, DataType::kI32, "outside input 0"},
                        Case{{0, 1, 3}, DataType::kI32, "run 3"},
                        Case{{0, 1, 1, 0}, DataType::kI32, "malformed gathers"},
                        Case{{0, 1, 1}, DataType::kI64, "1-D i32"},
                        Case{{0, 1, 1}, DataType::kI32, "of at least 2", 1}}) {
    SCOPED_TRACE(c.message);
    FusedElementwiseParams p;
    p.program = {1, static_cast<int64_t>(UnaryOp::kNeg), 0, 0};
    p.constants = {0, 0};
    p.gathers = c.gathers;
    try {
      infer_layer("fused", p, {{DataType::kF32, {3, 8}}, {c.index_dtype, {c.indices}}});
      ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(e.message().find(c.message), std::string::npos) << e.message();
    }
  }
}

}  // namespace
}  // namespace kiln::engine
