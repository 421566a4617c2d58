// Converters of elementwise ops: arithmetic and comparisons with tensors or scalars (torch type
// promotion), logical ops, unary math and the special functions.
#include "conversion/converters/operands.h"
#include "conversion/converters/shuffle_helpers.h"
#include "conversion/dtypes.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::BinaryOp;
using engine::DataType;
using engine::UnaryOp;
using torch::jit::Node;

std::optional<std::string> alpha_is_static(const Node* n) {
  if (n->inputs().size() < 3) return std::nullopt;
  if (torch::jit::toIValue(n->input(2))) return std::nullopt;
  return std::string("alpha must be a constant");
}

engine::TensorId binary(ConversionContext& ctx, const Node* n, BinaryOp op, BinaryOperands o) {
  if ((op == BinaryOp::kDiv || op >= BinaryOp::kZeta) && !engine::is_floating(o.dtype)) {
    // True division and the special functions of integers give floats, as in torch.
    o.a = ctx.cast(n, o.a, DataType::kF32);
    o.b = ctx.cast(n, o.b, DataType::kF32);
  }
  return ctx.add(n, engine::ElementwiseParams{op}, {o.a, o.b});
}

engine::TensorId binary(ConversionContext& ctx, const Node* n, BinaryOp op,
                        const torch::jit::Value* a, const torch::jit::Value* b) {
  return binary(ctx, n, op, binary_operands(ctx, n, a, b));
}

// add/sub with alpha: a + alpha * b.
ConvertFn add_like(BinaryOp op) {
  return [op](ConversionContext& ctx, const Node* n) {
    const double alpha = n->inputs().size() > 2 ? static_number(ctx, n->input(2)) : 1.0;
    if (alpha == 1.0) {
      ctx.set_tensor(n->output(), binary(ctx, n, op, n->input(0), n->input(1)));
      return;
    }
    BinaryOperands o = binary_operands(ctx, n, n->input(0), n->input(1));
    const auto scale = ctx.constant(at::scalar_tensor(alpha).to(to_scalar_type(o.dtype)), "alpha");
    const auto scaled =
        ctx.add(n, engine::ElementwiseParams{BinaryOp::kMul}, {o.b, scale}, "alpha");
    ctx.set_tensor(n->output(), ctx.add(n, engine::ElementwiseParams{op}, {o.a, scaled}));
  };
}

ConvertFn simple_binary(BinaryOp op) {
  return [op](ConversionContext& ctx, const Node* n) {
    ctx.set_tensor(n->output(), binary(ctx, n, op, n->input(0), n->input(1)));
  };
}

// rsub(a, b, alpha) = b - alpha * a.
void convert_rsub(ConversionContext& ctx, const Node* n) {
  const double alpha = static_number(ctx, n->input(2));
  BinaryOperands o = binary_operands(ctx, n, n->input(1), n->input(0));
  engine::TensorId scaled = o.b;
  if (alpha != 1.0) {
    const auto scale = ctx.constant(at::scalar_tensor(alpha).to(to_scalar_type(o.dtype)), "alpha");
    scaled = ctx.add(n, engine::ElementwiseParams{BinaryOp::kMul}, {o.b, scale}, "alpha");
  }
  ctx.set_tensor(n->output(), ctx.add(n, engine::ElementwiseParams{BinaryOp::kSub}, {o.a, scaled}));
}

std::optional<std::string> rounding_mode_is_static(const Node* n) {
  if (n->inputs().size() < 3 || is_none(n->input(2)) || torch::jit::toIValue(n->input(2))) {
    return std::nullopt;
  }
  return std::string("rounding_mode must be a constant");
}

