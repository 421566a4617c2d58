// decompose_ops' math identities (issue #35's coverage): elementwise identities, activations
// and special functions, products of vectors and matrices, losses, reductions and masks, each
// into ops the engine has layers for. decompose_ops (decompose_ops.cpp) calls decompose_math
// for every node its own rewrites leave.
#include "lowering/passes/decompose_math.h"

#include <cmath>
#include <limits>

#include "lowering/passes/rewrite_builder.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

Value* call(GraphPtr& graph, const char* name, std::vector<torch::jit::NamedValue> args) {
  return graph->insert(c10::Symbol::fromQualString(name), args);
}

constexpr double kPi = 3.14159265358979323846;
constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLn10 = 2.30258509299404568402;
const double kInf = std::numeric_limits<double>::infinity();

// movedim's permutation: dims `from` go to `to`, the others keep their order; empty when the
// dims are out of range or repeated.
std::vector<int64_t> moved_dims(int64_t rank, std::vector<int64_t> from, std::vector<int64_t> to) {
  if (from.size() != to.size()) return {};
  std::vector<int64_t> perm(static_cast<size_t>(rank), -1);
  std::vector<bool> used(static_cast<size_t>(rank), false);
  for (size_t i = 0; i < from.size(); ++i) {
    for (int64_t* d : {&from[i], &to[i]}) {
      if (*d < -rank || *d >= rank) return {};
      if (*d < 0) *d += rank;
    }
    if (perm[static_cast<size_t>(to[i])] != -1 || used[static_cast<size_t>(from[i])]) return {};
    perm[static_cast<size_t>(to[i])] = from[i];
    used[static_cast<size_t>(from[i])] = true;
  }
  int64_t next = 0;
  for (int64_t& p : perm) {
    if (p != -1) continue;
    while (used[static_cast<size_t>(next)]) ++next;
    p = next;
    used[static_cast<size_t>(next)] = true;
  }
  return perm;
}

}  // namespace

