// Channels-last on the CUDA backend: cuDNN's NHWC convolutions (with fused bias + ReLU and
// residual + ReLU in f16), channels-last pooling, and the layout pass's transposes, against the
// CPU backend.
#include <cmath>
#include <optional>
#include <string>

#include "cuda_testing.h"
#include "engine/cuda/kernels.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;
const auto constant = testing::random_constant;

ConvolutionParams conv(int64_t pad, int64_t stride = 1, int64_t groups = 1, bool bias = true) {
  ConvolutionParams p;
  p.strides = {stride, stride};
  p.padding_begin = p.padding_end = {pad, pad};
  p.groups = groups;
  p.post.has_bias = bias;
  return p;
}

// A residual block as resnets have them, a depthwise stage as mobilenets do, an asymmetric pad,
// pooling and a classifier.
std::vector<TensorId> cnn(Network& net, const std::vector<TensorId>& in) {
  TensorId t =
      net.add("stem", conv(3, 2),
              {in[0], constant(net, "w0", {16, 3, 7, 7}, 1), constant(net, "b0", {16}, 2)});
  t = net.add("relu0", ActivationParams{ActivationKind::kRelu}, {t});
  PoolingParams mp;
  mp.kind = PoolingKind::kMax;
  mp.kernel = {3, 3};
  mp.strides = {2, 2};
  mp.padding_begin = mp.padding_end = {1, 1};
  const TensorId block_in = net.add("maxpool", mp, {t});
  t = net.add("c1", conv(1),
              {block_in, constant(net, "w1", {16, 16, 3, 3}, 3), constant(net, "b1", {16}, 4)});
  t = net.add("relu1", ActivationParams{ActivationKind::kRelu}, {t});
  t = net.add("c2", conv(1),
              {t, constant(net, "w2", {16, 16, 3, 3}, 5), constant(net, "b2", {16}, 6)});
  t = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {t, block_in});
  t = net.add("relu2", ActivationParams{ActivationKind::kRelu}, {t});
  t = net.add("dw", conv(1, 1, 16),
              {t, constant(net, "w3", {16, 1, 3, 3}, 7), constant(net, "b3", {16}, 8)});
  t = net.add("clamp", ActivationParams{ActivationKind::kClamp, 0, 6}, {t});
  ConvolutionParams dw2 = conv(2, 2, 16, false);  // strided, dilated, our own NHWC kernel
  dw2.dilations = {2, 2};
  t = net.add("dw2", dw2, {t, constant(net, "w5", {16, 1, 3, 3}, 12)});
  ConvolutionParams asym = conv(0, 2, 1, false);
  asym.padding_begin = {0, 1};
  asym.padding_end = {1, 2};
  t = net.add("asym", asym, {t, constant(net, "w4", {24, 16, 3, 3}, 9)});
  PoolingParams gap;
  gap.kind = PoolingKind::kAverage;
  gap.adaptive = true;
  gap.output_size = {1, 1};
  t = net.add("gap", gap, {t});
  ShuffleParams flat;
  flat.has_reshape = true;
  flat.reshape = {0, -1};
  t = net.add("flatten", flat, {t});
  MatMulParams fc;
  fc.transpose_b = true;
  t = net.add("fc", fc, {t, constant(net, "wfc", {10, 24}, 10)});
  return {t};
}

int channels_last_convolutions(const Plan& plan) {
  int n = 0;
  for (const Layer& l : plan.network.layers()) {
    if (const auto* c = std::get_if<ConvolutionParams>(&l.params)) n += c->channels_last;
  }
  return n;
}

// A cuda build computing in `low` (f32 is always enabled) with its convolutions laid out as asked.
BuilderConfig computing_in(DataType low, ConvLayout layout = ConvLayout::kChannelsLast) {
  BuilderConfig config;
  config.enabled_precisions = {DataType::kF32};
  if (low != DataType::kF32) config.enabled_precisions.push_back(low);
  config.conv_layout = layout;
  return config;
}

// Tolerance of a network computing in `low` against the CPU's f32.
double tolerance_in(DataType low) {
  return low == DataType::kF32 ? 1e-4 : (low == DataType::kF16 ? 2e-2 : 6e-2);
}

// One channels-last convolution whose results match the CPU's within `low`'s precision.
void expect_one_channels_last_match(const cuda_testing::BothResults& r, DataType low) {
  EXPECT_EQ(channels_last_convolutions(r.gpu_plan), 1);
  const double tol = tolerance_in(low);
  cuda_testing::expect_match(r, tol, tol);
}

TEST(CudaLayout, ChannelsLastCnnMatchesCpuInF32AndF16) {
  KILN_REQUIRE_GPU();
  const std::vector<HostTensor> in = {random_tensor(DataType::kF32, {3, 3, 40, 36}, 11)};
  struct Case {
    const char* name;
    DataType low;
    ConvLayout layout;
    int channels_last;
    double tolerance;
  };
  const Case cases[] = {
      {"f32, channels-last forced", DataType::kF32, ConvLayout::kChannelsLast, 6, 1e-4},
      {"f16, channels-last by default", DataType::kF16, ConvLayout::kAuto, 6, 2e-2},
      {"f16, channels-first", DataType::kF16, ConvLayout::kChannelsFirst, 0, 2e-2}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = cuda_testing::run_both(in, cnn, computing_in(c.low, c.layout));
    EXPECT_EQ(channels_last_convolutions(r.gpu_plan), c.channels_last);
    cuda_testing::expect_match(r, c.tolerance, c.tolerance);
  }
}

