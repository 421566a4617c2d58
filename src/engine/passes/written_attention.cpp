// Attention written out as matmuls and a softmax, as one attention layer (passes.h).
#include <algorithm>
#include <map>
#include <optional>

#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"

namespace kiln::engine {

namespace {

// A reshape alone: no permutation, no cast.
bool is_plain_reshape(const Layer& l) {
  const auto* s = std::get_if<ShuffleParams>(&l.params);
  return s && l.inputs.size() == 1 && s->first_perm.empty() && s->second_perm.empty() && !s->cast;
}

// A transpose of the last two dims alone.
bool is_last_two_transpose(const Layer& l, size_t rank) {
  const auto* s = std::get_if<ShuffleParams>(&l.params);
  if (!s || l.inputs.size() != 1 || s->has_reshape || !s->second_perm.empty() || s->cast ||
      rank < 2 || s->first_perm.size() != rank) {
    return false;
  }
  for (size_t d = 0; d < rank; ++d) {
    const size_t want = d + 2 < rank ? d : (d + 2 == rank ? rank - 1 : rank - 2);
    if (s->first_perm[d] != static_cast<int64_t>(want)) return false;
  }
  return true;
}

// A matmul with no transpose of a and no post-op.
const MatMulParams* plain_matmul(const Layer& l) {
  const auto* m = std::get_if<MatMulParams>(&l.params);
  if (!m || m->transpose_a || l.inputs.size() != 2 || m->post.has_bias || m->post.has_residual ||
      m->post.activation != ActivationKind::kNone || m->post.activation2 != ActivationKind::kNone) {
    return nullptr;
  }
  return m;
}

Shape lead(const Shape& s) {
  return Shape(s.begin(), s.end() - 2);
}

// A term broadcast over frame `c` ([lead..., L, S]) as a term of frame `f`, whose leading dims
// are a regrouping of c's (the same elements in the same order: the frames are reshapes of one
// another): per group of dims with equal products, the term must broadcast over all of it or none.
std::optional<Shape> regrouped(Shape t, const Shape& c, const Shape& f) {
  if (t.size() > c.size()) return std::nullopt;
  t.insert(t.begin(), c.size() - t.size(), 1);
  std::vector<int64_t> cs, ts, fs;
  std::vector<size_t> f_at;
  for (size_t d = 0; d + 2 < c.size(); ++d) {
    if (c[d] != 1) cs.push_back(c[d]), ts.push_back(t[d]);
  }
  for (size_t d = 0; d + 2 < f.size(); ++d) {
    if (f[d] != 1) fs.push_back(f[d]), f_at.push_back(d);
  }
  Shape out(f.size(), 1);
  out[f.size() - 2] = t[t.size() - 2];
  out[f.size() - 1] = t[t.size() - 1];
  size_t i = 0, j = 0;
  while (i < cs.size() && j < fs.size()) {
    const size_t i0 = i, j0 = j;
    int64_t pc = cs[i++], pf = fs[j++];
    while (pc != pf) {
      if (pc < pf && i < cs.size()) {
        pc *= cs[i++];
      } else if (pf < pc && j < fs.size()) {
        pf *= fs[j++];
      } else {
        return std::nullopt;
      }
    }
    bool none = true, all = true;
    for (size_t k = i0; k < i; ++k) {
      none = none && ts[k] == 1;
      all = all && ts[k] == cs[k];
    }
    if (!none && !all) return std::nullopt;
    for (size_t k = j0; k < j; ++k) out[f_at[k]] = none ? 1 : fs[k];
  }
  if (i != cs.size() || j != fs.size()) return std::nullopt;
  return out;
}

// What feeds a softmax, traced back to the scores matmul.
struct Written {
  TensorId q = -1, k = -1;
  double scale = 1;
  bool scaled = false;  // a scale was met above the scores, which would apply to later terms
  std::vector<std::pair<TensorId, Shape>> terms;  // an added term, and the frame it was added in
  std::vector<size_t> layers;                     // the layers the attention replaces
  Shape scores;
};

class Tracer {
 public:
  Tracer(const Network& net, const std::vector<Layer>& layers, const NetworkIndex& index)
      : net_(net), layers_(layers), index_(index) {}

