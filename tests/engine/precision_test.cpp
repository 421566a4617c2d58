// The precision pass: which layers run low, where casts go, what stays untouched (integer and
// shape tensors, output names and dtypes), and that the rewritten network computes the same values
// within half-precision tolerance (the CPU backend runs f16/bf16 layers too).
#include "engine/passes/precision.h"

#include <algorithm>

#include "engine/builder.h"
#include "engine/cuda/backend.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;

std::string runs_everything(const Layer&, const std::vector<DataType>&,
                            const std::vector<DataType>&) {
  return "";
}

const Layer& layer_named(const Network& net, const std::string& name) {
  for (const Layer& l : net.layers()) {
    if (l.name == name) return l;
  }
  ADD_FAILURE() << "no layer `" << name << "`";
  static const Layer none;
  return none;
}

DataType dtype_of(const Network& net, TensorId id) {
  return net.tensor(id).dtype;
}

// The layer producing `id`.
const Layer& producer(const Network& net, TensorId id) {
  for (const Layer& l : net.layers()) {
    if (std::find(l.outputs.begin(), l.outputs.end(), id) != l.outputs.end()) return l;
  }
  ADD_FAILURE() << "no producer of tensor `" << net.tensor(id).name << "`";
  static const Layer none;
  return none;
}

Weights random_weights(const Shape& shape, uint64_t seed) {
  const HostTensor t = random_tensor(DataType::kF32, shape, seed, -0.5, 0.5);
  return Weights::from_floats(shape, std::vector<float>(t.as<float>(), t.as<float>() + t.numel()));
}

// conv + bias + relu, a reshape whose shape tensor is computed from the relu's shape, softmax,
// a gather by an i64 index input, matmul with constant weights; plus an integer-only output.
Network conv_softmax_network() {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {2, 3, 8, 8});
  auto idx = net.add_input("idx", DataType::kI64, {3});
  ConvolutionParams conv;
  conv.strides = {1, 1};
  conv.padding_begin = conv.padding_end = {1, 1};
  conv.dilations = {1, 1};
  auto y = net.add("conv", conv, {x, net.add_constant("w", random_weights({4, 3, 3, 3}, 1))});
  y = net.add("bias", ElementwiseParams{BinaryOp::kAdd},
              {y, net.add_constant("b", random_weights({1, 4, 1, 1}, 2))});
  y = net.add("relu", ActivationParams{ActivationKind::kRelu}, {y});
  auto shape = net.add("shape", ShapeParams{}, {y});
  auto lead = net.add("lead", SliceParams{{0}, {0}, {2}, {1}}, {shape});
  auto rest = net.add_constant("minus_one", Weights::from_ints({1}, {-1}));
  auto target = net.add("target", ConcatParams{0}, {lead, rest});
  ShuffleParams reshape;
  reshape.has_reshape = true;
  y = net.add("reshape", reshape, {y, target});
  y = net.add("softmax", SoftmaxParams{-1}, {y});
  y = net.add("gather", GatherParams{GatherMode::kDefault, 2}, {y, idx});
  y = net.add("matmul", MatMulParams{}, {y, net.add_constant("w2", random_weights({3, 5}, 3))});
  net.mark_output(y, "y");
  net.mark_output(net.add("idx2", ElementwiseParams{BinaryOp::kAdd}, {idx, idx}), "idx2");
  return net;
}

std::vector<HostTensor> run(const Network& net, const std::vector<HostTensor>& inputs) {
  ExecutionContext ctx(std::make_shared<const Engine>(net));
  return ctx.run(inputs);
}