// The depthwise kernels: 16-byte channel groups (C = 40 in f16, C = 36 in f32; C = 264 takes
// several channel tiles), strips of 4-channel words where 16-byte ones do not fit (C = 36 in f16)
// and of 2-channel words (C = 58 as shufflenet_v2's, C = 6), the per-element fallback (C = 7),
// 3x3, 5x5 and 7x7, rows whose width is no multiple of the strip, maps of several spatial tiles,
// strided, with bias, clamp + residual or SiLU.
TEST(CudaLayout, DepthwiseKernelsMatchCpu) {
  KILN_REQUIRE_GPU();
  // 15x13 outputs take the strip kernel (tiles want 14 columns or more); 37x35 and 29x30 the
  // tiled one for 5x5, 7x7 and strided filters, three and two 8x16 tiles across.
  struct Map {
    int64_t c, h, w;
  };
  for (const Map& m :
       {Map{40, 15, 13}, Map{36, 15, 13}, Map{6, 15, 13}, Map{58, 15, 13}, Map{7, 15, 13},
        Map{264, 15, 13}, Map{40, 37, 35}, Map{264, 29, 30}, Map{58, 29, 30}}) {
    const int64_t c = m.c, hw[2] = {m.h, m.w};
    for (int64_t k : {3, 5, 7}) {
      for (int64_t stride : {1, 2}) {
        for (DataType low : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
          SCOPED_TRACE("C=" + std::to_string(c) + " " + std::to_string(hw[0]) + "x" +
                       std::to_string(hw[1]) + " k=" + std::to_string(k) + " stride " +
                       std::to_string(stride) + " " + dtype_name(low));
          auto r = cuda_testing::run_both(
              {random_tensor(DataType::kF32, {2, c, hw[0], hw[1]}, 20)},
              [&](Network& net, const std::vector<TensorId>& in) {
                TensorId t = net.add(
                    "dw", conv(k / 2, stride, c),
                    {in[0], constant(net, "w", {c, 1, k, k}, 21), constant(net, "b", {c}, 22)});
                if (stride == 2) {
                  t = net.add("silu", ActivationParams{ActivationKind::kSilu}, {t});
                  return std::vector<TensorId>{t};
                }
                t = net.add("clamp", ActivationParams{ActivationKind::kClamp, 0, 6}, {t});
                t = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {t, in[0]});
                t = net.add("relu", ActivationParams{ActivationKind::kRelu}, {t});
                return std::vector<TensorId>{t};
              },
              computing_in(low));
          expect_one_channels_last_match(r, low);
        }
      }
    }
  }
}

// Which grouped convolutions grouped.cu takes (a host-side check, no GPU needed): under auto the
// widths cuDNN is slow at (24, 48, 24 -> 48), not its power-of-two ones (8, 16, 32: resnext's),
// which =kernel sends too; f32 on TF32 up to 48 channels a group (not 64, nor f32 without TF32);
// never 12-wide or 72-wide groups, depthwise, channels-first, misaligned data, or anything under
// =cudnn.
TEST(CudaLayout, GroupedKernelTakesTheWidthsCudnnIsSlowAt) {
  using cuda::GroupedPath;
  alignas(16) static char buffer[64];
  const auto check = [&](int64_t c, int64_t cout, int64_t groups, GroupedPath path,
                         DataType dtype = DataType::kF16, bool channels_last = true,
                         size_t offset = 0, bool tf32 = false) {
    ConvolutionParams p = conv(1, 1, groups);
    p.channels_last = channels_last;
    p.tf32 = tf32;
    void* data = buffer + offset;
    const cuda::TensorView x{dtype, {2, 14, 14, c}, data}, w{dtype, {cout, 3, 3, c / groups}, data},
        out{dtype, {2, 14, 14, cout}, data}, bias{dtype, {cout}, data};
    return cuda::grouped_nhwc_applies(p, x, w, &bias, nullptr, out, path);
  };
  EXPECT_TRUE(check(96, 96, 2, GroupedPath::kAuto));    // regnet_x: 48 a group
  EXPECT_TRUE(check(120, 120, 5, GroupedPath::kAuto));  // regnet_y: 24
  EXPECT_TRUE(check(48, 96, 2, GroupedPath::kAuto));    // 24 -> 48
  for (int64_t width : {8, 16, 32, 64}) {
    SCOPED_TRACE(width);
    EXPECT_FALSE(check(32 * width, 32 * width, 32, GroupedPath::kAuto));
    EXPECT_TRUE(check(32 * width, 32 * width, 32, GroupedPath::kKernel));
    EXPECT_FALSE(check(32 * width, 32 * width, 32, GroupedPath::kCudnn));
  }
  EXPECT_FALSE(check(96, 96, 2, GroupedPath::kCudnn));
  EXPECT_FALSE(check(48, 48, 4, GroupedPath::kKernel));                  // 12 a group
  EXPECT_FALSE(check(144, 144, 2, GroupedPath::kKernel));                // 72 a group
  EXPECT_FALSE(check(96, 96, 2, GroupedPath::kKernel, DataType::kF32));  // no TF32
  EXPECT_TRUE(check(96, 96, 2, GroupedPath::kAuto, DataType::kF32, true, 0, true));
  EXPECT_TRUE(check(120, 120, 5, GroupedPath::kAuto, DataType::kF32, true, 0, true));
  EXPECT_TRUE(check(256, 256, 32, GroupedPath::kKernel, DataType::kF32, true, 0, true));
  EXPECT_FALSE(check(256, 256, 32, GroupedPath::kAuto, DataType::kF32, true, 0, true));
  EXPECT_FALSE(check(128, 128, 2, GroupedPath::kKernel, DataType::kF32, true, 0, true));  // 64
  EXPECT_TRUE(check(128, 128, 2, GroupedPath::kKernel));  // 64 a group in f16
  EXPECT_TRUE(check(96, 96, 2, GroupedPath::kKernel, DataType::kBF16));
  EXPECT_FALSE(check(96, 96, 2, GroupedPath::kKernel, DataType::kF16, false));
  EXPECT_FALSE(check(96, 96, 2, GroupedPath::kKernel, DataType::kF16, true, 8));
  EXPECT_FALSE(check(96, 96, 96, GroupedPath::kKernel));  // depthwise
}