void convert_div(ConversionContext& ctx, const Node* n) {
  std::string mode;
  if (n->inputs().size() > 2 && !is_none(n->input(2))) {
    mode = torch::jit::toIValue(n->input(2))->toStringRef();
  }
  if (mode.empty()) {
    ctx.set_tensor(n->output(), binary(ctx, n, BinaryOp::kDiv, n->input(0), n->input(1)));
  } else if (mode == "floor") {
    ctx.set_tensor(n->output(), binary(ctx, n, BinaryOp::kFloorDiv, n->input(0), n->input(1)));
  } else {
    KILN_CHECK(mode == "trunc", InvalidArgument, "unknown rounding_mode `", mode, "`");
    BinaryOperands o = binary_operands(ctx, n, n->input(0), n->input(1));
    if (engine::is_floating(o.dtype)) {
      auto q = ctx.add(n, engine::ElementwiseParams{BinaryOp::kDiv}, {o.a, o.b}, "div");
      ctx.set_tensor(n->output(), ctx.add(n, engine::UnaryParams{UnaryOp::kTrunc}, {q}));
    } else {
      // Integer truncating division: floor division corrected where the signs differ and the
      // division is inexact: trunc(a/b) = floor(a/b) + (a % b != 0 && sign(a) != sign(b)).
      auto fa = ctx.cast(n, o.a, DataType::kF32), fb = ctx.cast(n, o.b, DataType::kF32);
      auto q = ctx.add(n, engine::ElementwiseParams{BinaryOp::kDiv}, {fa, fb}, "div");
      auto t = ctx.add(n, engine::UnaryParams{UnaryOp::kTrunc}, {q}, "trunc");
      ctx.set_tensor(n->output(), ctx.cast(n, t, o.dtype));
    }
  }
}

ConvertFn comparison(BinaryOp op) {
  return simple_binary(op);
}

ConvertFn logical(BinaryOp op) {
  return [op](ConversionContext& ctx, const Node* n) {
    auto a = ctx.cast(n, ctx.tensor(n->input(0), DataType::kBool), DataType::kBool);
    auto b = ctx.cast(n, ctx.tensor(n->input(1), DataType::kBool), DataType::kBool);
    ctx.set_tensor(n->output(), ctx.add(n, engine::ElementwiseParams{op}, {a, b}));
  };
}

// &, |, ^ (and bitwise_and/or/xor): logical on bools, bitwise on integers, after torch's
// promotion; floats have no bitwise ops.
ConvertFn bitwise(BinaryOp op) {
  return [op](ConversionContext& ctx, const Node* n) {
    BinaryOperands o = binary_operands(ctx, n, n->input(0), n->input(1));
    KILN_CHECK(o.dtype == DataType::kBool || engine::is_integer(o.dtype), InvalidArgument,
               n->kind().toQualString(), " of ", engine::dtype_name(o.dtype),
               " tensors (bitwise ops take integers and bools)");
    ctx.set_tensor(n->output(), ctx.add(n, engine::ElementwiseParams{op}, {o.a, o.b}));
  };
}

void convert_logical_not(ConversionContext& ctx, const Node* n) {
  auto a = ctx.cast(n, ctx.tensor(n->input(0)), DataType::kBool);
  ctx.set_tensor(n->output(), ctx.add(n, engine::UnaryParams{UnaryOp::kNot}, {a}));
}

// ~x: not of bools, every bit flipped of integers (x ^ -1); floats have no bitwise ops.
void convert_bitwise_not(ConversionContext& ctx, const Node* n) {
  const engine::TensorId x = ctx.tensor(n->input(0));
  const DataType dtype = ctx.desc(x).dtype;
  if (dtype == DataType::kBool) {
    ctx.set_tensor(n->output(), ctx.add(n, engine::UnaryParams{UnaryOp::kNot}, {x}));
    return;
  }
  KILN_CHECK(engine::is_integer(dtype), InvalidArgument, "bitwise_not of a ",
             engine::dtype_name(dtype), " tensor (bitwise ops take integers and bools)");
  const auto ones = ctx.constant(at::scalar_tensor(-1).to(to_scalar_type(dtype)), "all_ones");
  ctx.set_tensor(n->output(), ctx.add(n, engine::ElementwiseParams{BinaryOp::kXor}, {x, ones}));
}

