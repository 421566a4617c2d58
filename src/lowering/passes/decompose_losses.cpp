// decompose_ops' losses (issue #35's coverage): each loss of torch.nn.functional as its
// elementwise formula (torch's, with its clamps and epsilons) and the reduction, into ops the
// engine has layers for. Reductions: 0 none, 1 mean, 2 sum (torch's Reduction enum).
#include <cmath>

#include "lowering/passes/decompose_math.h"
#include "lowering/passes/rewrite_builder.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

constexpr double kTwoPi = 6.28318530717958647692;

Value* reduce(RewriteBuilder& b, Value* loss, int64_t reduction) {
  if (reduction == 0) return loss;
  if (reduction == 1) return b("aten::mean", {loss});
  if (reduction == 2) return b("aten::sum", {loss});
  return nullptr;
}

std::optional<int64_t> integer(const Value* v) {
  auto c = constant_value(v);
  if (!c || !c->isInt()) return std::nullopt;
  return c->toInt();
}

std::optional<bool> flag(const Value* v) {
  auto c = constant_value(v);
  if (!c || !c->isBool()) return std::nullopt;
  return c->toBool();
}

// nll_loss over [N, C, ...] log-probabilities (class dim 1) and [N, ...] class indices: minus
// each target's log-probability times its class weight, 0 at ignore_index; the mean divides by
// the weights of the targets not ignored. One sample ([C], a 0-d target) as a batch of one.
Value* nll_loss(RewriteBuilder& b, Value* input, int64_t rank, Value* target, Value* weight_arg,
                int64_t reduction, int64_t ignore_index) {
  if (rank == 1) {
    Value* loss = nll_loss(b, b("aten::unsqueeze", {input, 0}), 2,
                           b("aten::unsqueeze", {target, 0}), weight_arg, reduction, ignore_index);
    return reduction == 0 ? b("aten::squeeze", {loss, 0}) : loss;
  }
  Value* weight = is_constant_none(weight_arg) ? nullptr : weight_arg;
  Value* ignored = b("aten::eq", {target, ignore_index});
  Value* safe = b("aten::where", {ignored, 0, target});
  Value* picked =
      b("aten::squeeze", {b("aten::gather", {input, 1, b("aten::unsqueeze", {safe, 1})}), 1});
  // The targets' weights (bool where there are none: products and sums keep the input's
  // dtype and count the targets).
  Value* w = b("aten::logical_not", {ignored});
  if (weight) {
    Value* flat = b("aten::reshape", {safe, std::vector<int64_t>{-1}});
    w = b("aten::mul",
          {w, b("aten::reshape_as", {b("aten::index_select", {weight, 0, flat}), safe})});
  }
  Value* loss = b("aten::neg", {b("aten::mul", {picked, w})});
  if (reduction == 1) return b("aten::div", {b("aten::sum", {loss}), b("aten::sum", {w})});
  return reduce(b, loss, reduction);
}

}  // namespace

