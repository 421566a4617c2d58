// Chains of gathers by constant indices and shuffles as one gather of rows.
//
// swin's shifted windows roll the tokens ([B, H, W, C]: one gather along H, one along W, as
// concat_slices makes them) and then partition them into windows (a copy, [B * windows, 49, C]),
// and after the attention merge the windows (a copy) and roll back (two gathers): four passes over
// the activations where each direction moves every token once, to a place constant indices say.
// Such a chain (gathers by constant indices and shuffles, static shapes, each result read by the
// next alone) is one permutation of the tokens: its map from result elements to source elements is
// computed on the positions, with the trailing dim that every layer of the chain carries along
// (swin's C) as one row, and where the map moves whole rows of a [O, P, row] view of the source
// into a [O, Q, row] view of the result alike for each o, the chain becomes that view, one gather
// of Q rows by constant indices and a view to the result's shape. A chain, even one gather, that
// leaves every element in place is a view.
//
// Where the backend's gather copies single elements as fast as a copy moves them
// (BackendRules::element_gathers: the CPU's), slices are links too, and a chain may end in each
// of several slices of one link's result, each chain then its own gather (the shared links stay
// while anything else reads them): shufflenet_v2's channel shuffle, a transpose of [N H W, 2, C /
// 2] and two channel slices of it (three copies), becomes two gathers of channels, one per half.
#include <algorithm>
#include <numeric>
#include <optional>
#include <set>
#include <string>

#include "engine/layers/setup.h"
#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"
#include "engine/passes/positions.h"

namespace kiln::engine {
namespace {

// p gathered along `axis` by `indices` (already in range).
Positions gathered(const Positions& p, size_t axis, const std::vector<int64_t>& indices) {
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= p.shape[d];
  for (size_t d = axis + 1; d < p.shape.size(); ++d) inner *= p.shape[d];
  const int64_t n = p.shape[axis], m = static_cast<int64_t>(indices.size());
  Positions out;
  out.shape = p.shape;
  out.shape[axis] = m;
  out.at.resize(static_cast<size_t>(outer * m * inner));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < m; ++j) {
      const int64_t* from = p.at.data() + (o * n + indices[static_cast<size_t>(j)]) * inner;
      std::copy(from, from + inner, out.at.begin() + (o * m + j) * inner);
    }
  }
  return out;
}

// A link of a chain: a shuffle without a cast, a gather by constant indices (values wrapped into
// range), or (with element gathers) a slice, reading and writing static shapes.
struct Link {
  size_t layer;
  const ShuffleParams* shuffle = nullptr;
  size_t axis = 0;               // a gather's
  std::vector<int64_t> indices;  // a gather's, in range, flattened
  std::optional<SliceView> slice;
  bool moves = true;  // a slice that keeps one contiguous range runs as a view: it moves nothing
};

// Gathers whose indices are one of `keep` (a refittable plan's weights, which a refit may change)
// are no links.
std::optional<Link> link_at(const Network& net, const std::vector<Layer>& layers,
                            const NetworkIndex& index, const std::set<std::string>& keep,
                            bool slices, size_t i) {
  const Layer& l = layers[i];
  if (l.outputs.size() != 1 || l.inputs.empty()) return std::nullopt;
  const Shape& in = net.tensor(l.inputs[0]).shape;
  const Shape& out = net.tensor(l.outputs[0]).shape;
  if (!is_static(in) || !is_static(out) || in.empty()) return std::nullopt;
  Link link{i};
  if (const auto* sl = std::get_if<SliceParams>(&l.params)) {
    if (!slices || l.inputs.size() != 1 || out.size() != in.size()) return std::nullopt;
    link.slice = slice_view(l.name, *sl, in);
    const auto dense = contiguous_strides(out);
    link.moves = false;
    for (size_t d = 0; d < out.size(); ++d) {
      link.moves = link.moves || (out[d] > 1 && link.slice->strides[d] != dense[d]);
    }
    return link;
  }
  if (const auto* s = std::get_if<ShuffleParams>(&l.params)) {
    if (l.inputs.size() != 1 || (s->cast && s->to != net.tensor(l.inputs[0]).dtype)) {
      return std::nullopt;
    }
    const auto valid = [](const std::vector<int64_t>& perm, size_t rank) {
      std::vector<int64_t> sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      for (size_t k = 0; k < sorted.size(); ++k) {
        if (sorted[k] != static_cast<int64_t>(k)) return false;
      }
      return perm.empty() || perm.size() == rank;
    };
    if (!valid(s->first_perm, in.size()) || !valid(s->second_perm, out.size())) {
      return std::nullopt;
    }
    link.shuffle = s;
    return link;
  }
  const auto* g = std::get_if<GatherParams>(&l.params);
  if (!g || g->mode != GatherMode::kDefault || l.inputs.size() != 2) return std::nullopt;
  const auto ip = index.producer(l.inputs[1]);
  const auto* c = ip ? std::get_if<ConstantParams>(&layers[*ip].params) : nullptr;
  if (!c || keep.count(c->weight)) return std::nullopt;
  const Weights* w = &net.weight(c->weight);
  if (!w->data || (w->dtype != DataType::kI64 && w->dtype != DataType::kI32)) {
    return std::nullopt;
  }
  const int64_t rank = static_cast<int64_t>(in.size());
  const int64_t axis = g->axis < 0 ? g->axis + rank : g->axis;
  if (axis < 0 || axis >= rank) return std::nullopt;
  const int64_t n = in[static_cast<size_t>(axis)];
  const int64_t m = volume(w->shape);
  link.axis = static_cast<size_t>(axis);
  link.indices.resize(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) {
    int64_t v = w->dtype == DataType::kI64 ? reinterpret_cast<const int64_t*>(w->data->data())[j]
                                           : reinterpret_cast<const int32_t*>(w->data->data())[j];
    if (v < 0) v += n;
    if (v < 0 || v >= n) return std::nullopt;  // the kernel reports it at run time
    link.indices[static_cast<size_t>(j)] = v;
  }
  // Data [.., n, ..] by indices of any shape: [.., indices' dims, ..].
  Shape expect(in.begin(), in.begin() + axis);
  expect.insert(expect.end(), w->shape.begin(), w->shape.end());
  expect.insert(expect.end(), in.begin() + axis + 1, in.end());
  if (expect != out) return std::nullopt;
  return link;
}

