// aten::einsum to engine layers. Operands are multiplied pairwise, left to right: labels no later
// operand and not the output needs are summed first (in the operand alone where the other lacks
// them or has them of size 1), then the two become one batched matmul, [batch, a-only,
// contracted] x [batch, contracted, b-only] (groups of several labels reshaped into one dim),
// and the product is reshaped back to one dim a label. The result is permuted into the output's
// order. "..." stands for the same dims in every operand, right-aligned and broadcast as torch
// does. Labels repeated within one operand (diagonals) are refused.
#include <torch/csrc/jit/ir/constants.h>

#include <algorithm>
#include <numeric>

#include "conversion/converters/shuffle_helpers.h"
#include "conversion/dtypes.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::kDynamic;
using engine::TensorId;
using torch::jit::Node;

// Labels are ints: A-Z are 0-25 and a-z 26-51 (torch's order for the implicit output); the
// dims of "..." are 52 + their position counted in the broadcast ellipsis.
constexpr int kEllipsis = 52;

struct Term {
  std::vector<int> labels;  // letters, with -1 where "..." stands
  bool has_ellipsis = false;
};

struct Equation {
  std::vector<Term> inputs;
  Term output;
  bool explicit_output = false;
};

int label_of(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -2;
}

char letter_of(int label) {
  return static_cast<char>(label < 26 ? 'A' + label : 'a' + (label - 26));
}

// Parses one term ("bhid", "...ij", " b h "); nullopt-free: errors as text.
std::optional<std::string> parse_term(const std::string& text, Term* term) {
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ') continue;
    if (c == '.') {
      if (text.compare(i, 3, "...") != 0) return "a '.' that is not part of \"...\"";
      if (term->has_ellipsis) return "\"...\" twice in one term";
      term->has_ellipsis = true;
      term->labels.push_back(-1);
      i += 2;
      continue;
    }
    const int l = label_of(c);
    if (l < 0) return std::string("the character '") + c + "', which is not a letter";
    term->labels.push_back(l);
  }
  return std::nullopt;
}

// Parses the equation; checks what needs no shapes: operand count, repeated labels, output labels.
std::optional<std::string> parse_equation(const std::string& eq, size_t operands, Equation* out) {
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    Term t;
    if (auto e =
            parse_term(lhs.substr(start, comma == std::string::npos ? comma : comma - start), &t)) {
      return e;
    }
    out->inputs.push_back(t);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (out->inputs.size() != operands) {
    return "the equation has " + std::to_string(out->inputs.size()) + " operand terms for " +
           std::to_string(operands) + " tensors";
  }
  for (const Term& t : out->inputs) {
    for (int l : t.labels) {
      if (l >= 0 && std::count(t.labels.begin(), t.labels.end(), l) > 1) {
        return std::string("label '") + letter_of(l) +
               "' repeats within one operand (a diagonal), which has no converter";
      }
    }
  }
  if (arrow != std::string::npos) {
    out->explicit_output = true;
    if (auto e = parse_term(eq.substr(arrow + 2), &out->output)) return e;
    for (int l : out->output.labels) {
      if (l < 0) continue;
      if (std::count(out->output.labels.begin(), out->output.labels.end(), l) > 1) {
        return std::string("output label '") + letter_of(l) + "' repeats";
      }
      bool found = false;
      for (const Term& t : out->inputs) {
        found |= std::find(t.labels.begin(), t.labels.end(), l) != t.labels.end();
      }
      if (!found) return std::string("output label '") + letter_of(l) + "' is in no operand";
    }
  }
  return std::nullopt;
}

std::optional<std::string> einsum_capable(const Node* n) {
  if (auto r = static_inputs({0})(n)) return r;
  const Node* list = n->input(1)->node();
  if (list->kind() != torch::jit::prim::ListConstruct) {
    return "the operands %" + n->input(1)->debugName() + " are not a list construct";
  }
  if (n->inputs().size() > 2) {
    auto path = torch::jit::toIValue(n->input(2));
    if (!path || !path->isNone()) return "a contraction path (the engine chooses the order)";
  }
  auto eq = torch::jit::toIValue(n->input(0));
  if (!eq || !eq->isString()) return "the equation is not a constant string";
  Equation parsed;
  if (auto e = parse_equation(eq->toStringRef(), list->inputs().size(), &parsed)) {
    return "einsum \"" + eq->toStringRef() + "\": " + *e;
  }
  return std::nullopt;
}

// An intermediate: an engine tensor with one label per dim.
struct Operand {
  TensorId t;
  std::vector<int> labels;
};

bool has(const std::vector<int>& v, int l) {
  return std::find(v.begin(), v.end(), l) != v.end();
}

size_t index_of(const std::vector<int>& v, int l) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), l) - v.begin());
}

class Einsum {
 public:
  Einsum(ConversionContext& ctx, const Node* n) : ctx_(ctx), n_(n) {}