// Unary math on floats: integer inputs are computed in f32, as torch does for these ops.
ConvertFn unary(UnaryOp op, bool integers_stay = false) {
  return [op, integers_stay](ConversionContext& ctx, const Node* n) {
    auto x = ctx.tensor(n->input(0));
    if (!integers_stay && !engine::is_floating(ctx.desc(x).dtype))
      x = ctx.cast(n, x, DataType::kF32);
    ctx.set_tensor(n->output(), ctx.add(n, engine::UnaryParams{op}, {x}));
  };
}

// copysign(a, b): a's magnitude with b's sign bit, in torch's promoted dtype, integers and bools
// in f32 (torch's float result).
void convert_copysign(ConversionContext& ctx, const Node* n) {
  BinaryOperands o = binary_operands(ctx, n, n->input(0), n->input(1));
  if (!engine::is_floating(o.dtype)) {
    o.a = ctx.cast(n, o.a, DataType::kF32);
    o.b = ctx.cast(n, o.b, DataType::kF32);
  }
  ctx.set_tensor(n->output(),
                 ctx.add(n, engine::ElementwiseParams{BinaryOp::kCopysign}, {o.a, o.b}));
}

// signbit(x): the sign bit of floats (set for -0 and negative NaNs: copysign(1, x) < 0), x < 0 of
// integers, false of bools.
void convert_signbit(ConversionContext& ctx, const Node* n) {
  engine::TensorId x = ctx.tensor(n->input(0));
  const DataType dtype = ctx.desc(x).dtype;
  if (dtype == DataType::kBool) {
    ctx.set_tensor(n->output(), ctx.add(n, engine::ElementwiseParams{BinaryOp::kNe}, {x, x}));
    return;
  }
  if (engine::is_floating(dtype)) {
    const auto one = ctx.constant(at::scalar_tensor(1).to(to_scalar_type(dtype)), "one");
    x = ctx.add(n, engine::ElementwiseParams{BinaryOp::kCopysign}, {one, x}, "copysign");
  }
  const auto zero = ctx.constant(at::scalar_tensor(0).to(to_scalar_type(dtype)), "zero");
  ctx.set_tensor(n->output(), ctx.add(n, engine::ElementwiseParams{BinaryOp::kLt}, {x, zero}));
}

// A floating tensor of `n`'s input `i`: integers computed in f32, as torch does for float ops.
engine::TensorId float_input(ConversionContext& ctx, const Node* n, size_t i) {
  auto x = ctx.tensor(n->input(i));
  return engine::is_floating(ctx.desc(x).dtype) ? x : ctx.cast(n, x, DataType::kF32);
}

// A 0-d constant of x's dtype.
engine::TensorId scalar_like(ConversionContext& ctx, engine::TensorId x, double v,
                             const std::string& name) {
  return ctx.constant(at::scalar_tensor(v).to(to_scalar_type(ctx.desc(x).dtype)), name);
}

// The int argument `i` of polygamma (its order) or mvlgamma (its p), which must be a constant of
// at least `least`: others are left to torch, which rejects them.
CapabilityValidator static_int_at_least(size_t i, int64_t least, const char* what) {
  return [=](const Node* n) -> std::optional<std::string> {
    const auto v = torch::jit::toIValue(n->input(i));
    if (v && v->isInt() && v->toInt() >= least) return std::nullopt;
    return std::string(what) + " must be a constant integer >= " + std::to_string(least);
  };
}

// polygamma(n, x): one layer, ψ^(n) of the order as a constant operand.
void convert_polygamma(ConversionContext& ctx, const Node* n) {
  const auto x = float_input(ctx, n, 1);
  const auto order = scalar_like(ctx, x, static_number(ctx, n->input(0)), "order");
  ctx.set_tensor(n->output(),
                 ctx.add(n, engine::ElementwiseParams{BinaryOp::kPolygamma}, {order, x}));
}