// Whether every layer of the chain keeps the source's last dim, of `row` elements, as its last
// dim, so that the chain moves whole rows of it.
bool carries_last_dim(const Network& net, const std::vector<Layer>& layers,
                      const std::vector<Link>& chain, int64_t row) {
  for (const Link& k : chain) {
    const Layer& l = layers[k.layer];
    const Shape& in = net.tensor(l.inputs[0]).shape;
    const Shape& out = net.tensor(l.outputs[0]).shape;
    if (in.size() < 2 || out.size() < 2 || in.back() != row || out.back() != row) return false;
    if (k.slice) {
      if (k.slice->strides.back() != 1) return false;  // (the whole last dim, in order)
      continue;
    }
    if (!k.shuffle) {
      if (k.axis + 1 == in.size()) return false;
      continue;
    }
    const auto last_fixed = [](const std::vector<int64_t>& perm) {
      return perm.empty() || perm.back() == static_cast<int64_t>(perm.size()) - 1;
    };
    if (!last_fixed(k.shuffle->first_perm) || !last_fixed(k.shuffle->second_perm)) return false;
  }
  return true;
}

// The map of the chain from its result's elements (rows of `row` elements) to its source's.
Positions trace(const Network& net, const std::vector<Layer>& layers,
                const std::vector<Link>& chain, int64_t row) {
  const auto rows_of = [&](Shape s) {
    if (row > 1) s.pop_back();
    return s;
  };
  Positions p;
  p.shape = rows_of(net.tensor(layers[chain[0].layer].inputs[0]).shape);
  p.at.resize(static_cast<size_t>(volume(p.shape)));
  std::iota(p.at.begin(), p.at.end(), 0);
  for (const Link& k : chain) {
    const Layer& l = layers[k.layer];
    const Shape out = rows_of(net.tensor(l.outputs[0]).shape);
    if (k.slice) {
      // Output position e reads input position offset + sum of its coordinates times strides
      // (in rows where the chain carries them: the last dim, whole, is not in the positions).
      std::vector<int64_t> strides = k.slice->strides;
      int64_t from = k.slice->offset;
      if (row > 1) {
        strides.pop_back();
        for (int64_t& v : strides) v /= row;
        from /= row;
      }
      Positions q;
      q.shape = out;
      q.at.resize(static_cast<size_t>(volume(out)));
      std::vector<int64_t> c(out.size(), 0);
      for (size_t e = 0; e < q.at.size(); ++e) {
        q.at[e] = p.at[static_cast<size_t>(from)];
        for (size_t d = out.size(); d-- > 0;) {  // the next coordinate, row-major
          if (++c[d] < out[d]) {
            from += strides[d];
            break;
          }
          from -= strides[d] * (out[d] - 1);
          c[d] = 0;
        }
      }
      p = std::move(q);
      continue;
    }
    if (!k.shuffle) {
      p = gathered(p, k.axis, k.indices);
      p.shape = out;  // the indices' dims
      continue;
    }
    std::vector<int64_t> first = k.shuffle->first_perm, second = k.shuffle->second_perm;
    if (row > 1) {  // the row dim (last, fixed) is not in the positions
      if (!first.empty()) first.pop_back();
      if (!second.empty()) second.pop_back();
    }
    p = shuffled(p, first, second, out);
  }
  return p;
}

