// The channels-last layout pass and the channels-last convolution/pooling kernels: a network
// built channels-last gives the channels-first results, the transposes cancel between
// convolutions, and channels-last plans survive serialization.
#include "engine/builder.h"
#include "engine/plan.h"
#include "engine_testing.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;
const auto constant = testing::random_constant;

ConvolutionParams conv(int64_t pad, int64_t stride = 1, int64_t groups = 1, int64_t dil = 1) {
  ConvolutionParams p;
  p.strides = {stride, stride};
  p.padding_begin = p.padding_end = {pad, pad};
  p.dilations = {dil, dil};
  p.groups = groups;
  return p;
}

// conv+bias -> relu -> maxpool -> grouped dilated conv + residual -> relu -> per-channel scale
// -> concat with a depthwise conv -> avgpool (ceil, padded) -> outputs: the 4-d tensor and its
// spatial mean. `seed` picks the weights.
Network small_cnn(uint64_t seed = 0) {
  Network net;
  const TensorId x = net.add_input("x", DataType::kF32, {2, 6, 15, 13});
  ConvolutionParams c1 = conv(1);
  c1.post.has_bias = true;
  TensorId t =
      net.add("conv1", c1,
              {x, constant(net, "w1", {8, 6, 3, 3}, seed + 1), constant(net, "b1", {8}, seed + 2)});
  t = net.add("relu1", ActivationParams{ActivationKind::kRelu}, {t});
  PoolingParams mp;
  mp.kind = PoolingKind::kMax;
  mp.kernel = {3, 3};
  mp.strides = {2, 2};
  mp.padding_begin = mp.padding_end = {1, 1};
  const TensorId pooled = net.add("maxpool", mp, {t});
  t = net.add("conv2", conv(2, 1, 2, 2), {pooled, constant(net, "w2", {8, 4, 3, 3}, seed + 3)});
  t = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {t, pooled});
  t = net.add("relu2", ActivationParams{ActivationKind::kRelu}, {t});
  t = net.add("scale", ElementwiseParams{BinaryOp::kMul},
              {t, constant(net, "s", {8, 1, 1}, seed + 4)});
  const TensorId dw =
      net.add("depthwise", conv(1, 1, 8), {t, constant(net, "w3", {8, 1, 3, 3}, seed + 5)});
  t = net.add("cat", ConcatParams{1, false}, {t, dw});
  PoolingParams ap;
  ap.kind = PoolingKind::kAverage;
  ap.kernel = {2, 2};
  ap.strides = {2, 2};
  ap.padding_begin = ap.padding_end = {1, 1};
  ap.ceil_mode = true;
  ap.count_include_pad = false;
  t = net.add("avgpool", ap, {t});
  ReduceParams mean;
  mean.op = ReduceOp::kMean;
  mean.axes = {2, 3};
  const TensorId m = net.add("mean", mean, {t});
  net.mark_output(t, "features");
  net.mark_output(m, "pooled");
  return net;
}

std::vector<HostTensor> run(const Plan& plan, const std::vector<HostTensor>& in) {
  ExecutionContext ctx(std::make_shared<const Engine>(plan.network, plan.target));
  return ctx.run(in);
}

// Builds the one-input, one-output `net` channels-last and channels-first, checks that both give
// the same output on `x` (rtol 1e-5), and returns the channels-last build's report.
BuildReport expect_channels_last_matches(const Network& net, const HostTensor& x, double atol,
                                         Plan* channels_last = nullptr) {
  BuilderConfig first, last;
  first.conv_layout = ConvLayout::kChannelsFirst;
  last.conv_layout = ConvLayout::kChannelsLast;
  BuildReport report;
  const Plan b = build(net, last, &report);
  EXPECT_TRUE(testing::near(run(b, {x})[0], testing::to_doubles(run(build(net, first), {x})[0]),
                            1e-5, atol));
  if (channels_last) *channels_last = b;
  return report;
}

int channels_last_layers(const Plan& plan) {
  int n = 0;
  for (const Layer& l : plan.network.layers()) {
    if (const auto* c = std::get_if<ConvolutionParams>(&l.params)) n += c->channels_last;
    if (const auto* p = std::get_if<PoolingParams>(&l.params)) n += p->channels_last;
  }
  return n;
}

