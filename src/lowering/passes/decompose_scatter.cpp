// decompose_ops' indexed writes (issue #35's coverage): index_add, index_copy, index_fill,
// index_reduce, put, masked_scatter and scatter_reduce, into the engine's scatter layer (write,
// add, or scatter_reduce's prod/amax/amin with include_self), gathers, cumulative sums and
// selects; and embedding_bag, embedding rows scattered into their bags. A 0-d tensor is written
// as one of one element.
#include <limits>

#include "lowering/passes/decompose_math.h"
#include "lowering/passes/rewrite_builder.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// A 1-d index along `dim` of a rank-`rank` tensor, as a view that broadcasts against it
// ([1, .., k, .., 1]).
Value* along(RewriteBuilder& b, Value* index, int64_t rank, int64_t dim) {
  std::vector<int64_t> shape(static_cast<size_t>(rank), 1);
  shape[static_cast<size_t>(dim)] = -1;
  return b("aten::reshape", {index, shape});
}

// What torch's scatter_reduce and index_reduce start a written position from when include_self is
// False (they write it over x first): the reduction's identity, for amax/amin the dtype's
// infinity, or its lowest/highest integer.
std::optional<c10::IValue> reduce_identity(const std::string& how, c10::ScalarType type) {
  if (how == "sum" || how == "mean") return c10::IValue(int64_t{0});
  if (how == "prod") return c10::IValue(int64_t{1});
  const bool max = how == "amax";
  if (how != "amax" && how != "amin") return std::nullopt;
  if (c10::isFloatingType(type)) {
    return c10::IValue(max ? -std::numeric_limits<double>::infinity()
                           : std::numeric_limits<double>::infinity());
  }
  const auto limit = [max](auto lowest, auto highest) {
    return c10::IValue(static_cast<int64_t>(max ? lowest : highest));
  };
  switch (type) {
    case c10::kLong:
      return limit(std::numeric_limits<int64_t>::lowest(), std::numeric_limits<int64_t>::max());
    case c10::kInt:
      return limit(std::numeric_limits<int32_t>::lowest(), std::numeric_limits<int32_t>::max());
    case c10::kShort:
      return limit(std::numeric_limits<int16_t>::lowest(), std::numeric_limits<int16_t>::max());
    case c10::kChar:
      return limit(std::numeric_limits<int8_t>::lowest(), std::numeric_limits<int8_t>::max());
    case c10::kByte:
      return limit(std::numeric_limits<uint8_t>::lowest(), std::numeric_limits<uint8_t>::max());
    default:
      return std::nullopt;
  }
}

// scatter_reduce(x, dim, index, src, how, include_self) as torch computes it: without include_self
// the written positions start from the identity; sum is a scatter_add, prod/amax/amin stay
// scatter_reduce with include_self (the engine's scatter reductions), mean is the sum over the
// number of terms (x counting as one with include_self; at least one), floor-divided for integers.
// scatter_reduce with include_self (a keyword-only argument).
Value* scatter_reduce_with_self(RewriteBuilder& b, Value* x, Value* dim, Value* index, Value* src,
                                const std::string& how) {
  return b.call("aten::scatter_reduce", {x, dim, index, src, how},
                {torch::jit::NamedValue("include_self", true)});
}

Value* scatter_reduce(RewriteBuilder& b, Value* x, Value* dim, Value* index, Value* src,
                      const std::string& how, bool include_self, c10::ScalarType type) {
  if (type == c10::kBool && how == "mean") return nullptr;
  const auto identity = reduce_identity(how, type);
  if (!identity) return nullptr;
  Value* base = include_self ? x : b("aten::scatter", {x, dim, index, b.constant(*identity)});
  if (how == "prod" || how == "amax" || how == "amin") {
    return scatter_reduce_with_self(b, base, dim, index, src, how);
  }
  Value* sum = b("aten::scatter_add", {base, dim, index, src});
  if (how == "sum") return sum;
  Value* counts =
      b("aten::scatter_add", {b(include_self ? "aten::ones_like" : "aten::zeros_like", {x}), dim,
                              index, b("aten::ones_like", {src})});
  if (!include_self) counts = b("aten::clamp", {counts, 1, b.none()});
  return b(c10::isFloatingType(type) ? "aten::div" : "aten::floor_divide", {sum, counts});
}

}  // namespace

