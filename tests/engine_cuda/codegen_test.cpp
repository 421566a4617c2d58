// Generated pointwise kernels (cuda/codegen.h). The generator and NVRTC run without a GPU: every
// op's source compiles for the architectures we target, keys name the computation, a plan keeps
// its kernels. On a GPU: generated kernels against the CPU backend on both entry points (vector
// and one element per thread), and a loaded plan that runs without compiling anything.
#include "engine/cuda/codegen.h"

#include "engine/cuda/backend.h"

#include <random>

#include "cuda_testing.h"
#include "engine/layer_kinds.h"
#include "engine/plan.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using cuda::PointwiseSpec;
using testing::random_tensor;

// A program using every float op once (comparisons and logical ops give 0/1 floats, as in a
// fused chain), on inputs of the three float dtypes, ending in casts through f16 and bf16; with
// or without the special functions (lgamma, zeta, Bessel, ...), which take NVRTC most of its time.
PointwiseSpec every_op_spec(DataType output, bool special = true) {
  PointwiseSpec spec;
  spec.inputs = {DataType::kF32, DataType::kF16, DataType::kBF16};
  spec.output = output;
  int64_t last = 0;
  auto reg = [&] { return static_cast<int64_t>(spec.inputs.size() + spec.ops.size()) - 1; };
  const int binary_ops = special ? kNumBinaryOps : static_cast<int>(BinaryOp::kZeta);
  const int unary_ops = special ? kNumUnaryOps : static_cast<int>(UnaryOp::kLgamma);
  for (int op = 0; op < binary_ops; ++op) {
    spec.ops.push_back({0, op, last, op % 3, 0, 0});
    last = reg();
  }
  for (int op = 0; op < unary_ops; ++op) {
    spec.ops.push_back({1, op, last, 0, 0, 0});
    last = reg();
  }
  for (int op = 0; op < kNumActivationKinds; ++op) {
    spec.ops.push_back({2, op, last, 0, 0.25 * op, 6.0});
    last = reg();
  }
  for (DataType t : {DataType::kF16, DataType::kBF16, DataType::kF32}) {
    spec.ops.push_back({3, static_cast<int64_t>(t), last, 0, 0, 0});
    last = reg();
  }
  return spec;
}

TEST(CudaCodegen, EveryOpCompilesForEachArchitecture) {
  for (DataType out : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    const PointwiseSpec spec = every_op_spec(out, false);
    const std::string source = cuda::pointwise_source(spec);
    for (const char* entry : {"kiln_pw_vec", "kiln_pw_nd32", "kiln_pw_nd64"}) {
      EXPECT_NE(source.find(entry), std::string::npos) << entry;
    }
    // Every architecture for one output dtype (NVRTC takes ~2 s for this program on the CI
    // machine), the one we run on for the others.
    for (int cc : out == DataType::kF16 ? std::vector<int>{75, 80, 90} : std::vector<int>{90}) {
      SCOPED_TRACE("sm_" + std::to_string(cc) + " " + dtype_name(out));
      const auto image = cuda::compile_kernel("every op", source, cc);
      ASSERT_GT(image.size(), 4u);
      // An ELF file (a cubin), not PTX text.
      EXPECT_EQ(image[0], 0x7f);
      EXPECT_EQ(image[1], 'E');
    }
  }
}

// A kernel with a gathered input compiles (NVRTC, no GPU needed), and its key differs from the
// same program's without.
TEST(CudaCodegen, GatheredInputsCompile) {
  PointwiseSpec spec;
  spec.ops = {{0, static_cast<int64_t>(BinaryOp::kMul), 0, 1, 0, 0}};
  spec.inputs = {DataType::kF16, DataType::kF16};
  spec.output = DataType::kF16;
  const std::string plain = cuda::pointwise_key(spec);
  spec.gathered = {true, false};
  EXPECT_NE(cuda::pointwise_key(spec), plain);
  const std::string source = cuda::pointwise_source(spec);
  EXPECT_NE(source.find("p.gidx[0]"), std::string::npos);
  EXPECT_EQ(source.find("p.gidx[1]"), std::string::npos);
  const auto image = cuda::compile_kernel("gathered", source, 90);
  ASSERT_GT(image.size(), 4u);
  EXPECT_EQ(image[0], 0x7f);
}