  // Whether `id`, read by layer `reader` alone, is scores plus terms, scaled, through reshapes.
  bool trace(TensorId id, size_t reader, Written& w, int depth = 0) const {
    if (depth > 16 || index_.single_consumer(id) != reader) return false;
    const auto p = index_.producer(id);
    if (!p) return false;
    const Layer& l = layers_[*p];
    const Shape& out = net_.tensor(id).shape;
    if (!is_static(out) || out.size() < 2) return false;
    if (is_plain_reshape(l)) {
      const Shape& in = net_.tensor(l.inputs[0]).shape;
      if (in.size() < 2 || !std::equal(in.end() - 2, in.end(), out.end() - 2)) return false;
      return take(*p, w) && trace(l.inputs[0], *p, w, depth + 1);
    }
    if (const auto* e = std::get_if<ElementwiseParams>(&l.params); e && l.inputs.size() == 2) {
      if (e->op == BinaryOp::kAdd) {
        if (w.scaled) return false;  // (scores + t) * s: t would be scaled too
        for (int side = 0; side < 2; ++side) {
          const TensorId chain = l.inputs[side], term = l.inputs[1 - side];
          const TensorDesc& t = net_.tensor(term);
          if (net_.tensor(chain).shape != out || t.dtype != net_.tensor(id).dtype ||
              t.shape.size() > out.size() || !is_static(t.shape)) {
            continue;
          }
          Written tried = w;
          tried.terms.emplace_back(term, out);
          if (take(*p, tried) && trace(chain, *p, tried, depth + 1)) {
            w = std::move(tried);
            return true;
          }
        }
        return false;
      }
      if (e->op == BinaryOp::kMul || e->op == BinaryOp::kDiv) {
        for (int side = 1; side >= (e->op == BinaryOp::kMul ? 0 : 1); --side) {
          const auto s = scalar_constant(net_, l.inputs[side]);
          if (!s || *s == 0 || net_.tensor(l.inputs[1 - side]).shape != out) continue;
          Written tried = w;
          tried.scale = e->op == BinaryOp::kMul ? tried.scale * *s : tried.scale / *s;
          tried.scaled = true;
          if (take(*p, tried) && trace(l.inputs[1 - side], *p, tried, depth + 1)) {
            w = std::move(tried);
            return true;
          }
        }
        return false;
      }
      return false;
    }
    const auto* m = plain_matmul(l);
    if (!m || !take(*p, w)) return false;
    w.scores = out;
    w.q = strip_scale(l.inputs[0], *p, w);
    TensorId kt = l.inputs[1];
    if (!m->transpose_b) {  // k^T must be k's last two dims transposed
      const auto t = index_.producer(kt);
      if (!t || index_.single_consumer(kt) != *p ||
          !is_last_two_transpose(layers_[*t], net_.tensor(kt).shape.size()) || !take(*t, w)) {
        return false;
      }
      w.k = strip_scale(layers_[*t].inputs[0], *t, w);
    } else {
      w.k = strip_scale(kt, *p, w);
    }
    return true;
  }

 private:
  // Adds layer `i` to those replaced, once.
  static bool take(size_t i, Written& w) {
    if (std::find(w.layers.begin(), w.layers.end(), i) != w.layers.end()) return false;
    w.layers.push_back(i);
    return true;
  }

  // q or k, read by `reader` alone, without the multiplies by scalar constants before it.
  TensorId strip_scale(TensorId id, size_t reader, Written& w) const {
    for (int depth = 0; depth < 4 && index_.single_consumer(id) == reader; ++depth) {
      const auto p = index_.producer(id);
      if (!p) break;
      const Layer& l = layers_[*p];
      const auto* e = std::get_if<ElementwiseParams>(&l.params);
      if (!e || e->op != BinaryOp::kMul || l.inputs.size() != 2) break;
      const int side = scalar_constant(net_, l.inputs[1]) ? 1 : 0;
      const auto s = scalar_constant(net_, l.inputs[side]);
      if (!s || net_.tensor(l.inputs[1 - side]).shape != net_.tensor(id).shape || !take(*p, w)) {
        break;
      }
      w.scale *= *s;
      id = l.inputs[1 - side];
      reader = *p;
    }
    return id;
  }

