// The head-folding pass (attention_heads.h): operands and results of attention layers traced
// through shuffles and slices as strided views of the tensors they come from.
#include "engine/passes/attention_heads.h"

#include <algorithm>
#include <map>
#include <optional>

#include "engine/layers/infer.h"
#include "engine/passes/network_index.h"
#include "engine/passes/views.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

using Strides = std::vector<int64_t>;

// Whether `st` lays out `shape` as `want` does; dims of size 1 take any stride.
bool same_layout(const Shape& shape, const Strides& st, const Strides& want) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != 1 && st[i] != want[i]) return false;
  }
  return true;
}

struct Graph {
  const Network& net;
  const std::vector<Layer>& layers;
  const NetworkIndex& index;

  const Layer* produced_by(TensorId id) const {
    const auto p = index.producer(id);
    return p ? &layers[*p] : nullptr;
  }
  std::optional<size_t> single_consumer(TensorId id) const { return index.single_consumer(id); }
  const Shape& shape(TensorId id) const { return net.tensor(id).shape; }
};

// Dynamic dims traced as symbols: each a distinct prime larger than every static dim of the
// tensors a trace meets. A traced size is then a product of static factors and symbols that its
// factorization tells apart: one size divides another exactly when it does for every value of
// the dims, and the views' own shape inference (a reshape's 0 and -1, permutations) computes the
// sizes it would compute symbolically. So a view traced at these sizes is that view at every size
// of the dims. (Slices along a dynamic dim are not traced: a clamp is no such product.)
class Symbols {
 public:
  // Symbols above every static dim of `shapes`.
  explicit Symbols(const std::vector<const Shape*>& shapes) {
    for (const Shape* s : shapes) {
      for (int64_t d : *s) next_ = std::max(next_, d + 1);
    }
  }
  // `s` with a new symbol for each dynamic dim.
  Shape of(const Shape& s) {
    Shape out = s;
    for (int64_t& d : out) {
      if (d == kDynamic) d = fresh();
    }
    return out;
  }
  // Whether `v` is a product of static factors only (or 0).
  bool is_static(int64_t v) const {
    for (int64_t p : primes_) {
      if (v != 0 && v % p == 0) return false;
    }
    return true;
  }

 private:
  int64_t fresh() {
    for (int64_t n = std::max<int64_t>(next_, 2);; ++n) {
      bool prime = true;
      for (int64_t f = 2; f * f <= n && prime; ++f) prime = n % f != 0;
      if (prime) {
        next_ = n + 1;
        primes_.push_back(n);
        return n;
      }
    }
  }
  int64_t next_ = 2;
  std::vector<int64_t> primes_;
};

// The shapes of `path`'s outputs (layers in order, each reading the one before's output as its
// first input, shuffles and slices) from `first`, the first layer's input's shape in symbols
// (Symbols), by the layers' own shape inference; nullopt where a layer slices a dynamic dim or
// inference leaves a dim unknown (a reshape to a shape tensor's unknown values).
std::optional<std::vector<Shape>> view_shapes(const Graph& g, const std::vector<const Layer*>& path,
                                              Shape first) {
  std::vector<Shape> shapes;
  for (const Layer* l : path) {
    if (const auto* s = std::get_if<SliceParams>(&l->params)) {
      const Shape& in = g.shape(l->inputs[0]);
      for (int64_t axis : s->axes) {
        if (axis < 0) axis += static_cast<int64_t>(in.size());
        if (axis < 0 || axis >= static_cast<int64_t>(in.size()) ||
            in[static_cast<size_t>(axis)] == kDynamic) {
          return std::nullopt;
        }
      }
    }
    std::vector<InferInput> inputs;
    for (size_t i = 0; i < l->inputs.size(); ++i) {
      const TensorDesc& d = g.net.tensor(l->inputs[i]);
      inputs.push_back({d.dtype, i == 0 ? first : d.shape, d.values ? &*d.values : nullptr});
    }
    std::vector<InferOutput> out;
    try {
      out = infer_layer(l->name, l->params, inputs);
    } catch (const Error&) {
      return std::nullopt;  // (sizes past the bound on volumes: not traced)
    }
    if (out.size() != 1 || !is_static(out[0].shape)) return std::nullopt;
    // Where the network knows a dim, it is that.
    const Shape& known = g.shape(l->outputs[0]);
    if (known.size() != out[0].shape.size()) return std::nullopt;
    for (size_t d = 0; d < known.size(); ++d) {
      if (known[d] != kDynamic && known[d] != out[0].shape[d]) return std::nullopt;
    }
    first = out[0].shape;
    shapes.push_back(first);
  }
  return shapes;
}