// Grouped convolutions on each path (cuda_grouped=auto: grouped.cu in f16/bf16 where groups are
// 8-64 channels a side and not powers of two, and in f32 (TF32, the default) up to 48, cuDNN
// otherwise; =kernel: grouped.cu wherever it can; =cudnn): regnet's 24 and 48 channels a group,
// 40, 56, 24 -> 48; tiles of several groups (8 of 8, 4 of 16, 2 of 24; in f32 6 of 8) with a last
// tile of fewer, 16 -> 32, 32 -> 16, 64 (cuDNN's in f32), a width the kernel does not take (12);
// 3x3 stride 1 and 2, 5x5 dilated, 1x1, an asymmetric pad; maps whose pixel count is no multiple
// of the kernel's 64-pixel tile; batch 2 (fewer blocks than multiprocessors: three taps at a
// time, the last step of the 5x5's 25 with one), 32 (one tap at a time) and 96 (18,720 pixels:
// enough blocks that f32 takes 128 pixels a block); bias + ReLU, residual + ReLU, or nothing
// fused.
TEST(CudaLayout, GroupedConvolutionsMatchCpu) {
  KILN_REQUIRE_GPU();
  struct Case {
    int64_t c, cout, groups, k, stride, dilation;
    bool asymmetric;
    int post;  // 0: bias + ReLU, 1: bias, then + input and ReLU, 2: nothing fused
    int64_t batch = 2;
  };
  const Case cases[] = {
      {96, 96, 2, 3, 1, 1, false, 1},     {96, 96, 2, 3, 2, 1, false, 0},
      {48, 48, 2, 3, 1, 1, false, 0},     {120, 120, 5, 3, 2, 1, false, 2},
      {64, 128, 4, 3, 1, 1, false, 0},    {64, 64, 8, 5, 1, 2, false, 1},
      {128, 128, 2, 3, 1, 1, true, 2},    {64, 64, 4, 1, 1, 1, false, 0},
      {48, 48, 4, 3, 1, 1, false, 0},     {96, 96, 12, 3, 1, 1, false, 1},
      {80, 80, 5, 3, 2, 1, false, 0},     {128, 64, 4, 3, 1, 1, false, 2},
      {80, 80, 2, 3, 1, 1, false, 1},     {112, 112, 2, 3, 2, 1, false, 0},
      {48, 96, 2, 3, 1, 1, false, 2},     {96, 96, 2, 3, 1, 1, false, 1, 96},
      {96, 96, 2, 3, 1, 1, false, 0, 32},
  };
  for (const Case& k : cases) {
    for (DataType low : {DataType::kF16, DataType::kBF16, DataType::kF32}) {
      for (const char* grouped :
           {"cuda_grouped=auto", "cuda_grouped=kernel", "cuda_grouped=cudnn"}) {
        SCOPED_TRACE(std::to_string(k.c) + "->" + std::to_string(k.cout) + " groups " +
                     std::to_string(k.groups) + " k=" + std::to_string(k.k) + " stride " +
                     std::to_string(k.stride) + " batch " + std::to_string(k.batch) + " " +
                     dtype_name(low) + " " + grouped);
        BuilderConfig config = computing_in(low);
        apply_switch(config, grouped);
        auto r = cuda_testing::run_both(
            {random_tensor(DataType::kF32, {k.batch, k.c, 15, 13}, 30)},
            [&](Network& net, const std::vector<TensorId>& in) {
              ConvolutionParams p = conv(k.k / 2 * k.dilation, k.stride, k.groups, k.post != 2);
              p.dilations = {k.dilation, k.dilation};
              if (k.asymmetric) p.padding_end = {2, 0};
              std::vector<TensorId> conv_in = {
                  in[0], constant(net, "w", {k.cout, k.c / k.groups, k.k, k.k}, 31)};
              if (p.post.has_bias) conv_in.push_back(constant(net, "b", {k.cout}, 32));
              TensorId t = net.add("grouped", p, conv_in);
              if (k.post == 2) return std::vector<TensorId>{t};
              if (k.post == 1) t = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {t, in[0]});
              t = net.add("relu", ActivationParams{ActivationKind::kRelu}, {t});
              return std::vector<TensorId>{t};
            },
            config);
        EXPECT_EQ(channels_last_convolutions(r.gpu_plan), 1);
        // Sums of up to 64 x 25 products in f16/bf16, or of TF32 products (f16's 10-bit mantissa).
        const double tol = low == DataType::kBF16 ? 1.5e-1 : 3e-2;
        cuda_testing::expect_match(r, tol, tol);
      }
    }
  }
}

