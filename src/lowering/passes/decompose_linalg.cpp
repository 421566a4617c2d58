// decompose_ops' tensor algebra (issue #35's coverage): diagonals (diagonal, diag, diag_embed,
// diagflat), products (kron, tensordot, bilinear, vecdot), distances and similarities (dist,
// pairwise_distance, cdist, cosine_similarity), renorm, the trapezoid rules and the pixel and
// channel shuffles, each into views,
// gathers, reductions, matrix products and pads the engine has layers for. Sizes are read at run
// time (aten::size), so the rewrites hold for any shape of the inputs' ranks.
#include <algorithm>
#include <cmath>

#include "lowering/passes/decompose_math.h"
#include "lowering/passes/rewrite_builder.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// The diagonal at `offset` of dims d1, d2 (normalized, distinct) of a rank-`rank` tensor, as
// the last dim: those two dims moved last and flattened, and every (cols + 1)-th element from
// the diagonal's first.
Value* diagonal(RewriteBuilder& b, Value* x, int64_t rank, int64_t offset, int64_t d1, int64_t d2) {
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != d1 && i != d2) perm.push_back(i);
  }
  perm.push_back(d1);
  perm.push_back(d2);
  Value* rows = b.size(x, d1);
  Value* cols = b.size(x, d2);
  Value* flat = b("aten::flatten", {b("aten::permute", {x, perm}), -2, -1});
  Value* count = offset >= 0 ? b("prim::min", {rows, b("aten::sub", {cols, offset})})
                             : b("prim::min", {b("aten::add", {rows, offset}), cols});
  count = b("prim::max", {count, b.constant(0)});
  Value* start = offset >= 0 ? b.constant(offset) : b("aten::mul", {cols, -offset});
  Value* index =
      b("aten::add",
        {b("aten::mul", {b("aten::arange", {count}), b("aten::add", {cols, 1})}), start});
  return b("aten::index_select", {flat, -1, index});
}

// Matrices with x's last dim on their diagonal at `offset` ([..., n] -> [..., n + |k|, n + |k|]):
// x times the identity's mask, padded by |offset| rows below and columns left (or the reverse).
Value* diagonal_matrix(RewriteBuilder& b, Value* x, int64_t offset) {
  Value* r = b("aten::arange", {b.size(x, -1)});
  Value* eye = b("aten::eq", {b("aten::unsqueeze", {r, 1}), b("aten::unsqueeze", {r, 0})});
  Value* m = b("aten::where", {eye, b("aten::unsqueeze", {x, -1}), 0});
  if (offset == 0) return m;
  const int64_t k = offset > 0 ? offset : -offset;
  // constant_pad_nd's pairs from the last dim: (left, right) of columns, (top, bottom) of rows.
  const std::vector<int64_t> pad =
      offset > 0 ? std::vector<int64_t>{k, 0, 0, k} : std::vector<int64_t>{0, k, k, 0};
  return b("aten::constant_pad_nd", {m, pad, 0});
}

// The unweighted covariance of the rows of x ([variables, observations], or one variable):
// (x - mean) (x - mean)^T / (observations - correction).
Value* covariance(RewriteBuilder& b, Value* x, int64_t rank, int64_t correction) {
  Value* centered = b("aten::sub", {x, b("aten::mean", {x, std::vector<int64_t>{-1}, true})});
  Value* dof = b("aten::sub", {b.size(x, -1), correction});
  Value* products = rank == 1
                        ? b("aten::sum", {b("aten::mul", {centered, centered})})
                        : b("aten::matmul", {centered, b("aten::transpose", {centered, 0, 1})});
  return b("aten::div", {products, dof});
}

bool is_real_number_type(const std::optional<c10::ScalarType>& t) {
  return t && *t != c10::ScalarType::Bool && !c10::isComplexType(*t);
}

// The dtypes whose matrix products the engine computes: floating ones, and i64 and i32 (wrapping
// around, as torch's).
bool is_product_type(c10::ScalarType t) {
  return c10::isFloatingType(t) || t == c10::ScalarType::Long || t == c10::ScalarType::Int;
}

}  // namespace