// The volume of a shape in symbols, unless past the bound on volumes.
std::optional<int64_t> volume_of(const Shape& s) {
  try {
    return volume(s);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// A reshape of a tensor of (symbolic) shape `from` to `to`, written with `known`'s static dims,
// 0 where a dynamic dim is the input's at that position and -1 for at most one other, if that
// reshape infers `to`.
std::optional<ShuffleParams> reshape_to(const std::string& name, const Shape& from, const Shape& to,
                                        const Shape& known) {
  ShuffleParams r;
  r.has_reshape = true;
  int inferred = 0;
  for (size_t d = 0; d < to.size(); ++d) {
    if (known[d] != kDynamic) {
      r.reshape.push_back(known[d]);
    } else if (d < from.size() && from[d] == to[d]) {
      r.reshape.push_back(0);
    } else {
      r.reshape.push_back(-1);
      ++inferred;
    }
  }
  if (inferred > 1) return std::nullopt;
  try {
    const auto out = infer_layer(name, r, {{DataType::kF32, from, nullptr}});
    if (out.size() == 1 && out[0].shape == to) return r;
  } catch (const Error&) {
  }
  return std::nullopt;
}

// The dim of `shape` that holds `rows` after leading dims whose product is `batch` (the packed
// [batch, rows, width] reading of a tensor of at least 3 dims), if there is one.
std::optional<size_t> packed_rows_dim(const Shape& shape, int64_t batch, int64_t rows) {
  if (shape.size() < 3 || batch <= 0 || rows <= 0) return std::nullopt;
  int64_t product = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) {
    if (d > 0 && product == batch && shape[d] == rows) return d;
    product *= shape[d];
    if (product > batch) break;
  }
  return std::nullopt;
}

struct Operand {
  TensorId base;  // [B, rows, ...]: a reshape to [B, rows, width] makes it the packed operand
  int64_t column;
  int64_t width;
  Shape base_shape, packed;  // in the trace's symbols: base's, and [B, rows, width]
};

// The [B, rows, width] tensor and column at which `id` ([B, H, rows, E]) is the heads' column
// ranges, traced back through shuffles and slices. The farthest such tensor wins; the chain may
// start further back (GPT-2's projection is a [B * L, 3 D] GEMM viewed as [B, L, 3 D]). B and rows
// may be dynamic (Symbols); H, E, the width and the column are static.
std::optional<Operand> trace_operand(const Graph& g, TensorId id) {
  std::vector<const Layer*> path;
  for (const Layer* l = g.produced_by(id); l && path.size() < 16;) {
    const bool view = std::holds_alternative<ShuffleParams>(l->params) ||
                      (std::holds_alternative<SliceParams>(l->params) && l->inputs.size() == 1);
    if (!view || l->inputs.empty()) break;
    path.push_back(l);
    l = g.produced_by(l->inputs[0]);
  }
  for (size_t len = path.size(); len > 0; --len) {
    const TensorId base = path[len - 1]->inputs[0];
    std::vector<const Shape*> met = {&g.shape(base)};
    std::vector<const Layer*> chain;  // from base to id
    for (size_t i = len; i-- > 0;) {
      chain.push_back(path[i]);
      met.push_back(&g.shape(path[i]->outputs[0]));
    }
    Symbols sym(met);
    const Shape b = sym.of(g.shape(base));
    const auto shapes = view_shapes(g, chain, b);
    if (!shapes) continue;
    const Shape& t = shapes->back();
    if (t.size() != 4 || !sym.is_static(t[1]) || !sym.is_static(t[3])) continue;
    // [B, rows, width], or [B..., rows, ...] read as [B, rows, width] (a contiguous view): leading
    // dims whose product is B (the batch of an attention whose leading dims were merged), then
    // rows.
    const auto rows_at = packed_rows_dim(b, t[0], t[2]);
    if (!rows_at) continue;
    std::optional<Modes> modes = contiguous_modes(b);
    int64_t offset = 0;
    for (size_t i = 0; i < chain.size() && modes; ++i) {
      const Layer& l = *chain[i];
      const Shape& in = i == 0 ? b : (*shapes)[i - 1];
      if (const auto* s = std::get_if<ShuffleParams>(&l.params)) {
        modes = shuffle_modes(*s, *modes, in, (*shapes)[i]);
      } else if (!slice_modes(std::get<SliceParams>(l.params), in, (*shapes)[i], *modes, offset)) {
        modes.reset();
      }
    }
    const auto st = modes ? single_strides(*modes) : std::nullopt;
    const auto elements = volume_of(b);
    if (!elements) continue;
    const int64_t width = *elements / (t[0] * t[2]), heads = t[1], e = t[3];
    if (!sym.is_static(width) || !sym.is_static(offset)) continue;
    if (!st || !same_layout(t, *st, {t[2] * width, e, width, 1})) continue;
    if (offset < 0 || offset + heads * e > width) continue;
    return Operand{base, offset, width, b, {t[0], t[2], width}};
  }
  return std::nullopt;
}

// A reshape alone (no permutation), from `in` to `out` shapes.
bool is_reshape(const Layer& l) {
  const auto* s = std::get_if<ShuffleParams>(&l.params);
  return s && l.inputs.size() == 1 && s->first_perm.empty() && s->second_perm.empty();
}

// A slice that keeps every element (step 1, the whole of each sliced dim).
bool is_full_slice(const Graph& g, const Layer& l) {
  const auto* s = std::get_if<SliceParams>(&l.params);
  if (!s || l.inputs.size() != 1 || s->starts.size() != s->axes.size() ||
      s->ends.size() != s->axes.size() || s->steps.size() != s->axes.size()) {
    return false;
  }
  const Shape& in = g.shape(l.inputs[0]);
  for (size_t j = 0; j < s->axes.size(); ++j) {
    const int64_t a = s->axes[j] < 0 ? s->axes[j] + static_cast<int64_t>(in.size()) : s->axes[j];
    if (a < 0 || a >= static_cast<int64_t>(in.size()) || s->steps[j] != 1 || s->starts[j] != 0 ||
        s->ends[j] < in[static_cast<size_t>(a)]) {
      return false;
    }
  }
  return true;
}

// The nearest tensor of shape `want` that `id` is, in element order, through reshapes and
// slices keeping every element (torch's `x[:, :, None]` spellings of an unsqueeze).
std::optional<TensorId> same_elements_as(const Graph& g, TensorId id, const Shape& want) {
  for (int depth = 0; depth < 8; ++depth) {
    if (g.shape(id) == want) return id;
    const Layer* l = g.produced_by(id);
    if (!l || !(is_reshape(*l) || is_full_slice(g, *l))) return std::nullopt;
    id = l->inputs[0];
  }
  return std::nullopt;
}

// Key or value heads repeated for grouped-query attention (attention_heads.h).
std::optional<RepeatedHeads> repeated_heads(const Graph& g, TensorId id) {
  const Shape& t = g.shape(id);
  const Layer* l = g.produced_by(id);
  if (!l || t.size() != 4 || !is_static(t)) return std::nullopt;
  if (const auto* gather = std::get_if<GatherParams>(&l->params)) {
    if (gather->mode != GatherMode::kDefault || (gather->axis != 1 && gather->axis != -3) ||
        l->inputs.size() != 2) {
      return std::nullopt;
    }
    const Shape& s = g.shape(l->inputs[0]);
    const Layer* c = g.produced_by(l->inputs[1]);
    const auto* constant = c ? std::get_if<ConstantParams>(&c->params) : nullptr;
    if (s.size() != 4 || s[1] <= 0 || t[1] % s[1] != 0 || !constant) return std::nullopt;
    const Weights& w = g.net.weight(constant->weight);
    const int64_t group = t[1] / s[1];
    if (w.dtype != DataType::kI64 || w.shape != Shape{t[1]} || !w.data) return std::nullopt;
    const auto* index = reinterpret_cast<const int64_t*>(w.data->data());
    for (int64_t h = 0; h < t[1]; ++h) {
      if (index[h] != h / group) return std::nullopt;
    }
    return RepeatedHeads{l->inputs[0], group};
  }
  // reshape [B, Hkv, group, S, E] -> [B, H, S, E] of select(c, y, y), y [B, Hkv, 1, S, E] the
  // elements of a [B, Hkv, S, E] tensor.
  if (!is_reshape(*l)) return std::nullopt;
  const Shape& x = g.shape(l->inputs[0]);
  const Layer* sel = g.produced_by(l->inputs[0]);
  if (x.size() != 5 || !sel || !std::holds_alternative<SelectParams>(sel->params) ||
      sel->inputs.size() != 3 || sel->inputs[1] != sel->inputs[2]) {
    return std::nullopt;
  }
  if (g.shape(sel->inputs[1]) != Shape{x[0], x[1], 1, x[3], x[4]} || x[1] * x[2] != t[1]) {
    return std::nullopt;
  }
  const auto source = same_elements_as(g, sel->inputs[1], Shape{x[0], x[1], x[3], x[4]});
  if (!source) return std::nullopt;
  return RepeatedHeads{*source, x[2]};
}

struct Merge {
  TensorId result;             // [B, L, H * E]
  std::vector<size_t> layers;  // the shuffles between the attention and `result`
  Shape packed, result_shape;  // in the trace's symbols: [B, L, H * E], and result's
};

// The [B, L, H * E] tensor that the attention's result `id` ([B, H, L, E]) becomes through a
// chain of shuffles, each the only consumer of the one before (B and L may be dynamic: Symbols).
std::optional<Merge> trace_result(const Graph& g, TensorId id) {
  Merge m;
  std::vector<const Layer*> chain;
  TensorId cur = id;
  while (m.layers.size() < 4) {
    const auto next = g.single_consumer(cur);
    if (!next) return std::nullopt;
    const Layer& l = g.layers[*next];
    if (!std::holds_alternative<ShuffleParams>(l.params) || l.inputs[0] != cur) {
      return std::nullopt;
    }
    m.layers.push_back(*next);
    chain.push_back(&l);
    cur = l.outputs[0];
    std::vector<const Shape*> met = {&g.shape(id)};
    for (const Layer* c : chain) met.push_back(&g.shape(c->outputs[0]));
    Symbols sym(met);
    const Shape o = sym.of(g.shape(id));
    const auto shapes = view_shapes(g, chain, o);
    if (!shapes) return std::nullopt;
    // [B, L, H * E], or [B..., L, H * E] with leading dims whose product is B.
    const Shape& r = shapes->back();
    const auto rows_at = packed_rows_dim(r, o[0], o[2]);
    if (!rows_at || *rows_at + 2 != r.size() || r.back() != o[1] * o[3]) continue;
    // Where the result tensor puts the attention's elements: back through the chain.
    std::optional<Modes> modes = contiguous_modes(r);
    for (size_t i = chain.size(); i-- > 0 && modes;) {
      modes = shuffle_modes_back(std::get<ShuffleParams>(chain[i]->params), *modes,
                                 i == 0 ? o : (*shapes)[i - 1], (*shapes)[i]);
    }
    const auto st = modes ? single_strides(*modes) : std::nullopt;
    if (st && same_layout(o, *st, {o[2] * o[1] * o[3], o[3], o[1] * o[3], 1})) {
      m.result = cur;
      m.packed = {o[0], o[2], o[1] * o[3]};
      m.result_shape = r;
      return m;
    }
  }
  return std::nullopt;
}

// Attention over more than 4 dims ([D..., H, L, E]: heads of windows of a batch) as attention
// over [prod D, H, L, E] through reshapes (views), so that its head split and merge fold as
// rank-4 ones do. A mask must broadcast over the leading dims wholly or not at all; it is viewed
// likewise. Leaves the others as they are.
void merge_leading_dims(Network& net) {
  std::vector<Layer> out;
  bool changed = false;
  int made = 0;
  for (const Layer& l : net.layers()) {
    const auto* a = std::get_if<AttentionParams>(&l.params);
    if (!a || a->heads > 0 || l.inputs.size() != (a->has_mask ? 4u : 3u)) {
      out.push_back(l);
      continue;
    }
    const Shape q = net.tensor(l.inputs[0]).shape, k = net.tensor(l.inputs[1]).shape,
                v = net.tensor(l.inputs[2]).shape, o = net.tensor(l.outputs[0]).shape;
    const size_t n = q.size() > 3 ? q.size() - 3 : 0;  // the leading dims
    const Shape lead(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(n));
    const auto lead_of = [&](const Shape& s) {
      return Shape(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(n));
    };
    bool ok = q.size() > 4 && is_static(q) && is_static(k) && is_static(v) && o == q &&
              k.size() == q.size() && v.size() == q.size() && lead_of(k) == lead &&
              lead_of(v) == lead;
    const int64_t batch = ok ? volume(lead) : 0;
    Shape mask;
    if (ok && a->has_mask) {
      mask = net.tensor(l.inputs[3]).shape;
      ok = mask.size() <= q.size() && is_static(mask);
      if (ok) {
        mask.insert(mask.begin(), q.size() - mask.size(), 1);
        bool none = true, all = true;
        for (size_t d = 0; d < n; ++d) {
          none = none && mask[d] == 1;
          all = all && mask[d] == lead[d];
        }
        ok = none || all;
        mask = {none ? 1 : batch, mask[n], mask[n + 1], mask[n + 2]};
      }
    }
    if (!ok) {
      out.push_back(l);
      continue;
    }
    const auto view = [&](TensorId id, const Shape& to) {
      TensorDesc d = net.tensor(id);
      d.name = l.name + ":batch" + std::to_string(made++);
      d.shape = to;
      d.values.reset();
      ShuffleParams r;
      r.has_reshape = true;
      r.reshape = to;
      const TensorId t = net.add_tensor(d);
      out.push_back(Layer{d.name, r, {id}, {t}});
      return t;
    };
    const auto merged = [&](const Shape& s) { return Shape{batch, s[n], s[n + 1], s[n + 2]}; };
    Layer rewritten = l;
    rewritten.inputs[0] = view(l.inputs[0], merged(q));
    rewritten.inputs[1] = view(l.inputs[1], merged(k));
    rewritten.inputs[2] = view(l.inputs[2], merged(v));
    if (a->has_mask) rewritten.inputs[3] = view(l.inputs[3], mask);
    TensorDesc result = net.tensor(l.outputs[0]);
    result.name = l.name + ":batch" + std::to_string(made++);
    result.shape = merged(o);
    result.values.reset();
    rewritten.outputs = {net.add_tensor(result)};
    out.push_back(rewritten);
    ShuffleParams r;
    r.has_reshape = true;
    r.reshape = o;
    out.push_back(Layer{result.name, r, rewritten.outputs, l.outputs});
    changed = true;
  }
  if (changed) net.set_layers(std::move(out));
}

}  // namespace