// mvlgamma(x, p) = Σ_{i<p} lgamma(x - i/2) + p (p - 1)/4 log π, summed in torch's order. (torch
// raises where some x <= (p - 1)/2; the engine cannot raise on values, and computes there too.)
void convert_mvlgamma(ConversionContext& ctx, const Node* n) {
  const auto x = float_input(ctx, n, 0);
  const int64_t p = torch::jit::toIValue(n->input(1))->toInt();
  engine::TensorId sum = -1;
  for (int64_t i = p - 1; i >= 0; --i) {
    auto shifted = x;
    if (i > 0) {
      const auto half = scalar_like(ctx, x, 0.5 * static_cast<double>(i), "shift");
      shifted = ctx.add(n, engine::ElementwiseParams{BinaryOp::kSub}, {x, half}, "shift");
    }
    const auto term = ctx.add(n, engine::UnaryParams{UnaryOp::kLgamma}, {shifted}, "lgamma");
    sum =
        sum < 0 ? term : ctx.add(n, engine::ElementwiseParams{BinaryOp::kAdd}, {sum, term}, "sum");
  }
  const double log_pi = 1.14472988584940017414;
  const auto c = scalar_like(ctx, x, static_cast<double>(p * (p - 1)) / 4 * log_pi, "constant");
  ctx.set_tensor(n->output(), ctx.add(n, engine::ElementwiseParams{BinaryOp::kAdd}, {sum, c}));
}

// An orthogonal polynomial (x, n): x and n promoted together as torch does, integers and bools
// computed in f32. torch implements them for f32 and f64 only and raises for 16-bit floats; so
// does this.
ConvertFn orthogonal_polynomial(BinaryOp op) {
  return [op](ConversionContext& ctx, const Node* n) {
    const BinaryOperands o = binary_operands(ctx, n, n->input(0), n->input(1));
    KILN_CHECK(o.dtype != DataType::kF16 && o.dtype != DataType::kBF16, InvalidArgument,
               n->kind().toQualString(), " of ", engine::dtype_name(o.dtype),
               " operands: torch computes the orthogonal polynomials in f32 or f64 only");
    ctx.set_tensor(n->output(), binary(ctx, n, op, o));
  };
}

void add_binary(Registry& r, const std::string& name, ConvertFn fn, CapabilityValidator v = {}) {
  r.add_converter(with_dynamic_shapes(
      {{name + ".Tensor", name + ".Scalar", name + "_.Tensor", name + "_.Scalar"}, fn, v}));
}

}  // namespace