Value* decompose_math(GraphPtr& graph, Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema) return nullptr;
  const std::string name = schema->name(), overload = schema->overload_name();
  const auto in = [&](size_t i) { return node->input(i); };
  const size_t n = node->inputs().size();
  auto g = [&](const char* op, std::vector<torch::jit::NamedValue> args) {
    return call(graph, op, std::move(args));
  };
  if ((name == "aten::bitwise_left_shift" || name == "aten::__lshift__" ||
       name == "aten::bitwise_right_shift" || name == "aten::__rshift__") &&
      n == 2 && (overload == "Tensor" || overload == "Scalar" || overload == "Tensor_Scalar")) {
    // Shifts of int64 and int32 by a tensor or a number as torch does them: a * 2^b for the left
    // (wrapping), floor(a / 2^b) for the right (arithmetic); a shift by less than 0 or by the
    // width or more gives 0 to the left and the sign (0 or -1) to the right.
    const auto type = known_dtype(in(0));
    if (type != c10::kLong && type != c10::kInt) return nullptr;
    const int64_t width = type == c10::kLong ? 64 : 32;
    const bool left = name == "aten::bitwise_left_shift" || name == "aten::__lshift__";
    Value* a = in(0);
    Value* sign = g("aten::where", {g("aten::lt", {a, 0}), g("aten::full_like", {a, -1}),
                                    g("aten::full_like", {a, 0})});
    if (auto amount = constant_value(in(1)); amount && amount->isInt()) {
      const int64_t s = amount->toInt();
      if (s < 0 || s >= width - (left ? 0 : 1)) return left ? g("aten::mul", {a, 0}) : sign;
      const int64_t power = static_cast<int64_t>(uint64_t{1} << s);
      return g(left ? "aten::mul" : "aten::floor_divide", {a, power});
    }
    if (known_dtype(in(1)) != type) return nullptr;
    Value* s = in(1);
    Value* in_range =
        g("aten::logical_and", {g("aten::ge", {s, 0}), g("aten::lt", {s, width - (left ? 0 : 1)})});
    // 2^s where it is in range (else 2^0, unused): pow wraps 2^63 to -2^63, whose products
    // wrap to the shifted bits.
    Value* power = g("aten::pow", {2, g("aten::where", {in_range, s, g("aten::mul", {s, 0})})});
    if (left) {
      return g("aten::where", {in_range, g("aten::mul", {a, power}), g("aten::mul", {a, 0})});
    }
    return g("aten::where", {in_range, g("aten::floor_divide", {a, power}), sign});
  }
  if (n == 1 && overload.empty()) {
    Value* x = in(0);
    if (name == "aten::acosh") {
      return g(
          "aten::log",
          {g("aten::add", {x, g("aten::sqrt", {g("aten::sub", {g("aten::mul", {x, x}), 1})})})});
    }
    if (name == "aten::asinh") {
      Value* a = g("aten::abs", {x});
      Value* r =
          g("aten::log",
            {g("aten::add", {a, g("aten::sqrt", {g("aten::add", {g("aten::mul", {a, a}), 1})})})});
      return g("aten::mul", {g("aten::sign", {x}), r});
    }
    if (name == "aten::atanh") {
      return g(
          "aten::mul",
          {g("aten::sub", {g("aten::log1p", {x}), g("aten::log1p", {g("aten::neg", {x})})}), 0.5});
    }
    if (name == "aten::erfc") return g("aten::rsub", {g("aten::erf", {x}), 1});
    if (name == "aten::exp2") return g("aten::exp", {g("aten::mul", {x, kLn2})});
    if (name == "aten::log10") return g("aten::mul", {g("aten::log", {x}), 1.0 / kLn10});
    if (name == "aten::deg2rad") return g("aten::mul", {x, kPi / 180});
    if (name == "aten::rad2deg") return g("aten::mul", {x, 180 / kPi});
    if (name == "aten::frac") return g("aten::sub", {x, g("aten::trunc", {x})});
    if (name == "aten::isnan") return g("aten::ne", {x, x});
    if (name == "aten::isinf") return g("aten::eq", {g("aten::abs", {x}), kInf});
    if (name == "aten::isposinf") return g("aten::eq", {x, kInf});
    if (name == "aten::isneginf") return g("aten::eq", {x, -kInf});
    // inf * 0 and nan * 0 are nan; integers and bools are always finite.
    if (name == "aten::isfinite") return g("aten::eq", {g("aten::mul", {x, 0}), 0});
    if (name == "aten::log_sigmoid") {
      return g("aten::neg", {g("aten::softplus", {g("aten::neg", {x}), 1, 20})});
    }
    if (name == "aten::mT" || name == "aten::mH" || name == "aten::adjoint") {
      return g("aten::transpose", {x, -2, -1});
    }
    if (name == "aten::matrix_H") return g("aten::transpose", {x, 0, 1});
    if (name == "aten::ravel") return g("aten::reshape", {x, std::vector<int64_t>{-1}});
    // Views that only mark a complex tensor's negation or conjugation: real tensors as they are.
    const auto type = known_dtype(x);
    const bool real = type && !c10::isComplexType(*type);
    const bool floating = type && c10::isFloatingType(*type);
    if (real &&
        (name == "aten::positive" || name == "aten::resolve_neg" || name == "aten::resolve_conj")) {
      return x;
    }
    if (real && name == "aten::sgn") return g("aten::sign", {x});
    if (real && name == "aten::sinc") {
      Value* px = g("aten::mul", {x, kPi});
      return g("aten::where",
               {g("aten::eq", {x, 0}), 1.0, g("aten::div", {g("aten::sin", {px}), px})});
    }
    if (floating && name == "aten::special_entr") {
      // As torch: nan stays nan, -x log x above 0, 0 at 0, -inf below (zeros and infinities of
      // x's own dtype: x * 0, then minus inf).
      Value* zero = g("aten::mul", {x, 0});
      Value* below = g("aten::where", {g("aten::eq", {x, 0}), zero, g("aten::sub", {zero, kInf})});
      Value* above = g("aten::neg", {g("aten::mul", {x, g("aten::log", {x})})});
      return g("aten::where",
               {g("aten::ne", {x, x}), x, g("aten::where", {g("aten::gt", {x, 0}), above, below})});
    }
    if (name == "aten::dot" || name == "aten::vdot") return nullptr;  // two inputs, below
  }
  if (name == "aten::special_xlog1py" && overload.empty() && n == 2) {
    const auto tx = known_dtype(in(0)), ty = known_dtype(in(1));
    if (!tx || !ty || *tx != *ty || !c10::isFloatingType(*tx)) return nullptr;
    // As torch: nan where y is nan, 0 where x is 0, else x log1p(y).
    Value* product = g("aten::mul", {in(0), g("aten::log1p", {in(1)})});
    Value* zero = g("aten::mul", {in(0), 0});
    return g("aten::where", {g("aten::ne", {in(1), in(1)}), in(1),
                             g("aten::where", {g("aten::eq", {in(0), 0}), zero, product})});
  }
  if ((name == "aten::threshold" && n == 3) ||
      ((name == "aten::hardshrink" || name == "aten::softshrink") && n == 2)) {
    const auto type = known_dtype(in(0));
    auto a = constant_value(in(1));
    if (!type || !a || !(a->isDouble() || a->isInt())) return nullptr;
    const double t = a->toScalar().toDouble();
    Value* x = in(0);
    if (name == "aten::threshold") {  // x <= threshold ? value : x (nan stays)
      auto value = constant_value(in(2));
      if (!value || !(value->isDouble() || value->isInt())) return nullptr;
      if (c10::isFloatingType(*type)) {
        return g("aten::where", {g("aten::le", {x, t}), value->toScalar().toDouble(), x});
      }
      // Of integers: the value cast to x's dtype as torch does (2.5 -> 2), the comparison with
      // the threshold as given (x <= 1.5).
      if (!c10::isIntegralType(*type, /*includeBool=*/false)) return nullptr;
      const int64_t v = static_cast<int64_t>(value->toScalar().toDouble());
      return g("aten::where", {g("aten::le", {x, t}), g("aten::full_like", {x, v}), x});
    }
    if (!c10::isFloatingType(*type)) return nullptr;
    if (name == "aten::hardshrink") {  // -l <= x <= l ? 0 : x
      return g("aten::where",
               {g("aten::logical_and", {g("aten::ge", {x, -t}), g("aten::le", {x, t})}), 0.0, x});
    }
    // softshrink: x > l ? x - l : (x < -l ? x + l : x * 0), nan stays nan.
    return g("aten::where", {g("aten::gt", {x, t}), g("aten::sub", {x, t}),
                             g("aten::where", {g("aten::lt", {x, -t}), g("aten::add", {x, t}),
                                               g("aten::mul", {x, 0})})});
  }
  if (name == "aten::prelu" && n == 2) {
    // x > 0 ? x : w x, w along dim 1 (the only dim of a 1-d input).
    const auto rank = known_rank(in(0));
    const auto type = known_dtype(in(0));
    if (!rank || !type || !c10::isFloatingType(*type)) return nullptr;
    Value* w = in(1);
    if (*rank >= 2) {
      std::vector<int64_t> shape(static_cast<size_t>(*rank - 1), 1);
      shape[0] = -1;
      w = g("aten::reshape", {w, shape});
    }
    return g("aten::where", {g("aten::gt", {in(0), 0}), in(0), g("aten::mul", {w, in(0)})});
  }
  if (name == "aten::logit" && n == 2) {
    auto eps = constant_value(in(1));
    if (!eps) return nullptr;
    Value* x = in(0);
    if (!eps->isNone()) x = g("aten::clamp", {x, eps->toDouble(), 1 - eps->toDouble()});
    return g("aten::log", {g("aten::div", {x, g("aten::rsub", {x, 1})})});
  }
  if (name == "aten::celu" && n == 2) {
    auto alpha = constant_value(in(1));
    if (!alpha || !(alpha->isDouble() || alpha->isInt())) return nullptr;
    const double a = alpha->toScalar().toDouble();
    if (a == 0) return nullptr;
    Value* neg = g("aten::mul", {g("aten::expm1", {g("aten::div", {in(0), a})}), a});
    return g("aten::where", {g("aten::gt", {in(0), 0}), in(0), neg});
  }
  if (n == 2 && (overload.empty() || overload == "Tensor" || overload == "Scalar")) {
    Value* a = in(0);
    Value* b = in(1);
    if (name == "aten::atan2") {  // a = y, b = x
      Value* q = g("aten::atan", {g("aten::div", {a, b})});
      Value* left = g("aten::where",
                      {g("aten::lt", {a, 0}), g("aten::sub", {q, kPi}), g("aten::add", {q, kPi})});
      Value* r = g("aten::where", {g("aten::lt", {b, 0}), left, q});
      // x = +-0: +-pi/2 by y's sign (y / -0 would flip it), 0 at the origin. (torch's pi at
      // y = +0, x = -0 is not kept.)
      return g("aten::where",
               {g("aten::eq", {b, 0}), g("aten::mul", {g("aten::sign", {a}), kPi / 2}), r});
    }
    if (name == "aten::hypot") {
      return g("aten::sqrt", {g("aten::add", {g("aten::mul", {a, a}), g("aten::mul", {b, b})})});
    }
    if (name == "aten::fmod" && overload == "Scalar") {  // a constant, nonzero divisor
      auto divisor = constant_value(b);
      if (!divisor || !divisor->isScalar() || divisor->toScalar().toDouble() == 0) return nullptr;
      Value* q = graph->insert(c10::aten::div, {a, b},
                               {torch::jit::NamedValue("rounding_mode", std::string("trunc"))});
      return g("aten::sub", {a, g("aten::mul", {q, b})});
    }
    if (name == "aten::fmax" || name == "aten::fmin") {
      Value* m = g(name == "aten::fmax" ? "aten::maximum" : "aten::minimum", {a, b});
      return g("aten::where",
               {g("aten::ne", {a, a}), b, g("aten::where", {g("aten::ne", {b, b}), a, m})});
    }
    if (name == "aten::logaddexp" || name == "aten::logaddexp2") {
      const bool two = name == "aten::logaddexp2";
      Value* m = g("aten::maximum", {a, b});
      Value* d = g("aten::neg", {g("aten::abs", {g("aten::sub", {a, b})})});
      if (two) d = g("aten::mul", {d, kLn2});
      Value* tail = g("aten::log1p", {g("aten::exp", {d})});
      if (two) tail = g("aten::mul", {tail, 1 / kLn2});
      // Equal arguments (infinities too): a + log(2) (or + 1 in base 2).
      return g("aten::where", {g("aten::eq", {a, b}), g("aten::add", {a, two ? 1.0 : kLn2}),
                               g("aten::add", {m, tail})});
    }
    if (name == "aten::xlogy" && overload == "Tensor") {
      Value* r =
          g("aten::where", {g("aten::eq", {a, 0}), 0.0, g("aten::mul", {a, g("aten::log", {b})})});
      return g("aten::where", {g("aten::ne", {b, b}), b, r});
    }
    if (name == "aten::clamp_min" && overload == "Tensor") return g("aten::maximum", {a, b});
    if (name == "aten::clamp_max" && overload == "Tensor") return g("aten::minimum", {a, b});
    if (name == "aten::dot" || name == "aten::vdot") {
      return g("aten::sum", {g("aten::mul", {a, b})});
    }
    // mul and sum, exact for integers too (the engine's matrix products take floats).
    if (name == "aten::mv") return g("aten::sum", {g("aten::mul", {a, b}), -1});
    if (name == "aten::outer" || name == "aten::ger") {
      return g("aten::mul", {g("aten::unsqueeze", {a, 1}), b});
    }
    if (name == "aten::broadcast_to") return g("aten::expand", {a, b});
  }
  if (name == "aten::clamp" && overload == "Tensor" && n == 3) {
    Value* r = in(0);
    if (!constant_value(in(1)) || !constant_value(in(1))->isNone()) {
      r = g("aten::maximum", {r, in(1)});
    }
    if (!constant_value(in(2)) || !constant_value(in(2))->isNone()) {
      r = g("aten::minimum", {r, in(2)});
    }
    return r;
  }
  if ((name == "aten::addcmul" || name == "aten::addcdiv") && n == 4) {
    Value* t = g(name == "aten::addcmul" ? "aten::mul" : "aten::div", {in(1), in(2)});
    return g("aten::add", {in(0), g("aten::mul", {t, in(3)})});
  }
  if (name == "aten::lerp" && n == 3) {
    // As torch computes it: start + weight * (end - start) for |weight| < 0.5, else
    // end - (end - start) * (1 - weight), exact at both ends.
    Value* diff = g("aten::sub", {in(1), in(0)});
    if (auto w = constant_number(in(2))) {
      if (std::abs(*w) < 0.5) return g("aten::add", {in(0), g("aten::mul", {diff, *w})});
      return g("aten::sub", {in(1), g("aten::mul", {diff, 1.0 - *w})});
    }
    Value* near_start = g("aten::add", {in(0), g("aten::mul", {diff, in(2)})});
    Value* near_end = g("aten::sub", {in(1), g("aten::mul", {diff, g("aten::rsub", {in(2), 1})})});
    return g("aten::where", {g("aten::lt", {g("aten::abs", {in(2)}), 0.5}), near_start, near_end});
  }
  if ((name == "aten::addmv" || name == "aten::addr") && n == 5) {
    auto beta = constant_value(in(3));
    auto alpha = constant_value(in(4));
    if (!beta || !alpha || !beta->isScalar() || !alpha->isScalar()) return nullptr;
    Value* product = name == "aten::addmv"
                         ? g("aten::sum", {g("aten::mul", {in(1), in(2)}), -1})
                         : g("aten::mul", {g("aten::unsqueeze", {in(1), 1}), in(2)});
    if (alpha->toScalar().toDouble() != 1) product = g("aten::mul", {product, in(4)});
    // beta = 0 ignores self, nan and inf included.
    if (beta->toScalar().toDouble() == 0)
      return g("aten::add", {g("aten::mul", {in(0), 0}), product});
    return g("aten::add", {g("aten::mul", {in(0), in(3)}), product});
  }
  if (name == "aten::heaviside" && n == 2) {  // 0 below zero, 1 above, `values` at zero
    Value* step = g("aten::where", {g("aten::gt", {in(0), 0}), 1, 0});
    return g("aten::where", {g("aten::eq", {in(0), 0}), in(1), step});
  }
  if (name == "aten::nan_to_num" && n == 4) {
    const auto type = known_dtype(in(0));
    if (!type) return nullptr;
    if (!c10::isFloatingType(*type)) return in(0);  // integers have no NaN or infinities
    auto nan = constant_value(in(1)), pos = constant_value(in(2)), neg = constant_value(in(3));
    if (!nan || !pos || !neg) return nullptr;
    const double max = *type == c10::kHalf       ? 65504.0
                       : *type == c10::kBFloat16 ? 3.3895313892515355e38
                       : *type == c10::kDouble   ? std::numeric_limits<double>::max()
                                                 : std::numeric_limits<float>::max();
    Value* x = in(0);
    Value* r = g("aten::where", {g("aten::ne", {x, x}), nan->isNone() ? 0.0 : nan->toDouble(), x});
    r = g("aten::where", {g("aten::eq", {x, kInf}), pos->isNone() ? max : pos->toDouble(), r});
    return g("aten::where", {g("aten::eq", {x, -kInf}), neg->isNone() ? -max : neg->toDouble(), r});
  }
  if (name == "aten::movedim" && n == 3) {
    const auto rank = known_rank(in(0));
    auto from = constant_value(in(1)), to = constant_value(in(2));
    if (!rank || !from || !to) return nullptr;
    const auto perm =
        moved_dims(*rank, from->isInt() ? std::vector<int64_t>{from->toInt()} : from->toIntVector(),
                   to->isInt() ? std::vector<int64_t>{to->toInt()} : to->toIntVector());
    if (perm.empty()) return nullptr;
    Value* moved = g("aten::permute", {in(0), perm});
    moved->setType(in(0)->type()->expect<c10::TensorType>()->withDim(static_cast<size_t>(*rank)));
    return moved;
  }
  if (name == "aten::numpy_T" && n == 1) {
    const auto rank = known_rank(in(0));
    if (!rank) return nullptr;
    std::vector<int64_t> perm;
    for (int64_t d = *rank - 1; d >= 0; --d) perm.push_back(d);
    return g("aten::permute", {in(0), perm});
  }
  if ((name == "aten::atleast_1d" || name == "aten::atleast_2d" || name == "aten::atleast_3d") &&
      n == 1 && overload.empty()) {
    const auto rank = known_rank(in(0));
    if (!rank) return nullptr;
    const int64_t want = name.back() == 'd' ? name[name.size() - 2] - '0' : 0;
    Value* x = in(0);
    if (*rank == 0) return g("aten::reshape", {x, std::vector<int64_t>(want, 1)});
    if (*rank == 1 && want >= 2) x = g("aten::unsqueeze", {x, 0});
    if ((*rank == 1 || *rank == 2) && want == 3) x = g("aten::unsqueeze", {x, -1});
    return x;
  }
  if ((name == "aten::flip" && n == 2) ||
      ((name == "aten::fliplr" || name == "aten::flipud") && n == 1)) {
    const auto rank = known_rank(in(0));
    std::vector<int64_t> dims = {name == "aten::fliplr" ? 1 : 0};
    if (name == "aten::flip") {
      auto d = constant_value(in(1));
      if (!d || !d->isIntList()) return nullptr;
      dims = d->toIntVector();
    }
    if (!rank) return nullptr;
    // Each dim read backwards: index_select by (size - 1) - arange(size), sizes read at run time.
    Value* x = in(0);
    for (int64_t d : dims) {
      if (d < -*rank || d >= *rank) return nullptr;
      if (d < 0) d += *rank;
      Value* size = g("aten::size", {in(0), d});
      Value* last = g("aten::sub", {size, 1});
      Value* index = g("aten::rsub", {g("aten::arange", {size}), last});
      x = g("aten::index_select", {x, d, index});
    }
    x->setType(in(0)->type());  // the input's rank and dtype, for rewrites of what reads it
    return x;
  }
  if (name == "aten::round" && overload == "decimals" && n == 2) {
    const auto type = known_dtype(in(0));
    auto decimals = constant_value(in(1));
    if (!type || !c10::isFloatingType(*type) || !decimals || !decimals->isInt()) return nullptr;
    const int64_t d = decimals->toInt();
    if (d == 0) return g("aten::round", {in(0)});
    const double scale = std::pow(10.0, static_cast<double>(d < 0 ? -d : d));
    if (d > 0) return g("aten::div", {g("aten::round", {g("aten::mul", {in(0), scale})}), scale});
    return g("aten::mul", {g("aten::round", {g("aten::div", {in(0), scale})}), scale});
  }
  if (name == "aten::repeat" && n == 2) {
    const auto rank = known_rank(in(0));
    auto repeats = constant_value(in(1));
    if (!rank || !repeats || !repeats->isIntList()) return nullptr;
    const std::vector<int64_t> r = repeats->toIntVector();
    const int64_t m = static_cast<int64_t>(r.size());
    if (m < *rank) return nullptr;
    // [s...] as [1, s0, 1, s1, ...], expanded to [r0, s0, r1, s1, ...], as [r0 * s0, ...].
    std::vector<Value*> sizes;
    for (int64_t i = 0; i < m - *rank; ++i) sizes.push_back(graph->insertConstant(int64_t{1}));
    for (int64_t i = 0; i < *rank; ++i) sizes.push_back(g("aten::size", {in(0), i}));
    std::vector<Value*> split, expanded, merged;
    for (int64_t i = 0; i < m; ++i) {
      split.push_back(graph->insertConstant(int64_t{1}));
      split.push_back(sizes[i]);
      expanded.push_back(graph->insertConstant(r[i]));
      expanded.push_back(sizes[i]);
      merged.push_back(g("aten::mul", {sizes[i], r[i]}));
    }
    Value* x = g("aten::reshape", {in(0), RewriteBuilder(graph).list(split)});
    x = g("aten::expand", {x, RewriteBuilder(graph).list(expanded)});
    return g("aten::reshape", {x, RewriteBuilder(graph).list(merged)});
  }
  if ((name == "aten::nansum" || name == "aten::nanmean") && overload.empty() && n == 4) {
    // NaN as 0 in the sum; nanmean divides by the count of the others (0 / 0: NaN, as torch).
    const auto type = known_dtype(in(0));
    auto dims = constant_value(in(1));
    auto keep = constant_value(in(2));
    if (!type || *type == c10::ScalarType::Bool || !dims || !keep || !keep->isBool() ||
        !is_constant_none(in(3)) || (name == "aten::nanmean" && !c10::isFloatingType(*type))) {
      return nullptr;
    }
    if (dims->isNone() && keep->toBool()) return nullptr;
    Value* x = in(0);
    Value* nan = g("aten::ne", {x, x});
    auto sum = [&](Value* v) {
      return dims->isNone() ? g("aten::sum", {v}) : g("aten::sum", {v, in(1), in(2)});
    };
    Value* total = sum(g("aten::where", {nan, int64_t{0}, x}));
    if (name == "aten::nansum") return total;
    return g("aten::div", {total, sum(g("aten::logical_not", {nan}))});
  }
  if (name == "aten::trace" && n == 1) {
    // The diagonal of the flattened matrix: elements 0, m + 1, 2 (m + 1), ... min(n, m) of them.
    const auto rank = known_rank(in(0));
    const auto type = known_dtype(in(0));
    if (!rank || *rank != 2 || !type || *type == c10::ScalarType::Bool) return nullptr;
    Value* rows = g("aten::size", {in(0), 0});
    Value* cols = g("aten::size", {in(0), 1});
    Value* index = g("aten::mul", {g("aten::arange", {g("prim::min", {rows, cols})}),
                                   g("aten::add", {cols, 1})});
    Value* flat = g("aten::reshape", {in(0), std::vector<int64_t>{-1}});
    return g("aten::sum", {g("aten::index_select", {flat, 0, index})});
  }
  if ((name == "aten::tril" || name == "aten::triu") && n == 2) {
    // Kept where column - row <= k (tril) or >= k (triu), else 0 of x's dtype; the matrix's
    // sizes read at run time.
    const auto rank = known_rank(in(0));
    const auto type = known_dtype(in(0));
    auto k = constant_value(in(1));
    if (!rank || *rank < 2 || !type || *type == c10::ScalarType::Bool || !k || !k->isInt()) {
      return nullptr;
    }
    Value* rows = g("aten::arange", {g("aten::size", {in(0), -2})});
    Value* cols = g("aten::arange", {g("aten::size", {in(0), -1})});
    Value* offset =
        g("aten::sub", {g("aten::unsqueeze", {cols, 0}), g("aten::unsqueeze", {rows, 1})});
    Value* keep = g(name == "aten::tril" ? "aten::le" : "aten::ge", {offset, k->toInt()});
    return g("aten::where", {keep, in(0), int64_t{0}});
  }
  if (name == "aten::repeat_interleave" && overload == "self_int" && n == 4) {
    // Each element `repeats` times along dim: [.., s, ..] -> [.., s, 1, ..] -> expanded to
    // [.., s, r, ..] -> [.., s * r, ..].
    const auto rank = known_rank(in(0));
    auto repeats = constant_value(in(1));
    auto dim = constant_value(in(2));
    if (!rank || *rank < 1 || !repeats || !repeats->isInt() || !dim || !dim->isInt()) {
      return nullptr;
    }
    int64_t d = dim->toInt();
    if (d < -*rank || d >= *rank) return nullptr;
    if (d < 0) d += *rank;
    const int64_t r = repeats->toInt();
    std::vector<Value*> expanded, merged;
    for (int64_t i = 0; i < *rank; ++i) {
      Value* size = g("aten::size", {in(0), i});
      expanded.push_back(size);
      merged.push_back(i == d ? g("aten::mul", {size, r}) : size);
      if (i == d) expanded.push_back(graph->insertConstant(r));
    }
    Value* x = g("aten::expand",
                 {g("aten::unsqueeze", {in(0), d + 1}), RewriteBuilder(graph).list(expanded)});
    return g("aten::reshape", {x, RewriteBuilder(graph).list(merged)});
  }
  if (name == "aten::isclose" && n == 5) {
    const auto type = known_dtype(in(0));
    auto rtol = constant_value(in(2)), atol = constant_value(in(3)), nan = constant_value(in(4));
    // Floats, and integers (whose error and allowance torch compares in float just the same).
    if (!type || (!c10::isFloatingType(*type) && !c10::isIntegralType(*type, false)) || !rtol ||
        !atol || !nan || !nan->isBool() || nan->toBool() || known_dtype(in(1)) != type) {
      return nullptr;
    }
    // As torch: equal, or a finite difference within atol + rtol * |other|.
    Value* error = g("aten::abs", {g("aten::sub", {in(0), in(1)})});
    Value* allowed = g("aten::add", {g("aten::mul", {g("aten::abs", {in(1)}), rtol->toDouble()}),
                                     atol->toDouble()});
    Value* finite = g("aten::eq", {g("aten::mul", {error, 0}), 0});
    Value* within = g("aten::logical_and", {finite, g("aten::le", {error, allowed})});
    return g("aten::logical_or", {g("aten::eq", {in(0), in(1)}), within});
  }
  if (name == "aten::inner" && n == 2) {
    const auto ra = known_rank(in(0)), rb = known_rank(in(1));
    if (!ra || !rb || *ra < 1) return nullptr;
    if (*rb == 1) return g("aten::sum", {g("aten::mul", {in(0), in(1)}), -1});
    if (*rb == 2) return g("aten::matmul", {in(0), g("aten::transpose", {in(1), 0, 1})});
    return nullptr;
  }
  if (name == "aten::fmod" && overload == "Tensor" && n == 2) {
    const auto type = known_dtype(in(0));
    if (!type) return nullptr;
    Value* q = graph->insert(c10::aten::div, {in(0), in(1)},
                             {torch::jit::NamedValue("rounding_mode", std::string("trunc"))});
    Value* r = g("aten::sub", {in(0), g("aten::mul", {q, in(1)})});
    if (!c10::isFloatingType(*type)) return r;
    // A finite dividend by an infinite divisor is itself (inf * 0 would make it NaN).
    Value* keep = g("aten::logical_and", {g("aten::eq", {g("aten::abs", {in(1)}), kInf}),
                                          g("aten::eq", {g("aten::mul", {in(0), 0}), 0})});
    return g("aten::where", {keep, in(0), r});
  }
  if (name == "aten::count_nonzero" && n == 2) {
    auto dims = constant_value(in(1));
    if (!dims) return nullptr;
    Value* nonzero = g("aten::ne", {in(0), 0});
    if (dims->isNone()) return g("aten::sum", {nonzero});
    const std::vector<int64_t> d =
        dims->isInt() ? std::vector<int64_t>{dims->toInt()} : dims->toIntVector();
    if (d.empty()) return g("aten::sum", {nonzero});
    return g("aten::sum", {nonzero, d, false});
  }
  if (name == "aten::addbmm" && n == 5) {  // beta * self + alpha * (sum of the batch's products)
    auto beta = constant_value(in(3)), alpha = constant_value(in(4));
    if (!beta || !alpha || !beta->isScalar() || !alpha->isScalar()) return nullptr;
    Value* product = g("aten::sum", {g("aten::bmm", {in(1), in(2)}), 0});
    if (alpha->toScalar().toDouble() != 1) product = g("aten::mul", {product, in(4)});
    if (beta->toScalar().toDouble() == 0) {
      return g("aten::add", {g("aten::mul", {in(0), 0}), product});
    }
    return g("aten::add", {g("aten::mul", {in(0), in(3)}), product});
  }
  if ((name == "aten::linalg_cross" || name == "aten::cross") && n == 3) {
    // a x b = a[1,2,0] * b[2,0,1] - a[2,0,1] * b[1,2,0] along the dim of size 3.
    auto dim = constant_value(in(2));
    const auto rank = known_rank(in(0));
    if (!dim || !dim->isInt() || !rank || *rank != known_rank(in(1))) return nullptr;
    Value* first = graph->insertConstant(at::tensor({1, 2, 0}, at::kLong));
    Value* second = graph->insertConstant(at::tensor({2, 0, 1}, at::kLong));
    const auto pick = [&](Value* x, Value* index) {
      return g("aten::index_select", {x, dim->toInt(), index});
    };
    return g("aten::sub", {g("aten::mul", {pick(in(0), first), pick(in(1), second)}),
                           g("aten::mul", {pick(in(0), second), pick(in(1), first)})});
  }
  if (n == 1 && overload.empty() &&
      (name == "aten::real" || name == "aten::conj_physical" || name == "aten::isreal" ||
       name == "aten::angle")) {
    const auto type = known_dtype(in(0));
    if (!type || c10::isComplexType(*type)) return nullptr;
    Value* x = in(0);
    if (name == "aten::real" || name == "aten::conj_physical") return x;
    if (name == "aten::isreal") {
      return graph->insert(c10::aten::ones_like, {x},
                           {torch::jit::NamedValue("dtype", c10::ScalarType::Bool)});
    }
    if (!c10::isFloatingType(*type)) {  // integers and bools: as torch, in the default float
      Value* none = graph->insertConstant(c10::IValue());
      x = g("aten::to", {x, static_cast<int64_t>(c10::ScalarType::Float), false, false, none});
    }
    const c10::ScalarType result = c10::isFloatingType(*type) ? *type : c10::ScalarType::Float;
    // angle: pi below zero, 0 from zero up (as x's dtype), NaN kept.
    Value* none = graph->insertConstant(c10::IValue());
    Value* a = g("aten::to", {g("aten::where", {g("aten::lt", {x, 0}), kPi, 0.0}),
                              static_cast<int64_t>(result), false, false, none});
    return g("aten::where", {g("aten::ne", {x, x}), x, a});
  }
  if (name == "aten::ldexp" && overload == "Tensor" && n == 2) {  // as torch: x * 2^e
    return g("aten::mul", {in(0), g("aten::pow", {2.0, in(1)})});
  }
  if (name == "aten::isin" && overload == "Tensor_Tensor" && n == 4) {
    // Equal to some test element: elements against the flattened tests along a new last dim.
    auto invert = constant_value(in(3));
    if (!invert || !invert->isBool()) return nullptr;
    Value* hit = g("aten::eq", {g("aten::unsqueeze", {in(0), -1}),
                                g("aten::reshape", {in(1), std::vector<int64_t>{-1}})});
    Value* found = g("aten::any", {hit, -1, false});
    return invert->toBool() ? g("aten::logical_not", {found}) : found;
  }
  if (name == "aten::bucketize" && overload == "Tensor" && n == 4) {
    // The number of boundaries below x (right: not above), counted as "not at or above" so that
    // NaN, above every boundary for torch, counts them all.
    auto out_int32 = constant_value(in(2)), right = constant_value(in(3));
    if (known_rank(in(1)) != 1 || !out_int32 || !out_int32->isBool() || !right ||
        !right->isBool()) {
      return nullptr;
    }
    Value* x = g("aten::unsqueeze", {in(0), -1});
    Value* above = g(right->toBool() ? "aten::gt" : "aten::ge", {in(1), x});
    Value* count =
        g("aten::sum", {g("aten::logical_not", {above}), std::vector<int64_t>{-1}, false});
    if (!out_int32->toBool()) return count;
    Value* none = graph->insertConstant(c10::IValue());
    return g("aten::to", {count, static_cast<int64_t>(c10::ScalarType::Int), false, false, none});
  }
  if (name == "aten::_safe_softmax" && n == 3) {
    // softmax, with 0 for a slice all -inf (softmax's NaN there).
    auto dim = constant_value(in(1));
    if (!dim || !dim->isInt()) return nullptr;
    Value* s = g("aten::softmax", {in(0), in(1), in(2)});
    Value* empty =
        g("aten::eq", {g("aten::amax", {in(0), std::vector<int64_t>{dim->toInt()}, true}), -kInf});
    return g("aten::where", {empty, 0.0, s});
  }
  if (name == "aten::_softmax_backward_data" && n == 4) {
    // y (g - sum(g y)) along dim, in the input's dtype.
    auto dim = constant_value(in(2));
    auto dtype = constant_value(in(3));
    if (!dim || !dim->isInt() || !dtype || !dtype->isInt()) return nullptr;
    Value* gy = g("aten::mul", {in(0), in(1)});
    Value* sum = g("aten::sum", {gy, std::vector<int64_t>{dim->toInt()}, true});
    Value* r = g("aten::sub", {gy, g("aten::mul", {in(1), sum})});
    Value* none = graph->insertConstant(c10::IValue());
    return g("aten::to", {r, dtype->toInt(), false, false, none});
  }
  if (name == "aten::take" && n == 2) {
    // The flattened tensor at each index (negative ones from the end), shaped as the indices.
    Value* flat = g("aten::reshape", {in(0), std::vector<int64_t>{-1}});
    Value* index = g("aten::reshape", {in(1), std::vector<int64_t>{-1}});
    Value* numel = graph->insert(c10::Symbol::fromQualString("aten::numel"), {in(0)});
    index = g("aten::where", {g("aten::lt", {index, 0}), g("aten::add", {index, numel}), index});
    Value* picked = g("aten::index_select", {flat, 0, index});
    return g("aten::reshape_as", {picked, in(1)});
  }
  if (name == "aten::take_along_dim" && n == 3) {
    // gather, both sides expanded to their broadcast sizes but along dim (as torch); no dim:
    // the flattened tensor.
    auto dim = constant_value(in(2));
    if (!dim) return nullptr;
    if (dim->isNone()) {
      Value* flat = g("aten::reshape", {in(0), std::vector<int64_t>{-1}});
      return g("aten::gather", {flat, 0, g("aten::reshape", {in(1), std::vector<int64_t>{-1}})});
    }
    const auto rank = known_rank(in(0));
    if (!dim->isInt() || !rank || *rank < 1 || known_rank(in(1)) != rank) return nullptr;
    int64_t d = dim->toInt();
    if (d < -*rank || d >= *rank) return nullptr;
    if (d < 0) d += *rank;
    std::vector<Value*> sizes;
    for (int64_t i = 0; i < *rank; ++i) {
      sizes.push_back(
          i == d ? graph->insertConstant(int64_t{-1})
                 : g("prim::max", {g("aten::size", {in(0), i}), g("aten::size", {in(1), i})}));
    }
    Value* shape = RewriteBuilder(graph).list(sizes);
    return g("aten::gather",
             {g("aten::expand", {in(0), shape}), d, g("aten::expand", {in(1), shape})});
  }
  if (name == "aten::rot90" && n == 3) {
    // As torch: k = 1 flips the second dim and transposes, 2 flips both, 3 flips the first and
    // transposes.
    auto k = constant_value(in(1)), dims = constant_value(in(2));
    if (!k || !k->isInt() || !dims || !dims->isIntList() || dims->toIntVector().size() != 2) {
      return nullptr;
    }
    const std::vector<int64_t> d = dims->toIntVector();
    const int64_t turns = ((k->toInt() % 4) + 4) % 4;
    if (turns == 0) return g("aten::clone", {in(0)});
    if (turns == 2) return g("aten::flip", {in(0), d});
    Value* flipped = g("aten::flip", {in(0), std::vector<int64_t>{turns == 1 ? d[1] : d[0]}});
    return g("aten::transpose", {flipped, d[0], d[1]});
  }
  if (name == "aten::sum_to_size" && n == 2) {
    // Summed over the leading dims `size` lacks and, keeping them, over its dims of size 1.
    const auto rank = known_rank(in(0));
    auto size = constant_value(in(1));
    if (!rank || !size || !size->isIntList()) return nullptr;
    const std::vector<int64_t> target = size->toIntVector();
    const int64_t lead = *rank - static_cast<int64_t>(target.size());
    if (lead < 0) return nullptr;
    Value* x = in(0);
    std::vector<int64_t> ones;
    for (size_t i = 0; i < target.size(); ++i) {
      if (target[i] == 1) ones.push_back(lead + static_cast<int64_t>(i));
    }
    if (!ones.empty()) x = g("aten::sum", {x, ones, true});
    if (lead > 0) {
      std::vector<int64_t> leading;
      for (int64_t i = 0; i < lead; ++i) leading.push_back(i);
      x = g("aten::sum", {x, leading, false});
    }
    return x;
  }
  if (name == "aten::tile" && n == 2) {  // repeat, with leading 1s for dims it does not name
    const auto rank = known_rank(in(0));
    auto dims = constant_value(in(1));
    if (!rank || !dims || !dims->isIntList()) return nullptr;
    std::vector<int64_t> reps = dims->toIntVector();
    while (static_cast<int64_t>(reps.size()) < *rank) reps.insert(reps.begin(), 1);
    if (reps.empty()) return in(0);
    return g("aten::repeat", {in(0), reps});
  }
  if (name == "aten::logsumexp" && n == 3) {
    auto dims = constant_value(in(1));
    auto keep = constant_value(in(2));
    if (!dims || !keep || !dims->isIntList() || !keep->isBool()) return nullptr;
    Value* x = in(0);
    // Of a 0-d tensor (over its dim 0, or none): the value itself, infinities and NaN included.
    if (known_rank(x) == 0 && known_dtype(x) && c10::isFloatingType(*known_dtype(x))) {
      return g("aten::clone", {x});
    }
    Value* reduced = in(1);
    if (dims->toIntVector().empty()) {  // every dim: the flattened tensor's one
      if (keep->toBool()) return nullptr;
      x = g("aten::reshape", {x, std::vector<int64_t>{-1}});
      reduced = graph->insertConstant(std::vector<int64_t>{0});
    }
    Value* m = g("aten::amax", {x, reduced, true});
    // A slice all -inf (or with +inf) has no finite max to shift by: shift by 0 there.
    m = g("aten::where", {g("aten::eq", {g("aten::abs", {m}), kInf}), 0.0, m});
    Value* sum = g("aten::sum", {g("aten::exp", {g("aten::sub", {x, m})}), reduced, true});
    Value* r = g("aten::add", {g("aten::log", {sum}), m});
    // Without keepdim, the reduced dims (now of size 1) go: a sum over them drops them.
    return keep->toBool() ? r : g("aten::sum", {r, reduced, false});
  }
  return nullptr;
}

}  // namespace kiln::lowering
