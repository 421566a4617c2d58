// decompose_ops' spectral transforms (issue #35's coverage): the inverse real FFTs (irfft,
// irfft2, irfftn) and the Hermitian FFTs (hfft, hfft2, hfftn) of real tensors, the ones of
// torch.fft whose output is real, as products with DFT matrices built in the graph. kiln has no
// complex tensors, so the spectrum is real (its imaginary parts zero) and for such a spectrum hfftn
// is irfftn scaled (by N for norm "backward", 1/N for "forward", the same for "ortho"). The
// matrices are built from aten::arange and aten::size at run time, so the rewrites hold for any
// sizes; their angles are (k * t mod n) * 2π / n, exact in the integers before the one rounding.
#include <algorithm>
#include <cmath>

#include "lowering/passes/decompose_math.h"
#include "lowering/passes/rewrite_builder.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// A complex tensor as its real and imaginary parts; `im` is null while it is zero.
struct Complex {
  Value* re = nullptr;
  Value* im = nullptr;
};

// The cosines and sines of the DFT of length n (an int Value) from the first `used` of its
// frequencies: [used, n] matrices of angles (k * t mod n) * 2π / n, in f32.
std::pair<Value*, Value*> dft_matrices(RewriteBuilder& b, Value* used, Value* n) {
  Value* k = b("aten::unsqueeze", {b("aten::arange", {used}), 1});
  Value* t = b("aten::unsqueeze", {b("aten::arange", {n}), 0});
  Value* index = b("aten::remainder", {b("aten::mul", {k, t}), n});
  Value* angle = b("aten::div", {b("aten::mul", {b.cast(index, c10::kFloat), 2 * M_PI}), n});
  return {b("aten::cos", {angle}), b("aten::sin", {angle})};
}

// x's dim d multiplied by the matrix m ([size of d, n]): the dim becomes n.
Value* along(RewriteBuilder& b, Value* x, int64_t d, Value* m) {
  Value* moved = b("aten::transpose", {x, d, -1});
  return b("aten::transpose", {b("aten::matmul", {moved, m}), d, -1});
}

// The first `n` entries of x along d (all of them when there are fewer: the zeros torch pads
// with add nothing to the sums).
Value* head(RewriteBuilder& b, Value* x, int64_t d, Value* n) {
  return b("aten::slice", {x, d, 0, n, 1});
}

// The inverse DFT of length n along d (e^{+2πi kt/n}, not scaled).
Complex inverse_dft(RewriteBuilder& b, const Complex& x, int64_t d, Value* n) {
  Value* re = head(b, x.re, d, n);
  auto [cos, sin] = dft_matrices(b, b.size(re, d), n);
  if (!x.im) return {along(b, re, d, cos), along(b, re, d, sin)};
  Value* im = head(b, x.im, d, n);
  return {b("aten::sub", {along(b, re, d, cos), along(b, im, d, sin)}),
          b("aten::add", {along(b, re, d, sin), along(b, im, d, cos)})};
}

// The real inverse DFT of length n along d from the first n / 2 + 1 frequencies of a Hermitian
// spectrum: each frequency but 0 and n / 2 stands for itself and its conjugate (weight 2), and
// the imaginary parts of those two are ignored (their sines are zero), as torch does.
Value* inverse_real_dft(RewriteBuilder& b, const Complex& x, int64_t d, Value* n) {
  Value* half = b("aten::add", {b("aten::floordiv", {n, 2}), 1});
  Value* re = head(b, x.re, d, half);
  Value* used = b.size(re, d);
  auto [cos, sin] = dft_matrices(b, used, n);
  Value* k = b("aten::arange", {used});
  Value* single =
      b("aten::logical_or", {b("aten::eq", {k, 0}), b("aten::eq", {b("aten::mul", {k, 2}), n})});
  Value* weight = b("aten::unsqueeze",
                    {b("aten::where", {single, b.constant(at::scalar_tensor(1.0, at::kFloat)),
                                       b.constant(at::scalar_tensor(2.0, at::kFloat))}),
                     1});
  Value* out = along(b, re, d, b("aten::mul", {cos, weight}));
  if (!x.im) return out;
  return b("aten::sub", {out, along(b, head(b, x.im, d, used), d, b("aten::mul", {sin, weight}))});
}

// The transform's dims and lengths from the op's constant arguments: `lengths` holds the
// constant lengths torch was given (s, or n), -1 for a dim whose length follows from the input.
struct Plan {
  std::vector<int64_t> dims;
  std::vector<int64_t> lengths;
};