// Patch embeddings (kernel == stride, no padding) run as a patch gather plus one GEMM: square and
// non-square patches, a plane that the patches do not tile exactly, bias + GELU, and a residual.
TEST(CudaLayout, PatchConvolutionsAsGemmMatchCpu) {
  KILN_REQUIRE_GPU();
  struct Case {
    int64_t kh, kw, h, w;
    bool residual;
  };
  for (const Case& c :
       {Case{4, 4, 16, 20, false}, Case{2, 3, 10, 12, true}, Case{4, 4, 18, 19, false}}) {
    for (DataType low : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      SCOPED_TRACE(std::to_string(c.kh) + "x" + std::to_string(c.kw) + " on " +
                   std::to_string(c.h) + "x" + std::to_string(c.w) + " " + dtype_name(low));
      auto r = cuda_testing::run_both(
          {random_tensor(DataType::kF32, {2, 3, c.h, c.w}, 30),
           random_tensor(DataType::kF32, {2, 24, c.h / c.kh, c.w / c.kw}, 31)},
          [&](Network& net, const std::vector<TensorId>& in) {
            ConvolutionParams p;
            p.strides = {c.kh, c.kw};
            p.post.has_bias = true;
            TensorId t = net.add(
                "patch", p,
                {in[0], constant(net, "w", {24, 3, c.kh, c.kw}, 32), constant(net, "b", {24}, 33)});
            if (c.residual) {
              t = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {t, in[1]});
            } else {
              t = net.add("gelu", ActivationParams{ActivationKind::kGelu}, {t});
              t = net.add("keep", ElementwiseParams{BinaryOp::kAdd}, {t, in[1]});
            }
            return std::vector<TensorId>{t};
          },
          computing_in(low));
      expect_one_channels_last_match(r, low);
    }
  }
}

// 1x1 convolutions: a GEMM on x itself from 32 input channels (bias + residual + ReLU as a resnet
// bottleneck ends, bias + SiLU as efficientnet's expansions), cuDNN below that and at stride 2
// (resnet's downsample), with channel counts that are and are not multiples of 8.
TEST(CudaLayout, PointwiseConvolutionsMatchCpu) {
  KILN_REQUIRE_GPU();
  struct Case {
    int64_t cin, cout, stride;
    bool residual;
  };
  for (const Case& c : {Case{64, 32, 1, true}, Case{32, 20, 1, false}, Case{48, 40, 1, false},
                        Case{40, 24, 1, true}, Case{16, 96, 1, false}, Case{24, 20, 1, true},
                        Case{12, 20, 2, false}, Case{32, 64, 2, true}}) {
    for (DataType low : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      SCOPED_TRACE(std::to_string(c.cin) + " -> " + std::to_string(c.cout) + " stride " +
                   std::to_string(c.stride) + (c.residual ? " residual " : " ") + dtype_name(low));
      const int64_t h = 13, w = 10, oh = (h - 1) / c.stride + 1, ow = (w - 1) / c.stride + 1;
      auto r = cuda_testing::run_both(
          {random_tensor(DataType::kF32, {2, c.cin, h, w}, 40),
           random_tensor(DataType::kF32, {2, c.cout, oh, ow}, 41)},
          [&](Network& net, const std::vector<TensorId>& in) {
            TensorId t = net.add("pointwise", conv(0, c.stride),
                                 {in[0], constant(net, "w", {c.cout, c.cin, 1, 1}, 42),
                                  constant(net, "b", {c.cout}, 43)});
            if (c.residual) {
              t = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {t, in[1]});
              t = net.add("relu", ActivationParams{ActivationKind::kRelu}, {t});
            } else {
              t = net.add("silu", ActivationParams{ActivationKind::kSilu}, {t});
              t = net.add("keep", ElementwiseParams{BinaryOp::kAdd}, {t, in[1]});
            }
            return std::vector<TensorId>{t};
          },
          computing_in(low));
      expect_one_channels_last_match(r, low);
    }
  }
}