Value* decompose_loss(GraphPtr& graph, Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema) return nullptr;
  const std::string name = schema->name(), overload = schema->overload_name();
  const auto in = [&](size_t i) { return node->input(i); };
  const size_t n = node->inputs().size();
  // Every loss here takes floats (a graph that does not know the dtype has its types from a
  // rewrite, of a float loss).
  const auto type = known_dtype(in(0));
  if (n < 2 || (type && !c10::isFloatingType(*type))) return nullptr;
  RewriteBuilder b(graph);

  if ((name == "aten::mse_loss" || name == "aten::l1_loss") && n == 3) {
    const auto reduction = integer(in(2));
    if (!reduction) return nullptr;
    Value* d = b("aten::sub", {in(0), in(1)});
    return reduce(b, name == "aten::mse_loss" ? b("aten::mul", {d, d}) : b("aten::abs", {d}),
                  *reduction);
  }
  if ((name == "aten::huber_loss" || name == "aten::smooth_l1_loss") && n == 4) {
    const auto reduction = integer(in(2));
    const auto param = constant_number(in(3));
    if (!reduction || !param) return nullptr;
    const double p = *param;
    Value* a = b("aten::abs", {b("aten::sub", {in(0), in(1)})});
    Value* loss = nullptr;
    if (name == "aten::huber_loss") {  // 0.5 d^2 below delta, delta (|d| - delta / 2) above
      Value* quad = b("aten::mul", {b("aten::mul", {a, a}), 0.5});
      loss = b("aten::where",
               {b("aten::lt", {a, p}), quad, b("aten::mul", {b("aten::sub", {a, 0.5 * p}), p})});
    } else if (p == 0) {  // smooth_l1 with beta 0 is l1
      loss = a;
    } else {  // 0.5 d^2 / beta below beta, |d| - beta / 2 above
      Value* quad = b("aten::div", {b("aten::mul", {b("aten::mul", {a, a}), 0.5}), p});
      loss = b("aten::where", {b("aten::lt", {a, p}), quad, b("aten::sub", {a, 0.5 * p})});
    }
    return reduce(b, loss, *reduction);
  }
  if (name == "aten::binary_cross_entropy" && n == 4) {
    // -w (y log x + (1 - y) log(1 - x)), each log clamped at -100 as torch.
    const auto reduction = integer(in(3));
    if (!reduction) return nullptr;
    auto log = [&](Value* v) { return b("aten::clamp", {b("aten::log", {v}), -100.0, b.none()}); };
    Value* y = in(1);
    Value* loss =
        b("aten::neg",
          {b("aten::add",
             {b("aten::mul", {y, log(in(0))}),
              b("aten::mul", {b("aten::rsub", {y, 1}), log(b("aten::rsub", {in(0), 1}))})})});
    if (!is_constant_none(in(2))) loss = b("aten::mul", {loss, in(2)});
    return reduce(b, loss, *reduction);
  }
  if (name == "aten::binary_cross_entropy_with_logits" && n == 5) {
    // (1 - y) x + l (log1p(exp(-|x|)) + max(-x, 0)), l = 1 + (pos_weight - 1) y; times weight.
    const auto reduction = integer(in(4));
    if (!reduction) return nullptr;
    Value* x = in(0);
    Value* y = in(1);
    Value* softplus =
        b("aten::add", {b("aten::log1p", {b("aten::exp", {b("aten::neg", {b("aten::abs", {x})})})}),
                        b("aten::relu", {b("aten::neg", {x})})});
    if (!is_constant_none(in(3))) {
      Value* l = b("aten::add", {b("aten::mul", {b("aten::sub", {in(3), 1}), y}), 1});
      softplus = b("aten::mul", {softplus, l});
    }
    Value* loss = b("aten::add", {b("aten::mul", {b("aten::rsub", {y, 1}), x}), softplus});
    if (!is_constant_none(in(2))) loss = b("aten::mul", {loss, in(2)});
    return reduce(b, loss, *reduction);
  }
  if (name == "aten::soft_margin_loss" && n == 3) {  // log(1 + exp(-y x))
    const auto reduction = integer(in(2));
    if (!reduction) return nullptr;
    Value* loss =
        b("aten::log1p", {b("aten::exp", {b("aten::neg", {b("aten::mul", {in(0), in(1)})})})});
    return reduce(b, loss, *reduction);
  }
  if (name == "aten::margin_ranking_loss" && n == 5) {  // max(0, -y (x1 - x2) + margin)
    const auto margin = constant_number(in(3));
    const auto reduction = integer(in(4));
    if (!margin || !reduction) return nullptr;
    Value* d = b("aten::mul", {b("aten::neg", {in(2)}), b("aten::sub", {in(0), in(1)})});
    return reduce(b, b("aten::clamp", {b("aten::add", {d, *margin}), 0.0, b.none()}), *reduction);
  }
  if (name == "aten::hinge_embedding_loss" && n == 4) {
    // max(0, margin - x) where y is not 1, plus x where y is not -1.
    const auto margin = constant_number(in(2));
    const auto reduction = integer(in(3));
    if (!margin || !reduction) return nullptr;
    Value* x = in(0);
    Value* zero = b("aten::mul", {x, 0});
    Value* hinge = b("aten::clamp", {b("aten::rsub", {x, *margin}), 0.0, b.none()});
    Value* loss = b("aten::add", {b("aten::where", {b("aten::ne", {in(1), 1}), hinge, zero}),
                                  b("aten::where", {b("aten::ne", {in(1), -1}), x, zero})});
    return reduce(b, loss, *reduction);
  }
  if (name == "aten::kl_div" && n == 4) {
    // target (log target - input), the target given as its log or not (0 log 0 = 0).
    const auto reduction = integer(in(2));
    const auto log_target = flag(in(3));
    if (!reduction || !log_target) return nullptr;
    Value* t = in(1);
    Value* loss = *log_target
                      ? b("aten::mul", {b("aten::exp", {t}), b("aten::sub", {t, in(0)})})
                      : b("aten::sub", {b("aten::xlogy", {t, t}), b("aten::mul", {t, in(0)})});
    return reduce(b, loss, *reduction);
  }
  if (name == "aten::poisson_nll_loss" && n == 6) {
    // exp(x) - t x (log_input), else x - t log(x + eps); full adds Stirling's t log t - t +
    // log(2 pi t) / 2 where t > 1.
    const auto log_input = flag(in(2)), full = flag(in(3));
    const auto eps = constant_number(in(4));
    const auto reduction = integer(in(5));
    if (!log_input || !full || !eps || !reduction) return nullptr;
    Value* x = in(0);
    Value* t = in(1);
    Value* loss =
        *log_input
            ? b("aten::sub", {b("aten::exp", {x}), b("aten::mul", {t, x})})
            : b("aten::sub", {x, b("aten::mul", {t, b("aten::log", {b("aten::add", {x, *eps})})})});
    if (*full) {
      Value* stirling =
          b("aten::add", {b("aten::sub", {b("aten::mul", {t, b("aten::log", {t})}), t}),
                          b("aten::mul", {b("aten::log", {b("aten::mul", {t, kTwoPi})}), 0.5})});
      loss = b("aten::add", {loss, b("aten::where", {b("aten::gt", {t, 1}), stirling, 0.0})});
    }
    return reduce(b, loss, *reduction);
  }
  if (name == "aten::cosine_embedding_loss" && n == 5) {
    // cos = x1 . x2 / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)) along the last dim; 1 - cos where
    // y = 1, max(0, cos - margin) where y = -1.
    const auto margin = constant_number(in(3));
    const auto reduction = integer(in(4));
    const auto rank = known_rank(in(0));
    if (!margin || !reduction || !rank || *rank < 1) return nullptr;
    const std::vector<int64_t> last = {-1};
    auto sum = [&](Value* a, Value* c) {
      return b("aten::sum", {b("aten::mul", {a, c}), last, false});
    };
    Value* denom = b("aten::sqrt", {b("aten::mul", {b("aten::add", {sum(in(0), in(0)), 1e-12}),
                                                    b("aten::add", {sum(in(1), in(1)), 1e-12})})});
    Value* cos = b("aten::div", {sum(in(0), in(1)), denom});
    Value* zero = b("aten::mul", {cos, 0});
    Value* pos = b("aten::where", {b("aten::eq", {in(2), 1}), b("aten::rsub", {cos, 1}), zero});
    Value* neg =
        b("aten::where", {b("aten::eq", {in(2), -1}),
                          b("aten::clamp", {b("aten::sub", {cos, *margin}), 0.0, b.none()}), zero});
    return reduce(b, b("aten::add", {pos, neg}), *reduction);
  }
  if (name == "aten::triplet_margin_loss" && n == 8) {
    // max(0, margin + d(a, p) - d(a, n)), d the pairwise distance; swap takes min(d(a, n),
    // d(p, n)).
    const auto margin = constant_number(in(3)), p = constant_number(in(4)),
               eps = constant_number(in(5));
    const auto swap = flag(in(6));
    const auto reduction = integer(in(7));
    if (!margin || !p || !eps || !swap || !reduction) return nullptr;
    auto distance = [&](Value* a, Value* c) {
      return b("aten::pairwise_distance", {a, c, *p, *eps, false});
    };
    Value* positive = distance(in(0), in(1));
    Value* negative = distance(in(0), in(2));
    if (*swap) negative = b("aten::minimum", {negative, distance(in(1), in(2))});
    Value* loss = b("aten::clamp", {b("aten::add", {b("aten::sub", {positive, negative}), *margin}),
                                    0.0, b.none()});
    return reduce(b, loss, *reduction);
  }
  if ((name == "aten::nll_loss_nd" || name == "aten::nll_loss" || name == "aten::nll_loss2d") &&
      n == 5) {
    const auto rank = known_rank(in(0));
    const auto reduction = integer(in(3));
    const auto ignore = integer(in(4));
    if (!rank || *rank < 1 || known_dtype(in(1)) != c10::ScalarType::Long || !reduction ||
        !ignore) {
      return nullptr;
    }
    return nll_loss(b, in(0), *rank, in(1), in(2), *reduction, *ignore);
  }
  if (name == "aten::cross_entropy_loss" && n == 6) {
    // Class indices: nll_loss of log_softmax over the class dim (1, or 0 of one sample);
    // class probabilities: -sum(weight target log_softmax) over it, the mean over samples.
    const auto rank = known_rank(in(0));
    const auto reduction = integer(in(3));
    const auto ignore = integer(in(4));
    const auto smoothing = constant_number(in(5));
    if (!rank || *rank < 1 || !reduction || !ignore || !smoothing || *smoothing != 0) {
      return nullptr;
    }
    const int64_t classes = *rank == 1 ? 0 : 1;
    Value* log_p = b("aten::log_softmax", {in(0), classes, b.none()});
    if (known_dtype(in(1)) == c10::ScalarType::Long) {
      return nll_loss(b, log_p, *rank, in(1), in(2), *reduction, *ignore);
    }
    if (known_dtype(in(1)) != known_dtype(in(0)) || known_rank(in(1)) != rank) return nullptr;
    Value* terms = b("aten::mul", {log_p, in(1)});
    if (!is_constant_none(in(2))) {
      std::vector<int64_t> shape(static_cast<size_t>(*rank), 1);
      shape[static_cast<size_t>(classes)] = -1;
      terms = b("aten::mul", {terms, b("aten::reshape", {in(2), shape})});
    }
    Value* loss = b("aten::neg", {b("aten::sum", {terms, std::vector<int64_t>{classes}, false})});
    return reduce(b, loss, *reduction);
  }
  if (name == "aten::multi_margin_loss" && n == 6) {
    // Per sample, sum over classes j other than y of w[y] max(0, margin - x[y] + x[j])^p / C;
    // x [N, C] or [C] (a 0-d x: one class, the target's).
    const auto rank = known_rank(in(0));
    const auto p = integer(in(2));
    const auto margin = constant_number(in(3));
    const auto reduction = integer(in(5));
    if (!rank || *rank > 2 || !p || (*p != 1 && *p != 2) || !margin || !reduction ||
        known_dtype(in(1)) != c10::ScalarType::Long) {
      return nullptr;
    }
    Value* x = *rank == 2 ? in(0) : b("aten::reshape", {in(0), std::vector<int64_t>{1, -1}});
    Value* y = b("aten::reshape", {in(1), std::vector<int64_t>{-1, 1}});
    Value* target = b("aten::gather", {x, 1, y});
    Value* terms =
        b("aten::clamp", {b("aten::add", {b("aten::sub", {x, target}), *margin}), 0.0, b.none()});
    if (*p == 2) terms = b("aten::mul", {terms, terms});
    if (!is_constant_none(in(4))) {  // the target's class weight, per sample
      Value* w =
          b("aten::index_select", {in(4), 0, b("aten::reshape", {y, std::vector<int64_t>{-1}})});
      terms = b("aten::mul", {terms, b("aten::unsqueeze", {w, 1})});
    }
    Value* classes = b.size(x, 1);
    Value* is_target = b("aten::eq", {b("aten::unsqueeze", {b("aten::arange", {classes}), 0}), y});
    terms = b("aten::where", {is_target, 0.0, terms});
    Value* loss =
        b("aten::div", {b("aten::sum", {terms, std::vector<int64_t>{1}, false}), classes});
    if (*rank < 2) loss = b("aten::reshape_as", {loss, in(1)});
    return reduce(b, loss, *reduction);
  }
  return nullptr;
}

}  // namespace kiln::lowering