Value* decompose_linalg(GraphPtr& graph, Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema) return nullptr;
  const std::string name = schema->name(), overload = schema->overload_name();
  const auto in = [&](size_t i) { return node->input(i); };
  const size_t n = node->inputs().size();
  RewriteBuilder b(graph);

  if ((name == "aten::diagonal" || name == "aten::linalg_diagonal") && n == 4) {
    const auto rank = known_rank(in(0));
    auto offset = constant_value(in(1)), d1 = constant_value(in(2)), d2 = constant_value(in(3));
    if (!rank || *rank < 2 || !offset || !offset->isInt() || !d1 || !d1->isInt() || !d2 ||
        !d2->isInt()) {
      return nullptr;
    }
    const auto a = normalized_dim(d1->toInt(), *rank), c = normalized_dim(d2->toInt(), *rank);
    if (!a || !c || *a == *c) return nullptr;
    return diagonal(b, in(0), *rank, offset->toInt(), *a, *c);
  }
  if ((name == "aten::diag" || name == "aten::diagflat") && n == 2) {
    const auto rank = known_rank(in(0));
    auto offset = constant_value(in(1));
    if (!rank || !offset || !offset->isInt() || !is_real_number_type(known_dtype(in(0)))) {
      return nullptr;
    }
    if (name == "aten::diag" && *rank == 2) return diagonal(b, in(0), 2, offset->toInt(), 0, 1);
    Value* x = in(0);
    if (name == "aten::diagflat") {
      x = b("aten::reshape", {x, std::vector<int64_t>{-1}});
    } else if (*rank != 1) {
      return nullptr;
    }
    return diagonal_matrix(b, x, offset->toInt());
  }
  if (name == "aten::diag_embed" && n == 4) {
    const auto rank = known_rank(in(0));
    auto offset = constant_value(in(1)), d1 = constant_value(in(2)), d2 = constant_value(in(3));
    if (!rank || *rank < 1 || !offset || !offset->isInt() || !d1 || !d1->isInt() || !d2 ||
        !d2->isInt() || !is_real_number_type(known_dtype(in(0)))) {
      return nullptr;
    }
    const auto a = normalized_dim(d1->toInt(), *rank + 1);
    const auto c = normalized_dim(d2->toInt(), *rank + 1);
    // The new dims last, in either order (the other order is the transpose).
    if (!a || !c || std::min(*a, *c) != *rank - 1 || std::max(*a, *c) != *rank) return nullptr;
    return diagonal_matrix(b, in(0), *a < *c ? offset->toInt() : -offset->toInt());
  }
  if ((name == "aten::pixel_shuffle" || name == "aten::pixel_unshuffle" ||
       name == "aten::channel_shuffle" || name == "aten::native_channel_shuffle") &&
      n == 2) {
    // Reshape, permute, reshape, the sizes read at run time: pixel_shuffle [*, C r r, H, W] ->
    // [*, C, r, r, H, W] -> [*, C, H, r, W, r] -> [*, C, H r, W r]; pixel_unshuffle the reverse;
    // channel_shuffle [N, C, *] -> [N, g, C / g, *] -> [N, C / g, g, *] -> [N, C, *].
    const auto rank = known_rank(in(0));
    auto factor = constant_value(in(1));
    if (!rank || !factor || !factor->isInt() || factor->toInt() < 1) return nullptr;
    const int64_t r = factor->toInt();
    Value* x = in(0);
    std::vector<Value*> sizes;
    for (int64_t i = 0; i < *rank; ++i) sizes.push_back(b.size(x, i));
    if (name == "aten::channel_shuffle" || name == "aten::native_channel_shuffle") {
      if (*rank < 2) return nullptr;
      std::vector<Value*> split = {sizes[0], b.constant(r), b("aten::floordiv", {sizes[1], r})};
      split.insert(split.end(), sizes.begin() + 2, sizes.end());
      Value* t = b("aten::transpose", {b("aten::reshape", {x, b.list(split)}), 1, 2});
      return b("aten::reshape", {t, b.list(sizes)});
    }
    if (*rank < 3) return nullptr;
    const size_t lead = static_cast<size_t>(*rank - 3);
    std::vector<Value*> split(sizes.begin(), sizes.begin() + static_cast<long>(lead));
    std::vector<Value*> merged = split;
    std::vector<int64_t> perm;
    for (size_t i = 0; i < lead; ++i) perm.push_back(static_cast<int64_t>(i));
    const int64_t l = static_cast<int64_t>(lead);
    Value* c = sizes[lead];
    Value* h = sizes[lead + 1];
    Value* w = sizes[lead + 2];
    Value* rv = b.constant(r);
    if (name == "aten::pixel_shuffle") {
      Value* channels = b("aten::floordiv", {c, r * r});
      split.insert(split.end(), {channels, rv, rv, h, w});
      perm.insert(perm.end(), {l, l + 3, l + 1, l + 4, l + 2});
      merged.insert(merged.end(), {channels, b("aten::mul", {h, r}), b("aten::mul", {w, r})});
    } else {
      Value* oh = b("aten::floordiv", {h, r});
      Value* ow = b("aten::floordiv", {w, r});
      split.insert(split.end(), {c, oh, rv, ow, rv});
      perm.insert(perm.end(), {l, l + 2, l + 4, l + 1, l + 3});
      merged.insert(merged.end(), {b("aten::mul", {c, r * r}), oh, ow});
    }
    Value* t = b("aten::permute", {b("aten::reshape", {x, b.list(split)}), perm});
    return b("aten::reshape", {t, b.list(merged)});
  }
  if (name == "aten::msort" && n == 1)
    return b.outputs("aten::sort", {in(0), b.constant(0), b.constant(false)}, 2)[0];
  if ((name == "aten::median" || name == "aten::nanmedian") && n == 1) {
    // The lower middle of the sorted, flattened tensor (NaN sort last). median: NaN if there is
    // one (the last); nanmedian: the middle of the numbers only (NaN when there are none).
    if (!is_real_number_type(known_dtype(in(0)))) return nullptr;
    Value* flat = b("aten::reshape", {in(0), std::vector<int64_t>{-1}});
    Value* sorted = b.outputs("aten::sort", {flat, b.constant(0), b.constant(false)}, 2)[0];
    if (name == "aten::median") {
      Value* middle =
          b("aten::select",
            {sorted, 0, b("aten::floordiv", {b("aten::sub", {b("aten::numel", {in(0)}), 1}), 2})});
      Value* last = b("aten::select", {sorted, 0, -1});
      return b("aten::where", {b("aten::ne", {last, last}), last, middle});
    }
    Value* count = b("aten::sum", {b("aten::logical_not", {b("aten::isnan", {flat})})});
    Value* index =
        b("aten::clamp", {b("aten::floor_divide", {b("aten::sub", {count, 1}), 2}), 0, b.none()});
    Value* picked =
        b("aten::gather", {sorted, 0, b("aten::reshape", {index, std::vector<int64_t>{1}})});
    return b("aten::reshape", {picked, std::vector<int64_t>{}});
  }
  if ((name == "aten::quantile" || name == "aten::nanquantile") && overload == "scalar" && n == 5) {
    // As torch: the sorted dim (NaN last) read at rank q (n - 1), n its length (nanquantile: its
    // count of numbers), between the elements below and above the rank by `interpolation`;
    // quantile is NaN where the dim has a NaN, nanquantile where it has no number.
    const auto rank = known_rank(in(0));
    const auto type = known_dtype(in(0));
    const auto q = constant_number(in(1));
    auto dim = constant_value(in(2)), keep = constant_value(in(3)), mode = constant_value(in(4));
    if (!rank || !type || !c10::isFloatingType(*type) || !q || !(*q >= 0 && *q <= 1) || !dim ||
        !(dim->isNone() || dim->isInt()) || !keep || !keep->isBool() || !mode ||
        !mode->isString()) {
      return nullptr;
    }
    const std::string how = mode->toStringRef();
    if (how != "linear" && how != "lower" && how != "higher" && how != "midpoint" &&
        how != "nearest") {
      return nullptr;
    }
    Value* x = in(0);
    int64_t d = 0;
    if (dim->isNone()) {
      x = b("aten::reshape", {x, std::vector<int64_t>{-1}});
    } else {
      const auto nd = normalized_dim(dim->toInt(), std::max<int64_t>(*rank, 1));
      if (!nd) return nullptr;
      d = *nd;
      if (*rank == 0) x = b("aten::reshape", {x, std::vector<int64_t>{1}});
    }
    Value* sorted = b.outputs("aten::sort", {x, b.constant(d), b.constant(false)}, 2)[0];
    Value* numbers = b("aten::logical_not", {b("aten::isnan", {x})});
    Value* count = b.cast(b("aten::sum", {numbers, std::vector<int64_t>{d}, true}), *type);
    Value* length = name == "aten::nanquantile"
                        ? count
                        : b("aten::add", {b("aten::mul", {count, 0}), b.size(x, d)});
    Value* ranks =
        b("aten::clamp", {b("aten::mul", {b("aten::sub", {length, 1}), *q}), 0, b.none()});
    if (how == "nearest") ranks = b("aten::round", {ranks});
    Value* below = b.cast(b("aten::floor", {ranks}), c10::kLong);
    Value* above = b.cast(b("aten::ceil", {ranks}), c10::kLong);
    Value* low = b("aten::gather", {sorted, d, below});
    Value* high = b("aten::gather", {sorted, d, above});
    Value* value = nullptr;
    if (how == "lower" || how == "nearest") {
      value = low;
    } else if (how == "higher") {
      value = high;
    } else if (how == "midpoint") {
      value = b("aten::lerp", {low, high, 0.5});
    } else {
      value = b("aten::lerp", {low, high, b("aten::sub", {ranks, b("aten::floor", {ranks})})});
    }
    if (name == "aten::quantile") {  // NaN where the dim has one (the last of the sorted dim)
      Value* last = b("aten::narrow", {sorted, d, -1, 1});
      value = b("aten::where", {b("aten::ne", {last, last}), last, value});
    }
    if (keep->toBool()) {
      if (dim->isNone()) {
        return b("aten::reshape", {value, std::vector<int64_t>(static_cast<size_t>(*rank), 1)});
      }
      return *rank == 0 ? b("aten::reshape", {value, std::vector<int64_t>{}}) : value;
    }
    return b("aten::squeeze", {value, d});
  }
  if (name == "aten::linalg_matrix_power" && n == 2) {
    // A power n >= 0 of square matrices by squaring (n = 0: the identity, NaNs or not); negative
    // powers need an inverse and stay.
    const auto rank = known_rank(in(0));
    const auto type = known_dtype(in(0));
    auto power = constant_value(in(1));
    if (!rank || *rank < 2 || !type || !power || !power->isInt() || power->toInt() < 0) {
      return nullptr;
    }
    int64_t k = power->toInt();
    if (k == 0) {
      Value* i = b("aten::arange", {b.size(in(0), -1)});
      Value* eye = b.cast(b("aten::eq", {b("aten::unsqueeze", {i, 1}), i}), *type);
      return b("aten::expand_as", {eye, in(0)});
    }
    Value* result = nullptr;
    Value* square = in(0);
    while (k > 0) {
      if (k & 1) result = result ? b("aten::matmul", {result, square}) : square;
      k >>= 1;
      if (k > 0) square = b("aten::matmul", {square, square});
    }
    return result == in(0) ? b("aten::clone", {in(0)}) : result;
  }
  if (name == "aten::unfold" && n == 4) {
    // Windows of `size` every `step` along dim, as a new last dim: an index_select of the
    // windows' positions, the dim split into [windows, size] and size moved last.
    const auto rank = known_rank(in(0));
    auto dim = constant_value(in(1)), size = constant_value(in(2)), step = constant_value(in(3));
    if (!rank || !dim || !dim->isInt() || !size || !size->isInt() || !step || !step->isInt() ||
        step->toInt() < 1 || size->toInt() < 0) {
      return nullptr;
    }
    Value* x = in(0);
    const int64_t r = *rank;
    if (r == 0) {  // a 0-d tensor: one window of its element (torch allows sizes 0 and 1)
      if (size->toInt() > 1) return nullptr;
      return b("aten::reshape", {x, std::vector<int64_t>{size->toInt()}});
    }
    const auto d = normalized_dim(dim->toInt(), r);
    if (!d) return nullptr;
    const int64_t k = size->toInt(), st = step->toInt();
    Value* windows =
        b("aten::add", {b("aten::floordiv", {b("aten::sub", {b.size(x, *d), k}), st}), 1});
    Value* starts = b("aten::unsqueeze", {b("aten::mul", {b("aten::arange", {windows}), st}), 1});
    Value* index = b("aten::add", {starts, b("aten::unsqueeze", {b("aten::arange", {k}), 0})});
    Value* picked =
        b("aten::index_select", {x, *d, b("aten::reshape", {index, std::vector<int64_t>{-1}})});
    std::vector<Value*> split;
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < r; ++i) {
      if (i == *d) {
        split.push_back(windows);
        split.push_back(b.constant(k));
      } else {
        split.push_back(b.size(x, i));
      }
      perm.push_back(i < *d + 1 ? i : i + 1);
    }
    perm.push_back(*d + 1);
    Value* y = b("aten::reshape", {picked, b.list(split)});
    return b("aten::permute", {y, perm});
  }
  if (name == "aten::cov" && n == 4) {
    // Unweighted only.
    const auto rank = known_rank(in(0));
    auto correction = constant_value(in(1));
    const auto type = known_dtype(in(0));
    if (!rank || (*rank != 1 && *rank != 2) || !type || !c10::isFloatingType(*type) ||
        !correction || !correction->isInt() || !is_constant_none(in(2)) ||
        !is_constant_none(in(3))) {
      return nullptr;
    }
    return covariance(b, in(0), *rank, correction->toInt());
  }
  if (name == "aten::corrcoef" && n == 1) {
    // cov over the outer product of the standard deviations, clamped to [-1, 1]; c / c of one
    // variable (1, or NaN for a constant).
    const auto rank = known_rank(in(0));
    if (!rank || (*rank != 1 && *rank != 2)) return nullptr;
    const auto type = known_dtype(in(0));
    if (!type || !c10::isFloatingType(*type)) return nullptr;
    Value* c = covariance(b, in(0), *rank, 1);
    if (*rank == 1) return b("aten::div", {c, c});
    Value* sd = b("aten::sqrt", {b("aten::diagonal", {c, 0, 0, 1})});
    Value* r = b("aten::div", {b("aten::div", {c, b("aten::unsqueeze", {sd, 1})}),
                               b("aten::unsqueeze", {sd, 0})});
    return b("aten::clamp", {r, -1, 1});
  }
  if (name == "aten::kron" && n == 2) {
    // [a0, 1, a1, 1, ...] * [1, b0, 1, b1, ...] -> [a0 * b0, a1 * b1, ...], the shorter shape
    // with leading 1s.
    const auto ra = known_rank(in(0)), rb = known_rank(in(1));
    if (!ra || !rb) return nullptr;
    const int64_t r = std::max(*ra, *rb);
    if (r == 0) return b("aten::mul", {in(0), in(1)});
    std::vector<Value*> sa, sb, ia, ib, merged;
    for (int64_t i = 0; i < r; ++i) {
      Value* one = b.constant(1);
      Value* x = i < r - *ra ? one : b.size(in(0), i - (r - *ra));
      Value* y = i < r - *rb ? one : b.size(in(1), i - (r - *rb));
      ia.insert(ia.end(), {x, one});
      ib.insert(ib.end(), {one, y});
      merged.push_back(b("aten::mul", {x, y}));
    }
    Value* product = b("aten::mul", {b("aten::reshape", {in(0), b.list(ia)}),
                                     b("aten::reshape", {in(1), b.list(ib)})});
    return b("aten::reshape", {product, b.list(merged)});
  }
  if (name == "aten::tensordot" && n == 4) {
    // a's free dims x contracted ones times b's contracted x free ones, as one matrix product.
    const auto ra = known_rank(in(0)), rb = known_rank(in(1));
    const auto type = known_dtype(in(0));
    auto da = constant_value(in(2)), db = constant_value(in(3));
    if (!ra || !rb || !type || !is_product_type(*type) || known_dtype(in(1)) != type || !da ||
        !db || !da->isIntList() || !db->isIntList() ||
        da->toIntVector().size() != db->toIntVector().size()) {
      return nullptr;
    }
    std::vector<int64_t> ca, cb;
    for (auto [dims, rank, out] :
         {std::tuple{da->toIntVector(), *ra, &ca}, std::tuple{db->toIntVector(), *rb, &cb}}) {
      for (int64_t d : dims) {
        auto nd = normalized_dim(d, rank);
        if (!nd || std::count(out->begin(), out->end(), *nd)) return nullptr;
        out->push_back(*nd);
      }
    }
    std::vector<int64_t> pa, pb;
    std::vector<Value*> free_sizes, contracted;
    for (int64_t i = 0; i < *ra; ++i) {
      if (std::count(ca.begin(), ca.end(), i)) continue;
      pa.push_back(i);
      free_sizes.push_back(b.size(in(0), i));
    }
    for (int64_t d : ca) {
      pa.push_back(d);
      contracted.push_back(b.size(in(0), d));
    }
    pb = cb;
    for (int64_t i = 0; i < *rb; ++i) {
      if (std::count(cb.begin(), cb.end(), i)) continue;
      pb.push_back(i);
      free_sizes.push_back(b.size(in(1), i));
    }
    Value* k = b.product(contracted);
    Value* left =
        b("aten::reshape", {b("aten::permute", {in(0), pa}), b.list({b.constant(-1), k})});
    Value* right =
        b("aten::reshape", {b("aten::permute", {in(1), pb}), b.list({k, b.constant(-1)})});
    return b("aten::reshape", {b("aten::matmul", {left, right}), b.list(free_sizes)});
  }
  if (name == "aten::bilinear" && n == 4) {
    // y[..., o] = x1 W[o] x2 + bias[o]: x1 against W as [in1, out * in2], then x2 along in2.
    const auto type = known_dtype(in(0));
    if (!type || !is_product_type(*type) || known_rank(in(2)) != 3) return nullptr;
    Value* w = in(2);
    Value* outs = b.size(w, 0);
    Value* in2 = b.size(w, 2);
    Value* wm = b("aten::reshape", {b("aten::permute", {w, std::vector<int64_t>{1, 0, 2}}),
                                    b.list({b.size(w, 1), b("aten::mul", {outs, in2})})});
    Value* t = b("aten::unflatten", {b("aten::matmul", {in(0), wm}), -1, b.list({outs, in2})});
    Value* y = b("aten::sum", {b("aten::mul", {t, b("aten::unsqueeze", {in(1), -2})}),
                               std::vector<int64_t>{-1}, false});
    return is_constant_none(in(3)) ? y : b("aten::add", {y, in(3)});
  }
  if (name == "aten::linalg_vecdot" && n == 3) {
    auto dim = constant_value(in(2));
    if (!dim || !dim->isInt() || !is_real_number_type(known_dtype(in(0)))) return nullptr;
    return b("aten::sum",
             {b("aten::mul", {in(0), in(1)}), std::vector<int64_t>{dim->toInt()}, false});
  }
  if (name == "aten::cosine_similarity" && n == 4) {
    // As torch: each side divided by its norm clamped to eps, then the dot product along dim.
    const auto type = known_dtype(in(0));
    auto dim = constant_value(in(2));
    const auto eps = constant_number(in(3));
    if (!type || !c10::isFloatingType(*type) || !dim || !dim->isInt() || !eps) return nullptr;
    const std::vector<int64_t> dims = {dim->toInt()};
    auto unit = [&](Value* x) {
      Value* norm = b("aten::clamp", {b.norm(x, 2, dims, true, *type), *eps, b.none()});
      return b("aten::div", {x, norm});
    };
    return b("aten::sum", {b("aten::mul", {unit(in(0)), unit(in(1))}), dims, false});
  }
  if ((name == "aten::pairwise_distance" && n == 5) || (name == "aten::dist" && n == 3) ||
      (name == "aten::cdist" && n == 4)) {
    const auto type = known_dtype(in(0));
    const auto p = constant_number(in(2));
    if (!type || !c10::isFloatingType(*type) || known_dtype(in(1)) != type || !p || *p < 0 ||
        std::isnan(*p)) {
      return nullptr;
    }
    if (name == "aten::dist") return b.norm(b("aten::sub", {in(0), in(1)}), *p, {}, false, *type);
    if (name == "aten::pairwise_distance") {  // ||x1 - x2 + eps|| along the last dim
      const auto eps = constant_number(in(3));
      auto keep = constant_value(in(4));
      if (!eps || !keep || !keep->isBool()) return nullptr;
      Value* d = b("aten::add", {b("aten::sub", {in(0), in(1)}), *eps});
      return b.norm(d, *p, {-1}, keep->toBool(), *type);
    }
    // cdist: [..., P, M] and [..., R, M] -> [..., P, R], every pair's difference formed (P R M
    // elements: torch's own kernel for p != 2 does not form them, nor its matrix form for 2).
    if (known_rank(in(0)) < 2 || known_rank(in(1)) < 2) return nullptr;
    Value* d =
        b("aten::sub", {b("aten::unsqueeze", {in(0), -2}), b("aten::unsqueeze", {in(1), -3})});
    return b.norm(d, *p, {-1}, false, *type);
  }
  if (name == "aten::renorm" && n == 4) {
    // Each slice along dim scaled to norm maxnorm where its p-norm is above (torch's 1e-7 too).
    const auto rank = known_rank(in(0));
    const auto type = known_dtype(in(0));
    const auto p = constant_number(in(1)), maxnorm = constant_number(in(3));
    auto dim = constant_value(in(2));
    if (!rank || *rank < 1 || !type || !c10::isFloatingType(*type) || !p || !(*p > 0) || !maxnorm ||
        !dim || !dim->isInt()) {
      return nullptr;
    }
    const auto d = normalized_dim(dim->toInt(), *rank);
    if (!d) return nullptr;
    std::vector<int64_t> others;
    for (int64_t i = 0; i < *rank; ++i) {
      if (i != *d) others.push_back(i);
    }
    if (others.empty()) return nullptr;
    Value* norm = b.norm(in(0), *p, others, true, *type);
    Value* shrink =
        b("aten::mul", {b("aten::reciprocal", {b("aten::add", {norm, 1e-7})}), *maxnorm});
    Value* scale = b("aten::where", {b("aten::gt", {norm, *maxnorm}), shrink, 1.0});
    return b("aten::mul", {in(0), scale});
  }
  if ((name == "aten::trapezoid" || name == "aten::trapz" ||
       name == "aten::cumulative_trapezoid") &&
      n == 3) {
    // The trapezoids' areas (y[i] + y[i + 1]) (x[i + 1] - x[i]) / 2 along dim, summed (or their
    // running sum); a constant spacing dx in the .dx overloads.
    const auto rank = known_rank(in(0));
    const auto type = known_dtype(in(0));
    auto dim = constant_value(in(2));
    if (!rank || *rank < 1 || !type || !c10::isFloatingType(*type) || !dim || !dim->isInt()) {
      return nullptr;
    }
    const auto d = normalized_dim(dim->toInt(), *rank);
    if (!d) return nullptr;
    Value* y = in(0);
    Value* ends = b("aten::add", {b("aten::slice", {y, *d, 1, b.none(), 1}),
                                  b("aten::slice", {y, *d, 0, -1, 1})});
    Value* areas = nullptr;
    if (overload == "x") {
      const auto rx = known_rank(in(1));
      if (!rx || (*rx != *rank && *rx != 1) || known_dtype(in(1)) != type) return nullptr;
      Value* dx = b("aten::diff", {in(1), 1, *rx == 1 ? 0 : *d, b.none(), b.none()});
      if (*rx == 1 && *rank > 1) {  // spacing along dim, broadcast over the others
        std::vector<int64_t> shape(static_cast<size_t>(*rank), 1);
        shape[static_cast<size_t>(*d)] = -1;
        dx = b("aten::reshape", {dx, shape});
      }
      areas = b("aten::mul", {b("aten::mul", {ends, dx}), 0.5});
    } else if (overload == "dx") {
      const auto dx = constant_number(in(1));
      if (!dx) return nullptr;
      areas = b("aten::mul", {ends, *dx * 0.5});
    } else {
      return nullptr;
    }
    if (name == "aten::cumulative_trapezoid") return b("aten::cumsum", {areas, *d});
    return b("aten::sum", {areas, std::vector<int64_t>{*d}, false});
  }
  return nullptr;
}

}  // namespace kiln::lowering
