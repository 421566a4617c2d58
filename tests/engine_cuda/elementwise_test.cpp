// The CUDA elementwise family against the CPU backend: binary (broadcasting, float and integer),
// unary, activations, cast, select, f16/bf16 and fused chains.
#include "cuda_testing.h"

namespace kiln::engine {
namespace {

using cuda_testing::compare_layer;
using testing::random_tensor;

constexpr BinaryOp kBinaryOps[] = {
    BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul,      BinaryOp::kDiv, BinaryOp::kPow,
    BinaryOp::kMax, BinaryOp::kMin, BinaryOp::kFloorDiv, BinaryOp::kMod, BinaryOp::kEq,
    BinaryOp::kNe,  BinaryOp::kLt,  BinaryOp::kLe,       BinaryOp::kGt,  BinaryOp::kGe,
    BinaryOp::kAnd, BinaryOp::kOr,  BinaryOp::kXor};

TEST(CudaElementwise, FloatBinaryOpsBroadcast) {
  KILN_REQUIRE_GPU();
  for (BinaryOp op : kBinaryOps) {
    if (op == BinaryOp::kAnd || op == BinaryOp::kOr || op == BinaryOp::kXor) continue;
    SCOPED_TRACE(binary_op_name(op));
    // Positive bases keep pow real; distinct seeds keep the operands different.
    const double lo = op == BinaryOp::kPow ? 0.1 : -3;
    compare_layer(ElementwiseParams{op}, {random_tensor(DataType::kF32, {2, 3, 1, 5}, 1, lo, 3),
                                          random_tensor(DataType::kF32, {3, 4, 1}, 2, 0.5, 3)});
  }
}

// Single ops over one float dtype move 16-byte vectors: a channels-last squeeze-excitation scale
// ([N, 1, 1, C] over [N, H, W, C]), a per-row scalar broadcast along the vectors ([N, H, W, 1]),
// and a scalar.
TEST(CudaElementwise, VectorizedSingleOps) {
  KILN_REQUIRE_GPU();
  for (DataType t : {DataType::kF32, DataType::kF16}) {
    SCOPED_TRACE(dtype_name(t));
    const double tol = t == DataType::kF32 ? 1e-6 : 1e-2;
    const HostTensor x = random_tensor(t, {3, 5, 7, 32}, 15, 0.5, 3);
    for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv,
                        BinaryOp::kMax, BinaryOp::kPow}) {
      SCOPED_TRACE(binary_op_name(op));
      compare_layer(ElementwiseParams{op}, {x, random_tensor(t, {3, 1, 1, 32}, 16, 0.5, 2)}, tol,
                    tol);
      compare_layer(ElementwiseParams{op}, {random_tensor(t, {3, 5, 7, 1}, 17, 0.5, 2), x}, tol,
                    tol);
      compare_layer(ElementwiseParams{op}, {x, random_tensor(t, {1}, 18, 0.5, 2)}, tol, tol);
    }
    compare_layer(ActivationParams{ActivationKind::kSilu}, {x}, tol, tol);
    compare_layer(UnaryParams{UnaryOp::kExp}, {x}, tol, tol);
  }
}

TEST(CudaElementwise, IntegerBinaryOps) {
  KILN_REQUIRE_GPU();
  for (BinaryOp op : kBinaryOps) {
    if (op == BinaryOp::kDiv) continue;  // integer true division is rejected by inference
    SCOPED_TRACE(binary_op_name(op));
    const double lo = op == BinaryOp::kPow ? 0 : -20;
    compare_layer(ElementwiseParams{op}, {random_tensor(DataType::kI64, {4, 33}, 3, lo, 20),
                                          random_tensor(DataType::kI64, {33}, 4, 1, 5)});
  }
  compare_layer(ElementwiseParams{BinaryOp::kAnd}, {random_tensor(DataType::kBool, {70}, 5, 0, 1),
                                                    random_tensor(DataType::kBool, {70}, 6, 0, 1)});
}