TEST(Precision, FloatLayersRunLowWithCastsAtTheBoundaries) {
  const Network before = conv_softmax_network();
  Network net = before;
  PrecisionReport report;
  ASSERT_TRUE(choose_precisions(net, {DataType::kF32, DataType::kF16}, runs_everything, &report));

  // Inputs keep their dtypes; the f32 one is cast right after, the index is used as it is.
  ASSERT_EQ(net.inputs().size(), 2u);
  const TensorId x = net.inputs()[0], idx = net.inputs()[1];
  EXPECT_EQ(dtype_of(net, x), DataType::kF32);
  EXPECT_EQ(dtype_of(net, idx), DataType::kI64);
  const Layer& conv = layer_named(net, "conv");
  ASSERT_EQ(conv.inputs.size(), 2u);
  for (TensorId in : conv.inputs) {
    EXPECT_EQ(dtype_of(net, in), DataType::kF16);
    const Layer& cast = producer(net, in);
    ASSERT_TRUE(std::holds_alternative<CastParams>(cast.params)) << cast.name;
    // The input's cast reads the input; the weight's cast reads the f32 constant (folded later).
    const TensorId src = cast.inputs.at(0);
    EXPECT_TRUE(src == x || std::holds_alternative<ConstantParams>(producer(net, src).params));
    EXPECT_EQ(dtype_of(net, src), DataType::kF32);
  }
  for (const char* name : {"conv", "bias", "relu", "reshape", "softmax", "gather", "matmul"}) {
    const Layer& l = layer_named(net, name);
    EXPECT_EQ(dtype_of(net, l.outputs.at(0)), DataType::kF16) << name;
  }
  // Shape tensors and indices are untouched, and the shape layer needs no cast of its input.
  const Layer& shape = layer_named(net, "shape");
  EXPECT_EQ(shape.inputs.at(0), layer_named(net, "relu").outputs.at(0));
  const Layer& reshape = layer_named(net, "reshape");
  EXPECT_EQ(dtype_of(net, reshape.inputs.at(1)), DataType::kI64);
  EXPECT_EQ(net.tensor(reshape.inputs.at(1)).values, (std::vector<int64_t>{2, 4, -1}));
  EXPECT_EQ(layer_named(net, "gather").inputs.at(1), idx);
  const Layer& idx2 = layer_named(net, "idx2");
  EXPECT_EQ(idx2.inputs, (std::vector<TensorId>{idx, idx}));

  // Outputs keep names and dtypes: y is cast back to f32, the integer output is as it was.
  ASSERT_EQ(net.outputs().size(), 2u);
  const TensorDesc& y = net.tensor(net.outputs()[0]);
  EXPECT_EQ(y.name, "y");
  EXPECT_EQ(y.dtype, DataType::kF32);
  EXPECT_EQ(y.shape, (Shape{2, 4, 5}));
  const Layer& back = producer(net, net.outputs()[0]);
  ASSERT_TRUE(std::holds_alternative<CastParams>(back.params));
  EXPECT_EQ(back.inputs.at(0), layer_named(net, "matmul").outputs.at(0));
  EXPECT_EQ(net.tensor(net.outputs()[1]).name, "idx2");
  EXPECT_EQ(dtype_of(net, net.outputs()[1]), DataType::kI64);
  EXPECT_EQ(net.outputs()[1], idx2.outputs.at(0));

  // Casts: x, w, b, w2 to f16 and y back to f32.
  EXPECT_EQ(report.casts_inserted, 5);
  EXPECT_EQ(report.low, DataType::kF16);
  EXPECT_EQ(report.count(DataType::kF16), 7);
  EXPECT_EQ(report.count(DataType::kF32), 0);
  EXPECT_EQ(report.summary(), "precision: 7 layers f16, 0 f32, 5 casts inserted");

  const auto in_x = random_tensor(DataType::kF32, {2, 3, 8, 8}, 4);
  const auto in_idx = testing::tensor_from(DataType::kI64, {3}, {0, 63, -2});
  const auto want = run(before, {in_x, in_idx});
  const auto got = run(net, {in_x, in_idx});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].dtype(), DataType::kF32);
  EXPECT_TRUE(testing::near(got[0], testing::to_doubles(want[0]), 1e-2, 1e-5));
  EXPECT_TRUE(testing::near(got[1], testing::to_doubles(want[1]), 0, 0));

  // The builder's later passes (a cpu build here: the same folding and fusion a cuda build runs
  // after this pass) fold the weights' casts into f16 constants.
  const Plan plan = build(net, BuilderConfig{});
  for (const Layer& l : plan.network.layers()) {
    if (const auto* c = std::get_if<ConstantParams>(&l.params)) {
      const DataType t = plan.network.weight(c->weight).dtype;
      EXPECT_TRUE(t == DataType::kF16 || t == DataType::kI64) << l.name << " " << dtype_name(t);
    }
    if (std::holds_alternative<CastParams>(l.params)) {
      EXPECT_FALSE(plan.network.constant_data(l.inputs.at(0))) << l.name << " casts a constant";
    }
  }
  const auto planned = run(plan.network, {in_x, in_idx});
  EXPECT_TRUE(testing::near(planned[0], testing::to_doubles(got[0]), 0, 0));
}

