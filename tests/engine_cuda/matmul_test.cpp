// The CUDA matmul (cuBLASLt) against the CPU backend: transposes, batches (broadcast ones too),
// vectors, constant weights, post-ops fused by the builder (bias, activations, residual), and
// the timed choice of large GEMMs' algorithms, projections of one input merged; integer products
// (our kernel) bit for bit; the GEMM of few rows (skinny_gemm.cu) with every post-op.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>

#include "cuda_testing.h"
#include "engine/builder.h"
#include "engine/cuda/kernels.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using testing::random_tensor;

constexpr double kRtol = 1e-5, kAtol = 1e-4;

// Device memory for a kernel launched directly: `bytes` unset, or a host tensor's bytes.
struct DeviceBytes {
  explicit DeviceBytes(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  explicit DeviceBytes(const HostTensor& t) : DeviceBytes(t.nbytes()) {
    EXPECT_EQ(cudaMemcpy(p, t.data(), t.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() { cudaFree(p); }
  void* get() const { return p; }
  void* p = nullptr;
};

void compare_matmul(const Shape& a, const Shape& b, bool ta, bool tb, uint64_t seed) {
  SCOPED_TRACE(shape_to_string(a) + " x " + shape_to_string(b) + (ta ? " ta" : "") +
               (tb ? " tb" : ""));
  cuda_testing::compare_layer(
      MatMulParams{ta, tb},
      {random_tensor(DataType::kF32, a, seed), random_tensor(DataType::kF32, b, seed + 1)}, kRtol,
      kAtol);
}

TEST(CudaMatMul, ShapesAndTransposes) {
  KILN_REQUIRE_GPU();
  compare_matmul({7, 13}, {13, 5}, false, false, 1);
  compare_matmul({13, 7}, {13, 5}, true, false, 3);
  compare_matmul({7, 13}, {5, 13}, false, true, 5);
  compare_matmul({13, 7}, {5, 13}, true, true, 7);
  compare_matmul({64, 128}, {128, 96}, false, false, 9);
  compare_matmul({13}, {13, 5}, false, false, 11);  // vector @ matrix
  compare_matmul({7, 13}, {13}, false, false, 13);  // matrix @ vector
  compare_matmul({13}, {13}, false, false, 15);     // dot
}

TEST(CudaMatMul, Batches) {
  KILN_REQUIRE_GPU();
  compare_matmul({3, 7, 13}, {3, 13, 5}, false, false, 17);
  compare_matmul({3, 7, 13}, {13, 5}, false, false, 19);  // shared weights: one GEMM of 21 rows
  compare_matmul({3, 7, 13}, {5, 13}, false, true, 20);
  compare_matmul({2, 3, 13, 7}, {13, 5}, true, false, 22);  // transposed A: batched
  compare_matmul({7, 13}, {2, 3, 13, 5}, false, false, 21);
  compare_matmul({2, 1, 7, 13}, {1, 3, 13, 5}, false, false, 23);  // both broadcast
  compare_matmul({2, 3, 13, 7}, {3, 5, 13}, true, true, 25);
}

TEST(CudaMatMul, ConstantWeightsAndFusedPostOps) {
  KILN_REQUIRE_GPU();
  const HostTensor w = random_tensor(DataType::kF32, {32, 48}, 27);
  const HostTensor bias = random_tensor(DataType::kF32, {48}, 28);
  auto constant = [](Network& net, const std::string& name, const HostTensor& t) {
    std::vector<uint8_t> bytes(static_cast<const uint8_t*>(t.data()),
                               static_cast<const uint8_t*>(t.data()) + t.nbytes());
    return net.add_constant(name, Weights::from_bytes(t.dtype(), t.shape(), std::move(bytes)));
  };
  for (ActivationKind act : {ActivationKind::kRelu, ActivationKind::kGeluTanh,
                             ActivationKind::kSigmoid, ActivationKind::kNone}) {
    for (bool residual : {false, true}) {
      SCOPED_TRACE(std::string(activation_name(act)) + (residual ? " + residual" : ""));
      auto r = cuda_testing::run_both(
          {random_tensor(DataType::kF32, {4, 10, 32}, 29),
           random_tensor(DataType::kF32, {4, 10, 48}, 30)},
          [&](Network& net, const std::vector<TensorId>& in) {
            auto y = net.add("mm", MatMulParams{}, {in[0], constant(net, "w", w)});
            y = net.add("bias", ElementwiseParams{BinaryOp::kAdd}, {y, constant(net, "b", bias)});
            if (act != ActivationKind::kNone) y = net.add("act", ActivationParams{act}, {y});
            if (residual) {
              y = net.add("res", ElementwiseParams{BinaryOp::kAdd}, {y, in[1]});
              y = net.add("act2", ActivationParams{ActivationKind::kRelu}, {y});
            }
            return std::vector<TensorId>{y};
          });
      EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "matmul"), 1);
      cuda_testing::expect_match(r, kRtol, kAtol);
    }
  }
}

TEST(CudaMatMul, HalfPrecisionsAccumulateInFloat) {
  KILN_REQUIRE_GPU();
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    SCOPED_TRACE(dtype_name(t));
    MatMulParams p;
    p.post.has_bias = true;
    p.post.activation = ActivationKind::kRelu;
    cuda_testing::compare_layer(
        p,
        {random_tensor(t, {3, 40, 256}, 35, -1, 1), random_tensor(t, {256, 72}, 36, -1, 1),
         random_tensor(t, {72}, 37)},
        1e-2, 2e-2);
    cuda_testing::compare_layer(
        MatMulParams{false, true},
        {random_tensor(t, {2, 5, 64}, 38, -1, 1), random_tensor(t, {2, 7, 64}, 39, -1, 1)}, 1e-2,
        2e-2);
  }
}

TEST(CudaMatMul, PostOpsOnTheLayer) {
  KILN_REQUIRE_GPU();
  MatMulParams p;
  p.post.has_bias = true;
  p.post.activation = ActivationKind::kRelu;
  p.post.has_residual = true;
  p.post.activation2 = ActivationKind::kTanh;
  cuda_testing::compare_layer(
      p,
      {random_tensor(DataType::kF32, {9, 16}, 31), random_tensor(DataType::kF32, {16, 24}, 32),
       random_tensor(DataType::kF32, {24}, 33), random_tensor(DataType::kF32, {9, 24}, 34)},
      kRtol, kAtol);
  // The residual (always of the output's shape and dtype) is cuBLASLt's C operand when nothing
  // comes between bias and residual; act2 then is the epilogue's (GELU-tanh) or none.
  MatMulParams q;
  q.post.has_bias = true;
  q.post.has_residual = true;
  for (DataType t : {DataType::kF32, DataType::kF16}) {
    SCOPED_TRACE(dtype_name(t));
    const double rtol = t == DataType::kF32 ? kRtol : 1e-2,
                 atol = t == DataType::kF32 ? kAtol : 2e-2;
    for (ActivationKind act2 : {ActivationKind::kNone, ActivationKind::kGeluTanh}) {
      q.post.activation2 = act2;
      cuda_testing::compare_layer(
          q,
          {random_tensor(t, {2, 9, 64}, 40, -1, 1), random_tensor(t, {64, 24}, 41, -1, 1),
           random_tensor(t, {24}, 42), random_tensor(t, {2, 9, 24}, 43)},
          rtol, atol);
    }
    // GELU (erf) is no cuBLASLt epilogue: bias, GELU, residual and ReLU in the post-op kernel,
    // on 16-byte vectors (24 channels) or per element (20 channels: not a multiple of 8 halves).
    MatMulParams g = q;
    g.post.activation = ActivationKind::kGelu;
    g.post.activation2 = ActivationKind::kRelu;
    for (int64_t n : {24, 20}) {
      cuda_testing::compare_layer(
          g,
          {random_tensor(t, {2, 9, 64}, 44, -1, 1), random_tensor(t, {64, n}, 45, -1, 1),
           random_tensor(t, {n}, 46), random_tensor(t, {2, 9, n}, 47)},
          rtol, atol);
    }
  }
}

// Every GPU output has the CPU's dtype, shape and bytes.
void expect_same_bytes(const cuda_testing::BothResults& r) {
  ASSERT_EQ(r.cpu.size(), r.gpu.size());
  for (size_t i = 0; i < r.cpu.size(); ++i) {
    ASSERT_EQ(r.gpu[i].dtype(), r.cpu[i].dtype());
    ASSERT_EQ(r.gpu[i].shape(), r.cpu[i].shape());
    EXPECT_EQ(std::memcmp(r.gpu[i].data(), r.cpu[i].data(), r.cpu[i].nbytes()), 0)
        << "output " << i;
  }
}

// Values spread over the dtype's range: nearly every product and sum wraps around.
HostTensor wide_integers(DataType t, const Shape& shape, uint64_t seed) {
  const double limit = t == DataType::kI64 ? 4e18 : 2e9;
  return random_tensor(t, shape, seed, -limit, limit);
}

// i64 and i32 products (our tiled kernel) equal the CPU's loops exactly, both wrapping around as
// torch's do: transposes, vectors, broadcast batches, several 64-wide tiles of rows, columns and
// depth, K == 0; and the bias and residual adds the builder fuses into the layer.
// A Llama MLP, down(silu(gate(x)) * up(x)): the builder's elementwise_projections makes gate and
// up one GEMM of both weights, and the generated kernel of silu and the product reads the two
// halves of its result in place: two GEMMs and one fused kernel in all, no gather; f32 and with f16
// enabled, against the CPU. Inputs in [-0.5, 0.5]: the outputs are of order one, so that f16's
// rounding of the product (stored in f16) stays well inside the tolerance (inputs in [-2, 2] give
// outputs of order 15, whose f16 rounding through K = 176 reaches 0.03).
TEST(CudaMatMul, GateAndUpProjectionsAreOneGemm) {
  KILN_REQUIRE_GPU();
  for (bool half : {false, true}) {
    SCOPED_TRACE(half ? "f16" : "f32");
    BuilderConfig config;
    if (half) config.enabled_precisions = {DataType::kF32, DataType::kF16};
    auto r = cuda_testing::run_both(
        {random_tensor(DataType::kF32, {2, 40, 64}, 64, -0.5, 0.5)},
        [&](Network& net, const std::vector<TensorId>& in) {
          uint64_t seed = 65;
          const auto linear = [&](TensorId x, const std::string& name, int64_t n, int64_t k) {
            MatMulParams m;
            m.transpose_b = true;
            return net.add(name, m,
                           {x, testing::random_constant(net, name + ".w", {n, k}, seed++)});
          };
          const auto gate = linear(in[0], "gate", 176, 64), up = linear(in[0], "up", 176, 64);
          const auto act = net.add("silu", ActivationParams{ActivationKind::kSilu}, {gate});
          const auto h = net.add("mul", ElementwiseParams{BinaryOp::kMul}, {act, up});
          return std::vector<TensorId>{linear(h, "down", 64, 176)};
        },
        config);
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "matmul"), 2);
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "gather"), 0);
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "fused_elementwise"), 1);
    cuda_testing::expect_match(r, half ? 2e-2 : kRtol, half ? 2e-2 : kAtol);
  }
}