// What replaces a chain: the source viewed as [outer, rows, row], `indices` of the rows gathered
// alike for each of the outer blocks.
struct RowGather {
  int64_t outer, rows, row;
  std::vector<int64_t> indices;
};

// The map `f` (result element -> source element, in units of `unit` elements, over a source of
// `source` units) as a row gather, if it is one; `leading`: the sizes of the source's and the
// result's leading dims (in units), whose products are the outer blocks tried.
std::optional<RowGather> as_row_gather(const std::vector<int64_t>& f, int64_t source,
                                       const std::vector<Shape>& leading, int64_t unit) {
  const int64_t n = static_cast<int64_t>(f.size());
  // The longest run length k that every block [j k, (j + 1) k) of f keeps in order from a
  // multiple of k: the gcd of the places where f breaks its order, their values and the sizes.
  int64_t k = std::gcd(n, source);
  for (int64_t e = 0; e < n && k > 1; ++e) {
    if (e == 0 || f[static_cast<size_t>(e)] != f[static_cast<size_t>(e - 1)] + 1) {
      k = std::gcd(k, std::gcd(e, f[static_cast<size_t>(e)]));
    }
  }
  const int64_t q_all = n / k, p_all = source / k;
  // The outer blocks: the source's leading dims that map [o Q, (o + 1) Q) of the result into
  // [o P, (o + 1) P) by one table of Q rows, as many of them as do.
  std::vector<int64_t> outers = {1};
  for (const Shape& dims : leading) {
    int64_t product = 1;
    for (int64_t d : dims) outers.push_back(product *= d);
  }
  std::sort(outers.begin(), outers.end());
  outers.erase(std::unique(outers.begin(), outers.end()), outers.end());
  for (size_t c = outers.size(); c-- > 0;) {
    const int64_t outer = outers[c];
    if (q_all % outer != 0 || p_all % outer != 0) continue;
    const int64_t q = q_all / outer, p = p_all / outer;
    bool ok = true;
    for (int64_t o = 1; o < outer && ok; ++o) {
      for (int64_t j = 0; j < q; ++j) {
        if (f[static_cast<size_t>((o * q + j) * k)] / k - o * p !=
            f[static_cast<size_t>(j * k)] / k) {
          ok = false;
          break;
        }
      }
    }
    if (!ok) continue;
    RowGather g{outer, p, k * unit, std::vector<int64_t>(static_cast<size_t>(q))};
    for (int64_t j = 0; j < q; ++j) {
      g.indices[static_cast<size_t>(j)] = f[static_cast<size_t>(j * k)] / k;
      if (g.indices[static_cast<size_t>(j)] >= p) return std::nullopt;  // crosses outer blocks
    }
    return g;
  }
  return std::nullopt;
}

// Maps of at most this many positions are computed (elements, or rows where the chain carries
// them); gathered rows of fewer bytes than this stay as they are (a copy moves them faster).
constexpr int64_t kMaxPositions = int64_t{1} << 22;
constexpr int64_t kMinRowBytes = 16;

}  // namespace