// Whether pointwise.cu's kernel runs the plan's convolution: its `applies` on the layer as planned,
// with data as aligned as the arena's (convolution.cpp adds only a pixel count over 4,096 and
// the plan's switches leaving cuda_pointwise at auto).
bool runs_small_channel_pointwise(const Plan& plan) {
  const Network& net = plan.network;
  alignas(16) static char aligned[16];
  for (const Layer& l : net.layers()) {
    const auto* p = std::get_if<ConvolutionParams>(&l.params);
    if (!p) continue;
    const auto view = [&](TensorId id) {
      const TensorDesc& d = net.tensor(id);
      return cuda::TensorView{d.dtype, d.shape, aligned};
    };
    size_t next = 2;
    std::optional<cuda::TensorView> bias, residual;
    if (p->post.has_bias) bias = view(l.inputs[next++]);
    if (p->post.has_residual) residual = view(l.inputs[next++]);
    return cuda::pointwise_nhwc_applies(*p, view(l.inputs[0]), view(l.inputs[1]),
                                        bias ? &*bias : nullptr, residual ? &*residual : nullptr,
                                        view(l.outputs[0]));
  }
  return false;
}

// 1x1 convolutions of 8-32 input channels over 64x64 x 2 pixels (more than the GEMM's 4,096):
// pointwise.cu's kernel with bias and no activation, ReLU, clamp(0, 6) or SiLU fused, against the
// CPU. f32 layers may use TF32, which the kernel does not (fp32 FMAs): f32's 1e-4 tolerance is one
// that a path rounding to TF32 would miss. Under clamp, a NaN in one input pixel gives NaN in all
// of its outputs (torch's clamp keeps NaN).
TEST(CudaLayout, SmallChannelPointwiseMatchesCpu) {
  KILN_REQUIRE_GPU();
  struct Activation {
    const char* name;
    std::optional<ActivationParams> params;
    bool nan_input;
  };
  const Activation activations[] = {{"none", std::nullopt, false},
                                    {"relu", ActivationParams{ActivationKind::kRelu}, false},
                                    {"clamp", ActivationParams{ActivationKind::kClamp, 0, 6}, true},
                                    {"silu", ActivationParams{ActivationKind::kSilu}, false}};
  const int64_t n = 2, h = 64, w = 64, nan_n = 1, nan_y = 3, nan_x = 7;
  for (int64_t cin : {8, 16, 24, 32}) {
    const HostTensor x = random_tensor(DataType::kF32, {n, cin, h, w}, 50);
    HostTensor x_nan = random_tensor(DataType::kF32, {n, cin, h, w}, 50);
    static_cast<float*>(x_nan.data())[((nan_n * cin + cin - 1) * h + nan_y) * w + nan_x] = NAN;
    for (int64_t cout : {16, 96, 144}) {
      for (DataType low : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
        for (const Activation& act : activations) {
          SCOPED_TRACE(std::to_string(cin) + " -> " + std::to_string(cout) + " " + act.name + " " +
                       dtype_name(low));
          BuilderConfig config = computing_in(low);
          config.tf32 = low == DataType::kF32;
          auto r = cuda_testing::run_both(
              {act.nan_input ? x_nan : x},
              [&](Network& net, const std::vector<TensorId>& in) {
                TensorId t = net.add("pointwise", conv(0),
                                     {in[0], constant(net, "w", {cout, cin, 1, 1}, 51),
                                      constant(net, "b", {cout}, 52)});
                if (act.params) t = net.add("act", *act.params, {t});
                return std::vector<TensorId>{t};
              },
              config);
          EXPECT_TRUE(runs_small_channel_pointwise(r.gpu_plan));
          if (!act.nan_input) {
            expect_one_channels_last_match(r, low);
            continue;
          }
          // The NaN pixel gives NaN in every output channel, as torch.clamp does; the CPU
          // reference's clamp fused into oneDNN gives its lower bound there (onednn.h says why),
          // so those outputs are expected as NaN and the rest as the CPU's.
          ASSERT_EQ(r.gpu.size(), 1u);
          ASSERT_EQ(r.cpu.size(), 1u);
          EXPECT_EQ(channels_last_convolutions(r.gpu_plan), 1);
          std::vector<double> want = testing::to_doubles(r.cpu[0]);
          ASSERT_EQ(static_cast<int64_t>(want.size()), n * cout * h * w);
          for (int64_t c = 0; c < cout; ++c) {
            want[static_cast<size_t>(((nan_n * cout + c) * h + nan_y) * w + nan_x)] = NAN;
          }
          const double tol = tolerance_in(low);
          EXPECT_TRUE(testing::near(r.gpu[0], want, tol, tol));
          const std::vector<double> y = testing::to_doubles(r.gpu[0]);
          int nan_outputs = 0;
          for (int64_t c = 0; c < cout; ++c) {
            nan_outputs += std::isnan(y[((nan_n * cout + c) * h + nan_y) * w + nan_x]);
          }
          EXPECT_EQ(nan_outputs, cout);
        }
      }
    }
  }
}