std::optional<Plan> plan_of(const Value* s_arg, const Value* dim_arg, int64_t rank, bool one_dim,
                            bool two_dims) {
  auto s = constant_value(s_arg), dim = constant_value(dim_arg);
  if (!s || !dim) return std::nullopt;
  Plan p;
  std::vector<int64_t> given;
  if (one_dim) {
    if (!dim->isInt()) return std::nullopt;
    given = {dim->toInt()};
  } else if (dim->isIntList()) {
    given = dim->toIntVector();
  } else if (!dim->isNone()) {
    return std::nullopt;
  }
  std::vector<int64_t> lengths;
  if (s->isInt()) {
    lengths = {s->toInt()};
  } else if (s->isIntList()) {
    lengths = s->toIntVector();
  } else if (!s->isNone()) {
    return std::nullopt;
  }
  if (dim->isNone()) {  // irfftn/hfftn: the last len(s) dims, all of them without s
    const int64_t count = s->isNone() ? rank : static_cast<int64_t>(lengths.size());
    if (count > rank) return std::nullopt;
    for (int64_t d = rank - count; d < rank; ++d) given.push_back(d);
  }
  if (two_dims && given.size() != 2) return std::nullopt;
  if (given.empty() || (!s->isNone() && lengths.size() != given.size())) return std::nullopt;
  for (int64_t d : given) {
    auto nd = normalized_dim(d, rank);
    if (!nd || std::find(p.dims.begin(), p.dims.end(), *nd) != p.dims.end()) return std::nullopt;
    p.dims.push_back(*nd);
  }
  p.lengths.assign(p.dims.size(), -1);
  for (size_t j = 0; j < lengths.size(); ++j) {
    if (lengths[j] != -1 && lengths[j] < 1) return std::nullopt;  // torch's error, left whole
    p.lengths[j] = lengths[j];
  }
  return p;
}

}  // namespace

Value* decompose_spectral(GraphPtr& graph, Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema || node->inputs().size() != 4) return nullptr;
  const std::string name = schema->name();
  const bool hermitian = name.rfind("aten::fft_hfft", 0) == 0;
  if (!hermitian && name.rfind("aten::fft_irfft", 0) != 0) return nullptr;
  const std::string suffix = name.substr(hermitian ? 14 : 15);
  if (!suffix.empty() && suffix != "2" && suffix != "n") return nullptr;
  Value* x = node->input(0);
  const auto type = known_dtype(x);
  const auto rank = known_rank(x);
  // f32, and integers and bools in f32 as torch computes them; f16's own precision is left to
  // torch.
  if (!type || !rank || *rank < 1 || c10::isComplexType(*type) ||
      (c10::isFloatingType(*type) && *type != c10::kFloat)) {
    return nullptr;
  }
  auto norm = constant_value(node->input(3));
  if (!norm || (!norm->isNone() && !norm->isString())) return nullptr;
  const std::string norm_name = norm->isNone() ? "backward" : norm->toStringRef();
  if (norm_name != "backward" && norm_name != "forward" && norm_name != "ortho") return nullptr;
  auto plan = plan_of(node->input(1), node->input(2), *rank, suffix.empty(), suffix == "2");
  if (!plan) return nullptr;

  RewriteBuilder b(graph);
  Complex z{*type == c10::kFloat ? x : b.cast(x, c10::kFloat), nullptr};
  std::vector<Value*> lengths;
  const size_t count = plan->dims.size();
  Value* out = nullptr;
  for (size_t j = 0; j < count; ++j) {
    const int64_t d = plan->dims[j];
    const bool last = j + 1 == count;
    Value* n = plan->lengths[j] != -1 ? b.constant(plan->lengths[j])
               : last                 ? b("aten::mul", {b("aten::sub", {b.size(x, d), 1}), 2})
                                      : b.size(x, d);
    lengths.push_back(n);
    if (last) {
      out = inverse_real_dft(b, z, d, n);
    } else {
      z = inverse_dft(b, z, d, n);
    }
  }
  // irfft's "backward" divides by N, "forward" does not; hfft the other way round; "ortho" both
  // by sqrt(N).
  Value* total = b.product(lengths);
  if (norm_name == "ortho") {
    Value* root = b("aten::rsqrt", {b.cast(b("prim::NumToTensor", {total}), c10::kFloat)});
    return b("aten::mul", {out, root});
  }
  if ((norm_name == "backward") != hermitian) return b("aten::div", {out, total});
  return out;
}

}  // namespace kiln::lowering