TEST(CudaElementwise, UnaryOps) {
  KILN_REQUIRE_GPU();
  for (int i = 0; i < kNumUnaryOps; ++i) {
    const auto op = static_cast<UnaryOp>(i);
    SCOPED_TRACE(unary_op_name(op));
    if (op == UnaryOp::kNot) {
      compare_layer(UnaryParams{op}, {random_tensor(DataType::kBool, {100}, 7, 0, 1)});
      continue;
    }
    const bool domain = op == UnaryOp::kAsin || op == UnaryOp::kAcos || op == UnaryOp::kErfinv;
    const bool positive = op == UnaryOp::kLog || op == UnaryOp::kSqrt || op == UnaryOp::kRsqrt ||
                          op == UnaryOp::kLog2 || op == UnaryOp::kLog1p ||
                          (op >= UnaryOp::kK0 && op <= UnaryOp::kK1e) || op == UnaryOp::kBesselY0 ||
                          op == UnaryOp::kBesselY1;
    const bool probability = op == UnaryOp::kNdtri;
    // The Bessel and Airy functions over more than one branch of their algorithms.
    const bool wide = op >= UnaryOp::kI0 && op <= UnaryOp::kAiryAi;
    double lo = domain ? -0.99 : (positive ? 0.05 : -3), hi = domain ? 0.99 : 3;
    if (probability) lo = 0.001, hi = 0.999;
    if (wide) hi = 20, lo = positive ? 0.05 : -20;
    compare_layer(UnaryParams{op}, {random_tensor(DataType::kF32, {3, 257}, 8, lo, hi)}, 1e-5,
                  1e-6);
  }
  compare_layer(UnaryParams{UnaryOp::kNeg}, {random_tensor(DataType::kI64, {50}, 9, -100, 100)});
  compare_layer(UnaryParams{UnaryOp::kAbs}, {random_tensor(DataType::kI32, {50}, 10, -100, 100)});
}

// The binary special functions on their domains: ζ(s > 1, q), ψ^(n) with integer orders, and the
// incomplete gammas from tiny to large shapes.
TEST(CudaElementwise, SpecialBinaryOps) {
  KILN_REQUIRE_GPU();
  compare_layer(ElementwiseParams{BinaryOp::kZeta},
                {random_tensor(DataType::kF32, {4, 1}, 19, 1.1, 8),
                 random_tensor(DataType::kF32, {64}, 20, -9.5, 30)});
  compare_layer(ElementwiseParams{BinaryOp::kPolygamma},
                {testing::tensor_from(DataType::kF32, {5, 1}, {0, 1, 2, 3, 4}),
                 random_tensor(DataType::kF32, {64}, 21, -9.5, 30)});
  for (BinaryOp op : {BinaryOp::kIgamma, BinaryOp::kIgammac}) {
    SCOPED_TRACE(binary_op_name(op));
    compare_layer(ElementwiseParams{op}, {random_tensor(DataType::kF32, {4, 1}, 22, 0.01, 200),
                                          random_tensor(DataType::kF32, {64}, 23, 0, 250)});
  }
}

// The orthogonal polynomials over x in [-3, 3], inside and outside their intervals, at degrees
// -1 to 40 (the recurrences, which round as on the CPU, and the trig forms, where the device's
// cosf and acosf differ from libm's by ulps that the degree multiplies).
TEST(CudaElementwise, OrthogonalPolynomials) {
  KILN_REQUIRE_GPU();
  std::vector<double> degrees;
  for (int d = -1; d <= 40; ++d) degrees.push_back(d);
  const HostTensor x = random_tensor(DataType::kF32, {64, 1}, 24, -3, 3);
  const HostTensor n = testing::tensor_from(DataType::kF32, {1, 42}, degrees);
  for (int i = static_cast<int>(BinaryOp::kChebyshevT); i < kNumBinaryOps; ++i) {
    const auto op = static_cast<BinaryOp>(i);
    SCOPED_TRACE(binary_op_name(op));
    compare_layer(ElementwiseParams{op}, {x, n}, 1e-4, 1e-3);
  }
}

