// cuda builds with f16/bf16 enabled (the builder's precision pass) against the CPU engine in f32:
// a conv net and a matmul/softmax net, weights folded into low-precision constants (refittable
// plans too: a refit casts the new weights again), outputs still f32 under their names.
#include "cuda_testing.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;

TensorId constant(Network& net, const std::string& name, const Shape& shape, uint64_t seed) {
  const HostTensor t = random_tensor(DataType::kF32, shape, seed, -0.5, 0.5);
  std::vector<uint8_t> bytes(static_cast<const uint8_t*>(t.data()),
                             static_cast<const uint8_t*>(t.data()) + t.nbytes());
  return net.add_constant(name, Weights::from_bytes(t.dtype(), t.shape(), std::move(bytes)));
}

ConvolutionParams conv3x3() {
  ConvolutionParams p;
  p.strides = {1, 1};
  p.padding_begin = p.padding_end = {1, 1};
  p.dilations = {1, 1};
  return p;
}

std::vector<TensorId> conv_net(Network& net, const std::vector<TensorId>& in) {
  auto y = net.add("conv1", conv3x3(), {in[0], constant(net, "w1", {8, 3, 3, 3}, 1)});
  y = net.add("bias1", ElementwiseParams{BinaryOp::kAdd},
              {y, constant(net, "b1", {1, 8, 1, 1}, 2)});
  y = net.add("relu1", ActivationParams{ActivationKind::kRelu}, {y});
  y = net.add("conv2", conv3x3(), {y, constant(net, "w2", {8, 8, 3, 3}, 3)});
  y = net.add("relu2", ActivationParams{ActivationKind::kRelu}, {y});
  PoolingParams pool;
  pool.kind = PoolingKind::kAverage;
  pool.adaptive = true;
  pool.output_size = {1, 1};
  return {net.add("pool", pool, {y})};
}

std::vector<TensorId> matmul_softmax_net(Network& net, const std::vector<TensorId>& in) {
  auto y = net.add("mm1", MatMulParams{}, {in[0], constant(net, "w1", {32, 48}, 4)});
  y = net.add("bias1", ElementwiseParams{BinaryOp::kAdd}, {y, constant(net, "b1", {48}, 5)});
  y = net.add("gelu", ActivationParams{ActivationKind::kGeluTanh}, {y});
  y = net.add("mm2", MatMulParams{}, {y, constant(net, "w2", {48, 16}, 6)});
  return {net.add("softmax", SoftmaxParams{-1}, {y})};
}

// The network run_both builds, for inspecting the plan and report of a cuda build.
Plan build_cuda(const std::vector<HostTensor>& inputs, const cuda_testing::NetworkBuilder& make,
                BuilderConfig config, BuildReport* report) {
  Network net;
  std::vector<TensorId> ids;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ids.push_back(net.add_input("in" + std::to_string(i), inputs[i].dtype(), inputs[i].shape()));
  }
  for (TensorId out : make(net, ids)) net.mark_output(out, "out");
  config.device = "cuda:0";
  return build(net, config, report);
}

// Every weight is a low-precision constant (casts folded), every float activation low but the
// output, which is f32 and keeps its name.
void expect_lowered(const Plan& plan, DataType low) {
  const Network& net = plan.network;
  int casts_of_constants = 0;
  for (const Layer& l : net.layers()) {
    if (!std::holds_alternative<CastParams>(l.params)) continue;
    for (const Layer& p : net.layers()) {
      casts_of_constants +=
          std::holds_alternative<ConstantParams>(p.params) && p.outputs[0] == l.inputs.at(0);
    }
  }
  EXPECT_EQ(casts_of_constants, 0);
  for (const Layer& l : net.layers()) {
    if (std::holds_alternative<ConstantParams>(l.params)) {
      EXPECT_EQ(net.tensor(l.outputs[0]).dtype, low) << l.name;
    }
  }
  for (const Layer& l : net.layers()) {
    if (std::holds_alternative<ConvolutionParams>(l.params) ||
        std::holds_alternative<MatMulParams>(l.params)) {
      EXPECT_EQ(net.tensor(l.outputs[0]).dtype, low) << l.name;
    }
  }
  ASSERT_EQ(net.outputs().size(), 1u);
  EXPECT_EQ(net.tensor(net.outputs()[0]).name, "out");
  EXPECT_EQ(net.tensor(net.outputs()[0]).dtype, DataType::kF32);
}

