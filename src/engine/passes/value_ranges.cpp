// Value ranges of integer and bool tensors (value_ranges.h).
#include "engine/passes/value_ranges.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

namespace kiln::engine {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kMaxDepth = 24;  // layers followed back from the tensor asked about

bool integral(DataType t) {
  return t == DataType::kI64 || t == DataType::kI32 || t == DataType::kI8 || t == DataType::kU8 ||
         t == DataType::kBool;
}

// The bounds of a type's values.
ValueRange type_range(DataType t) {
  switch (t) {
    case DataType::kBool:
      return {0, 1};
    case DataType::kU8:
      return {0, 255};
    case DataType::kI8:
      return {-128, 127};
    case DataType::kI32:
      return {-2147483648.0, 2147483647.0};
    case DataType::kI64:
      return {-kInf, kInf};  // (past 2^62: see compute)
    default:
      return {-kInf, kInf};
  }
}

ValueRange of_values(const int64_t* v, int64_t n) {
  ValueRange r{kInf, -kInf};
  for (int64_t i = 0; i < n; ++i) {
    r.lo = std::min(r.lo, static_cast<double>(v[i]));
    r.hi = std::max(r.hi, static_cast<double>(v[i]));
  }
  return r;
}

std::optional<ValueRange> of_weights(const Weights& w) {
  if (!w.data || !is_static(w.shape)) return std::nullopt;
  const int64_t n = volume(w.shape);
  if (n == 0) return std::nullopt;  // (no values: nothing to say)
  const uint8_t* p = w.data->data();
  ValueRange r{kInf, -kInf};
  for (int64_t i = 0; i < n; ++i) {
    double x;
    switch (w.dtype) {
      case DataType::kI64: {
        int64_t v;
        std::memcpy(&v, p + i * 8, 8);
        x = static_cast<double>(v);
        break;
      }
      case DataType::kI32: {
        int32_t v;
        std::memcpy(&v, p + i * 4, 4);
        x = v;
        break;
      }
      case DataType::kI8:
        x = static_cast<int8_t>(p[i]);
        break;
      case DataType::kU8:
        x = p[i];
        break;
      case DataType::kBool:
        x = p[i] != 0;
        break;
      default:
        return std::nullopt;
    }
    r.lo = std::min(r.lo, x);
    r.hi = std::max(r.hi, x);
  }
  return r;
}

ValueRange join(ValueRange a, ValueRange b) {
  return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
}

// x * y with 0 * inf = 0 (a bound times zero is zero).
double times(double x, double y) {
  return x == 0 || y == 0 ? 0 : x * y;
}

std::optional<ValueRange> binary(BinaryOp op, ValueRange a, ValueRange b) {
  switch (op) {
    case BinaryOp::kAdd:
      return ValueRange{a.lo + b.lo, a.hi + b.hi};
    case BinaryOp::kSub:
      return ValueRange{a.lo - b.hi, a.hi - b.lo};
    case BinaryOp::kMul: {
      const double c[] = {times(a.lo, b.lo), times(a.lo, b.hi), times(a.hi, b.lo),
                          times(a.hi, b.hi)};
      return ValueRange{*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
    }
    case BinaryOp::kMax:
      return ValueRange{std::max(a.lo, b.lo), std::max(a.hi, b.hi)};
    case BinaryOp::kMin:
      return ValueRange{std::min(a.lo, b.lo), std::min(a.hi, b.hi)};
    case BinaryOp::kFloorDiv:  // by a positive constant only
      if (b.lo != b.hi || b.lo <= 0) return std::nullopt;
      return ValueRange{std::floor(a.lo / b.lo), std::floor(a.hi / b.lo)};
    case BinaryOp::kLt:
      return a.hi < b.lo ? ValueRange{1, 1} : a.lo >= b.hi ? ValueRange{0, 0} : ValueRange{0, 1};
    case BinaryOp::kLe:
      return a.hi <= b.lo ? ValueRange{1, 1} : a.lo > b.hi ? ValueRange{0, 0} : ValueRange{0, 1};
    case BinaryOp::kGt:
      return a.lo > b.hi ? ValueRange{1, 1} : a.hi <= b.lo ? ValueRange{0, 0} : ValueRange{0, 1};
    case BinaryOp::kGe:
      return a.lo >= b.hi ? ValueRange{1, 1} : a.hi < b.lo ? ValueRange{0, 0} : ValueRange{0, 1};
    case BinaryOp::kEq:
      if (a.lo == a.hi && b.lo == b.hi && a.lo == b.lo) return ValueRange{1, 1};
      return a.hi < b.lo || b.hi < a.lo ? ValueRange{0, 0} : ValueRange{0, 1};
    case BinaryOp::kNe:
      if (a.lo == a.hi && b.lo == b.hi && a.lo == b.lo) return ValueRange{0, 0};
      return a.hi < b.lo || b.hi < a.lo ? ValueRange{1, 1} : ValueRange{0, 1};
    default:
      return std::nullopt;
  }
}

struct Memo {
  const std::set<std::string>& keep;
  std::map<TensorId, std::optional<ValueRange>> known;
};

std::optional<ValueRange> range_of(const Network& net, const NetworkIndex& index, TensorId id,
                                   int depth, Memo& memo);

std::optional<ValueRange> compute(const Network& net, const NetworkIndex& index, TensorId id,
                                  int depth, Memo& memo) {
  const TensorDesc& d = net.tensor(id);
  if (!integral(d.dtype)) return std::nullopt;
  const auto p = index.producer(id);
  const Layer* producer_layer = p ? &net.layers()[*p] : nullptr;
  if (producer_layer) {  // a weight refit may replace says nothing of its values
    const auto* c = std::get_if<ConstantParams>(&producer_layer->params);
    if (c && memo.keep.count(c->weight)) return std::nullopt;
  }
  if (d.values && !d.values->empty()) {
    return of_values(d.values->data(), static_cast<int64_t>(d.values->size()));
  }
  if (!producer_layer || depth > kMaxDepth) return std::nullopt;
  const Layer& l = *producer_layer;
  const auto in = [&](size_t i) -> std::optional<ValueRange> {
    if (i >= l.inputs.size()) return std::nullopt;
    return range_of(net, index, l.inputs[i], depth + 1, memo);
  };
  std::optional<ValueRange> r;
  if (const auto* c = std::get_if<ConstantParams>(&l.params)) {
    r = of_weights(net.weight(c->weight));
  } else if (const auto* f = std::get_if<FillParams>(&l.params)) {
    if (f->mode == FillMode::kConstant) {
      r = ValueRange{f->value, f->value};
    } else {  // start + i * delta for i = 0, 1, ...: one end is the start
      r = f->delta >= 0 ? ValueRange{f->start, kInf} : ValueRange{-kInf, f->start};
    }
  } else if (const auto* s = std::get_if<ShuffleParams>(&l.params)) {
    if (!s->cast) r = in(0);
  } else if (std::holds_alternative<SliceParams>(l.params)) {
    r = in(0);
  } else if (std::holds_alternative<GatherParams>(l.params)) {
    r = in(0);  // the data's elements (an index out of range is an error)
  } else if (std::holds_alternative<SelectParams>(l.params)) {
    const auto c = in(0);
    if (c && c->lo >= 1) {
      r = in(1);
    } else if (c && c->hi <= 0) {
      r = in(2);
    } else {
      const auto a = in(1), b = in(2);
      if (a && b) r = join(*a, *b);
    }
  } else if (std::holds_alternative<CastParams>(l.params)) {
    const auto x = in(0);
    if (x && d.dtype == DataType::kBool) {
      r = x->lo > 0 || x->hi < 0     ? ValueRange{1, 1}
          : x->lo == 0 && x->hi == 0 ? ValueRange{0, 0}
                                     : ValueRange{0, 1};
    } else if (x) {
      const ValueRange t = type_range(d.dtype);
      if (x->lo >= t.lo && x->hi <= t.hi) r = x;  // (else it wraps)
    }
  } else if (const auto* e = std::get_if<ElementwiseParams>(&l.params)) {
    const auto a = in(0), b = in(1);
    if (a && b) {
      if (e->op == BinaryOp::kAnd && d.dtype == DataType::kBool) {
        r = ValueRange{std::min(a->lo, b->lo) > 0 ? 1.0 : 0.0, a->hi > 0 && b->hi > 0 ? 1.0 : 0.0};
      } else if (e->op == BinaryOp::kOr && d.dtype == DataType::kBool) {
        r = ValueRange{a->lo > 0 || b->lo > 0 ? 1.0 : 0.0, std::max(a->hi, b->hi) > 0 ? 1.0 : 0.0};
      } else if (e->op != BinaryOp::kAnd && e->op != BinaryOp::kOr) {
        r = binary(e->op, *a, *b);
      }
    } else if ((a || b) && d.dtype == DataType::kBool) {  // one side decides and/or
      const ValueRange known = a ? *a : *b;
      if (e->op == BinaryOp::kAnd && known.hi <= 0) r = ValueRange{0, 0};
      if (e->op == BinaryOp::kOr && known.lo > 0) r = ValueRange{1, 1};
    }
  }
  if (!r || std::isnan(r->lo) || std::isnan(r->hi)) return std::nullopt;
  // Results past the type's bounds wrap (i64: finite bounds past 2^62, where doubles stop being
  // exact enough to tell): then nothing is known. An unbounded side (a range's end) is no value.
  const ValueRange t = type_range(d.dtype);
  const double limit = 4611686018427387904.0;  // 2^62
  if (r->lo < t.lo || r->hi > t.hi || (std::isfinite(r->lo) && std::abs(r->lo) > limit) ||
      (std::isfinite(r->hi) && std::abs(r->hi) > limit)) {
    return std::nullopt;
  }
  return r;
}

std::optional<ValueRange> range_of(const Network& net, const NetworkIndex& index, TensorId id,
                                   int depth, Memo& memo) {
  if (const auto it = memo.known.find(id); it != memo.known.end()) return it->second;
  const auto r = compute(net, index, id, depth, memo);
  memo.known[id] = r;
  return r;
}

}  // namespace

std::optional<ValueRange> value_range(const Network& net, const NetworkIndex& index, TensorId id,
                                      const std::set<std::string>& keep) {
  Memo memo{keep, {}};
  return range_of(net, index, id, 0, memo);
}

bool always_true(const Network& net, const NetworkIndex& index, TensorId id,
                 const std::set<std::string>& keep) {
  if (net.tensor(id).dtype != DataType::kBool) return false;
  const auto r = value_range(net, index, id, keep);
  return r && r->lo >= 1;
}

}  // namespace kiln::engine
