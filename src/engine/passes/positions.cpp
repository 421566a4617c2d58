// Positions traced through permutations and shuffles (positions.h).
#include "engine/passes/positions.h"

namespace kiln::engine {

namespace {

std::vector<int64_t> row_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

}  // namespace

Positions permuted(const Positions& p, const std::vector<int64_t>& perm) {
  const size_t rank = p.shape.size();
  const std::vector<int64_t> in_st = row_strides(p.shape);
  Positions out;
  out.shape.resize(rank);
  std::vector<int64_t> st(rank);
  for (size_t i = 0; i < rank; ++i) {
    out.shape[i] = p.shape[static_cast<size_t>(perm[i])];
    st[i] = in_st[static_cast<size_t>(perm[i])];
  }
  out.at.resize(p.at.size());
  std::vector<int64_t> idx(rank, 0);
  int64_t from = 0;
  for (size_t e = 0; e < out.at.size(); ++e) {
    out.at[e] = p.at[static_cast<size_t>(from)];
    for (size_t d = rank; d-- > 0;) {  // next index, odometer order
      from += st[d];
      if (++idx[d] < out.shape[d]) break;
      from -= st[d] * out.shape[d];
      idx[d] = 0;
    }
  }
  return out;
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

Positions shuffled(Positions p, const std::vector<int64_t>& first,
                   const std::vector<int64_t>& second, const Shape& out) {
  if (!first.empty() && !is_identity(first)) p = permuted(p, first);
  if (second.empty() || is_identity(second)) {
    p.shape = out;
    return p;
  }
  // The reshape's target: the result with the second permutation undone.
  Shape mid(out.size());
  for (size_t i = 0; i < out.size(); ++i) mid[static_cast<size_t>(second[i])] = out[i];
  p.shape = mid;
  return permuted(p, second);
}

}  // namespace kiln::engine