TEST(CudaElementwise, Activations) {
  KILN_REQUIRE_GPU();
  for (int i = 1; i <= static_cast<int>(ActivationKind::kSelu); ++i) {  // 0 is kNone
    const auto kind = static_cast<ActivationKind>(i);
    SCOPED_TRACE(activation_name(kind));
    ActivationParams p{kind, 0.1, 0.0};
    if (kind == ActivationKind::kSoftplus) p = {kind, 1.5, 20};
    if (kind == ActivationKind::kClamp) p = {kind, -0.5, 1.25};
    if (kind == ActivationKind::kElu) p = {kind, 1.0, 0};
    compare_layer(p, {random_tensor(DataType::kF32, {4, 1000}, 11, -6, 6)}, 1e-5, 1e-6);
  }
}

TEST(CudaElementwise, HalfPrecisions) {
  KILN_REQUIRE_GPU();
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    SCOPED_TRACE(dtype_name(t));
    compare_layer(ElementwiseParams{BinaryOp::kMul},
                  {random_tensor(t, {8, 64}, 12), random_tensor(t, {64}, 13)}, 1e-2, 1e-3);
    compare_layer(ActivationParams{ActivationKind::kGelu}, {random_tensor(t, {1000}, 14)}, 1e-2,
                  1e-3);
  }
}

TEST(CudaElementwise, Cast) {
  KILN_REQUIRE_GPU();
  const DataType types[] = {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kI64,
                            DataType::kI32, DataType::kI8,  DataType::kU8,   DataType::kBool};
  for (DataType from : types) {
    for (DataType to : types) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      const double lo = to == DataType::kU8 || from == DataType::kU8 ? 0 : -100;
      compare_layer(CastParams{to}, {random_tensor(from, {3, 41}, 15, lo, 100)});
    }
  }
}

TEST(CudaElementwise, Select) {
  KILN_REQUIRE_GPU();
  compare_layer(SelectParams{}, {random_tensor(DataType::kBool, {4, 1, 6}, 16, 0, 1),
                                 random_tensor(DataType::kF32, {5, 6}, 17),
                                 random_tensor(DataType::kF32, {4, 5, 1}, 18)});
  compare_layer(SelectParams{}, {random_tensor(DataType::kBool, {30}, 19, 0, 1),
                                 random_tensor(DataType::kI64, {30}, 20, -9, 9),
                                 random_tensor(DataType::kI64, {1}, 21, -9, 9)});
}

TEST(CudaElementwise, FusedChainRunsAsOneKernel) {
  KILN_REQUIRE_GPU();
  auto r = cuda_testing::run_both(
      {random_tensor(DataType::kF32, {2, 8, 33}, 22), random_tensor(DataType::kF32, {33}, 23),
       random_tensor(DataType::kF32, {8, 1}, 24)},
      [](Network& net, const std::vector<TensorId>& in) {
        auto a = net.add("add", ElementwiseParams{BinaryOp::kAdd}, {in[0], in[1]});
        auto b = net.add("act", ActivationParams{ActivationKind::kSilu}, {a});
        auto c = net.add("mul", ElementwiseParams{BinaryOp::kMul}, {b, in[2]});
        auto d = net.add("cast", CastParams{DataType::kF16}, {c});
        auto e = net.add("neg", UnaryParams{UnaryOp::kNeg}, {d});
        return std::vector<TensorId>{e};
      });
  EXPECT_EQ(cuda_testing::count_layers(r.gpu_plan, "fused_elementwise"), 1);
  cuda_testing::expect_match(r, 1e-3, 1e-3);
}

}  // namespace
}  // namespace kiln::engine