TEST(CudaMatMul, IntegerProductsEqualTheCpus) {
  KILN_REQUIRE_GPU();
  struct IntCase {
    Shape a, b;
    bool ta = false, tb = false;
  };
  const IntCase cases[] = {{{7, 13}, {13, 5}},
                           {{13, 7}, {5, 13}, true, true},
                           {{13}, {13, 5}},
                           {{7, 13}, {13}},
                           {{13}, {13}},
                           {{2, 1, 7, 13}, {1, 3, 13, 5}},
                           {{3, 7, 13}, {5, 13}, false, true},
                           {{130, 70}, {70, 150}},
                           {{70, 130}, {2, 150, 70}, true, true},
                           {{4, 0}, {0, 6}}};
  for (DataType t : {DataType::kI64, DataType::kI32}) {
    for (const IntCase& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + shape_to_string(c.a) + (c.ta ? "T" : "") +
                   " x " + shape_to_string(c.b) + (c.tb ? "T" : ""));
      expect_same_bytes(cuda_testing::run_both_layer(
          MatMulParams{c.ta, c.tb}, {wide_integers(t, c.a, 60), wide_integers(t, c.b, 61)}));
    }
    SCOPED_TRACE(std::string(dtype_name(t)) + " with bias and residual");
    auto r =
        cuda_testing::run_both({wide_integers(t, {3, 70, 40}, 62), wide_integers(t, {40, 90}, 63),
                                wide_integers(t, {90}, 64), wide_integers(t, {3, 70, 90}, 65)},
                               [](Network& net, const std::vector<TensorId>& in) {
                                 auto y = net.add("mm", MatMulParams{}, {in[0], in[1]});
                                 y = net.add("bias", ElementwiseParams{BinaryOp::kAdd}, {y, in[2]});
                                 return std::vector<TensorId>{
                                     net.add("res", ElementwiseParams{BinaryOp::kAdd}, {y, in[3]})};
                               });
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "matmul"), 1);
    EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "elementwise"), 0);
    expect_same_bytes(r);
  }
}

