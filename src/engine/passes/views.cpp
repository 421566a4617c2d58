// Views of tensors traced as (size, stride) modes (views.h).
#include "engine/passes/views.h"

#include <algorithm>
#include <numeric>

namespace kiln::engine {

using Strides = std::vector<int64_t>;

// The permutation (identity when empty), if it is one of n dims.
std::optional<std::vector<size_t>> permutation(const std::vector<int64_t>& perm, size_t n) {
  std::vector<size_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = i;
  if (perm.empty()) return p;
  if (perm.size() != n) return std::nullopt;
  std::vector<bool> seen(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (perm[i] < 0 || static_cast<size_t>(perm[i]) >= n || seen[static_cast<size_t>(perm[i])]) {
      return std::nullopt;
    }
    seen[static_cast<size_t>(perm[i])] = true;
    p[i] = static_cast<size_t>(perm[i]);
  }
  return p;
}

Modes contiguous_modes(const Shape& shape) {
  Modes m(shape.size());
  const Strides st = contiguous_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1) m[d] = {{shape[d], st[d]}};
  }
  return m;
}

// The dims regrouped into `to` (a reshape): modes split where a dim of `to` ends inside one,
// which must then divide it.
std::optional<Modes> reshape_modes(const Modes& in, const Shape& to) {
  std::vector<Mode> flat;
  for (const auto& dim : in) flat.insert(flat.end(), dim.begin(), dim.end());
  Modes out(to.size());
  size_t next = 0;
  for (size_t d = 0; d < to.size(); ++d) {
    int64_t want = to[d];
    while (want > 1) {
      if (next >= flat.size()) return std::nullopt;
      auto [size, stride] = flat[next];
      if (size <= 0) return std::nullopt;  // (an empty tensor: nothing to trace)
      if (size <= want) {
        if (want % size != 0) return std::nullopt;
        out[d].push_back(flat[next++]);
        want /= size;
      } else {
        if (size % want != 0) return std::nullopt;
        out[d].push_back({want, stride * (size / want)});  // the major part
        flat[next] = {size / want, stride};                // the rest, for the next dims
        want = 1;
      }
    }
  }
  if (next != flat.size()) return std::nullopt;
  return out;
}

// One dim's modes as a single stride, if they coalesce (each major mode's stride is the minor
// one's span); 0 for a dim of size 1.
std::optional<int64_t> single_stride(const std::vector<Mode>& dim) {
  if (dim.empty()) return 0;
  for (size_t i = 0; i + 1 < dim.size(); ++i) {
    if (dim[i].second != dim[i + 1].first * dim[i + 1].second) return std::nullopt;
  }
  return dim.back().second;
}

// The modes after shuffle `p` (permute, reshape, permute) of an input of shape `in`.
std::optional<Modes> shuffle_modes(const ShuffleParams& p, const Modes& m, const Shape& in,
                                   const Shape& out) {
  const auto p1 = permutation(p.first_perm, in.size());
  const auto p2 = permutation(p.second_perm, out.size());
  if (!p1 || !p2 || m.size() != in.size()) return std::nullopt;
  Modes permuted(in.size());
  for (size_t i = 0; i < in.size(); ++i) permuted[i] = m[(*p1)[i]];
  Shape reshaped(out.size());
  for (size_t i = 0; i < out.size(); ++i) reshaped[(*p2)[i]] = out[i];
  std::optional<Modes> r = permuted;
  if (p.has_reshape) {
    r = reshape_modes(permuted, reshaped);
  } else {
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[(*p1)[i]] != reshaped[i]) return std::nullopt;
    }
  }
  if (!r) return std::nullopt;
  Modes result(out.size());
  for (size_t i = 0; i < out.size(); ++i) result[i] = (*r)[(*p2)[i]];
  return result;
}