TEST(Precision, LayersTheTargetCannotRunLowStayF32) {
  Network net = conv_softmax_network();
  auto no_low_softmax = [](const Layer& l, const std::vector<DataType>& in,
                           const std::vector<DataType>&) -> std::string {
    if (std::holds_alternative<SoftmaxParams>(l.params) && in.at(0) != DataType::kF32) {
      return "no " + std::string(dtype_name(in[0])) + " softmax here";
    }
    return "";
  };
  PrecisionReport report;
  ASSERT_TRUE(choose_precisions(net, {DataType::kF32, DataType::kBF16}, no_low_softmax, &report));
  EXPECT_EQ(report.low, DataType::kBF16);
  const Layer& softmax = layer_named(net, "softmax");
  EXPECT_EQ(dtype_of(net, softmax.outputs.at(0)), DataType::kF32);
  // Its input is cast up from the low reshape, its output back down for the gather.
  const Layer& up = producer(net, softmax.inputs.at(0));
  ASSERT_TRUE(std::holds_alternative<CastParams>(up.params));
  EXPECT_EQ(dtype_of(net, up.inputs.at(0)), DataType::kBF16);
  const Layer& gather = layer_named(net, "gather");
  EXPECT_EQ(dtype_of(net, gather.inputs.at(0)), DataType::kBF16);
  EXPECT_EQ(producer(net, gather.inputs.at(0)).inputs.at(0), softmax.outputs.at(0));
  EXPECT_EQ(report.count(DataType::kBF16), 6);
  ASSERT_EQ(report.count(DataType::kF32), 1);
  EXPECT_NE(report.summary().find("1 f32 (softmax: no bf16 softmax here)"), std::string::npos)
      << report.summary();
  EXPECT_EQ(report.casts_inserted, 7);
}