// GEMMs of 2 GFLOP or more time the heuristic's candidates on their first run (into scratch
// memory: the output and the residual it reads stay as they were) and keep the fastest.
TEST(CudaMatMul, LargeGemmsTimeTheirCandidates) {
  KILN_REQUIRE_GPU();
  MatMulParams p{false, true};
  p.post.has_bias = true;
  for (bool residual : {false, true}) {
    SCOPED_TRACE(residual ? "bias + residual" : "bias + GELU-tanh");
    p.post.has_residual = residual;
    p.post.activation = residual ? ActivationKind::kNone : ActivationKind::kGeluTanh;
    // A batch of 4 x 128 rows against shared weights: one GEMM of 512 rows.
    std::vector<HostTensor> inputs = {random_tensor(DataType::kF16, {4, 128, 1024}, 48, -.5, .5),
                                      random_tensor(DataType::kF16, {2048, 1024}, 49, -.5, .5),
                                      random_tensor(DataType::kF16, {2048}, 50)};
    if (residual) inputs.push_back(random_tensor(DataType::kF16, {4, 128, 2048}, 51));
    cuda_testing::compare_layer(p, inputs, 1e-2, 3e-2);
  }
}

// GEMMs whose output tiles leave most SMs idle (few rows, K of 512 or more: BERT's linear layers
// at batch 1) also time split-K forms of the heuristic's first candidate, whichever reduction
// scheme cuBLASLt offers, with the bias, GELU and residual epilogues. Whatever wins answers as the
// CPU does; the 16-row GEMM with K = 16384 (one output tile) is where a split must win.
TEST(CudaMatMul, GemmsOfFewTilesTimeSplitK) {
  KILN_REQUIRE_GPU();
  struct Case {
    int64_t rows, n, k;
    bool residual;
  };
  for (const Case& c : {Case{128, 768, 3072, true}, Case{128, 3072, 768, false},
                        Case{16, 128, 16384, false}, Case{16, 128, 16384, true}}) {
    SCOPED_TRACE(std::to_string(c.rows) + " x " + std::to_string(c.n) + " x " +
                 std::to_string(c.k) + (c.residual ? " bias + residual" : " bias + GELU-tanh"));
    MatMulParams p{false, true};
    p.post.has_bias = true;
    p.post.has_residual = c.residual;
    p.post.activation = c.residual ? ActivationKind::kNone : ActivationKind::kGeluTanh;
    std::vector<HostTensor> inputs = {random_tensor(DataType::kF16, {1, c.rows, c.k}, 60, -.5, .5),
                                      random_tensor(DataType::kF16, {c.n, c.k}, 61, -.5, .5),
                                      random_tensor(DataType::kF16, {c.n}, 62)};
    if (c.residual) inputs.push_back(random_tensor(DataType::kF16, {1, c.rows, c.n}, 63));
    cuda_testing::compare_layer(p, inputs, 1e-2, 3e-2);
  }
}