TEST(Layout, ChannelsLastNetworkMatchesChannelsFirst) {
  const Network net = small_cnn();
  BuilderConfig first, last;
  first.conv_layout = ConvLayout::kChannelsFirst;
  last.conv_layout = ConvLayout::kChannelsLast;
  BuildReport report;
  const Plan a = build(net, first);
  const Plan b = build(net, last, &report);
  EXPECT_EQ(channels_last_layers(a), 0);
  // 3 convolutions and 2 pools; relu/add fuse into the convolutions.
  EXPECT_EQ(channels_last_layers(b), 5) << report.to_string();
  EXPECT_EQ(report.layout.convolutions, 3);
  // The input goes channels-last once; the 4-d output comes back once; the mean (over H, W)
  // needs no transpose: [N, C] in both layouts.
  EXPECT_EQ(report.layout.transposes, 2) << report.to_string();
  EXPECT_NE(report.to_string().find("layout: 3 convolutions channels-last"), std::string::npos)
      << report.to_string();
  const std::vector<HostTensor> in = {random_tensor(DataType::kF32, {2, 6, 15, 13}, 9)};
  const auto want = run(a, in);
  const auto got = run(b, in);
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i].shape(), want[i].shape());
    EXPECT_TRUE(testing::near(got[i], testing::to_doubles(want[i]), 1e-5, 1e-6)) << "output " << i;
  }
}

// 3-d convolutions (video models: [N, C, T, H, W]) go channels-last as 2-d ones do: conv3d + bias
// -> relu -> maxpool3d -> conv3d + residual -> relu -> per-channel scale -> global average pool
// -> [N, C]; one transpose in, none out (the pooled [N, C, 1, 1, 1] is the same in both layouts
// up to a view), values as channels-first.
TEST(Layout, ThreeDimensionalConvolutionsGoChannelsLast) {
  Network net;
  const TensorId x = net.add_input("x", DataType::kF32, {2, 3, 4, 9, 8});
  ConvolutionParams c1;
  c1.strides = {1, 2, 2}, c1.padding_begin = c1.padding_end = {1, 3, 3}, c1.dilations = {1, 1, 1};
  c1.post.has_bias = true;
  TensorId t = net.add("conv1", c1,
                       {x, constant(net, "w1", {8, 3, 3, 7, 7}, 1), constant(net, "b1", {8}, 2)});
  t = net.add("relu1", ActivationParams{ActivationKind::kRelu}, {t});
  PoolingParams mp;
  mp.kind = PoolingKind::kMax;
  mp.kernel = {1, 3, 3}, mp.strides = {1, 2, 2};
  mp.padding_begin = mp.padding_end = {0, 1, 1};
  const TensorId pooled = net.add("maxpool", mp, {t});
  ConvolutionParams c2;
  c2.strides = {1, 1, 1}, c2.padding_begin = c2.padding_end = {1, 1, 1}, c2.dilations = {1, 1, 1};
  t = net.add("conv2", c2, {pooled, constant(net, "w2", {8, 8, 3, 3, 3}, 3)});
  t = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {t, pooled});
  t = net.add("relu2", ActivationParams{ActivationKind::kRelu}, {t});
  t = net.add("scale", ElementwiseParams{BinaryOp::kMul}, {t, constant(net, "s", {8, 1, 1, 1}, 4)});
  PoolingParams gp;
  gp.kind = PoolingKind::kAverage;
  gp.adaptive = true;
  gp.output_size = {1, 1, 1};
  t = net.add("gap", gp, {t});
  ShuffleParams flat;
  flat.has_reshape = true;
  flat.reshape = {2, 8};
  net.mark_output(net.add("flat", flat, {t}), "y");
  const BuildReport report =
      expect_channels_last_matches(net, random_tensor(DataType::kF32, {2, 3, 4, 9, 8}, 5), 1e-6);
  EXPECT_EQ(report.layout.convolutions, 2) << report.to_string();
  EXPECT_EQ(report.layout.transposes, 1) << report.to_string();
}