// Half precision with f32 accumulation: 1e-2 relative, with an absolute floor for values near 0.
constexpr double kRtol = 1e-2, kAtol = 1e-2;

TEST(CudaPrecision, ConvNetInF16MatchesCpuF32) {
  KILN_REQUIRE_GPU();
  const std::vector<HostTensor> in = {random_tensor(DataType::kF32, {2, 3, 16, 16}, 10)};
  for (bool refittable : {false, true}) {
    SCOPED_TRACE(refittable ? "refittable" : "folded");
    BuilderConfig config;
    config.enabled_precisions = {DataType::kF32, DataType::kF16};
    config.refittable = refittable;
    BuildReport report;
    const Plan plan = build_cuda(in, conv_net, config, &report);
    expect_lowered(plan, DataType::kF16);
    EXPECT_EQ(report.precision.count(DataType::kF16), 6) << report.to_string();
    EXPECT_NE(report.to_string().find("precision: 6 layers f16, 0 f32"), std::string::npos)
        << report.to_string();
    auto r = cuda_testing::run_both(in, conv_net, config);
    cuda_testing::expect_match(r, kRtol, kAtol);
  }
}

TEST(CudaPrecision, MatMulSoftmaxNetInF16AndBf16MatchesCpuF32) {
  KILN_REQUIRE_GPU();
  const std::vector<HostTensor> in = {random_tensor(DataType::kF32, {4, 10, 32}, 11)};
  for (DataType low : {DataType::kF16, DataType::kBF16}) {
    SCOPED_TRACE(dtype_name(low));
    BuilderConfig config;
    config.enabled_precisions = {DataType::kF32, low};
    BuildReport report;
    expect_lowered(build_cuda(in, matmul_softmax_net, config, &report), low);
    EXPECT_EQ(report.precision.count(low), 5) << report.to_string();
    auto r = cuda_testing::run_both(in, matmul_softmax_net, config);
    // Probabilities near 1/16: a tighter floor. bf16 keeps 8 bits of mantissa to f16's 11.
    const bool f16 = low == DataType::kF16;
    cuda_testing::expect_match(r, f16 ? kRtol : 4 * kRtol, f16 ? 1e-3 : 4e-3);
  }
}

// Number of convolution/matmul layers whose params allow TF32.
int tf32_layers(const Plan& plan) {
  int n = 0;
  for (const Layer& l : plan.network.layers()) {
    if (const auto* c = std::get_if<ConvolutionParams>(&l.params)) n += c->tf32;
    if (const auto* m = std::get_if<MatMulParams>(&l.params)) n += m->tf32;
  }
  return n;
}