// No GPU needed: gemm_skinny=off|on|only reaches the kernels from the plan's switches (off when not
// given), and the forms timed for BERT's four linear layers at 128 rows on 132 SMs: the split
// that fills the SMs in one wave first (K / 32 divisible by it, at most 8: a portable cluster),
// then its neighbours, then blocks of 64 rows; where wgmma runs, the wgmma form of each first.
TEST(CudaKernelOptions, SkinnyGemmIsASwitchAndItsForms) {
  EXPECT_EQ(cuda::kernel_options({}).gemm_skinny, cuda::SkinnyGemm::kOff);
  for (const auto& [value, want] : {std::pair{"on", cuda::SkinnyGemm::kOn},
                                    {"only", cuda::SkinnyGemm::kOnly},
                                    {"off", cuda::SkinnyGemm::kOff}}) {
    BuilderConfig config;
    apply_switch(config, std::string("gemm_skinny=") + value);
    EXPECT_EQ(cuda::kernel_options(config.switches).gemm_skinny, want) << value;
  }
  BuilderConfig config;
  EXPECT_THROW(apply_switch(config, "gemm_skinny=auto"), InvalidArgument);

  using V = std::vector<int>;
  const auto f = [](int splits, int rows = 0) { return cuda::skinny_form(splits, rows); };
  const auto g = [](int splits, int rows = 0) { return cuda::skinny_form(splits, rows, true); };
  // Above 64 rows the last form has blocks of 64 rows, at the split that fills two waves.
  EXPECT_EQ(cuda::skinny_gemm_forms(128, 768, 768, 132, false), (V{f(8), f(6), f(8, 64)}));
  EXPECT_EQ(cuda::skinny_gemm_forms(128, 2304, 768, 132, false), (V{f(3), f(2), f(4), f(3, 64)}));
  EXPECT_EQ(cuda::skinny_gemm_forms(128, 3072, 768, 132, false), (V{f(2), f(1), f(3), f(2, 64)}));
  EXPECT_EQ(cuda::skinny_gemm_forms(128, 768, 3072, 132, false), (V{f(8), f(6), f(8, 64)}));
  EXPECT_EQ(cuda::skinny_gemm_forms(200, 768, 96, 132, false), (V{f(3), f(1), f(3, 64)}));
  EXPECT_EQ(cuda::skinny_gemm_forms(16, 65536, 64, 132, false), (V{f(1)}));  // 1024 tiles
  EXPECT_EQ(cuda::skinny_gemm_forms(128, 768, 768, 132, true),
            (V{g(8), g(6), g(8, 64), f(8), f(6), f(8, 64)}));
  EXPECT_EQ(f(8), 8);  // a plain split count is a form: plans kept them so
  EXPECT_EQ(cuda::skinny_form_splits(f(6, 64)), 6);
  EXPECT_EQ(cuda::skinny_form_rows(f(6, 64)), 64);
  EXPECT_FALSE(cuda::skinny_form_wgmma(f(6, 64)));
  EXPECT_EQ(cuda::skinny_form_splits(g(6, 64)), 6);
  EXPECT_EQ(cuda::skinny_form_rows(g(6, 64)), 64);
  EXPECT_TRUE(cuda::skinny_form_wgmma(g(6, 64)));
  EXPECT_TRUE(cuda::skinny_gemm_form_valid(768, false, f(8)));
  EXPECT_TRUE(cuda::skinny_gemm_form_valid(768, false, f(8, 128)));
  EXPECT_TRUE(cuda::skinny_gemm_form_valid(768, true, f(8, 128)));
  EXPECT_TRUE(cuda::skinny_gemm_form_valid(768, false, g(8, 128)));
  EXPECT_FALSE(cuda::skinny_gemm_form_valid(768, true, g(8, 128)));  // wgmma reads [n, k] only
  EXPECT_FALSE(cuda::skinny_gemm_form_valid(768, false, f(5)));
  EXPECT_FALSE(cuda::skinny_gemm_form_valid(96, false, f(6)));
  EXPECT_FALSE(cuda::skinny_gemm_form_valid(768, false, f(0)));
  EXPECT_FALSE(cuda::skinny_gemm_form_valid(768, false, f(2, 32)));
  EXPECT_FALSE(cuda::skinny_gemm_form_valid(768, false, f(2) | 1 << 20));  // an unknown bit
  // A form that is none is refused before anything launches: K = 96 is 3 tiles, not 2 splits.
  try {
    cuda::launch_skinny_gemm(nullptr, "fc", DataType::kF16, 1, 64, 96, f(2), nullptr, nullptr,
                             false, nullptr, cuda::SkinnyPostOps{});
    ADD_FAILURE() << "a form of 2 splits of 3 tiles launched";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("layer `fc`: 2 K splits (1 to 8, dividing K / 32 = 3)"),
              std::string::npos)
        << e.what();
  }

  alignas(16) static uint8_t buffer[64];
  const cuda::SkinnyPostOps none;
  EXPECT_TRUE(cuda::skinny_gemm_takes(DataType::kF16, 128, 768, 768, buffer, buffer, buffer, none));
  EXPECT_TRUE(cuda::skinny_gemm_takes(DataType::kBF16, 256, 64, 32, buffer, buffer, buffer, none));
  EXPECT_FALSE(
      cuda::skinny_gemm_takes(DataType::kF32, 128, 768, 768, buffer, buffer, buffer, none));
  EXPECT_FALSE(
      cuda::skinny_gemm_takes(DataType::kF16, 257, 768, 768, buffer, buffer, buffer, none));
  EXPECT_FALSE(cuda::skinny_gemm_takes(DataType::kF16, 128, 72, 768, buffer, buffer, buffer, none));
  EXPECT_FALSE(cuda::skinny_gemm_takes(DataType::kF16, 128, 768, 40, buffer, buffer, buffer, none));
  EXPECT_FALSE(
      cuda::skinny_gemm_takes(DataType::kF16, 128, 768, 768, buffer + 8, buffer, buffer, none));
}

