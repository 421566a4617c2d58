// Shape inference of scaled dot-product attention
// (torch.nn.functional.scaled_dot_product_attention).
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

bool dims_compatible(int64_t a, int64_t b) {
  return a == b || a == kDynamic || b == kDynamic;
}
int64_t merge_dims(int64_t a, int64_t b) {
  return a == kDynamic ? b : a;
}

// Packed heads (AttentionParams::heads > 0): q, k, v are [B, rows, width] holding the heads at
// column offsets; the output is [B, L, heads * head_size]; a mask broadcasts to [B, heads, L, S].
std::vector<InferOutput> infer_packed(const std::string& what, const AttentionParams& p,
                                      const std::vector<InferInput>& in) {
  KILN_CHECK(p.head_size > 0 && p.columns.size() == 3, InvalidArgument, what,
             ": packed heads need head_size > 0 and 3 column offsets, got head_size ", p.head_size,
             " and ", p.columns.size(), " offsets");
  KILN_CHECK(p.heads <= (int64_t{1} << 24) && p.head_size <= (int64_t{1} << 24), InvalidArgument,
             what, ": ", p.heads, " heads of ", p.head_size, " is out of range");
  KILN_CHECK(p.kv_heads >= 0 && (p.kv_heads == 0 || p.heads % p.kv_heads == 0), InvalidArgument,
             what, ": ", p.kv_heads, " key/value heads do not divide ", p.heads, " query heads");
  const int64_t kv_heads = p.kv_heads > 0 ? p.kv_heads : p.heads;
  const char* names[] = {"q", "k", "v"};
  for (size_t i = 0; i < 3; ++i) {
    const Shape& s = in[i].shape;
    KILN_CHECK(s.size() == 3, InvalidArgument, what, ": packed ", names[i],
               " must be [batch, rows, width], got ", shape_to_string(s));
    KILN_CHECK(is_floating(in[i].dtype) && in[i].dtype == in[0].dtype, InvalidArgument, what,
               ": q, k, v must share one floating dtype, got ", dtype_name(in[0].dtype), ", ",
               dtype_name(in[1].dtype), ", ", dtype_name(in[2].dtype));
    const int64_t col = p.columns[i], h = i == 0 ? p.heads : kv_heads;
    KILN_CHECK(s[2] != kDynamic && col >= 0 && col <= s[2] && h * p.head_size <= s[2] - col,
               ShapeMismatch, what, ": ", names[i], " ", shape_to_string(s), " has no ", h,
               " heads of ", p.head_size, " at column ", col);
    KILN_CHECK(dims_compatible(s[0], in[0].shape[0]), ShapeMismatch, what,
               ": q, k, v batches differ (", shape_to_string(in[0].shape), ", ", shape_to_string(s),
               ")");
  }
  KILN_CHECK(dims_compatible(in[1].shape[1], in[2].shape[1]), ShapeMismatch, what, ": k ",
             shape_to_string(in[1].shape), " and v ", shape_to_string(in[2].shape),
             " differ in the sequence dim");
  if (p.has_mask) {
    check_mask(what, in[3],
               {merge_dims(in[0].shape[0], in[1].shape[0]), p.heads, in[0].shape[1],
                merge_dims(in[1].shape[1], in[2].shape[1])},
               "the attention weights");
  }
  return {{in[0].dtype, Shape{in[0].shape[0], in[0].shape[1], p.heads * p.head_size}}};
}

}  // namespace

void check_mask(const std::string& what, const InferInput& m, const Shape& target,
                const char* target_name) {
  KILN_CHECK(m.dtype == DataType::kBool || is_floating(m.dtype), InvalidArgument, what,
             ": mask must be bool or floating, got ", dtype_name(m.dtype));
  bool ok = m.shape.size() <= target.size();
  for (size_t i = 0; ok && i < m.shape.size(); ++i) {
    const int64_t md = m.shape[m.shape.size() - 1 - i], td = target[target.size() - 1 - i];
    ok = md == 1 || dims_compatible(md, td);
  }
  KILN_CHECK(ok, ShapeMismatch, what, ": mask ", shape_to_string(m.shape),
             " does not broadcast to ", target_name, " ", shape_to_string(target));
}

std::vector<InferOutput> infer(const std::string& layer, const AttentionParams& p,
                               const std::vector<InferInput>& in) {
  const size_t count = p.has_mask ? 4 : 3;
  expect_input_count(layer, in, count, count);
  const std::string what = "layer `" + layer + "` (attention)";
  KILN_CHECK(p.heads >= 0, InvalidArgument, what, ": heads ", p.heads, " is negative");
  if (p.heads > 0) return infer_packed(what, p, in);
  KILN_CHECK(p.head_size == 0 && p.columns.empty() && p.kv_heads == 0, InvalidArgument, what,
             ": head_size, kv_heads and columns are for packed heads (heads > 0)");
  const char* names[] = {"q", "k", "v", "mask"};
  for (size_t i = 0; i < 3; ++i) {
    KILN_CHECK(in[i].shape.size() >= 2, InvalidArgument, what, ": ", names[i],
               " needs rank >= 2, got ", shape_to_string(in[i].shape));
    KILN_CHECK(is_floating(in[i].dtype), InvalidArgument, what, ": ", names[i],
               " must be floating, got ", dtype_name(in[i].dtype));
    KILN_CHECK(in[i].dtype == in[0].dtype, InvalidArgument, what, ": q, k, v dtypes differ (",
               dtype_name(in[0].dtype), ", ", dtype_name(in[1].dtype), ", ",
               dtype_name(in[2].dtype), ")");
  }
  const Shape &q = in[0].shape, &k = in[1].shape, &v = in[2].shape;
  const int64_t L = q[q.size() - 2], E = q.back(), S = k[k.size() - 2];
  KILN_CHECK(dims_compatible(E, k.back()), ShapeMismatch, what, ": q ", shape_to_string(q),
             " and k ", shape_to_string(k), " differ in the embedding dim");
  KILN_CHECK(dims_compatible(S, v[v.size() - 2]), ShapeMismatch, what, ": k ", shape_to_string(k),
             " and v ", shape_to_string(v), " differ in the sequence dim");
  Shape batch =
      broadcast_shapes(Shape(q.begin(), q.end() - 2), Shape(k.begin(), k.end() - 2), what);
  batch = broadcast_shapes(batch, Shape(v.begin(), v.end() - 2), what);
  if (p.has_mask) {
    Shape weights = batch;
    weights.push_back(L);
    weights.push_back(merge_dims(S, v[v.size() - 2]));
    check_mask(what, in[3], weights, "the attention weights");
  }
  Shape out = batch;
  out.push_back(L);
  out.push_back(v.back());
  return {{in[0].dtype, out}};
}

}  // namespace kiln::engine