  const Network& net_;
  const std::vector<Layer>& layers_;
  const NetworkIndex& index_;
};

}  // namespace

int fold_written_attention(
    Network& net,
    const std::function<bool(const Shape&, const Shape&, const Shape&, DataType)>& fused) {
  std::vector<Layer> layers = net.layers();
  NetworkIndex index(net, layers);
  const Tracer tracer(net, layers, index);
  std::map<size_t, std::vector<Layer>> at;  // the rewrites, at the output matmuls' places
  int folded = 0;
  for (size_t si = 0; si < layers.size(); ++si) {
    const auto* sm = std::get_if<SoftmaxParams>(&layers[si].params);
    if (!sm || sm->log || sm->causal || layers[si].inputs.size() != 1 || index.removed(si)) {
      continue;
    }
    const TensorId probs = layers[si].outputs[0];
    const Shape p_shape = net.tensor(probs).shape;
    if (p_shape.size() < 2 || !is_static(p_shape) ||
        (sm->axis != -1 && sm->axis != static_cast<int64_t>(p_shape.size()) - 1)) {
      continue;
    }
    const auto oi = index.single_consumer(probs);
    if (!oi || !plain_matmul(layers[*oi]) ||
        std::get<MatMulParams>(layers[*oi].params).transpose_b || layers[*oi].inputs[0] != probs) {
      continue;
    }
    Written w;
    if (!tracer.trace(layers[si].inputs[0], si, w)) continue;
    const Layer& out_mm = layers[*oi];
    // Copies: adding tensors below moves them.
    const TensorDesc q = net.tensor(w.q), k = net.tensor(w.k), v = net.tensor(out_mm.inputs[1]);
    const TensorDesc o = net.tensor(out_mm.outputs[0]);
    const DataType dt = q.dtype;
    if (!is_static(q.shape) || !is_static(k.shape) || !is_static(v.shape) || q.shape.size() < 2 ||
        k.shape.size() != q.shape.size() || v.shape.size() != p_shape.size() ||
        lead(q.shape) != lead(w.scores) || lead(k.shape) != lead(w.scores) ||
        lead(v.shape) != lead(p_shape) || q.shape.back() != k.shape.back() ||
        w.scores[w.scores.size() - 2] != q.shape[q.shape.size() - 2] ||
        w.scores.back() != k.shape[k.shape.size() - 2] ||
        v.shape[v.shape.size() - 2] != w.scores.back() || k.dtype != dt || v.dtype != dt ||
        o.dtype != dt || net.tensor(probs).dtype != dt || !is_floating(dt) || w.scale == 0) {
      continue;
    }
    // The frame the attention runs in: the most leading dims any of its pieces had.
    Shape frame = w.scores;
    for (const auto& [term, c] : w.terms) {
      if (c.size() > frame.size()) frame = c;
    }
    if (p_shape.size() > frame.size()) frame = p_shape;
    const Shape fl = lead(frame);
    const auto framed = [&](const TensorDesc& t) {
      Shape s = fl;
      s.push_back(t.shape[t.shape.size() - 2]);
      s.push_back(t.shape.back());
      return s;
    };
    const Shape qf = framed(q), kf = framed(k), vf = framed(v);
    if (!fused(qf, kf, vf, dt)) continue;
    std::vector<Shape> term_shapes;
    for (const auto& [term, c] : w.terms) {
      const auto s = regrouped(net.tensor(term).shape, c, frame);
      if (!s) break;
      term_shapes.push_back(*s);
    }
    if (term_shapes.size() != w.terms.size()) continue;

    std::vector<Layer>& out = at[*oi];
    const std::string& name = out_mm.name;
    int made = 0;
    const auto reshaped = [&](TensorId id, const Shape& to) {
      const TensorDesc& d = net.tensor(id);
      if (d.shape == to) return id;
      ShuffleParams r;
      r.has_reshape = true;
      r.reshape = to;
      const std::string n = name + ":framed" + std::to_string(made++);
      const DataType t = d.dtype;
      const TensorId res = net.add_tensor(TensorDesc{n, t, to, std::nullopt});
      out.push_back(Layer{n, r, {id}, {res}});
      return res;
    };
    std::vector<TensorId> inputs = {reshaped(w.q, qf), reshaped(w.k, kf),
                                    reshaped(out_mm.inputs[1], vf)};
    TensorId mask = -1;
    Shape mask_shape;
    for (size_t t = 0; t < w.terms.size(); ++t) {
      const TensorId term = reshaped(w.terms[t].first, term_shapes[t]);
      if (mask < 0) {
        mask = term, mask_shape = term_shapes[t];
        continue;
      }
      for (size_t d = 0; d < mask_shape.size(); ++d) {
        mask_shape[d] = std::max(mask_shape[d], term_shapes[t][d]);
      }
      const std::string n = name + ":mask" + std::to_string(t);
      const TensorId sum = net.add_tensor(TensorDesc{n, dt, mask_shape, std::nullopt});
      out.push_back(Layer{n, ElementwiseParams{BinaryOp::kAdd}, {mask, term}, {sum}});
      mask = sum;
    }
    AttentionParams a;
    a.scale = w.scale;
    a.has_mask = mask >= 0;
    if (a.has_mask) inputs.push_back(mask);
    Shape of = vf;
    of[of.size() - 2] = qf[qf.size() - 2];
    if (of == o.shape) {
      out.push_back(Layer{name, a, inputs, out_mm.outputs});
    } else {
      const TensorId res = net.add_tensor(TensorDesc{name + ":framed", dt, of, std::nullopt});
      out.push_back(Layer{name + ":framed", a, inputs, {res}});
      ShuffleParams r;
      r.has_reshape = true;
      r.reshape = o.shape;
      out.push_back(Layer{name, r, {res}, out_mm.outputs});
    }
    for (size_t l : w.layers) index.remove(l);
    index.remove(si);
    index.remove(*oi);
    ++folded;
  }
  if (folded == 0) return 0;
  std::vector<Layer> kept;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!index.removed(i)) kept.push_back(std::move(layers[i]));
    for (Layer& l : at[i]) kept.push_back(std::move(l));
  }
  net.set_layers(std::move(kept));
  return folded;
}

}  // namespace kiln::engine