std::vector<Value*> decompose_embedding_bag(GraphPtr& graph, Node* node) {
  // (weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
  // include_last_offset[, padding_idx]): the backward's three outputs must be unused.
  const c10::FunctionSchema* schema = node->maybeSchema();
  const size_t n = node->inputs().size();
  if (!schema || (n != 8 && n != 9) || node->outputs().size() != 4) return {};
  for (size_t i = 1; i < 4; ++i) {
    if (node->outputs()[i]->hasUses()) return {};
  }
  const auto in = [&](size_t i) { return node->input(i); };
  auto mode = constant_value(in(4)), last = constant_value(in(7));
  const std::optional<c10::IValue> padding =
      n == 9 ? constant_value(in(8)) : std::optional<c10::IValue>(c10::IValue());
  // (torch takes only float weights and 1-d indices and offsets here: F.embedding_bag flattens
  // [B, L] input and makes its offsets.)
  if (!mode || !mode->isInt() || mode->toInt() < 0 || mode->toInt() > 2 || !last ||
      !last->isBool() || !padding || !(padding->isNone() || padding->isInt())) {
    return {};
  }
  const int64_t how = mode->toInt();  // 0 sum, 1 mean, 2 max
  const bool weighted = !is_constant_none(in(6));
  if (weighted && how != 0) return {};  // (torch takes per-sample weights with sum only)
  // _embedding_bag writes "no padding" as -1, embedding_bag.padding_idx as None (F.embedding_bag
  // makes a negative padding_idx positive first; a negative one here is left to torch).
  std::optional<int64_t> pad;
  if (padding->isInt()) {
    if (padding->toInt() >= 0) {
      pad = padding->toInt();
    } else if (schema->name() != "aten::_embedding_bag" || padding->toInt() != -1) {
      return {};
    }
  }
  RewriteBuilder b(graph);
  Value* indices = in(1);
  // Each index's embedding row, whether it counts (not padding: every index without padding_idx,
  // which max and mean need), and its weight in a sum (per-sample weights, 0 for padding).
  Value* rows = b("aten::embedding", {in(0), indices, -1, false, false});
  Value* keep = pad ? b("aten::ne", {indices, *pad}) : b("aten::eq", {indices, indices});
  Value* coef = weighted ? in(6) : nullptr;
  if (pad) {
    Value* k = b("aten::type_as", {keep, rows});
    coef = coef ? b("aten::mul", {coef, k}) : k;
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // What a bag's reduction takes: weighted rows for sum and mean, rows kept (-inf else) for max.
  Value* terms = how == 2 ? b("aten::where", {b("aten::unsqueeze", {keep, -1}), rows, -kInf})
                 : coef   ? b("aten::mul", {rows, b("aten::unsqueeze", {coef, -1})})
                          : rows;
  // [N] indices in bags starting at offsets ([B], or [B + 1] ending with N when
  // include_last_offset): each index's bag from the starts (a count scattered at each start,
  // summed along: empty bags share their start with the next, which gets the indices), then
  // the rows scattered into [B, D] by bag.
  Value* offsets = in(2);
  Value* bags = b.size(offsets, 0);
  if (last->toBool()) bags = b("aten::sub", {bags, 1});
  Value* starts = b("aten::slice", {offsets, 0, 0, bags, 1});
  Value* total = b.size(indices, 0);
  // i64 marks, one past the end for bags that start there (empty trailing bags).
  Value* marks = b("aten::new_zeros", {offsets, b.list({b("aten::add", {total, 1})})});
  marks = b("aten::scatter_add", {marks, 0, starts, b("aten::ones_like", {starts})});
  Value* bag =
      b("aten::sub", {b("aten::cumsum", {b("aten::slice", {marks, 0, 0, total, 1}), 0}), 1});
  Value* at = b("aten::expand_as", {b("aten::unsqueeze", {bag, -1}), rows});
  Value* shape = b.list({bags, b.size(in(0), 1)});
  Value* result = nullptr;
  if (how == 2) {
    result = scatter_reduce_with_self(b, b("aten::new_full", {rows, shape, -kInf}),
                                      b.constant(int64_t{0}), at, terms, "amax");
  } else {
    result = b("aten::scatter_add", {b("aten::new_zeros", {rows, shape}), 0, at, terms});
  }
  if (how != 0) {
    Value* kept = b("aten::type_as", {keep, rows});
    Value* count = b(
        "aten::unsqueeze",
        {b("aten::scatter_add", {b("aten::new_zeros", {kept, b.list({bags})}), 0, bag, kept}), -1});
    result = how == 1 ? b("aten::div", {result, b("aten::clamp", {count, 1, b.none()})})
                      // a bag of nothing, or only padding, gives 0, as torch
                      : b("aten::where", {b("aten::gt", {count, 0}), result, 0.0});
  }
  // The backward's outputs are unused: empty placeholders, which dead code removes.
  std::vector<Value*> out{result};
  for (size_t i = 1; i < 4; ++i) out.push_back(b.constant(at::empty({0}, at::kLong)));
  return out;
}

Value* decompose_scatter(GraphPtr& graph, Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema) return nullptr;
  const std::string name = schema->name(), overload = schema->overload_name();
  const auto in = [&](size_t i) { return node->input(i); };
  const size_t n = node->inputs().size();
  RewriteBuilder b(graph);

  if ((name == "aten::index_add" && n == 5) || (name == "aten::index_copy" && n == 4) ||
      (name == "aten::index_fill" && n == 4) || (name == "aten::index_reduce" && n == 6)) {
    // index_add/index_copy/index_reduce: source's slices along dim to x's slices at `index`
    // (added, written, or reduced as scatter_reduce reduces); index_fill: x's slices at `index`
    // (negative from the end) set to the value.
    const auto rank = known_rank(in(0));
    auto dim = constant_value(in(1));
    if (!rank || !dim || !dim->isInt() || known_rank(in(2)) > 1) return nullptr;
    const int64_t r = std::max<int64_t>(*rank, 1);
    int64_t d = dim->toInt();
    if (d < -r || d >= r) return nullptr;
    if (d < 0) d += r;
    Value* x = *rank == 0 ? b("aten::reshape", {in(0), std::vector<int64_t>{1}}) : in(0);
    Value* index = b("aten::reshape", {in(2), std::vector<int64_t>{-1}});
    Value* y = nullptr;
    if (name == "aten::index_fill") {
      Value* size = b.size(x, d);
      Value* hit =
          b("aten::any", {b("aten::eq", {b("aten::unsqueeze", {b("aten::arange", {size}), -1}),
                                         b("aten::remainder", {index, size})}),
                          -1, false});
      y = b("aten::where", {along(b, hit, r, d), in(3), x});
      if (known_dtype(in(0)) != known_dtype(in(3)) && !constant_value(in(3))) {
        y = b("aten::type_as", {y, x});  // a tensor value of another dtype is cast to x's
      }
    } else {
      if (known_rank(in(3)) != rank) return nullptr;
      Value* source = *rank == 0 ? b("aten::reshape", {in(3), std::vector<int64_t>{1}}) : in(3);
      Value* positions = b("aten::expand_as", {along(b, index, r, d), source});
      if (name == "aten::index_copy") {
        y = b("aten::scatter", {x, d, positions, source});
      } else if (name == "aten::index_reduce") {
        auto reduce = constant_value(in(4)), self = constant_value(in(5));
        const auto type = known_dtype(in(0));
        if (!reduce || !reduce->isString() || !self || !self->isBool() || !type) return nullptr;
        y = scatter_reduce(b, x, b.constant(d), positions, source, reduce->toStringRef(),
                           self->toBool(), *type);
        if (!y) return nullptr;
      } else {
        auto alpha = constant_value(in(4));
        if (!alpha || !alpha->isScalar()) return nullptr;
        if (alpha->toScalar().toDouble() != 1) source = b("aten::mul", {source, in(4)});
        y = b("aten::scatter_add", {x, d, positions, source});
      }
    }
    return *rank == 0 ? b("aten::reshape", {y, std::vector<int64_t>{}}) : y;
  }
  if (name == "aten::put" && n == 4) {
    // The flattened tensor's elements at `index` (negative from the end) written (or added).
    auto accumulate = constant_value(in(3));
    if (!accumulate || !accumulate->isBool()) return nullptr;
    Value* flat = b("aten::reshape", {in(0), std::vector<int64_t>{-1}});
    Value* index = b("aten::reshape", {in(1), std::vector<int64_t>{-1}});
    index = b("aten::where", {b("aten::lt", {index, 0}),
                              b("aten::add", {index, b("aten::numel", {in(0)})}), index});
    Value* source = b("aten::reshape", {in(2), std::vector<int64_t>{-1}});
    Value* y =
        b(accumulate->toBool() ? "aten::scatter_add" : "aten::scatter", {flat, 0, index, source});
    return b("aten::reshape_as", {y, in(0)});
  }
  if (name == "aten::masked_scatter" && n == 3) {
    // Where the (broadcast) mask is set, source's elements in order: the k-th set position takes
    // source's k-th element (its index a running count of the mask).
    Value* mask =
        b("aten::reshape", {b("aten::expand_as", {in(1), in(0)}), std::vector<int64_t>{-1}});
    Value* order =
        b("aten::clamp", {b("aten::sub", {b("aten::cumsum", {mask, 0}), 1}), 0, b.none()});
    Value* taken =
        b("aten::index_select", {b("aten::reshape", {in(2), std::vector<int64_t>{-1}}), 0, order});
    Value* y =
        b("aten::where", {mask, taken, b("aten::reshape", {in(0), std::vector<int64_t>{-1}})});
    return b("aten::reshape_as", {y, in(0)});
  }
  if (name == "aten::scatter_reduce" && overload == "two" && n == 6) {
    // prod/amax/amin with include_self are the engine's: only the rest is rewritten.
    auto reduce = constant_value(in(4)), self = constant_value(in(5));
    const auto type = known_dtype(in(0));
    if (!reduce || !reduce->isString() || !self || !self->isBool() || !type) return nullptr;
    const std::string how = reduce->toStringRef();
    if (self->toBool() && (how == "prod" || how == "amax" || how == "amin")) return nullptr;
    return scatter_reduce(b, in(0), in(1), in(2), in(3), how, self->toBool(), *type);
  }
  return nullptr;
}

}  // namespace kiln::lowering
