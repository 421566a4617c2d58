// Converters of linear algebra (linear, matmul, mm, bmm, addmm, baddbmm, t) to engine matmul
// layers, with biases as post-op inputs where the engine's bias form fits.
#include "conversion/converters/convolution_params.h"
#include "conversion/converters/operands.h"
#include "conversion/dtypes.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::BinaryOp;
using torch::jit::Node;

// Operand i of a product whose first operand has dtype `dtype`. The engine multiplies floating
// tensors (another float dtype is cast to the first's) and i64 or i32 ones, which torch requires
// to be of one dtype: a mix with an integer operand is an error there, and stays one here.
engine::TensorId product_operand(ConversionContext& ctx, const Node* n, size_t i,
                                 engine::DataType dtype) {
  const engine::TensorId t = ctx.tensor(n->input(i));
  const engine::DataType own = ctx.desc(t).dtype;
  KILN_CHECK(
      engine::is_floating(own) || own == engine::DataType::kI64 || own == engine::DataType::kI32,
      Unsupported, "matrix product of a ", engine::dtype_name(own), " operand ", arg_name(n, i),
      " (the engine multiplies floating, i64 and i32 tensors)");
  KILN_CHECK(own == dtype || (engine::is_floating(own) && engine::is_floating(dtype)), Unsupported,
             "matrix product of a ", engine::dtype_name(own), " operand ", arg_name(n, i),
             " with a ", engine::dtype_name(dtype), " one (torch multiplies one dtype)");
  return ctx.cast(n, t, dtype);
}

// The first operand (input i) of a product: its dtype is the product's.
engine::TensorId first_operand(ConversionContext& ctx, const Node* n, size_t i) {
  return product_operand(ctx, n, i, ctx.desc(ctx.tensor(n->input(i))).dtype);
}

// linear(x, W, b) = x @ W^T + b: W stays [out, in] and the layer transposes it.
void convert_linear(ConversionContext& ctx, const Node* n) {
  const engine::TensorId x = first_operand(ctx, n, 0);
  const engine::DataType dtype = ctx.desc(x).dtype;
  engine::MatMulParams p;
  p.transpose_b = ctx.desc(ctx.tensor(n->input(1))).shape.size() >= 2;
  std::vector<engine::TensorId> inputs = {x, product_operand(ctx, n, 1, dtype)};
  if (n->inputs().size() > 2 && !is_none(n->input(2))) {
    const engine::TensorId b = product_operand(ctx, n, 2, dtype);
    if (ctx.desc(b).shape.size() == 1 && p.transpose_b) {
      p.post.has_bias = true;
      inputs.push_back(b);
    } else {
      // A 0-d bias (or a 1-D weight): add it after the product, broadcasting as torch does.
      const engine::TensorId y = ctx.add(n, p, inputs, "matmul");
      ctx.set_tensor(n->output(), ctx.add(n, engine::ElementwiseParams{BinaryOp::kAdd}, {y, b}));
      return;
    }
  }
  ctx.set_tensor(n->output(), ctx.add(n, p, inputs));
}

// matmul, mm and bmm differ only in the ranks torch accepts; the engine follows torch.matmul.
void convert_matmul(ConversionContext& ctx, const Node* n) {
  const engine::TensorId a = first_operand(ctx, n, 0);
  const engine::TensorId b = product_operand(ctx, n, 1, ctx.desc(a).dtype);
  ctx.set_tensor(n->output(), ctx.add(n, engine::MatMulParams{}, {a, b}));
}

std::optional<std::string> beta_alpha_static(const Node* n) {
  return require_static(n, {3, 4});
}

engine::TensorId scaled(ConversionContext& ctx, const Node* n, engine::TensorId t, double s,
                        const std::string& suffix) {
  if (s == 1.0) return t;
  const auto c = ctx.constant(at::scalar_tensor(s).to(to_scalar_type(ctx.desc(t).dtype)),
                              ctx.unique_name(n, suffix));
  return ctx.add(n, engine::ElementwiseParams{BinaryOp::kMul}, {t, c}, suffix);
}

// addmm/baddbmm: beta * self + alpha * (m1 @ m2). The common case from nn.Linear (beta = alpha
// = 1 and a [N] bias) is one matmul with a bias post-op; the rest is spelled out elementwise.
// Integer products take beta and alpha truncated to integers, as torch does (alpha = 0.5 is 0).
void convert_addmm(ConversionContext& ctx, const Node* n) {
  const double beta = static_number(ctx, n->input(3));
  const double alpha = static_number(ctx, n->input(4));
  const engine::TensorId m1 = first_operand(ctx, n, 1);
  const engine::DataType dtype = ctx.desc(m1).dtype;
  const engine::TensorId m2 = product_operand(ctx, n, 2, dtype);
  const engine::TensorId self = product_operand(ctx, n, 0, dtype);
  const engine::Shape& ss = ctx.desc(self).shape;
  const engine::Shape& m2s = ctx.desc(m2).shape;
  const int64_t cols = m2s.back();
  if (beta == 1.0 && alpha == 1.0 && ss.size() == 1 &&
      (ss[0] == 1 || (ss[0] == cols && cols != engine::kDynamic))) {
    engine::MatMulParams p;
    p.post.has_bias = true;
    ctx.set_tensor(n->output(), ctx.add(n, p, {m1, m2, self}));
    return;
  }
  engine::TensorId y =
      scaled(ctx, n, ctx.add(n, engine::MatMulParams{}, {m1, m2}, "matmul"), alpha, "alpha");
  // beta == 0 ignores self entirely (NaN and inf in it do not propagate), as in torch.
  if (beta != 0.0) {
    const engine::TensorId s = scaled(ctx, n, self, beta, "beta");
    y = ctx.add(n, engine::ElementwiseParams{BinaryOp::kAdd}, {s, y});
  }
  ctx.set_tensor(n->output(), y);
}

// t(): 2-D transpose; 0-D and 1-D tensors are returned as they are.
void convert_t(ConversionContext& ctx, const Node* n) {
  const engine::TensorId x = ctx.tensor(n->input(0));
  const size_t rank = ctx.desc(x).shape.size();
  KILN_CHECK(rank <= 2, InvalidArgument, "t() expects a tensor of at most 2 dims, got ",
             engine::shape_to_string(ctx.desc(x).shape));
  if (rank < 2) {
    ctx.set_tensor(n->output(), x);
    return;
  }
  engine::ShuffleParams p;
  p.first_perm = {1, 0};
  ctx.set_tensor(n->output(), ctx.add(n, p, {x}));
}

}  // namespace

void register_linear_converters(Registry& r) {
  // Matmul layers take dynamic dims; addmm's bias post-op is used only where the bias fits
  // statically.
  r.add_converter(with_dynamic_shapes({{"aten::linear"}, convert_linear}));
  r.add_converter(with_dynamic_shapes({{"aten::matmul", "aten::mm", "aten::bmm"}, convert_matmul}));
  r.add_converter(
      with_dynamic_shapes({{"aten::addmm", "aten::baddbmm"}, convert_addmm, beta_alpha_static}));
  r.add_converter(with_dynamic_shapes({{"aten::t"}, convert_t}));
}

}  // namespace kiln::conversion