  void run() {
    const std::string eq = ctx_.ivalue(n_->input(0)).toStringRef();
    const std::vector<TensorId> tensors = ctx_.tensor_list(n_->input(1));
    Equation parsed;
    if (auto e = parse_equation(eq, tensors.size(), &parsed)) {
      KILN_THROW(InvalidArgument, "einsum \"", eq, "\": ", *e);
    }
    KILN_CHECK(!tensors.empty(), InvalidArgument, "einsum \"", eq, "\" of no tensors");
    // The dims "..." stands for: right-aligned over the operands; the broadcast count is the
    // most any operand has.
    std::vector<Operand> ops;
    int ellipsis_dims = 0;
    std::vector<int> own_ellipsis;  // per operand, the dims its "..." stands for
    engine::DataType dtype = ctx_.desc(tensors[0]).dtype;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const size_t rank = ctx_.desc(tensors[i]).shape.size();
      const Term& t = parsed.inputs[i];
      const size_t letters = t.labels.size() - (t.has_ellipsis ? 1 : 0);
      KILN_CHECK(t.has_ellipsis ? rank >= letters : rank == letters, InvalidArgument, "einsum \"",
                 eq, "\": operand ", i, " has ", rank, " dims for ", letters, " labels",
                 t.has_ellipsis ? " and \"...\"" : "");
      own_ellipsis.push_back(static_cast<int>(rank - letters));
      ellipsis_dims = std::max(ellipsis_dims, own_ellipsis.back());
      dtype = promote(dtype, ctx_.desc(tensors[i]).dtype);
    }
    // Integer products (i64, i32) wrap around; torch multiplies them of one dtype only.
    const bool one_integer_dtype =
        (dtype == engine::DataType::kI64 || dtype == engine::DataType::kI32) &&
        std::all_of(tensors.begin(), tensors.end(),
                    [&](engine::TensorId t) { return ctx_.desc(t).dtype == dtype; });
    KILN_CHECK(engine::is_floating(dtype) || one_integer_dtype, Unsupported, "einsum of ",
               engine::dtype_name(dtype),
               " tensors (the engine multiplies floating tensors, and i64 or i32 ones of one "
               "dtype)");
    for (size_t i = 0; i < tensors.size(); ++i) {
      ops.push_back({ctx_.cast(n_, tensors[i], dtype),
                     expand(parsed.inputs[i].labels, own_ellipsis[i], ellipsis_dims)});
    }
    std::vector<int> output;
    if (parsed.explicit_output) {
      output = expand(parsed.output.labels, ellipsis_dims, ellipsis_dims);
    } else {
      // torch: the broadcast dims first, then the letters used once, in label order.
      for (int k = 0; k < ellipsis_dims; ++k) output.push_back(kEllipsis + k);
      std::vector<int> once;
      for (const Operand& o : ops) {
        for (int l : o.labels) {
          if (l >= kEllipsis) continue;
          int uses = 0;
          for (const Operand& p : ops)
            uses += static_cast<int>(std::count(p.labels.begin(), p.labels.end(), l));
          if (uses == 1) once.push_back(l);
        }
      }
      std::sort(once.begin(), once.end());
      output.insert(output.end(), once.begin(), once.end());
    }
    Operand acc = ops[0];
    for (size_t i = 1; i < ops.size(); ++i) {
      // Labels still needed: the output's and those of operands after this one.
      std::vector<int> keep = output;
      for (size_t j = i + 1; j < ops.size(); ++j) {
        keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
      }
      acc = product(acc, ops[i], keep);
    }
    // A lone operand (or what is left): sum the labels the output lacks, then order them.
    std::vector<int64_t> axes;
    for (size_t d = 0; d < acc.labels.size(); ++d) {
      if (!has(output, acc.labels[d])) axes.push_back(static_cast<int64_t>(d));
    }
    acc = sum(acc, axes);
    std::vector<int64_t> perm;
    for (int l : output) perm.push_back(static_cast<int64_t>(index_of(acc.labels, l)));
    ctx_.set_tensor(n_->output(), permute(acc.t, perm));
  }

 private:
  // A term's labels with "..." replaced by the last `dims` of `total` ellipsis labels.
  static std::vector<int> expand(const std::vector<int>& labels, int dims, int total) {
    std::vector<int> out;
    for (int l : labels) {
      if (l >= 0) {
        out.push_back(l);
        continue;
      }
      for (int k = total - dims; k < total; ++k) out.push_back(kEllipsis + k);
    }
    return out;
  }

  int64_t dim(const Operand& o, int label) const {
    return ctx_.desc(o.t).shape[index_of(o.labels, label)];
  }

  Operand sum(const Operand& o, const std::vector<int64_t>& axes) {
    if (axes.empty()) return o;
    engine::ReduceParams p;
    p.axes = axes;
    Operand out{ctx_.add(n_, p, {o.t}, "sum"), {}};
    for (size_t d = 0; d < o.labels.size(); ++d) {
      if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) == axes.end()) {
        out.labels.push_back(o.labels[d]);
      }
    }
    return out;
  }

  TensorId permute(TensorId t, const std::vector<int64_t>& perm) {
    std::vector<int64_t> identity(perm.size());
    std::iota(identity.begin(), identity.end(), 0);
    if (perm == identity) return t;
    engine::ShuffleParams p;
    p.first_perm = perm;
    return ctx_.add(n_, p, {t}, "permute");
  }

  // `o` permuted into `order` and reshaped to one dim per group (a group of no labels is a dim
  // of 1; of several, their product).
  TensorId grouped(const Operand& o, const std::vector<std::vector<int>>& groups) {
    std::vector<int64_t> perm;
    for (const auto& g : groups) {
      for (int l : g) perm.push_back(static_cast<int64_t>(index_of(o.labels, l)));
    }
    const TensorId t = permute(o.t, perm);
    const engine::Shape& shape = ctx_.desc(t).shape;
    std::vector<TargetDim> dims;
    size_t at = 0;
    for (const auto& g : groups) {
      if (g.size() == 1) {
        dims.push_back(copy_dim(shape, at));
      } else {
        int64_t size = 1;
        for (size_t k = at; k < at + g.size(); ++k) {
          size = (size == kDynamic || shape[k] == kDynamic) ? kDynamic : size * shape[k];
        }
        dims.push_back({size, -1});
      }
      at += g.size();
    }
    return reshape_dims(ctx_, n_, t, dims, "group");
  }

  Operand product(Operand a, Operand b, const std::vector<int>& keep) {
    // Sum, in each operand alone, what the other lacks and no one needs later, and contracted
    // labels of size 1 on either side (broadcast, then summed: each side's sum multiplies).
    auto alone = [&](const Operand& x, const Operand& y) {
      std::vector<int64_t> axes;
      for (size_t d = 0; d < x.labels.size(); ++d) {
        const int l = x.labels[d];
        if (has(keep, l)) continue;
        if (!has(y.labels, l) || dim(x, l) == 1 || dim(y, l) == 1) {
          axes.push_back(static_cast<int64_t>(d));
        }
      }
      return axes;
    };
    const auto a_axes = alone(a, b), b_axes = alone(b, a);
    a = sum(a, a_axes);
    b = sum(b, b_axes);
    std::vector<int> batch, contracted, a_only, b_only;
    for (int l : a.labels) {
      if (!has(b.labels, l)) {
        a_only.push_back(l);
      } else if (has(keep, l)) {
        batch.push_back(l);
      } else {
        contracted.push_back(l);
      }
    }
    for (int l : b.labels) {
      if (!has(a.labels, l)) b_only.push_back(l);
    }
    for (int l : contracted) {
      const int64_t da = dim(a, l), db = dim(b, l);
      KILN_CHECK(da == db || da == kDynamic || db == kDynamic, InvalidArgument, "einsum: label '",
                 l < kEllipsis ? std::string(1, letter_of(l)) : std::string("..."), "' is ", da,
                 " in one operand and ", db, " in the other");
    }
    std::vector<std::vector<int>> ga, gb;
    for (int l : batch) {
      ga.push_back({l});
      gb.push_back({l});
    }
    ga.push_back(a_only);
    ga.push_back(contracted);
    gb.push_back(contracted);
    gb.push_back(b_only);
    const TensorId y =
        ctx_.add(n_, engine::MatMulParams{}, {grouped(a, ga), grouped(b, gb)}, "matmul");
    // [batch..., M, N] back to one dim a label.
    const engine::Shape& ys = ctx_.desc(y).shape;
    std::vector<TargetDim> dims;
    for (size_t d = 0; d < batch.size(); ++d) dims.push_back(copy_dim(ys, d));
    auto unmerge = [&](const Operand& o, const std::vector<int>& g, size_t axis) {
      if (g.size() == 1) {
        dims.push_back(copy_dim(ys, axis));
        return;
      }
      for (int l : g) dims.push_back({dim(o, l), -1});
    };
    unmerge(a, a_only, batch.size());
    unmerge(b, b_only, batch.size() + 1);
    Operand out{reshape_dims(ctx_, n_, y, dims, "split"), batch};
    out.labels.insert(out.labels.end(), a_only.begin(), a_only.end());
    out.labels.insert(out.labels.end(), b_only.begin(), b_only.end());
    return out;
  }

  ConversionContext& ctx_;
  const Node* n_;
};

void convert_einsum(ConversionContext& ctx, const Node* n) {
  Einsum(ctx, n).run();
}

}  // namespace

void register_einsum_converters(Registry& r) {
  // Dynamic dims stay dynamic through the groups and reshapes; a reshape with two unknown dims
  // is refused.
  r.add_converter(with_dynamic_shapes({{"aten::einsum"}, convert_einsum, einsum_capable}));
}

}  // namespace kiln::conversion