// TF32 marks the f32 convolutions and matmuls only (not f16 ones), survives serialization, and
// stays within TF32's rounding of the f32 result (10-bit mantissa: ~1e-3 relative per product);
// without it the same plans match the CPU to f32 accuracy.
TEST(CudaPrecision, Tf32MarksF32ConvolutionsAndMatMuls) {
  KILN_REQUIRE_GPU();
  struct NetCase {
    const char* name;
    std::vector<HostTensor> in;
    cuda_testing::NetworkBuilder make;
    int layers;  // convolutions and matmuls after fusion
  };
  const NetCase nets[] = {
      {"conv net", {random_tensor(DataType::kF32, {2, 3, 16, 16}, 10)}, conv_net, 2},
      {"matmul net", {random_tensor(DataType::kF32, {4, 10, 32}, 11)}, matmul_softmax_net, 2}};
  for (const NetCase& c : nets) {
    for (bool tf32 : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (tf32 ? " tf32" : " f32"));
      BuilderConfig config;
      config.tf32 = tf32;
      BuildReport report;
      const Plan plan = build_cuda(c.in, c.make, config, &report);
      EXPECT_EQ(tf32_layers(plan), tf32 ? c.layers : 0);
      EXPECT_EQ(report.changes("tf32"), tf32 ? c.layers : 0);
      const std::vector<uint8_t> bytes = serialize_plan(plan);
      EXPECT_EQ(tf32_layers(deserialize_plan(bytes.data(), bytes.size())), tf32_layers(plan));
      auto r = cuda_testing::run_both(c.in, c.make, config);
      cuda_testing::expect_match(r, tf32 ? 5e-3 : 1e-5, tf32 ? 5e-3 : 1e-4);
    }
    SCOPED_TRACE(std::string(c.name) + " f16 + tf32");
    BuilderConfig half;
    half.tf32 = true;
    half.enabled_precisions = {DataType::kF32, DataType::kF16};
    EXPECT_EQ(tf32_layers(build_cuda(c.in, c.make, half, nullptr)), 0);
  }
}

// matmul + bias + erf GELU, the FFN's first half: [4, 64, 96] x [96, 256].
std::vector<TensorId> ffn_gelu_net(Network& net, const std::vector<TensorId>& in) {
  MatMulParams linear;  // a linear layer's matmul, as conversion writes it: the bias a post-op
  linear.post.has_bias = true;
  const auto y = net.add(
      "ffn1", linear, {in[0], constant(net, "w1", {96, 256}, 21), constant(net, "b1", {256}, 22)});
  return {net.add("gelu", ActivationParams{ActivationKind::kGelu}, {y})};
}

ActivationKind fused_activation(const Plan& plan) {
  for (const Layer& l : plan.network.layers()) {
    if (const auto* m = std::get_if<MatMulParams>(&l.params)) return m->post.activation;
  }
  return ActivationKind::kNone;
}

// gelu_tanh_epilogues turns the erf GELU fused into an f16/bf16 matmul into its tanh form (the
// cuBLASLt epilogue), never an f32 one's; both forms stay within half precision's rounding of the
// CPU's f32 erf result (the forms differ by at most 4.7e-4 at |x| = 2.7; inputs reach |x| ~ 6).
TEST(CudaPrecision, GeluTanhEpiloguesOnlyForHalfMatMuls) {
  KILN_REQUIRE_GPU();
  const std::vector<HostTensor> in = {random_tensor(DataType::kF32, {4, 64, 96}, 23, -1, 1)};
  for (DataType low : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (bool tanh_form : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(low)) + (tanh_form ? " tanh epilogue" : " exact"));
      BuilderConfig config;
      config.enabled_precisions = {DataType::kF32};
      if (low != DataType::kF32) config.enabled_precisions.push_back(low);
      config.gelu_tanh_epilogues = tanh_form;
      BuildReport report;
      const Plan plan = build_cuda(in, ffn_gelu_net, config, &report);
      const bool marked = tanh_form && low != DataType::kF32;
      EXPECT_EQ(report.changes("gelu_tanh"), marked ? 1 : 0) << report.to_string();
      EXPECT_EQ(fused_activation(plan), marked ? ActivationKind::kGeluTanh : ActivationKind::kGelu);
      auto r = cuda_testing::run_both(in, ffn_gelu_net, config);
      // f16: 2^-11 relative rounding of operands and output, plus the forms' 4.7e-4.
      const double rtol = low == DataType::kF32 ? 1e-5 : (low == DataType::kF16 ? 5e-3 : 2e-2);
      const double atol = low == DataType::kF32 ? 1e-5 : (low == DataType::kF16 ? 3e-3 : 1.6e-2);
      cuda_testing::expect_match(r, rtol, atol);
    }
  }
}

}  // namespace
}  // namespace kiln::engine