// Layers the small-channel kernel does not take stay on cuDNN and still match: 12 input channels,
// and an activation it does not fuse (hardswish).
TEST(CudaLayout, SmallChannelPointwiseFallbacksMatchCpu) {
  KILN_REQUIRE_GPU();
  struct Case {
    int64_t cin;
    ActivationParams act;
  };
  for (const Case& c : {Case{12, ActivationParams{ActivationKind::kClamp, 0, 6}},
                        Case{16, ActivationParams{ActivationKind::kHardSwish}}}) {
    for (DataType low : {DataType::kF32, DataType::kF16}) {
      SCOPED_TRACE(std::to_string(c.cin) + " -> 96 " + dtype_name(low));
      const std::vector<HostTensor> inputs = {
          random_tensor(DataType::kF32, {2, c.cin, 64, 64}, 60)};
      auto r = cuda_testing::run_both(
          inputs,
          [&](Network& net, const std::vector<TensorId>& in) {
            const TensorId t = net.add(
                "pointwise", conv(0),
                {in[0], constant(net, "w", {96, c.cin, 1, 1}, 62), constant(net, "b", {96}, 63)});
            return std::vector<TensorId>{net.add("act", c.act, {t})};
          },
          computing_in(low));
      EXPECT_FALSE(runs_small_channel_pointwise(r.gpu_plan));
      expect_one_channels_last_match(r, low);
    }
  }
}

// The GPU plan matches the CPU within `tol`, and so do three more runs of one context of it:
// eager, captured into a CUDA graph, replayed (kernels that keep state between runs reset it).
void expect_match_and_replays(const cuda_testing::BothResults& r,
                              const std::vector<HostTensor>& inputs, double tol) {
  cuda_testing::expect_match(r, tol, tol);
  ExecutionContext ctx(std::make_shared<const Engine>(r.gpu_plan.network, r.gpu_plan.target));
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    const auto again = ctx.run(inputs);
    EXPECT_TRUE(testing::near(again[0], testing::to_doubles(r.cpu[0]), tol, tol));
  }
}

// A channels-last network computing in f16/bf16 casts its f32 input and transposes it to NHWC,
// and casts its output back after the transpose to NCHW: each pair is one shuffle that casts
// (fuse_cast_into_shuffle), so no cast layer is left; in f32 there are no casts. Input planes of a
// multiple of 4 pixels with 1 or 3 channels take the vectorized planes-to-channels-last kernel,
// others the element-wise copy. Eager, captured and replayed runs match the CPU.
TEST(CudaLayout, CastsJoinTheLayoutTransposes) {
  KILN_REQUIRE_GPU();
  struct Case {
    int64_t c, h, w;
  };
  for (const Case& c : {Case{3, 9, 11}, Case{3, 8, 12}, Case{1, 8, 8}}) {
    for (DataType low : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      SCOPED_TRACE("C=" + std::to_string(c.c) + " " + std::to_string(c.h) + "x" +
                   std::to_string(c.w) + " " + dtype_name(low));
      const std::vector<HostTensor> inputs = {
          random_tensor(DataType::kF32, {2, c.c, c.h, c.w}, 95)};
      auto r = cuda_testing::run_both(
          inputs,
          [&](Network& net, const std::vector<TensorId>& in) {
            return std::vector<TensorId>{net.add(
                "c", conv(1, 2),
                {in[0], constant(net, "w", {16, c.c, 3, 3}, 96), constant(net, "b", {16}, 97)})};
          },
          computing_in(low));
      int casting_shuffles = 0;
      for (const Layer& l : r.gpu_plan.network.layers()) {
        const auto* p = std::get_if<ShuffleParams>(&l.params);
        if (p && p->cast) {
          ++casting_shuffles;
          const DataType from = r.gpu_plan.network.tensor(l.inputs[0]).dtype;
          EXPECT_TRUE((from == DataType::kF32 && p->to == low) ||
                      (from == low && p->to == DataType::kF32));
        }
      }
      EXPECT_EQ(casting_shuffles, low == DataType::kF32 ? 0 : 2);
      EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "cast"), 0);
      const double tol = tolerance_in(low);
      expect_match_and_replays(r, inputs, tol);
    }
  }
}