// The special functions and orthogonal polynomials (special_math.h and orthogonal_polynomials.h,
// NVRTC's third and fourth headers) once, for the one architecture.
TEST(CudaCodegen, SpecialFunctionsCompile) {
  const auto image = cuda::compile_kernel(
      "special functions", cuda::pointwise_source(every_op_spec(DataType::kF32)), 90);
  ASSERT_GT(image.size(), 4u);
  EXPECT_EQ(image[0], 0x7f);
  EXPECT_EQ(image[1], 'E');
}

TEST(CudaCodegen, CompilesEachSourceOncePerProcess) {
  PointwiseSpec spec;
  spec.inputs = {DataType::kF16, DataType::kF16};
  spec.output = DataType::kF16;
  spec.ops = {{0, static_cast<int64_t>(BinaryOp::kMul), 0, 1, 0, 0},
              {2, static_cast<int64_t>(ActivationKind::kLeakyRelu), 2, 0, 0.125, 0}};
  const std::string source = cuda::pointwise_source(spec);
  const int before = cuda::kernels_compiled();
  const auto first = cuda::compile_kernel("a", source, 90);
  EXPECT_EQ(cuda::kernels_compiled(), before + 1);
  EXPECT_EQ(cuda::compile_kernel("a", source, 90), first);
  EXPECT_EQ(cuda::kernels_compiled(), before + 1);
  cuda::compile_kernel("a", source, 80);  // another architecture is another kernel
  EXPECT_EQ(cuda::kernels_compiled(), before + 2);
}

TEST(CudaCodegen, KeysNameTheComputationExactly) {
  PointwiseSpec a;
  a.inputs = {DataType::kF32};
  a.output = DataType::kF32;
  a.ops = {{2, static_cast<int64_t>(ActivationKind::kClamp), 0, 0, 0.0, 6.0}};
  PointwiseSpec b = a;
  EXPECT_EQ(cuda::pointwise_key(a), cuda::pointwise_key(b));
  b.ops[0].beta = std::nextafter(6.0f, 7.0f);  // one ulp apart: another kernel
  EXPECT_NE(cuda::pointwise_key(a), cuda::pointwise_key(b));
  b = a;
  b.inputs = {DataType::kF16};
  EXPECT_NE(cuda::pointwise_key(a), cuda::pointwise_key(b));
  b = a;
  b.output = DataType::kBF16;
  EXPECT_NE(cuda::pointwise_key(a), cuda::pointwise_key(b));
  // The constant is in the source exactly, as a hexadecimal float.
  EXPECT_NE(cuda::pointwise_source(a).find("0x1.8p+2f"), std::string::npos);
}

TEST(CudaCodegen, TakesFloatPointwiseLayersOnly) {
  Network net;
  auto x = net.add_input("x", DataType::kF16, {4, 8});
  auto i = net.add_input("i", DataType::kI64, {4, 8});
  auto relu = net.add("relu", ActivationParams{ActivationKind::kRelu}, {x});
  auto add = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {relu, x});
  auto iadd = net.add("iadd", ElementwiseParams{BinaryOp::kAdd}, {i, i});
  auto cmp = net.add("cmp", ElementwiseParams{BinaryOp::kLt}, {add, x});  // bool output
  auto red = net.add("sum", ReduceParams{ReduceOp::kSum, {1}, false}, {add});
  net.mark_output(iadd);
  net.mark_output(cmp);
  net.mark_output(red);
  std::map<std::string, bool> taken;
  for (const Layer& l : net.layers()) taken[l.name] = cuda::pointwise_spec(net, l).has_value();
  EXPECT_TRUE(taken["relu"]);
  EXPECT_TRUE(taken["add"]);
  EXPECT_FALSE(taken["iadd"]);
  EXPECT_FALSE(taken["cmp"]);
  EXPECT_FALSE(taken["sum"]);
}