void register_elementwise_converters(Registry& r) {
  // Elementwise layers read no dims (broadcasts of dynamic dims resolve at run time): each
  // takes dynamic shapes.
  add_binary(r, "aten::add", add_like(BinaryOp::kAdd), alpha_is_static);
  add_binary(r, "aten::sub", add_like(BinaryOp::kSub), alpha_is_static);
  add_binary(r, "aten::mul", simple_binary(BinaryOp::kMul));
  add_binary(r, "aten::div", convert_div);
  r.add_converter(with_dynamic_shapes(
      {{"aten::div.Tensor_mode", "aten::div.Scalar_mode", "aten::div_.Tensor_mode"},
       convert_div,
       rounding_mode_is_static}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::rsub.Tensor", "aten::rsub.Scalar"}, convert_rsub, alpha_is_static}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::pow.Tensor_Tensor", "aten::pow.Tensor_Scalar", "aten::pow.Scalar"},
       simple_binary(BinaryOp::kPow)}));
  r.add_converter(
      with_dynamic_shapes({{"aten::maximum", "aten::max.other"}, simple_binary(BinaryOp::kMax)}));
  r.add_converter(
      with_dynamic_shapes({{"aten::minimum", "aten::min.other"}, simple_binary(BinaryOp::kMin)}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::floor_divide", "aten::floor_divide.Scalar", "aten::floor_divide_.Tensor"},
       simple_binary(BinaryOp::kFloorDiv)}));
  add_binary(r, "aten::remainder", simple_binary(BinaryOp::kMod));
  add_binary(r, "aten::eq", comparison(BinaryOp::kEq));
  add_binary(r, "aten::ne", comparison(BinaryOp::kNe));
  add_binary(r, "aten::lt", comparison(BinaryOp::kLt));
  add_binary(r, "aten::le", comparison(BinaryOp::kLe));
  add_binary(r, "aten::gt", comparison(BinaryOp::kGt));
  add_binary(r, "aten::ge", comparison(BinaryOp::kGe));
  r.add_converter(with_dynamic_shapes({{"aten::logical_and"}, logical(BinaryOp::kAnd)}));
  r.add_converter(with_dynamic_shapes({{"aten::logical_or"}, logical(BinaryOp::kOr)}));
  r.add_converter(with_dynamic_shapes({{"aten::logical_xor"}, logical(BinaryOp::kXor)}));
  r.add_converter(with_dynamic_shapes({{"aten::logical_not"}, convert_logical_not}));
  r.add_converter(with_dynamic_shapes({{"aten::bitwise_not"}, convert_bitwise_not}));
  for (const auto& [name, op] : {std::pair<std::string, BinaryOp>{"and", BinaryOp::kAnd},
                                 {"or", BinaryOp::kOr},
                                 {"xor", BinaryOp::kXor}}) {
    r.add_converter(with_dynamic_shapes(
        {existing_schemas({"aten::__" + name + "__.Tensor", "aten::__" + name + "__.Scalar",
                           "aten::bitwise_" + name + ".Tensor",
                           "aten::bitwise_" + name + ".Scalar"}),
         bitwise(op)}));
  }
  const std::pair<const char*, UnaryOp> kFloatUnary[] = {{"aten::exp", UnaryOp::kExp},
                                                         {"aten::log", UnaryOp::kLog},
                                                         {"aten::sqrt", UnaryOp::kSqrt},
                                                         {"aten::rsqrt", UnaryOp::kRsqrt},
                                                         {"aten::reciprocal", UnaryOp::kReciprocal},
                                                         {"aten::sin", UnaryOp::kSin},
                                                         {"aten::cos", UnaryOp::kCos},
                                                         {"aten::tan", UnaryOp::kTan},
                                                         {"aten::asin", UnaryOp::kAsin},
                                                         {"aten::acos", UnaryOp::kAcos},
                                                         {"aten::atan", UnaryOp::kAtan},
                                                         {"aten::sinh", UnaryOp::kSinh},
                                                         {"aten::cosh", UnaryOp::kCosh},
                                                         {"aten::erf", UnaryOp::kErf},
                                                         {"aten::log2", UnaryOp::kLog2},
                                                         {"aten::log1p", UnaryOp::kLog1p},
                                                         {"aten::expm1", UnaryOp::kExpm1}};
  for (const auto& [name, op] : kFloatUnary)
    r.add_converter(with_dynamic_shapes({{name}, unary(op)}));
  const std::pair<const char*, UnaryOp> kAnyUnary[] = {
      {"aten::neg", UnaryOp::kNeg},     {"aten::abs", UnaryOp::kAbs},
      {"aten::floor", UnaryOp::kFloor}, {"aten::ceil", UnaryOp::kCeil},
      {"aten::round", UnaryOp::kRound}, {"aten::trunc", UnaryOp::kTrunc},
      {"aten::sign", UnaryOp::kSign}};
  for (const auto& [name, op] : kAnyUnary)
    r.add_converter(with_dynamic_shapes({{name}, unary(op, true)}));
  // Special functions (engine/special_math.h), with torch.special's aliases. aten::lgamma
  // itself is not registered yet: the test suite (tests/data/lgamma.ir, the models of
  // tests/models/make_models.py, the compile, kilnc, refit and partitioning tests) uses it as
  // its op without a converter; torch.special.gammaln (aten::special_gammaln) is lgamma.
  const std::pair<const char*, UnaryOp> kSpecialUnary[] = {
      {"aten::special_gammaln", UnaryOp::kLgamma},
      {"aten::digamma", UnaryOp::kDigamma},
      {"aten::special_digamma", UnaryOp::kDigamma},
      {"aten::special_psi", UnaryOp::kDigamma},
      {"aten::erfinv", UnaryOp::kErfinv},
      {"aten::special_erfinv", UnaryOp::kErfinv},
      {"aten::special_erfcx", UnaryOp::kErfcx},
      {"aten::special_ndtr", UnaryOp::kNdtr},
      {"aten::special_ndtri", UnaryOp::kNdtri},
      {"aten::special_log_ndtr", UnaryOp::kLogNdtr},
      {"aten::i0", UnaryOp::kI0},
      {"aten::special_i0", UnaryOp::kI0},
      {"aten::special_modified_bessel_i0", UnaryOp::kI0},
      {"aten::special_i0e", UnaryOp::kI0e},
      {"aten::special_i1", UnaryOp::kI1},
      {"aten::special_modified_bessel_i1", UnaryOp::kI1},
      {"aten::special_i1e", UnaryOp::kI1e},
      {"aten::special_modified_bessel_k0", UnaryOp::kK0},
      {"aten::special_scaled_modified_bessel_k0", UnaryOp::kK0e},
      {"aten::special_modified_bessel_k1", UnaryOp::kK1},
      {"aten::special_scaled_modified_bessel_k1", UnaryOp::kK1e},
      {"aten::special_bessel_j0", UnaryOp::kBesselJ0},
      {"aten::special_bessel_j1", UnaryOp::kBesselJ1},
      {"aten::special_bessel_y0", UnaryOp::kBesselY0},
      {"aten::special_bessel_y1", UnaryOp::kBesselY1},
      {"aten::special_spherical_bessel_j0", UnaryOp::kSphericalBesselJ0},
      {"aten::special_airy_ai", UnaryOp::kAiryAi}};
  for (const auto& [name, op] : kSpecialUnary)
    r.add_converter(with_dynamic_shapes({{name}, unary(op)}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::special_zeta", "aten::special_zeta.self_scalar", "aten::special_zeta.other_scalar"},
       simple_binary(BinaryOp::kZeta)}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::igamma", "aten::special_gammainc"}, simple_binary(BinaryOp::kIgamma)}));
  r.add_converter(
      with_dynamic_shapes({{"aten::copysign.Tensor", "aten::copysign.Scalar"}, convert_copysign}));
  r.add_converter(with_dynamic_shapes({{"aten::signbit"}, convert_signbit}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::igammac", "aten::special_gammaincc"}, simple_binary(BinaryOp::kIgammac)}));
  r.add_converter(with_dynamic_shapes({{"aten::polygamma", "aten::special_polygamma"},
                                       convert_polygamma,
                                       static_int_at_least(0, 0, "polygamma's order n")}));
  r.add_converter(with_dynamic_shapes({{"aten::mvlgamma", "aten::special_multigammaln"},
                                       convert_mvlgamma,
                                       static_int_at_least(1, 1, "mvlgamma's p")}));
  // The orthogonal polynomials (x, n) of two tensors, a number x or a number n.
  const std::pair<const char*, BinaryOp> kPolynomials[] = {
      {"aten::special_chebyshev_polynomial_t", BinaryOp::kChebyshevT},
      {"aten::special_chebyshev_polynomial_u", BinaryOp::kChebyshevU},
      {"aten::special_chebyshev_polynomial_v", BinaryOp::kChebyshevV},
      {"aten::special_chebyshev_polynomial_w", BinaryOp::kChebyshevW},
      {"aten::special_shifted_chebyshev_polynomial_t", BinaryOp::kShiftedChebyshevT},
      {"aten::special_shifted_chebyshev_polynomial_u", BinaryOp::kShiftedChebyshevU},
      {"aten::special_shifted_chebyshev_polynomial_v", BinaryOp::kShiftedChebyshevV},
      {"aten::special_shifted_chebyshev_polynomial_w", BinaryOp::kShiftedChebyshevW},
      {"aten::special_hermite_polynomial_h", BinaryOp::kHermiteH},
      {"aten::special_hermite_polynomial_he", BinaryOp::kHermiteHe},
      {"aten::special_laguerre_polynomial_l", BinaryOp::kLaguerreL},
      {"aten::special_legendre_polynomial_p", BinaryOp::kLegendreP}};
  for (const auto& [name, op] : kPolynomials) {
    const std::string s = name;
    r.add_converter(
        with_dynamic_shapes({{s, s + ".x_scalar", s + ".n_scalar"}, orthogonal_polynomial(op)}));
  }
}

}  // namespace kiln::conversion