// An efficientnet block's tail: depthwise convolution + SiLU, squeeze-excitation in torch's form
// (global average pool, 1x1 + SiLU, 1x1 + sigmoid, times the depthwise output), then a 1x1
// projection to `out` channels, with a bias and a residual (a 1x1 convolution of the input) when
// asked.
std::vector<TensorId> se_block(Network& net, const std::vector<TensorId>& in, int64_t c,
                               int64_t squeeze, int64_t out, bool project_bias = false,
                               bool residual = false) {
  TensorId x =
      net.add("dw", conv(1, 1, c),
              {in[0], constant(net, "w_dw", {c, 1, 3, 3}, 71), constant(net, "b_dw", {c}, 72)});
  x = net.add("silu", ActivationParams{ActivationKind::kSilu}, {x});
  PoolingParams gap;
  gap.kind = PoolingKind::kAverage;
  gap.adaptive = true;
  gap.output_size = {1, 1};
  TensorId t = net.add("gap", gap, {x});
  t = net.add("fc1", conv(0),
              {t, constant(net, "w1", {squeeze, c, 1, 1}, 73), constant(net, "b1", {squeeze}, 74)});
  t = net.add("act1", ActivationParams{ActivationKind::kSilu}, {t});
  t = net.add("fc2", conv(0),
              {t, constant(net, "w2", {c, squeeze, 1, 1}, 75), constant(net, "b2", {c}, 76)});
  t = net.add("act2", ActivationParams{ActivationKind::kSigmoid}, {t});
  t = net.add("scale", ElementwiseParams{BinaryOp::kMul}, {t, x});
  std::vector<TensorId> project_in = {t, constant(net, "w_p", {out, c, 1, 1}, 77)};
  if (project_bias) project_in.push_back(constant(net, "b_p", {out}, 78));
  t = net.add("project", conv(0, 1, 1, project_bias), project_in);
  if (residual) {
    const TensorId r = net.add("shortcut", conv(0, 1, 1, false),
                               {in[0], constant(net, "w_r", {out, c, 1, 1}, 79)});
    t = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {t, r});
  }
  return {t};
}

// Squeeze-excitation runs as the fused CUDA layer: channels in 16-byte words (40, 264, 1152) and
// not (36 in f16), one chunk of pixels per sample and several (264 at 20x20), channel words past
// the block's threads (1030 single channels on 1024 threads), and 4096 channels (the most; past
// the 48 KiB of shared memory a launch gets without asking, in f16 and bf16). The projections
// here stay convolutions (too few pixels per output channel, or per sample at batch 2+).
// Three runs of one context (eager, captured into a CUDA graph, replayed) all match the CPU:
// the last block's counters return to zero.
TEST(CudaLayout, SqueezeExcitationMatchesCpu) {
  KILN_REQUIRE_GPU();
  struct Case {
    int64_t n, c, hw, squeeze;
  };
  for (const Case& c : {Case{3, 40, 9, 10}, Case{2, 36, 7, 9}, Case{2, 264, 20, 66},
                        Case{2, 1152, 3, 48}, Case{1, 4096, 2, 64}, Case{1, 1030, 2, 20}}) {
    for (DataType low : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      SCOPED_TRACE("C=" + std::to_string(c.c) + " HW=" + std::to_string(c.hw) + " " +
                   dtype_name(low));
      const std::vector<HostTensor> inputs = {
          random_tensor(DataType::kF32, {c.n, c.c, c.hw, c.hw}, 70)};
      auto r = cuda_testing::run_both(
          inputs,
          [&](Network& net, const std::vector<TensorId>& in) {
            return se_block(net, in, c.c, c.squeeze, 16);
          },
          computing_in(low));
      EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "squeeze_excitation"), 1);
      EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "pooling"), 0);
      EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "convolution"), 2);  // dw, project
      const double tol = tolerance_in(low);
      expect_match_and_replays(r, inputs, tol);
    }
  }
}