std::optional<RepeatedHeads> repeated_heads(const Network& net, const std::vector<Layer>& layers,
                                            const NetworkIndex& index, TensorId id) {
  return repeated_heads(Graph{net, layers, index}, id);
}

int fold_attention_heads(Network& net, const PackedHeads& accept) {
  merge_leading_dims(net);
  std::vector<Layer> layers = net.layers();
  NetworkIndex index(net, layers);
  const Graph g{net, layers, index};
  int folded = 0;
  // Per rewritten attention layer: the reshapes to put before it, and its inputs they replace.
  std::map<size_t, std::vector<Layer>> reshapes;
  std::map<size_t, std::vector<std::pair<size_t, TensorId>>> swaps;
  std::map<size_t, std::vector<Layer>> after;  // views of the packed result, after the layer
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto* a = std::get_if<AttentionParams>(&layers[i].params);
    if (!a || a->heads > 0 || layers[i].inputs.size() != (a->has_mask ? 4u : 3u)) continue;
    const TensorDesc &q = net.tensor(layers[i].inputs[0]), &k = net.tensor(layers[i].inputs[1]),
                     &v = net.tensor(layers[i].inputs[2]), &o = net.tensor(layers[i].outputs[0]);
    // B, L and S may be dynamic (the operands and the result are traced in symbols, and the
    // packed layer checks at run time what the unpacked one checks).
    if (q.shape.size() != 4 || k.shape.size() != 4) continue;
    const int64_t B = q.shape[0], H = q.shape[1], L = q.shape[2], E = q.shape[3], S = k.shape[2];
    if (H <= 0 || E <= 0 || B == 0 || L == 0 || S == 0 || k.shape != Shape{B, H, S, E} ||
        v.shape != k.shape || o.shape != q.shape || k.dtype != q.dtype || v.dtype != q.dtype ||
        o.dtype != q.dtype) {
      continue;
    }
    AttentionParams packed = *a;
    packed.heads = H, packed.head_size = E;
    // Grouped-query attention: k and v both heads repeated by one group.
    const auto rk = repeated_heads(g, layers[i].inputs[1]);
    const auto rv = repeated_heads(g, layers[i].inputs[2]);
    const bool grouped = rk && rv && rk->group == rv->group && rk->group > 1;
    if (grouped) packed.kv_heads = H / rk->group;
    std::vector<TensorId> sources;
    std::vector<TensorDesc> source_descs;
    std::vector<Operand> operands;
    for (size_t j = 0; j < 3; ++j) {
      TensorId operand = layers[i].inputs[j];
      if (grouped && j > 0) operand = (j == 1 ? rk : rv)->source;
      const auto src = trace_operand(g, operand);
      if (!src) break;
      sources.push_back(src->base);
      TensorDesc d = net.tensor(src->base);
      d.shape = {B, j == 0 ? L : S, src->width};
      source_descs.push_back(d);
      packed.columns.push_back(src->column);
      operands.push_back(*src);
    }
    if (sources.size() != 3) continue;
    // Sources of more than 3 dims ([B, rows, H, E]: computed on the unpermuted heads) are read
    // through a reshape to [B, rows, width] (a view at run time), one per source.
    std::vector<std::optional<ShuffleParams>> flatten(3);
    bool flattens = true;
    for (size_t j = 0; j < 3; ++j) {
      if (operands[j].base_shape.size() == 3) continue;
      flatten[j] = reshape_to(layers[i].name, operands[j].base_shape, operands[j].packed,
                              source_descs[j].shape);
      flattens = flattens && flatten[j].has_value();
    }
    if (!flattens) continue;
    if (a->has_mask) {  // unchanged: it broadcasts to [B, H, L, S] as it did
      sources.push_back(layers[i].inputs[3]);
      source_descs.push_back(net.tensor(layers[i].inputs[3]));
    }
    const auto merge = trace_result(g, layers[i].outputs[0]);
    if (!merge) continue;
    TensorDesc result = net.tensor(merge->result);
    result.shape = {B, L, H * E};
    std::optional<ShuffleParams> unflatten;  // [B..., L, H * E]: through a view
    if (merge->result_shape.size() != 3) {
      unflatten = reshape_to(layers[i].name, merge->packed, merge->result_shape,
                             net.tensor(merge->result).shape);
      if (!unflatten) continue;
    }
    if (!accept(packed, source_descs, result)) continue;
    for (size_t r : merge->layers) index.remove(r);
    TensorId written = merge->result;
    if (unflatten) {
      result.name += ":packed";
      result.values.reset();
      written = net.add_tensor(result);
      after[i].push_back(Layer{result.name, *unflatten, {written}, {merge->result}});
    }
    Layer rewritten{layers[i].name, packed, sources, {written}};
    index.replace(i, layers[i], rewritten);
    layers[i] = std::move(rewritten);
    std::map<TensorId, TensorId> flat;
    for (size_t j = 0; j < 3; ++j) {
      const TensorId base = sources[j];
      if (!flatten[j]) continue;
      if (!flat.count(base)) {
        TensorDesc d = source_descs[j];
        d.name += ":packed:" + layers[i].name;
        d.values.reset();
        const TensorId id = net.add_tensor(d);
        reshapes[i].push_back(Layer{d.name, *flatten[j], {base}, {id}});
        flat[base] = id;
      }
      swaps[i].emplace_back(j, flat[base]);
    }
    ++folded;
  }
  if (folded == 0) return 0;
  std::vector<Layer> kept;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (index.removed(i)) continue;
    for (Layer& r : reshapes[i]) kept.push_back(std::move(r));
    for (const auto& [j, id] : swaps[i]) layers[i].inputs[j] = id;
    kept.push_back(std::move(layers[i]));
    for (Layer& r : after[i]) kept.push_back(std::move(r));
  }
  net.set_layers(std::move(kept));
  return folded;
}

}  // namespace kiln::engine