TEST(CudaCodegen, CompileErrorsCarryNvrtcLog) {
  try {
    cuda::compile_kernel("broken", "extern \"C\" __global__ void k() { undeclared(); }", 90);
    FAIL() << "compiled";
  } catch (const InternalError& e) {
    EXPECT_NE(e.message().find("broken"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("undeclared"), std::string::npos) << e.message();
  }
  EXPECT_THROW(cuda::compile_kernel("k", "", 10), InvalidArgument);
}

Plan plan_with_kernels() {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {4});
  net.mark_output(net.add("relu", ActivationParams{ActivationKind::kRelu}, {x}), "y");
  Plan plan{net, EngineTarget{}};
  plan.target.device = "cuda";
  plan.target.compute_capability = 90;
  const auto spec = cuda::pointwise_spec(plan.network, plan.network.layers()[0]);
  const std::string source = cuda::pointwise_source(*spec);
  plan.target.kernels.push_back(
      {cuda::pointwise_key(*spec), source, cuda::compile_kernel("relu", source, 90)});
  return plan;
}

// One kernel per distinct computation; a kernel NVRTC cannot compile leaves its layers on the
// interpreter (a warning, not a failed build).
TEST(CudaCodegen, GeneratesOneKernelPerComputationAndSurvivesNvrtcFailures) {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {4, 8});
  auto a = net.add("relu_a", ActivationParams{ActivationKind::kRelu}, {x});
  auto b = net.add("relu_b", ActivationParams{ActivationKind::kRelu}, {a});  // the same kernel
  net.mark_output(net.add("neg", UnaryParams{UnaryOp::kNeg}, {b}), "y");
  EngineTarget target;
  target.device = "cuda";
  target.compute_capability = 90;
  EXPECT_EQ(cuda::generate_kernels(net, target), 3);
  EXPECT_EQ(target.kernels.size(), 2u);
  EngineTarget old;
  old.device = "cuda";
  old.compute_capability = 10;  // no NVRTC compiles for it
  EXPECT_EQ(cuda::generate_kernels(net, old), 0);
  EXPECT_TRUE(old.kernels.empty());
}

TEST(CudaCodegen, PlanKeepsItsKernels) {
  const Plan plan = plan_with_kernels();
  const auto bytes = serialize_plan(plan);
  const Plan back = deserialize_plan(bytes.data(), bytes.size());
  ASSERT_EQ(back.target.kernels.size(), 1u);
  EXPECT_EQ(back.target.kernels[0].key, plan.target.kernels[0].key);
  EXPECT_EQ(back.target.kernels[0].source, plan.target.kernels[0].source);
  EXPECT_EQ(back.target.kernels[0].image, plan.target.kernels[0].image);

  Plan twice = plan;
  twice.target.kernels.push_back(plan.target.kernels[0]);
  auto b = serialize_plan(twice);
  try {
    deserialize_plan(b.data(), b.size());
    FAIL() << "loaded a plan whose kernel appears twice";
  } catch (const CorruptInput& e) {
    EXPECT_NE(e.message().find("appears twice"), std::string::npos) << e.message();
  }
  Plan on_cpu = plan;
  on_cpu.target.device = "cpu";
  b = serialize_plan(on_cpu);
  EXPECT_THROW(deserialize_plan(b.data(), b.size()), CorruptInput);
}