// A refittable plan is channels-last too: a refit transposes the new weights again, and the plan
// then answers as a build of the new weights does, bit for bit (the same kernels).
TEST(Layout, CpuPlansAreChannelsLastByDefaultRefittableOnesToo) {
  const Network net = small_cnn();
  EXPECT_EQ(channels_last_layers(build(net, BuilderConfig{})), 5);
  BuilderConfig first;
  first.conv_layout = ConvLayout::kChannelsFirst;
  EXPECT_EQ(channels_last_layers(build(net, first)), 0);
  BuilderConfig refittable;
  refittable.refittable = true;
  Plan plan = build(net, refittable);
  EXPECT_EQ(channels_last_layers(plan), 5);
  const Network tuned = small_cnn(/*seed=*/100);
  const std::vector<HostTensor> in = {random_tensor(DataType::kF32, {2, 6, 15, 13}, 9)};
  const auto before = run(plan, in);
  refit(plan, tuned, refittable, "small_cnn");
  const auto got = run(plan, in), want = run(build(tuned, refittable), in);
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(testing::near(got[i], testing::to_doubles(want[i]), 0, 0)) << "output " << i;
    EXPECT_FALSE(testing::near(got[i], testing::to_doubles(before[i]), 1e-3, 1e-3)) << i;
  }
}

// A refit whose passes would rewrite the network otherwise (here: other build settings) and one
// of another network are refused, naming the engine, and leave the plan as it was.
TEST(Layout, RefitsThatWouldRewriteOtherwiseAreRefused) {
  BuilderConfig last;
  last.refittable = true;
  Plan plan = build(small_cnn(), last);
  const std::vector<uint8_t> before = serialize_plan(plan);
  BuilderConfig first = last;
  first.conv_layout = ConvLayout::kChannelsFirst;
  try {
    refit(plan, small_cnn(/*seed=*/100), first, "engine `cnn`");
    FAIL() << "refit with other settings succeeded";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("engine `cnn`: the builder rewrites the network"),
              std::string::npos)
        << e.what();
  }
  Network other = small_cnn(/*seed=*/100);
  other.add_weight("w1",
                   Weights::from_floats({8, 6, 5, 5}, std::vector<float>(8 * 6 * 5 * 5, 0.5f)));
  EXPECT_THROW(refit(plan, other, last, "engine `cnn`"), InvalidArgument);
  EXPECT_EQ(serialize_plan(plan), before);
}

TEST(Layout, ChannelsLastPlansRoundTrip) {
  BuilderConfig last;
  last.conv_layout = ConvLayout::kChannelsLast;
  const Plan plan = build(small_cnn(), last);
  const auto bytes = serialize_plan(plan);
  const Plan loaded = deserialize_plan(bytes.data(), bytes.size());
  EXPECT_EQ(channels_last_layers(loaded), 5);
  const std::vector<HostTensor> in = {random_tensor(DataType::kF32, {2, 6, 15, 13}, 3)};
  const auto want = run(plan, in);
  const auto got = run(loaded, in);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(testing::near(got[i], testing::to_doubles(want[i]), 0, 0)) << "output " << i;
  }
  // A plan of the format before channels_last existed is refused, asking for a rebuild.
  auto old = bytes;
  old[8] = 1;
  try {
    deserialize_plan(old.data(), old.size());
    FAIL() << "a version-1 plan loaded";
  } catch (const CorruptInput& e) {
    EXPECT_NE(std::string(e.what()).find("format version 1 is older"), std::string::npos)
        << e.what();
  }
}

// Dynamic batch: the transposes and channels-last layers follow the run-time shape.
TEST(Layout, DynamicBatch) {
  Network net;
  const TensorId x = net.add_input("x", DataType::kF32, {kDynamic, 4, 9, 9},
                                   Profile{{1, 4, 9, 9}, {2, 4, 9, 9}, {5, 4, 9, 9}});
  ConvolutionParams c = conv(1, 2);
  TensorId t = net.add("conv", c, {x, constant(net, "w", {6, 4, 3, 3}, 7)});
  t = net.add("sig", ActivationParams{ActivationKind::kSigmoid}, {t});
  net.mark_output(t, "y");
  BuilderConfig first, last;
  first.conv_layout = ConvLayout::kChannelsFirst;
  last.conv_layout = ConvLayout::kChannelsLast;
  const Plan a = build(net, first), b = build(net, last);
  EXPECT_EQ(channels_last_layers(b), 1);
  for (int64_t n : {1, 5}) {
    const std::vector<HostTensor> in = {random_tensor(DataType::kF32, {n, 4, 9, 9}, 20 + n)};
    const auto want = run(a, in);
    const auto got = run(b, in);
    EXPECT_EQ(got[0].shape(), (Shape{n, 6, 5, 5}));
    EXPECT_TRUE(testing::near(got[0], testing::to_doubles(want[0]), 1e-5, 1e-6));
  }
}

