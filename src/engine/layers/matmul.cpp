// Shape inference of the matmul family: torch.matmul semantics with transposes and post-ops; and
// its geometry at concrete shapes, which the integer kernels of both backends walk.
#include <algorithm>

#include "engine/layers/infer.h"
#include "engine/layers/setup.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

bool dims_match(int64_t a, int64_t b) {
  return a == kDynamic || b == kDynamic || a == b;
}

}  // namespace

std::vector<InferOutput> infer(const std::string& layer, const MatMulParams& p,
                               const std::vector<InferInput>& in) {
  const size_t count = 2 + (p.post.has_bias ? 1 : 0) + (p.post.has_residual ? 1 : 0);
  expect_input_count(layer, in, count, count);
  const DataType dt = in[0].dtype;
  for (size_t i = 0; i < in.size(); ++i) {
    KILN_CHECK(in[i].dtype == dt, InvalidArgument, "layer `", layer, "` (matmul): input ", i,
               " is ", dtype_name(in[i].dtype), " but input 0 is ", dtype_name(dt),
               "; insert a cast");
  }
  // Integer products wrap around in two's complement, as torch's; they have no activations
  // (torch's have integer inputs to none).
  KILN_CHECK(is_floating(dt) || dt == DataType::kI64 || dt == DataType::kI32, InvalidArgument,
             "layer `", layer, "` (matmul): needs floating, i64 or i32 operands, got ",
             dtype_name(dt));
  KILN_CHECK(is_floating(dt) || (p.post.activation == ActivationKind::kNone &&
                                 p.post.activation2 == ActivationKind::kNone),
             InvalidArgument, "layer `", layer, "` (matmul): a ", dtype_name(dt),
             " matmul takes no activation post-op");
  const Shape& a = in[0].shape;
  const Shape& b = in[1].shape;
  KILN_CHECK(!a.empty() && !b.empty(), InvalidArgument, "layer `", layer,
             "` (matmul): operands must have rank >= 1, got ", shape_to_string(a), " and ",
             shape_to_string(b));
  // Rank-1 operands are promoted (a to [1, K], b to [K, 1]) and the promoted dim is dropped
  // from the result, as torch.matmul does; transposes only apply to rank >= 2 operands.
  const size_t ra = a.size(), rb = b.size();
  const int64_t m = ra == 1 ? 1 : (p.transpose_a ? a[ra - 1] : a[ra - 2]);
  const int64_t ka = ra == 1 ? a[0] : (p.transpose_a ? a[ra - 2] : a[ra - 1]);
  const int64_t kb = rb == 1 ? b[0] : (p.transpose_b ? b[rb - 1] : b[rb - 2]);
  const int64_t n = rb == 1 ? 1 : (p.transpose_b ? b[rb - 2] : b[rb - 1]);
  KILN_CHECK(dims_match(ka, kb), ShapeMismatch, "layer `", layer,
             "` (matmul): inner dims differ: ", shape_to_string(a),
             p.transpose_a ? " (transposed)" : "", " x ", shape_to_string(b),
             p.transpose_b ? " (transposed)" : "");
  const Shape batch_a(a.begin(), a.end() - static_cast<std::ptrdiff_t>(ra >= 2 ? 2 : 1));
  const Shape batch_b(b.begin(), b.end() - static_cast<std::ptrdiff_t>(rb >= 2 ? 2 : 1));
  Shape out = broadcast_shapes(ra >= 2 ? batch_a : Shape{}, rb >= 2 ? batch_b : Shape{},
                               "layer `" + layer + "` (matmul batch dims)");
  if (ra >= 2) out.push_back(m);
  if (rb >= 2) out.push_back(n);

  size_t next = 2;
  if (p.post.has_bias) {
    const Shape& bias = in[next++].shape;
    KILN_CHECK(bias.size() == 1 && (dims_match(bias[0], n) || bias[0] == 1), ShapeMismatch,
               "layer `", layer, "` (matmul): bias must be [", n, "], got ", shape_to_string(bias));
  }
  if (p.post.has_residual) {
    const Shape& res = in[next++].shape;
    const Shape both = broadcast_shapes(out, res, "layer `" + layer + "` (matmul residual)");
    bool fits = both.size() == out.size();
    for (size_t d = 0; fits && d < out.size(); ++d) fits = out[d] == kDynamic || both[d] == out[d];
    KILN_CHECK(fits, ShapeMismatch, "layer `", layer, "` (matmul): residual ", shape_to_string(res),
               " does not broadcast to the output ", shape_to_string(out));
  }
  return {{dt, out}};
}

MatMulGeometry matmul_geometry(const MatMulParams& p, const Shape& a, const Shape& b) {
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  const bool ta = p.transpose_a && !a_vec, tb = p.transpose_b && !b_vec;
  Shape as = a_vec ? Shape{1, a[0]} : a;
  Shape bs = b_vec ? Shape{b[0], 1} : b;
  const size_t rank = std::max(as.size(), bs.size());
  as.insert(as.begin(), rank - as.size(), 1);
  bs.insert(bs.begin(), rank - bs.size(), 1);
  const int64_t a_cols = as[rank - 1], b_cols = bs[rank - 1];
  MatMulGeometry g;
  g.m = ta ? a_cols : as[rank - 2];
  g.k = ta ? as[rank - 2] : a_cols;
  g.n = tb ? bs[rank - 2] : b_cols;
  g.a_row = ta ? 1 : a_cols;
  g.a_col = ta ? a_cols : 1;
  g.b_row = tb ? 1 : b_cols;
  g.b_col = tb ? b_cols : 1;
  // Batch strides: each operand's matrices lie one after another, row-major over its batch dims.
  int64_t a_stride = as[rank - 2] * a_cols, b_stride = bs[rank - 2] * b_cols;
  g.batch.assign(rank - 2, 1);
  g.a_batch_strides.assign(rank - 2, 0);
  g.b_batch_strides.assign(rank - 2, 0);
  for (size_t d = rank - 2; d-- > 0;) {
    g.batch[d] = as[d] == 1 ? bs[d] : as[d];
    if (as[d] != 1) g.a_batch_strides[d] = a_stride;
    if (bs[d] != 1) g.b_batch_strides[d] = b_stride;
    a_stride *= as[d];
    b_stride *= bs[d];
  }
  return g;
}

}  // namespace kiln::engine