// The modes of a shuffle's input (shape `in`) from those of its output (shape `out`): the
// shuffle that undoes it (the second permutation inverted, a reshape back to the permuted input,
// the first permutation inverted) applied to them.
std::optional<Modes> shuffle_modes_back(const ShuffleParams& p, const Modes& m, const Shape& in,
                                        const Shape& out) {
  const auto p1 = permutation(p.first_perm, in.size());
  const auto p2 = permutation(p.second_perm, out.size());
  if (!p1 || !p2) return std::nullopt;
  const auto inverse = [](const std::vector<size_t>& perm) {
    std::vector<int64_t> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
    return inv;
  };
  ShuffleParams undo;
  undo.first_perm = inverse(*p2);
  undo.second_perm = inverse(*p1);
  undo.has_reshape = p.has_reshape;
  if (p.has_reshape) {
    for (size_t i = 0; i < in.size(); ++i) undo.reshape.push_back(in[(*p1)[i]]);
  }
  return shuffle_modes(undo, m, out, in);
}

// Every dim's single stride (single_stride), if each has one.
std::optional<Strides> single_strides(const Modes& m) {
  Strides st(m.size());
  for (size_t d = 0; d < m.size(); ++d) {
    const auto one = single_stride(m[d]);
    if (!one) return std::nullopt;
    st[d] = *one;
  }
  return st;
}

// A slice: each sliced dim must be one mode (or coalesce into one).
bool slice_modes(const SliceParams& p, const Shape& in, const Shape& out, Modes& m,
                 int64_t& offset) {
  const size_t n = p.axes.size();
  if (p.starts.size() != n || p.steps.size() != n) return false;
  for (size_t j = 0; j < n; ++j) {
    int64_t axis = p.axes[j];
    if (axis < 0) axis += static_cast<int64_t>(in.size());
    if (axis < 0 || axis >= static_cast<int64_t>(in.size()) || p.steps[j] <= 0) return false;
    const size_t a = static_cast<size_t>(axis);
    const auto stride = single_stride(m[a]);
    if (!stride) return false;
    const int64_t start =
        std::clamp<int64_t>(p.starts[j] < 0 ? p.starts[j] + in[a] : p.starts[j], 0, in[a]);
    offset += start * *stride;
    m[a].clear();
    if (out[a] != 1) m[a] = {{out[a], *stride * p.steps[j]}};
  }
  return true;
}

// A shuffle is permute(first_perm) -> reshape -> permute(second_perm). Its input laid out with
// `st` gives its output (shape `out`) these strides, if the reshape is a view.
std::optional<std::vector<int64_t>> forward_shuffle(const ShuffleParams& p, const Shape& in,
                                                    const Strides& st, const Shape& out) {
  const auto p1 = permutation(p.first_perm, in.size());
  const auto p2 = permutation(p.second_perm, out.size());
  if (!p1 || !p2) return std::nullopt;
  Shape permuted(in.size()), reshaped(out.size());
  Strides permuted_st(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    permuted[i] = in[(*p1)[i]];
    permuted_st[i] = st[(*p1)[i]];
  }
  for (size_t i = 0; i < out.size(); ++i) reshaped[(*p2)[i]] = out[i];
  std::optional<Strides> reshaped_st = permuted_st;
  if (p.has_reshape) {
    reshaped_st = view_strides(permuted, permuted_st, reshaped);
  } else if (reshaped != permuted) {
    return std::nullopt;
  }
  if (!reshaped_st) return std::nullopt;
  Strides result(out.size());
  for (size_t i = 0; i < out.size(); ++i) result[i] = (*reshaped_st)[(*p2)[i]];
  return result;
}