// gemm_skinny=only: the kernel runs every f16/bf16 GEMM it takes, at the split that fills the SMs,
// and answers as the CPU does with each post-op form: bias and residual (BERT's projections), bias
// and GELU (erf: no cuBLASLt epilogue), bias, GELU-tanh, residual and ReLU, none; 1 to 256 rows (a
// partial tile of 37, two row tiles at 200, tiles of 64 rows at 64), K from 32 to 3072, one to
// eight splits; weights of [n, k] (linear) and of [k, n] (GPT-2's addmm). A GEMM it does not take
// (72 columns) runs on cuBLASLt.
TEST(CudaMatMul, SkinnyGemmMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  BuilderConfig only;
  apply_switch(only, "gemm_skinny=only");
  struct Case {
    int64_t rows, n, k;
    bool bias, residual;
    ActivationKind act, act2;
    bool kn = false;  // the weight is [k, n]
  };
  using A = ActivationKind;
  const Case cases[] = {{128, 768, 768, true, true, A::kNone, A::kNone},
                        {128, 3072, 768, true, false, A::kGelu, A::kNone},
                        {128, 768, 3072, true, true, A::kGeluTanh, A::kRelu},
                        {128, 2304, 768, true, false, A::kNone, A::kNone},
                        {1, 64, 32, false, false, A::kNone, A::kNone},
                        {37, 192, 256, true, false, A::kGeluTanh, A::kNone},
                        {200, 128, 512, true, true, A::kNone, A::kNone},
                        {64, 2304, 768, false, false, A::kSilu, A::kNone},
                        {128, 2304, 768, true, false, A::kNone, A::kNone, true},
                        {37, 192, 256, true, true, A::kGeluTanh, A::kNone, true},
                        {200, 128, 3072, false, false, A::kNone, A::kNone, true}};
  uint64_t seed = 1200;
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    const double rtol = t == DataType::kF16 ? 1e-2 : 3e-2, atol = t == DataType::kF16 ? 3e-2 : 1e-1;
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(c.rows) + " x " +
                   std::to_string(c.n) + " x " + std::to_string(c.k) + (c.kn ? " [k, n]" : ""));
      MatMulParams p{false, !c.kn};
      p.post.has_bias = c.bias;
      p.post.has_residual = c.residual;
      p.post.activation = c.act;
      p.post.activation2 = c.act2;
      std::vector<HostTensor> inputs = {
          random_tensor(t, {1, c.rows, c.k}, seed++, -.5, .5),
          random_tensor(t, c.kn ? Shape{c.k, c.n} : Shape{c.n, c.k}, seed++, -.5, .5)};
      if (c.bias) inputs.push_back(random_tensor(t, {c.n}, seed++));
      if (c.residual) inputs.push_back(random_tensor(t, {1, c.rows, c.n}, seed++));
      const int64_t before = cuda::skinny_gemm_launches();
      const auto r = cuda_testing::run_both_layer(p, inputs, only);
      cuda_testing::expect_match(r, rtol, atol);
      EXPECT_GT(cuda::skinny_gemm_launches(), before);
    }
  }
  MatMulParams p{false, true};
  const int64_t before = cuda::skinny_gemm_launches();
  const auto r =
      cuda_testing::run_both_layer(p,
                                   {random_tensor(DataType::kF16, {1, 16, 64}, 1290, -.5, .5),
                                    random_tensor(DataType::kF16, {72, 64}, 1291, -.5, .5)},
                                   only);
  cuda_testing::expect_match(r, 1e-2, 3e-2);
  EXPECT_EQ(cuda::skinny_gemm_launches(), before);
}