// A random chain of float ops over `inputs` as one fused layer.
FusedElementwiseParams random_program(size_t inputs, int ops, unsigned seed) {
  std::mt19937 rng(seed);
  FusedElementwiseParams p;
  // Ops that keep values finite and of order one on inputs in [0.5, 2].
  const BinaryOp binary[] = {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kMax,
                             BinaryOp::kMin};
  const UnaryOp unary[] = {UnaryOp::kNeg, UnaryOp::kAbs, UnaryOp::kSin, UnaryOp::kErf};
  const ActivationKind acts[] = {ActivationKind::kRelu, ActivationKind::kSigmoid,
                                 ActivationKind::kSilu, ActivationKind::kGelu,
                                 ActivationKind::kClamp};
  int64_t last = 0;
  for (int k = 0; k < ops; ++k) {
    const int64_t regs = static_cast<int64_t>(inputs) + k;
    const int kind = static_cast<int>(rng() % 3);
    const int64_t other = static_cast<int64_t>(rng() % static_cast<unsigned>(regs));
    if (kind == 0) {
      p.program.insert(p.program.end(), {0, static_cast<int64_t>(binary[rng() % 5]), last, other});
      p.constants.insert(p.constants.end(), {0, 0});
    } else if (kind == 1) {
      p.program.insert(p.program.end(), {1, static_cast<int64_t>(unary[rng() % 4]), last, 0});
      p.constants.insert(p.constants.end(), {0, 0});
    } else {
      p.program.insert(p.program.end(), {2, static_cast<int64_t>(acts[rng() % 5]), last, 0});
      p.constants.insert(p.constants.end(), {-1.0, 1.5});
    }
    last = regs;
    p.fused_layers.push_back("op" + std::to_string(k));
  }
  return p;
}

// Both entry points on broadcasts of every kind: per-channel in either layout, scalars, rows,
// an innermost dim that is not a multiple of the vector width, mixed dtypes.
TEST(CudaCodegen, GeneratedKernelsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  struct Case {
    std::vector<Shape> shapes;
    DataType dtype;
  };
  const std::vector<Case> cases = {
      {{{4, 16, 7, 7}, {16, 1, 1}, {1}}, DataType::kF32},      // NCHW per channel, inner 49
      {{{4, 7, 7, 16}, {16}, {4, 7, 7, 16}}, DataType::kF16},  // NHWC per channel (vector)
      {{{3, 5, 64}, {3, 5, 1}, {64}}, DataType::kBF16},        // rows and columns
      {{{2, 3, 5}, {1}, {2, 3, 5}}, DataType::kF16},           // odd innermost
      {{{1000}, {1000}}, DataType::kF32},                      // flat
  };
  unsigned seed = 1;
  for (const Case& c : cases) {
    std::vector<HostTensor> inputs;
    for (const Shape& s : c.shapes) inputs.push_back(random_tensor(c.dtype, s, seed++, 0.5, 2));
    const auto program = random_program(inputs.size(), 12, seed++);
    SCOPED_TRACE(shape_to_string(c.shapes[0]) + " " + dtype_name(c.dtype));
    const double tol = c.dtype == DataType::kF32 ? 1e-5 : 2e-2;
    auto r = cuda_testing::run_both_layer(program, inputs);
    EXPECT_EQ(r.gpu_plan.target.kernels.size(), 1u);
    cuda_testing::expect_match(r, tol, tol);
  }
}