// A densenet block in a low-precision build: concat -> per-channel scale and shift -> ReLU ->
// convolution, where the scale and shift reach the layout pass as casts of f32 constants (the
// precision pass's, folded only after layout). They are permuted with the data, so the only
// transposes left are those of the network's input and output.
TEST(Layout, ValuesComputedFromConstantsFollowTheData) {
  Network net;
  const TensorId x = net.add_input("x", DataType::kF32, {2, 4, 6, 6});
  const TensorId ca = net.add("conv_a", conv(1), {x, constant(net, "wa", {4, 4, 3, 3}, 40)});
  const TensorId cb = net.add("conv_b", conv(0), {x, constant(net, "wb", {4, 4, 1, 1}, 41)});
  TensorId t = net.add("cat", ConcatParams{1, false}, {ca, cb});
  const TensorId scale =
      net.add("scale_cast", CastParams{DataType::kF32}, {constant(net, "s", {8, 1, 1}, 42)});
  const TensorId shift =
      net.add("shift_sum", ElementwiseParams{BinaryOp::kAdd},
              {constant(net, "h1", {8, 1, 1}, 43), constant(net, "h2", {1}, 44)});
  t = net.add("mul", ElementwiseParams{BinaryOp::kMul}, {t, scale});
  t = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {t, shift});
  t = net.add("relu", ActivationParams{ActivationKind::kRelu}, {t});
  t = net.add("conv_c", conv(1), {t, constant(net, "wc", {4, 8, 3, 3}, 45)});
  net.mark_output(t, "y");
  const BuildReport report =
      expect_channels_last_matches(net, random_tensor(DataType::kF32, {2, 4, 6, 6}, 46), 1e-6);
  // x into channels-last (once for each convolution reading it) and y back.
  EXPECT_EQ(report.layout.transposes, 3) << report.to_string();
  EXPECT_EQ(report.layout.layers_moved, 4) << report.to_string();  // cat, mul, add, relu
}

// Layers the pass cannot move (here a softmax over a reshaped tensor) keep their inputs
// channels-first: the transpose stays in front of them.
TEST(Layout, UnmovableLayersReadChannelsFirstData) {
  Network net;
  const TensorId x = net.add_input("x", DataType::kF32, {2, 3, 8, 8});
  TensorId t = net.add("conv", conv(0), {x, constant(net, "w", {4, 3, 1, 1}, 8)});
  ShuffleParams flat;
  flat.has_reshape = true;
  flat.reshape = {2, -1};
  t = net.add("flatten", flat, {t});
  t = net.add("softmax", SoftmaxParams{-1, false}, {t});
  net.mark_output(t, "y");
  const BuildReport report =
      expect_channels_last_matches(net, random_tensor(DataType::kF32, {2, 3, 8, 8}, 30), 1e-7);
  EXPECT_EQ(report.layout.transposes, 2) << report.to_string();
}

// shufflenet's unit: a channel shuffle (reshape to groups, swap, reshape back) and a split along
// the channels, one half through a convolution, concatenated with the other. The shuffle and the
// slices follow the channels-last data: the only transposes are the input's and the output's. The
// channel shuffle, one transpose of the channels-last tensor, and the slices of it are then two
// gathers of channels on the CPU (gather_chains' element gathers), one per half.
TEST(Layout, ChannelShufflesAndSlicesFollowTheData) {
  Network net;
  const TensorId x = net.add_input("x", DataType::kF32, {2, 4, 6, 6});
  TensorId t = net.add("conv1", conv(0), {x, constant(net, "w1", {8, 4, 1, 1}, 40)});
  ShuffleParams split, swap, merge;
  split.has_reshape = merge.has_reshape = true;
  split.reshape = {2, 2, 4, 6, 6};
  swap.first_perm = {0, 2, 1, 3, 4};
  merge.reshape = {2, 8, 6, 6};
  t = net.add("merge", merge, {net.add("swap", swap, {net.add("split", split, {t})})});
  SliceParams first{{1}, {0}, {4}, {1}}, second{{1}, {4}, {8}, {1}};
  const TensorId a = net.add("first", first, {t});
  const TensorId b = net.add(
      "conv2", conv(1), {net.add("second", second, {t}), constant(net, "w2", {4, 4, 3, 3}, 41)});
  net.mark_output(net.add("cat", ConcatParams{1, false}, {a, b}), "y");
  Plan plan;
  const BuildReport report = expect_channels_last_matches(
      net, random_tensor(DataType::kF32, {2, 4, 6, 6}, 42), 1e-6, &plan);
  EXPECT_EQ(report.layout.transposes, 2) << report.to_string();
  // into channels-last and back; the shuffle and the two slices as two gathers
  EXPECT_EQ(count_moving_shuffles(plan.network.layers()), 2);
  EXPECT_EQ(testing::count_layers<GatherParams>(plan.network), 2);
  EXPECT_EQ(testing::count_layers<SliceParams>(plan.network), 0);
  EXPECT_EQ(report.changes("gather_chains"), 2) << report.to_string();
}