// gemm_skinny=on: BERT's four linear layers at 128 rows time the kernel's splits after cuBLASLt's
// candidates; whichever wins answers as the CPU does.
TEST(CudaMatMul, SkinnyGemmIsTimedAgainstCublasLt) {
  KILN_REQUIRE_GPU();
  BuilderConfig on;
  apply_switch(on, "gemm_skinny=on");
  const int64_t before = cuda::skinny_gemm_launches();
  uint64_t seed = 1300;
  for (const auto& [n, k] :
       {std::pair<int64_t, int64_t>{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}}) {
    SCOPED_TRACE(std::to_string(n) + " x " + std::to_string(k));
    MatMulParams p{false, true};
    p.post.has_bias = true;
    std::vector<HostTensor> inputs = {random_tensor(DataType::kF16, {1, 128, k}, seed++, -.5, .5),
                                      random_tensor(DataType::kF16, {n, k}, seed++, -.5, .5),
                                      random_tensor(DataType::kF16, {n}, seed++)};
    cuda_testing::expect_match(cuda_testing::run_both_layer(p, inputs, on), 1e-2, 3e-2);
  }
  EXPECT_GT(cuda::skinny_gemm_launches(), before);  // timed at least
}

// Every form of the kernel (every split of K, blocks of 64 and of 128 rows, mma.sync and, where
// the GPU runs it, wgmma), launched directly, answers as a float reference on the host: bias,
// GELU (erf), the residual, with partial row tiles and both weight layouts.
TEST(CudaMatMul, EverySkinnyGemmFormMatchesAReference) {
  KILN_REQUIRE_GPU();
  struct Case {
    int64_t rows, n, k;
    bool kn;
  };
  uint64_t seed = 1500;
  for (const Case& c : {Case{128, 192, 768, false}, Case{100, 128, 384, true},
                        Case{37, 64, 192, false}, Case{256, 64, 96, false}}) {
    const HostTensor a = random_tensor(DataType::kF16, {c.rows, c.k}, seed++, -.5, .5);
    const HostTensor w =
        random_tensor(DataType::kF16, c.kn ? Shape{c.k, c.n} : Shape{c.n, c.k}, seed++, -.5, .5);
    const HostTensor bias = random_tensor(DataType::kF16, {c.n}, seed++);
    const HostTensor res = random_tensor(DataType::kF16, {c.rows, c.n}, seed++);
    const auto at = [](const HostTensor& t, int64_t i) {
      return __half2float(static_cast<const __half*>(t.data())[i]);
    };
    std::vector<float> want(static_cast<size_t>(c.rows * c.n));
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = at(bias, j);
        for (int64_t q = 0; q < c.k; ++q) {
          sum += static_cast<double>(at(a, r * c.k + q)) * at(w, c.kn ? q * c.n + j : j * c.k + q);
        }
        sum = 0.5 * sum * (1 + std::erf(sum / std::sqrt(2.0)));
        want[static_cast<size_t>(r * c.n + j)] = static_cast<float>(sum + at(res, r * c.n + j));
      }
    }
    DeviceBytes da(a), dw(w), db(bias), dr(res), dy(res.nbytes());
    cuda::SkinnyPostOps post;
    post.bias = db.get();
    post.act = ActivationKind::kGelu;
    post.residual = dr.get();
    std::vector<int> forms;
    int device = 0;
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    for (bool wgmma : {false, true}) {
      for (int s : {1, 2, 3, 4, 6, 8}) {
        for (int block_rows : {0, 64, 128}) {
          const int form = cuda::skinny_form(s, block_rows, wgmma);
          if (cuda::skinny_gemm_form_valid(c.k, c.kn, form) &&
              (!wgmma || cuda::skinny_wgmma_available(device))) {
            forms.push_back(form);
          }
        }
      }
    }
    for (int form : forms) {
      SCOPED_TRACE(std::to_string(c.rows) + " x " + std::to_string(c.n) + " x " +
                   std::to_string(c.k) + (c.kn ? " [k, n]" : "") + ", " +
                   std::to_string(cuda::skinny_form_splits(form)) + " splits, block rows " +
                   std::to_string(cuda::skinny_form_rows(form)) +
                   (cuda::skinny_form_wgmma(form) ? ", wgmma" : ", mma.sync"));
      ASSERT_EQ(cudaMemset(dy.get(), 0xff, res.nbytes()), cudaSuccess);  // NaNs where unwritten
      cuda::launch_skinny_gemm(nullptr, "skinny", DataType::kF16, c.rows, c.n, c.k, form, da.get(),
                               dw.get(), c.kn, dy.get(), post);
      std::vector<__half> got(static_cast<size_t>(c.rows * c.n));
      ASSERT_EQ(cudaMemcpy(got.data(), dy.get(), res.nbytes(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      int bad = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const float g = __half2float(got[i]);
        if (!(std::abs(g - want[i]) <= 3e-2 + 1e-2 * std::abs(want[i])) && bad++ < 3) {
          ADD_FAILURE() << "element " << i << ": " << g << ", want " << want[i];
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

// programmatic_launch=on with gemm_skinny=only: BERT's chain at 128 rows (layer norm, projection
// of a constant [n, k] weight, layer norm, projection of a constant [k, n] weight with GELU and
// the residual) runs its skinny GEMMs launched early, streaming their weights while the layer norm
// ahead finishes, and answers as the CPU does.
TEST(CudaMatMul, SkinnyGemmsLaunchedEarlyMatchTheCpu) {
  KILN_REQUIRE_GPU();
  BuilderConfig config;
  apply_switch(config, "gemm_skinny=only");
  apply_switch(config, "programmatic_launch=on");
  EXPECT_TRUE(cuda::kernel_options(config.switches).programmatic_launch);
  EXPECT_FALSE(cuda::kernel_options({}).programmatic_launch);
  const DataType t = DataType::kF16;
  auto constant = [](Network& net, const std::string& name, const HostTensor& h) {
    std::vector<uint8_t> bytes(static_cast<const uint8_t*>(h.data()),
                               static_cast<const uint8_t*>(h.data()) + h.nbytes());
    return net.add_constant(name, Weights::from_bytes(h.dtype(), h.shape(), std::move(bytes)));
  };
  const HostTensor w1 = random_tensor(t, {768, 768}, 1400, -.05, .05);
  const HostTensor w2 = random_tensor(t, {768, 3072}, 1401, -.05, .05);  // [k, n]
  const HostTensor b2 = random_tensor(t, {3072}, 1402);
  const HostTensor g = random_tensor(t, {768}, 1403, .5, 1.5), beta = random_tensor(t, {768}, 1404);
  const int64_t before = cuda::skinny_gemm_launches();
  const auto r = cuda_testing::run_both(
      {random_tensor(t, {1, 128, 768}, 1405)},
      [&](Network& net, const std::vector<TensorId>& in) {
        const TensorId gamma = constant(net, "g", g), shift = constant(net, "beta", beta);
        auto x = net.add("ln1", NormalizationParams{}, {in[0], gamma, shift});
        auto h = net.add("proj", MatMulParams{false, true}, {x, constant(net, "w1", w1)});
        h = net.add("res", ElementwiseParams{BinaryOp::kAdd}, {h, x});
        h = net.add("ln2", NormalizationParams{}, {h, gamma, shift});
        auto f = net.add("fc", MatMulParams{}, {h, constant(net, "w2", w2)});
        f = net.add("bias", ElementwiseParams{BinaryOp::kAdd}, {f, constant(net, "b2", b2)});
        f = net.add("gelu", ActivationParams{ActivationKind::kGelu}, {f});
        return std::vector<TensorId>{f};
      },
      config);
  EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "matmul"), 2);
  cuda_testing::expect_match(r, 2e-2, 5e-2);
  EXPECT_GE(cuda::skinny_gemm_launches(), before + 2);
}

// programmatic_launch=on on cuBLASLt's GEMMs (gemm_skinny off): the layer norms and the flash
// attention between them are launched early, each waiting for the kernel ahead before it reads;
// the chain (projection, layer norm, attention of its output with itself, layer norm, at BERT's
// head shape) answers as the CPU does, and as the same plan built without the switch.
TEST(CudaMatMul, LayerNormsAndAttentionLaunchedEarlyMatchTheCpu) {
  KILN_REQUIRE_GPU();
  const DataType t = DataType::kF16;
  const HostTensor w = random_tensor(t, {64, 64}, 1600, -.2, .2);
  const HostTensor g = random_tensor(t, {64}, 1601, .5, 1.5), beta = random_tensor(t, {64}, 1602);
  const auto build = [&](Network& net, const std::vector<TensorId>& in) {
    const auto constant = [&](const std::string& name, const HostTensor& h) {
      std::vector<uint8_t> bytes(static_cast<const uint8_t*>(h.data()),
                                 static_cast<const uint8_t*>(h.data()) + h.nbytes());
      return net.add_constant(name, Weights::from_bytes(h.dtype(), h.shape(), std::move(bytes)));
    };
    const TensorId gamma = constant("g", g), shift = constant("beta", beta);
    auto x = net.add("proj", MatMulParams{false, true}, {in[0], constant("w", w)});
    x = net.add("ln1", NormalizationParams{}, {x, gamma, shift});
    x = net.add("attn", AttentionParams{}, {x, x, x});
    return std::vector<TensorId>{net.add("ln2", NormalizationParams{}, {x, gamma, shift})};
  };
  const std::vector<HostTensor> inputs = {random_tensor(t, {2, 12, 128, 64}, 1603)};
  BuilderConfig flash, early;  // the flash kernel, not cuDNN's (which is not launched early)
  apply_switch(flash, "attention_cudnn=off");
  apply_switch(early, "attention_cudnn=off");
  apply_switch(early, "programmatic_launch=on");
  const auto r = cuda_testing::run_both(inputs, build, early);
  EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "attention"), 1);
  cuda_testing::expect_match(r, 2e-2, 2e-2);
  // The GEMM's algorithm is chosen once per shape in the process: both plans run the same kernels.
  const auto plain = cuda_testing::run_both(inputs, build, flash);
  ASSERT_EQ(plain.gpu.size(), r.gpu.size());
  EXPECT_EQ(std::memcmp(plain.gpu[0].data(), r.gpu[0].data(), r.gpu[0].nbytes()), 0)
      << "launched early, the chain's values differ from its values launched as usual";
}

}  // namespace
}  // namespace kiln::engine