TEST(CudaCodegen, LoadedPlanRunsWithoutCompiling) {
  KILN_REQUIRE_GPU();
  const HostTensor x = random_tensor(DataType::kF32, {8, 32}, 3, -2, 2);
  Network net;
  auto in = net.add_input("x", DataType::kF32, {8, 32});
  auto a = net.add("silu", ActivationParams{ActivationKind::kSilu}, {in});
  auto b = net.add("mul", ElementwiseParams{BinaryOp::kMul}, {a, in});
  net.mark_output(net.add("neg", UnaryParams{UnaryOp::kNeg}, {b}), "y");
  BuilderConfig config;
  config.device = "cuda:0";
  const Plan plan = build(net, config);
  ASSERT_EQ(plan.target.kernels.size(), 1u);
  const auto bytes = serialize_plan(plan);
  const int before = cuda::kernels_compiled();
  const Plan loaded = deserialize_plan(bytes.data(), bytes.size());
  ExecutionContext ctx(std::make_shared<const Engine>(loaded.network, loaded.target));
  const auto y = ctx.run({x});
  EXPECT_EQ(cuda::kernels_compiled(), before);
  std::vector<double> want;
  for (double v : testing::to_doubles(x)) want.push_back(-(v / (1 + std::exp(-v))) * v);
  EXPECT_TRUE(testing::near(y[0], want, 1e-5, 1e-6));

  // cuda_codegen=off: no kernels in the plan, the same answers from the interpreter.
  apply_switch(config, "cuda_codegen=off");
  const Plan off = build(net, config);
  EXPECT_TRUE(off.target.kernels.empty());
  ExecutionContext off_ctx(std::make_shared<const Engine>(off.network, off.target));
  EXPECT_TRUE(testing::near(off_ctx.run({x})[0], want, 1e-5, 1e-6));
}

// Gathered inputs (the gathered_inputs pass): y = exp(gather(x, idx, axis) * t) + t, the gather
// read by the fused kernel. rotate_half's indices along the last axis (runs of 8: the vector
// path, in f32 and f16), wrapped and repeated indices along a middle axis, a source broadcast over
// the batch, a last axis of 12 (no vectors in f16), each on the generated kernel and on the
// interpreter (cuda_codegen=off). Values as the CPU's gather and elementwise layers give them.
TEST(CudaCodegen, GatheredInputsMatchTheGather) {
  KILN_REQUIRE_GPU();
  struct Case {
    Shape x, t;
    int64_t axis;
    std::vector<int64_t> indices;
  };
  std::vector<int64_t> rotate, rotate12;
  for (int64_t i = 0; i < 64; ++i) rotate.push_back((i + 32) % 64);
  for (int64_t i = 0; i < 12; ++i) rotate12.push_back((i + 6) % 12);
  for (const Case& c : {Case{{2, 40, 4, 64}, {2, 40, 4, 64}, 3, rotate},
                        Case{{2, 3, 4}, {2, 4, 4}, 1, {2, -1, 0, 0}},
                        Case{{1, 6, 16}, {3, 6, 12}, -1, {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10}},
                        Case{{3, 5, 12}, {3, 5, 12}, 2, rotate12}}) {
    for (DataType dt : {DataType::kF32, DataType::kF16}) {
      for (const bool codegen : {true, false}) {
        SCOPED_TRACE(shape_to_string(c.x) + " " + dtype_name(dt) + (codegen ? "" : " interpreter"));
        BuilderConfig config;
        if (!codegen) apply_switch(config, "cuda_codegen=off");
        const auto r = cuda_testing::run_both(
            {random_tensor(dt, c.x, 101), random_tensor(dt, c.t, 102)},
            [&](Network& net, const std::vector<TensorId>& in) {
              const auto n = static_cast<int64_t>(c.indices.size());
              auto idx = net.add_constant("idx", Weights::from_ints({n}, c.indices));
              auto g = net.add("gather", GatherParams{GatherMode::kDefault, c.axis}, {in[0], idx});
              auto e = net.add("exp", UnaryParams{UnaryOp::kExp},
                               {net.add("mul", ElementwiseParams{BinaryOp::kMul}, {g, in[1]})});
              return std::vector<TensorId>{
                  net.add("add", ElementwiseParams{BinaryOp::kAdd}, {e, in[1]})};
            },
            config);
        EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "gather"), 0);
        EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "fused_elementwise"), 1);
        EXPECT_EQ(r.gpu_plan.target.kernels.size(), codegen ? 1u : 0u);
        const double tol = dt == DataType::kF32 ? 1e-5 : 2e-3;
        cuda_testing::expect_match(r, tol, tol);
      }
    }
  }
}

}  // namespace
}  // namespace kiln::engine
