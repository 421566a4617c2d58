// Export sizes on nodes, and a small evaluator of sympy's size expressions.
#include "ir/export_sizes.h"

#include <algorithm>
#include <cctype>
#include <limits>

namespace kiln::ir {
namespace {

c10::Symbol sizes_attr(size_t output) {
  return c10::Symbol::attr("kiln_export_sizes_" + std::to_string(output));
}

c10::Symbol dtype_attr(size_t output) {
  return c10::Symbol::attr("kiln_export_dtype_" + std::to_string(output));
}

// Floor division and Python's remainder (the sign of the divisor), as sympy's FloorDiv and Mod.
std::optional<int64_t> floor_div(int64_t a, int64_t b) {
  if (b == 0 || (a == std::numeric_limits<int64_t>::min() && b == -1)) return std::nullopt;
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::optional<int64_t> python_mod(int64_t a, int64_t b) {
  const auto q = floor_div(a, b);
  if (!q) return std::nullopt;
  return a - *q * b;
}

// Recursive descent over sympy's srepr form, as torch.export writes sizes: call = Name '(' arg
// (',' arg)* ')'; arg = call | integer | 'string' | name '=' value (keywords, skipped).
// Symbol('s0', ...) is the symbol's value, Integer(n) n, Add/Mul/Max/Min over their arguments,
// FloorDiv, CeilDiv, Mod and PythonMod of two, Pow to a non-negative integer power.
class Parser {
 public:
  Parser(const std::string& text, const std::map<std::string, int64_t>& symbols)
      : s_(text), symbols_(symbols) {}

  std::optional<int64_t> parse() {
    auto v = value();
    skip();
    if (!v || i_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ >= s_.size() || s_[i_] != c) return false;
    ++i_;
    return true;
  }
  std::string word() {
    skip();
    const size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) {
      ++i_;
    }
    return s_.substr(start, i_ - start);
  }
  std::optional<int64_t> integer() {
    skip();
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    const size_t digits = i_;
    while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ == digits || i_ - digits > 18) return std::nullopt;
    return std::stoll(s_.substr(start, i_ - start));
  }

  // A value: an integer or a call (nested at most kMaxDepth deep: the text comes from files).
  std::optional<int64_t> value() {
    if (++depth_ > kMaxDepth) return std::nullopt;
    const auto v = value_at_depth();
    --depth_;
    return v;
  }

  std::optional<int64_t> value_at_depth() {
    skip();
    if (i_ < s_.size() && (s_[i_] == '-' || std::isdigit(static_cast<unsigned char>(s_[i_])))) {
      return integer();
    }
    const std::string name = word();
    if (name.empty() || !eat('(')) return std::nullopt;
    if (name == "Symbol") {
      if (!eat('\'')) return std::nullopt;
      const std::string symbol = word();
      if (!eat('\'') || !skip_keywords()) return std::nullopt;
      const auto it = symbols_.find(symbol);
      return it == symbols_.end() ? std::nullopt : std::optional<int64_t>(it->second);
    }
    std::vector<int64_t> args;
    if (!eat(')')) {
      do {
        const auto v = value();
        if (!v) return std::nullopt;
        args.push_back(*v);
      } while (eat(','));
      if (!eat(')')) return std::nullopt;
    }
    return apply(name, args);
  }

  // The rest of a Symbol's arguments: `, name=Value` pairs, then ')'.
  bool skip_keywords() {
    while (eat(',')) {
      if (word().empty() || !eat('=') || word().empty()) return false;
    }
    return eat(')');
  }

  static std::optional<int64_t> apply(const std::string& name, const std::vector<int64_t>& a) {
    if (name == "Integer" && a.size() == 1) return a[0];
    if (a.empty()) return std::nullopt;
    if (name == "Add" || name == "Mul" || name == "Max" || name == "Min") {
      int64_t out = a[0];
      for (size_t k = 1; k < a.size(); ++k) {
        if (name == "Add") {
          if (__builtin_add_overflow(out, a[k], &out)) return std::nullopt;
        } else if (name == "Mul") {
          if (__builtin_mul_overflow(out, a[k], &out)) return std::nullopt;
        } else {
          out = name == "Max" ? std::max(out, a[k]) : std::min(out, a[k]);
        }
      }
      return out;
    }
    if (a.size() != 2) return std::nullopt;
    if (name == "FloorDiv") return floor_div(a[0], a[1]);
    if (name == "CeilDiv") {
      if (a[0] == std::numeric_limits<int64_t>::min()) return std::nullopt;  // -a overflows
      const auto q = floor_div(-a[0], a[1]);
      return q ? std::optional<int64_t>(-*q) : std::nullopt;
    }
    if (name == "Mod" || name == "PythonMod") return python_mod(a[0], a[1]);
    if (name == "Pow" && a[1] >= 0 && a[1] <= 62) {
      int64_t out = 1;
      for (int64_t k = 0; k < a[1]; ++k) {
        if (__builtin_mul_overflow(out, a[0], &out)) return std::nullopt;
      }
      return out;
    }
    return std::nullopt;
  }

  static constexpr int kMaxDepth = 64;
  const std::string& s_;
  const std::map<std::string, int64_t>& symbols_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

void set_export_sizes(torch::jit::Node* node, size_t output, const ExportSizes& meta) {
  node->ss_(sizes_attr(output), meta.sizes);
  node->i_(dtype_attr(output), static_cast<int64_t>(meta.dtype));
}

std::optional<ExportSizes> export_sizes(const torch::jit::Value* value) {
  const torch::jit::Node* n = value->node();
  const c10::Symbol sizes = sizes_attr(value->offset()), dtype = dtype_attr(value->offset());
  if (!n->hasAttribute(sizes) || !n->hasAttribute(dtype)) return std::nullopt;
  ExportSizes out;
  out.sizes = n->ss(sizes);
  out.dtype = static_cast<c10::ScalarType>(n->i(dtype));
  return out;
}

void clear_export_sizes(torch::jit::Block* block) {
  for (torch::jit::Node* n : block->nodes()) {
    for (torch::jit::Block* b : n->blocks()) clear_export_sizes(b);
    for (const c10::Symbol name : n->attributeNames()) {
      if (std::string(name.toUnqualString()).rfind("kiln_export_", 0) == 0) {
        n->removeAttribute(name);
      }
    }
  }
}

std::optional<int64_t> evaluate_size(const std::string& expr,
                                     const std::map<std::string, int64_t>& symbols) {
  return Parser(expr, symbols).parse();
}

}  // namespace kiln::ir