// Squeeze-excitation takes the 1x1 projection after it where excitation_projection_applies (one
// sample, or 512+ pixels per sample, and 2+ pixels per output channel): the projection's weights
// scaled per sample, one batched GEMM of x with the projection's bias and residual, no excite
// pass. Channels in 16-byte words and not (36 in f16), one sample and two; one case that does not
// qualify (2 samples of 81 pixels) keeps its convolution. Eager, captured and replayed runs match
// the CPU's separate layers.
TEST(CudaLayout, SqueezeExcitationTakesItsProjection) {
  KILN_REQUIRE_GPU();
  struct Case {
    int64_t n, c, hw, squeeze, out;
    bool bias, residual;
  };
  for (const Case& c : {Case{1, 40, 6, 10, 16, true, false}, Case{2, 64, 24, 16, 24, true, true},
                        Case{1, 36, 8, 9, 32, false, true}, Case{2, 40, 9, 10, 16, true, true}}) {
    const bool folds = cuda::excitation_projection_applies(c.n, c.hw * c.hw, c.c, c.out);
    EXPECT_EQ(folds, c.n == 1 || c.hw >= 23);
    for (DataType low : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      SCOPED_TRACE("N=" + std::to_string(c.n) + " C=" + std::to_string(c.c) + " HW=" +
                   std::to_string(c.hw) + " O=" + std::to_string(c.out) + " " + dtype_name(low));
      const std::vector<HostTensor> inputs = {
          random_tensor(DataType::kF32, {c.n, c.c, c.hw, c.hw}, 80)};
      auto r = cuda_testing::run_both(
          inputs,
          [&](Network& net, const std::vector<TensorId>& in) {
            return se_block(net, in, c.c, c.squeeze, c.out, c.bias, c.residual);
          },
          computing_in(low));
      EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "squeeze_excitation"), 1);
      // dw and the shortcut, and the projection where it stays a convolution.
      EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "convolution"),
                1 + (c.residual ? 1 : 0) + (folds ? 0 : 1));
      const double tol = tolerance_in(low);
      expect_match_and_replays(r, inputs, tol);
    }
  }
}

}  // namespace
// shufflenet's unit on the GPU: a channel shuffle of channels-last data (one strided copy of
// [N H W, G, C / G]), channel slices and a concat, in f32 and f16 (C = 58 halves: no 16-byte
// rows), matching the CPU; only the input's and the output's transposes are left.
TEST(CudaLayout, ChannelShufflesOfChannelsLastDataMatchCpu) {
  KILN_REQUIRE_GPU();
  for (DataType low : {DataType::kF32, DataType::kF16}) {
    SCOPED_TRACE(dtype_name(low));
    auto r = cuda_testing::run_both(
        {random_tensor(DataType::kF32, {3, 24, 10, 9}, 50)},
        [&](Network& net, const std::vector<TensorId>& in) {
          TensorId t = net.add(
              "conv1", conv(0),
              {in[0], constant(net, "w1", {116, 24, 1, 1}, 51), constant(net, "b1", {116}, 52)});
          ShuffleParams split, swap, merge;
          split.has_reshape = merge.has_reshape = true;
          split.reshape = {3, 2, 58, 10, 9};
          swap.first_perm = {0, 2, 1, 3, 4};
          merge.reshape = {3, 116, 10, 9};
          t = net.add("merge", merge, {net.add("swap", swap, {net.add("split", split, {t})})});
          const TensorId a = net.add("first", SliceParams{{1}, {0}, {58}, {1}}, {t});
          const TensorId b =
              net.add("conv2", conv(1, 1, 58),
                      {net.add("second", SliceParams{{1}, {58}, {116}, {1}}, {t}),
                       constant(net, "w2", {58, 1, 3, 3}, 53), constant(net, "b2", {58}, 54)});
          return std::vector<TensorId>{net.add("cat", ConcatParams{1, false}, {a, b})};
        },
        computing_in(low));
    EXPECT_EQ(channels_last_convolutions(r.gpu_plan), 2);
    // into channels-last (with the cast), the channel shuffle, back
    EXPECT_EQ(count_moving_shuffles(r.gpu_plan.network.layers()), 3);
    const double tol = low == DataType::kF32 ? 1e-4 : 2e-2;
    cuda_testing::expect_match(r, tol, tol);
  }
}

// A dense block on channels-last data (issue #28's concat elision): every concat in place, each
// map copied once into the block's buffer, the inner concats strided views read by the generated
// batch norm + ReLU kernels (16-byte vectors where the growth keeps rows and pitch in whole
// vectors, one element a thread where it does not: 4 channels of f16). Matches the CPU, which
// builds it in place too, in f32 and f16.
TEST(CudaLayout, DenseBlockConcatsInPlaceMatchCpu) {
  KILN_REQUIRE_GPU();
  for (DataType low : {DataType::kF32, DataType::kF16}) {
    for (int64_t growth : {8, 4}) {
      SCOPED_TRACE(std::string(dtype_name(low)) + ", growth " + std::to_string(growth));
      uint64_t seed = 60;
      auto r = cuda_testing::run_both(
          {random_tensor(DataType::kF32, {3, 16, 10, 9}, 59)},
          [&](Network& net, const std::vector<TensorId>& in) {
            std::vector<TensorId> maps = {
                net.add("stem", conv(0),
                        {in[0], constant(net, "w", {16, 16, 1, 1}, seed++),
                         constant(net, "b", {16}, seed++)})};
            int64_t c = 16;
            for (int k = 0; k < 3; ++k) {
              const std::string n = std::to_string(k);
              const TensorId cat =
                  maps.size() == 1 ? maps[0] : net.add("cat" + n, ConcatParams{1, false}, maps);
              TensorId t = net.add("scale" + n, ElementwiseParams{BinaryOp::kMul},
                                   {cat, constant(net, "s" + n, {c, 1, 1}, seed++)});
              t = net.add("shift" + n, ElementwiseParams{BinaryOp::kAdd},
                          {t, constant(net, "t" + n, {c, 1, 1}, seed++)});
              t = net.add("relu" + n, ActivationParams{ActivationKind::kRelu}, {t});
              maps.push_back(net.add("conv" + n, conv(1, 1, 1, false),
                                     {t, constant(net, "w" + n, {growth, c, 3, 3}, seed++)}));
              c += growth;
            }
            const TensorId out = net.add("out", ConcatParams{1, false}, maps);
            return std::vector<TensorId>{net.add("head", conv(0, 1, 1, false),
                                                 {out, constant(net, "wh", {8, c, 1, 1}, seed++)})};
          },
          computing_in(low));
      int in_place = 0;
      for (const Layer& l : r.gpu_plan.network.layers()) {
        const auto* c = std::get_if<ConcatParams>(&l.params);
        in_place += c && c->in_place;
      }
      EXPECT_EQ(in_place, 3);
      EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "concat"), 3 + 4);  // 4 copies
      const double tol = low == DataType::kF32 ? 1e-4 : 2e-2;
      cuda_testing::expect_match(r, tol, tol);
    }
  }
}

}  // namespace kiln::engine