int fold_gather_chains(Network& net, const std::set<std::string>& keep, bool element_gathers) {
  const std::vector<Layer> layers = net.layers();
  const NetworkIndex index(net, layers);
  std::vector<std::optional<Link>> links(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    links[i] = link_at(net, layers, index, keep, element_gathers, i);
  }
  // Whether every reader of layer i's result is a link reading it as its data (so that each
  // reader's chain may take the layer in: the shared links of a channel shuffle's slices).
  const auto read_by_links_only = [&](size_t i) {
    const auto readers = index.consumers(layers[i].outputs[0]);
    if (readers.empty()) return false;
    for (size_t r : readers) {
      if (!links[r] || layers[r].inputs[0] != layers[i].outputs[0]) return false;
    }
    return true;
  };
  std::vector<bool> gone(layers.size(), false);
  std::vector<std::vector<Layer>> instead(layers.size());
  int rewritten = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!links[i]) continue;
    // Only where a chain ends.
    if (const auto next = index.single_consumer(layers[i].outputs[0]);
        next && links[*next] && layers[*next].inputs[0] == layers[i].outputs[0]) {
      continue;
    }
    // Back from its end while a link's data input is the previous link's result alone, or (with
    // element gathers, for a chain that ends in a slice) read by links alone: such a shared link
    // and the links before it stay for the other readers (until none is left).
    std::vector<Link> back = {*links[i]};  // from the end
    size_t exclusive = 1;                  // the last links, read by this chain alone
    bool through_shared = false;
    for (size_t head = i;;) {
      const auto prev = index.producer(layers[head].inputs[0]);
      if (!prev || !links[*prev]) break;
      const bool alone = index.single_consumer(layers[*prev].outputs[0]) == head;
      if (!alone && !(element_gathers && links[i]->slice && read_by_links_only(*prev))) break;
      through_shared = through_shared || !alone;
      back.push_back(*links[*prev]);
      if (!through_shared) exclusive = back.size();
      head = *prev;
    }
    const std::vector<Link> chain(back.rbegin(), back.rend());
    const size_t shared = chain.size() - exclusive;  // the first links, which stay
    int gathers = 0, moving = 0;
    bool sliced = false;
    for (const Link& k : chain) {
      gathers += !k.shuffle;
      moving += k.shuffle ? shuffle_moves_data(*k.shuffle) : k.moves;
      sliced = sliced || (k.slice && k.moves);
    }
    if (gathers == 0) continue;
    const TensorId source = layers[chain.front().layer].inputs[0];
    const TensorId result = layers[chain.back().layer].outputs[0];
    const TensorDesc src = net.tensor(source), res = net.tensor(result);  // (copies)
    const int64_t last = src.shape.back();
    const int64_t unit = carries_last_dim(net, layers, chain, last) ? last : 1;
    if (volume(src.shape) / unit > kMaxPositions || volume(res.shape) / unit > kMaxPositions) {
      continue;
    }
    const Positions f = trace(net, layers, chain, unit);
    const std::string& name = layers[chain.back().layer].name;
    std::vector<Layer>& now = instead[chain.back().layer];
    const auto view = [&](TensorId from, const Shape& to, const std::string& n, TensorId out) {
      ShuffleParams s;
      s.has_reshape = true;
      s.reshape = to;
      now.push_back(Layer{n, s, {from}, {out}});
    };
    // A chain that leaves every element where it was (a gather by 0, 1, ..., n - 1: BERT's mask
    // indexed with [:, None, None, :] as traced) is a view of its source, even alone.
    if (volume(src.shape) == volume(res.shape) && is_identity(f.at)) {
      view(source, res.shape, name, result);
      for (size_t n = shared; n < chain.size(); ++n) gone[chain[n].layer] = true;
      ++rewritten;
      continue;
    }
    if (moving < 2) continue;
    std::vector<Shape> leading = {src.shape, res.shape};  // in units, the last dim left out
    for (Shape& s : leading) {
      if (unit > 1) s.pop_back();
      if (!s.empty()) s.pop_back();
    }
    const auto g = as_row_gather(f.at, volume(src.shape) / unit, leading, unit);
    // Rows of single elements only where the backend gathers them fast and the chain had a slice
    // that copies (not one range of its input, which runs as a view).
    const bool small = g && g->row * static_cast<int64_t>(dtype_size(src.dtype)) < kMinRowBytes;
    if (!g || (small && !(element_gathers && sliced))) continue;
    // source -> [outer, rows, row] -> gather of the rows -> [outer, Q, row] -> the result's shape.
    const int64_t q = static_cast<int64_t>(g->indices.size());
    const Shape rows_shape = {g->outer, g->rows, g->row}, gathered_shape = {g->outer, q, g->row};
    const TensorId rows = net.add_tensor(TensorDesc{name + ":rows", src.dtype, rows_shape, {}});
    view(source, rows_shape, name + ":rows", rows);
    const std::string idx_name = name + ":row_indices";
    net.add_weight(idx_name, Weights::from_ints({q}, g->indices));
    const TensorId idx = net.add_tensor(TensorDesc{idx_name, DataType::kI64, {q}, {}});
    now.push_back(Layer{idx_name, ConstantParams{idx_name}, {}, {idx}});
    const TensorId picked =
        net.add_tensor(TensorDesc{name + ":gathered", src.dtype, gathered_shape, {}});
    GatherParams gp;
    gp.axis = 1;
    now.push_back(Layer{name + ":gather", gp, {rows, idx}, {picked}});
    view(picked, res.shape, name, result);
    for (size_t n = shared; n < chain.size(); ++n) gone[chain[n].layer] = true;
    ++rewritten;
  }
  if (rewritten == 0) return 0;
  splice_layers(net, layers, gone, std::move(instead));
  remove_dead_layers(net);  // the chains' index constants
  return rewritten;
}

}  // namespace kiln::engine