TEST(Precision, CastsAndFillsToF32AreRetargetedAndSumsKeepF16Range) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {4, 6});
  auto i = net.add_input("i", DataType::kI64, {4, 6});
  auto xf = net.add("to_float", CastParams{DataType::kF32}, {i});
  auto y = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {x, xf});
  FillParams fill;
  fill.mode = FillMode::kRange;
  fill.shape = {6};
  fill.start = 0.5;
  fill.delta = 0.25;
  y = net.add("mul", ElementwiseParams{BinaryOp::kMul}, {y, net.add("range", fill, {})});
  auto s = net.add("sum", ReduceParams{ReduceOp::kSum, {1}, false}, {y});
  auto m = net.add("mean", ReduceParams{ReduceOp::kMean, {1}, false}, {y});
  net.mark_output(s, "s");
  net.mark_output(m, "m");
  const Network before = net;

  PrecisionReport report;
  ASSERT_TRUE(choose_precisions(net, {DataType::kF32, DataType::kF16}, runs_everything, &report));
  EXPECT_EQ(std::get<CastParams>(layer_named(net, "to_float").params).to, DataType::kF16);
  EXPECT_EQ(std::get<FillParams>(layer_named(net, "range").params).dtype, DataType::kF16);
  EXPECT_EQ(dtype_of(net, layer_named(net, "mul").outputs.at(0)), DataType::kF16);
  EXPECT_EQ(dtype_of(net, layer_named(net, "mean").outputs.at(0)), DataType::kF16);
  // A sum can leave f16's range: it reads the f16 product cast up and stays f32.
  const Layer& sum = layer_named(net, "sum");
  EXPECT_EQ(dtype_of(net, sum.outputs.at(0)), DataType::kF32);
  EXPECT_EQ(net.outputs().at(0), sum.outputs.at(0));  // already f32: no cast back
  EXPECT_NE(report.summary().find("sum: its result may overflow f16"), std::string::npos);
  // Under bf16 (f32's range) the sum runs low too.
  Network bf = before;
  PrecisionReport bf_report;
  ASSERT_TRUE(
      choose_precisions(bf, {DataType::kF32, DataType::kBF16}, runs_everything, &bf_report));
  EXPECT_EQ(bf_report.count(DataType::kF32), 0);
  EXPECT_EQ(dtype_of(bf, layer_named(bf, "sum").outputs.at(0)), DataType::kBF16);

  const auto in_x = random_tensor(DataType::kF32, {4, 6}, 5);
  const auto in_i = random_tensor(DataType::kI64, {4, 6}, 6, -2, 2);
  const auto want = run(before, {in_x, in_i});
  for (const Network* rewritten : {&net, &bf}) {
    const auto got = run(*rewritten, {in_x, in_i});
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(got[k].dtype(), DataType::kF32);
      EXPECT_EQ(rewritten->tensor(rewritten->outputs()[k]).name, k ? "m" : "s");
      // bf16 keeps 8 bits of mantissa to f16's 11: it needs looser bounds.
      const bool f16 = rewritten == &net;
      EXPECT_TRUE(
          testing::near(got[k], testing::to_doubles(want[k]), f16 ? 1e-2 : 3e-2, f16 ? 2e-2 : 1e-1))
          << k;
    }
  }
}

// A model that casts a 16-bit tensor up to f32 itself (an RMS norm's squares, which leave f16's
// range from 256 on) computes in f32 until it casts back down; the rest runs low as before.
TEST(Precision, TheModelsOwnCastsUpFromF16StayF32UntilItCastsBack) {
  Network net;
  auto x = net.add_input("x", DataType::kF16, {2, 8});
  auto up = net.add("up", CastParams{DataType::kF32}, {x});
  auto sq = net.add("square", ElementwiseParams{BinaryOp::kMul}, {up, up});
  auto ms = net.add("mean", ReduceParams{ReduceOp::kMean, {1}, true}, {sq});
  auto r = net.add("rsqrt", UnaryParams{UnaryOp::kRsqrt}, {ms});
  auto y = net.add("scale", ElementwiseParams{BinaryOp::kMul}, {up, r});
  auto down = net.add("down", CastParams{DataType::kF16}, {y});
  auto z = net.add("after", CastParams{DataType::kF32}, {down});  // back in the model's f32...
  z = net.add("exp", UnaryParams{UnaryOp::kExp}, {z});            // ...which it casts up again
  auto w = net.add_input("w", DataType::kF32, {2, 8});
  net.mark_output(net.add("plain", ElementwiseParams{BinaryOp::kAdd}, {w, w}), "plain");
  net.mark_output(z, "z");
  net.mark_output(down, "y");
  const Network before = net;

  PrecisionReport report;
  ASSERT_TRUE(choose_precisions(net, {DataType::kF32, DataType::kF16}, runs_everything, &report));
  for (const char* name : {"up", "square", "mean", "rsqrt", "scale", "after", "exp"}) {
    const Layer& l = layer_named(net, name);
    EXPECT_EQ(dtype_of(net, l.outputs.at(0)), DataType::kF32) << name;
  }
  EXPECT_EQ(dtype_of(net, layer_named(net, "plain").outputs.at(0)), DataType::kF16);
  EXPECT_NE(report.summary().find("square: the model computes it in f32"), std::string::npos)
      << report.summary();
  // Values of 300: squares of 90000, inf in f16; the model's f32 keeps them.
  HostTensor in = random_tensor(DataType::kF32, {2, 8}, 7, 250, 300);
  HostTensor in16(DataType::kF16, {2, 8});
  for (int64_t k = 0; k < 16; ++k) in16.as<uint16_t>()[k] = float_to_half(in.as<float>()[k]);
  const auto w_in = random_tensor(DataType::kF32, {2, 8}, 8);
  const auto want = run(before, {in16, w_in});
  const auto got = run(net, {in16, w_in});
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_TRUE(testing::near(got[k], testing::to_doubles(want[k]), 1e-2, 1e-2)) << k;
  }
}

