// Shape inference of the matmul family: torch.matmul semantics with transposes and post-ops.
#include "engine/layers/infer.h"
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
  KILN_CHECK(is_floating(dt), InvalidArgument, "layer `", layer,
             "` (matmul): needs floating operands, got ", dtype_name(dt));
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

}  // namespace kiln::engine