std::optional<Strides> view_strides(const Shape& shape, const Strides& strides,
                                    const Shape& target) {
  if (volume(shape) != volume(target) || strides.size() != shape.size()) return std::nullopt;
  if (shape.empty()) return Strides(target.size(), 1);
  if (volume(shape) == 0) return contiguous_strides(target);
  // Dims of `shape` group into chunks that are contiguous among themselves; each chunk must be
  // exactly a run of target dims.
  Strides out(target.size(), 0);
  int64_t view_d = static_cast<int64_t>(target.size()) - 1;
  int64_t chunk_base = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[static_cast<size_t>(d)];
    const bool chunk_ends =
        d == 0 || (shape[static_cast<size_t>(d - 1)] != 1 &&
                   strides[static_cast<size_t>(d - 1)] != tensor_numel * chunk_base);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || target[static_cast<size_t>(view_d)] == 1)) {
      out[static_cast<size_t>(view_d)] = view_numel * chunk_base;
      view_numel *= target[static_cast<size_t>(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base = strides[static_cast<size_t>(d - 1)];
      tensor_numel = view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

std::optional<ComposedShuffle> shuffle_for_modes(const Shape& source, const Modes& m,
                                                 const Shape& out, size_t max_rank) {
  if (!is_static(source) || !is_static(out) || m.size() != out.size()) return std::nullopt;
  const int64_t n = volume(source);
  if (n == 0 || volume(out) != n) return std::nullopt;
  // The result's modes in its order; sorted by stride, major first, they must tile the source:
  // then they are its dims split into atoms, and the result is those atoms permuted.
  std::vector<Mode> atoms;
  for (const auto& dim : m) {
    for (const Mode& mode : dim) {
      if (mode.first != 1) atoms.push_back(mode);
    }
  }
  std::vector<size_t> order(atoms.size());  // atom indices in source order
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return atoms[a].second > atoms[b].second; });
  int64_t span = 1;
  for (size_t k = order.size(); k-- > 0;) {
    if (atoms[order[k]].second != span) return std::nullopt;
    span *= atoms[order[k]].first;
  }
  if (span != n) return std::nullopt;
  // Atoms next to each other in both orders move together: one dim of the permutation.
  std::vector<std::vector<size_t>> dims;  // runs of atoms, source order
  for (size_t k = 0; k < order.size(); ++k) {
    if (k > 0 && order[k] == order[k - 1] + 1) {
      dims.back().push_back(order[k]);
    } else {
      dims.push_back({order[k]});
    }
  }
  std::vector<size_t> perm(dims.size());  // result dim i is dims[perm[i]]
  std::iota(perm.begin(), perm.end(), size_t{0});
  std::sort(perm.begin(), perm.end(), [&](size_t a, size_t b) { return dims[a][0] < dims[b][0]; });
  Shape sizes;
  for (const auto& run : dims) {
    int64_t size = 1;
    for (size_t a : run) size *= atoms[a].first;
    sizes.push_back(size);
  }
  ComposedShuffle c;
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == i;
  if (identity) {
    c.move.has_reshape = true;
    c.move.reshape = out;
    c.moved = out;
    return c;
  }
  if (dims.size() > max_rank) return std::nullopt;
  c.moves = true;
  std::vector<int64_t> p(perm.begin(), perm.end());
  for (size_t i = 0; i < perm.size(); ++i) c.moved.push_back(sizes[perm[i]]);
  if (sizes == source) {
    c.move.first_perm = p;  // a transpose of the source's own dims
  } else {
    c.move.has_reshape = true;
    c.move.reshape = sizes;
    c.move.second_perm = p;
  }
  return c;
}

bool trace_shuffle(const Network& net, const Layer& l, TracedShuffles& t) {
  const auto* p = std::get_if<ShuffleParams>(&l.params);
  if (!p || l.inputs.size() != 1 || (p->cast && t.cast)) return false;
  const Shape& to = net.tensor(l.outputs[0]).shape;
  if (!is_static(to)) return false;
  auto modes = shuffle_modes(*p, t.modes, t.shape, to);
  if (!modes) return false;
  t.modes = std::move(*modes);
  t.shape = to;
  t.moving += shuffle_moves_data(*p);
  if (p->cast) t.cast = p;
  return true;
}

std::vector<Layer> composed_layers(Network& net, const ComposedShuffle& c, const TracedShuffles& t,
                                   TensorId source, TensorId result, const std::string& name,
                                   const std::string& move_name, const std::string& moved_name) {
  ShuffleParams move = c.move;
  if (t.cast) {
    move.cast = true;
    move.to = t.cast->to;
  }
  TensorDesc d = net.tensor(result);  // (a copy: a tensor is added below)
  if (c.moved == d.shape) return {Layer{name, move, {source}, {result}}};
  ShuffleParams view;
  view.has_reshape = true;
  view.reshape.assign(d.shape.begin(), d.shape.end());
  d.name = moved_name;
  d.shape = c.moved;
  d.values.reset();
  const TensorId moved = net.add_tensor(std::move(d));
  return {Layer{move_name, move, {source}, {moved}}, Layer{name, view, {moved}, {result}}};
}

}  // namespace kiln::engine