TEST(Precision, DynamicShapesKeepTheirProfiles) {
  Network net;
  Profile p{{1, 16}, {4, 16}, {8, 16}};
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 16}, p);
  auto y = net.add("mm", MatMulParams{}, {x, net.add_constant("w", random_weights({16, 8}, 7))});
  y = net.add("softmax", SoftmaxParams{-1}, {y});
  net.mark_output(y, "probs");
  const Network before = net;
  ASSERT_TRUE(choose_precisions(net, {DataType::kF32, DataType::kF16}, runs_everything));
  const Profile& q = net.profile(net.inputs().at(0));
  EXPECT_EQ(q.min, p.min);
  EXPECT_EQ(q.max, p.max);
  EXPECT_EQ(net.tensor(net.outputs().at(0)).shape, (Shape{kDynamic, 8}));
  const auto in = random_tensor(DataType::kF32, {3, 16}, 8);
  EXPECT_TRUE(
      testing::near(run(net, {in})[0], testing::to_doubles(run(before, {in})[0]), 1e-2, 1e-3));
}

TEST(Precision, NothingChangesWithoutALowPrecisionOrOnTheCpu) {
  Network net = conv_softmax_network();
  const size_t layers = net.layers().size();
  PrecisionReport report;
  EXPECT_FALSE(choose_precisions(net, {DataType::kF32}, runs_everything, &report));
  EXPECT_EQ(report.low, DataType::kF32);
  EXPECT_EQ(net.layers().size(), layers);
  // Nothing runs low when the target says no to every layer.
  auto nothing = [](const Layer&, const std::vector<DataType>&, const std::vector<DataType>&) {
    return std::string("no");
  };
  EXPECT_FALSE(choose_precisions(net, {DataType::kF32, DataType::kF16}, nothing, &report));
  EXPECT_EQ(report.count(DataType::kF32), 7);
  EXPECT_EQ(net.layers().size(), layers);
  // A cpu build computes in f32 whatever is enabled.
  BuilderConfig config;
  config.enabled_precisions = {DataType::kF32, DataType::kF16};
  BuildReport build_report;
  Plan plan = build(net, config, &build_report);
  for (size_t t = 0; t < plan.network.num_tensors(); ++t) {
    EXPECT_NE(plan.network.tensor(static_cast<TensorId>(t)).dtype, DataType::kF16);
  }
  EXPECT_EQ(build_report.to_string().find("precision:"), std::string::npos);
}

TEST(Precision, CudaSupportComesFromTheKernelTable) {
  const PrecisionSupportFn cuda = cuda_precision_support();
  ConvolutionParams conv;
  conv.strides = {1, 1};
  conv.padding_begin = conv.padding_end = {0, 0};
  conv.dilations = {1, 1};
  const Layer l{"c", conv, {}, {}};
  const auto f16 = DataType::kF16;
  if (!cuda::built()) {
    EXPECT_NE(cuda(l, {f16, f16}, {f16}), "");
    return;
  }
  EXPECT_EQ(cuda(l, {f16, f16}, {f16}), "");
  EXPECT_NE(cuda(l, {f16, DataType::kF32}, {f16}).find("share a floating dtype"),
            std::string::npos);
  // The shape kernel writes only integers.
  EXPECT_NE(cuda({"s", ShapeParams{}, {}, {}}, {f16}, {f16}), "");
}

}  // namespace
}  // namespace kiln::engine