// Tokens [N, H * W, C] made an image [N, C, H, W] (a transpose and a reshape, as maxvit's window
// merge and ViT-style models write it), scaled per channel, through a convolution and added back:
// the image is written channels-last instead, where the tokens already are (a view, no copy), so
// the only transpose left is the output's.
TEST(Layout, ShufflesWriteChannelsLastWhereThatSavesCopies) {
  Network net;
  const TensorId x = net.add_input("x", DataType::kF32, {2, 36, 8});
  ShuffleParams transpose, image;
  transpose.first_perm = {0, 2, 1};
  image.has_reshape = true;
  image.reshape = {2, 8, 6, 6};
  const TensorId t = net.add("image", image, {net.add("transpose", transpose, {x})});
  const TensorId scaled =
      net.add("scale", ElementwiseParams{BinaryOp::kMul}, {t, constant(net, "s", {8, 1, 1}, 46)});
  const TensorId c = net.add("conv", conv(0), {scaled, constant(net, "w", {8, 8, 1, 1}, 47)});
  net.mark_output(net.add("add", ElementwiseParams{BinaryOp::kAdd}, {t, c}), "y");
  Plan plan;
  const BuildReport report =
      expect_channels_last_matches(net, random_tensor(DataType::kF32, {2, 36, 8}, 48), 1e-6, &plan);
  EXPECT_EQ(report.layout.transposes, 1) << report.to_string();
  EXPECT_EQ(count_moving_shuffles(plan.network.layers()), 1);  // the output back to NCHW
}

// A slice of channels that only an output reads stays channels-first, where at batch 1 it is a
// view (channels-last it would be a copy, and the transpose back would follow it anyway).
TEST(Layout, SlicesReadOnlyByOutputsStayChannelsFirst) {
  Network net;
  const TensorId x = net.add_input("x", DataType::kF32, {1, 4, 6, 6});
  const TensorId t = net.add("conv", conv(0), {x, constant(net, "w", {8, 4, 1, 1}, 44)});
  net.mark_output(net.add("half", SliceParams{{1}, {0}, {4}, {1}}, {t}), "y");
  Plan plan;
  const BuildReport report = expect_channels_last_matches(
      net, random_tensor(DataType::kF32, {1, 4, 6, 6}, 45), 1e-6, &plan);
  EXPECT_EQ(report.layout.transposes, 2) << report.to_string();
  for (const Layer& l : plan.network.layers()) {
    if (const auto* p = std::get_if<SliceParams>(&l.params)) {
      EXPECT_EQ(p->axes, (std::vector<int64_t>{1}));
    }
  }
}

// Channels-last parameters a plan or caller may hold that no layer can run are errors naming it.
TEST(Layout, ImpossibleChannelsLastLayersAreRejected) {
  Network net;
  const TensorId x = net.add_input("x", DataType::kF32, {1, 5, 5, 4});
  ConvolutionParams deconv = conv(0);
  deconv.transposed = true;
  deconv.channels_last = true;
  try {
    net.add("deconv", deconv, {x, constant(net, "w", {4, 2, 3, 3}, 1)});
    FAIL() << "a channels-last transposed convolution was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("`deconv`"), std::string::npos) << e.what();
  }
  PoolingParams pool;
  pool.kernel = {2, 2, 2};  // 3 spatial dims on a 4-d tensor
  pool.channels_last = true;
  try {
    net.add("pool", pool, {x});
    FAIL() << "a channels-last pooling of the wrong rank was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("[N, spatial..., C]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::engine
