// The head-permute pass (passes.h): a transformer's head split ends in a permute ([B, L, H, E] ->
// [B, H, L, E]), and models that compute on the split heads before the attention (rotary
// embeddings: slices, a negation, a concat, multiplies by cos and sin tables, an add) leave the
// attention reading a computed tensor, not a view of the projection, so the head-folding pass
// (attention_heads.h) cannot take it. Those layers compute elementwise or along the last dim, so
// they run as well on the unpermuted [B, L, H, E] data: this pass moves the permute below them,
// onto the attention's operand, where the head folding takes it as a view.
//
// A permute moves only when every layer reached from it (through the layers that follow it) is
// one that can follow and every tensor leaving that region is read by an attention operand or by
// the unsqueeze of a grouped-query key/value repeat (attention_heads.cpp): a partial move would
// leave more permutes than it found.
#include <algorithm>
#include <map>
#include <set>

#include "engine/layer_kinds.h"
#include "engine/passes/passes.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

using Perm = std::vector<int64_t>;

// A permute alone (first_perm only) of a static tensor.
bool is_permute(const Network& net, const Layer& l) {
  const auto* s = std::get_if<ShuffleParams>(&l.params);
  return s && l.inputs.size() == 1 && !s->has_reshape && s->second_perm.empty() &&
         !s->first_perm.empty() && !s->cast && is_static(net.tensor(l.inputs[0]).shape);
}

bool numel_one(const Shape& s) {
  return is_static(s) && volume(s) == 1;
}

class Sinker {
 public:
  // `counter` numbers the tensors and layers it makes (names stay unique over many sinkers).
  Sinker(Network& net, const NetworkIndex& index, int& counter)
      : net_(net), index_(index), counter_(counter) {}

  // Moves the permute `layer` below what follows it, if the region allows; true if it did.
  bool sink(size_t layer) {
    const Layer& p = net_.layers()[layer];
    perm_ = std::get<ShuffleParams>(p.params).first_perm;
    rank_ = static_cast<int64_t>(perm_.size());
    region_.clear();
    region_layers_.clear();
    exits_.clear();
    region_.insert(p.outputs[0]);
    std::vector<TensorId> work = {p.outputs[0]};
    while (!work.empty()) {
      const TensorId t = work.back();
      work.pop_back();
      if (index_.is_output(t)) return false;
      for (size_t c : index_.consumers(t)) {
        const Layer& m = net_.layers()[c];
        if (ends_region(m, t)) {
          exits_.insert(t);
          continue;
        }
        if (!follows(m)) return false;
        if (region_layers_.insert(c).second) {
          region_.insert(m.outputs[0]);
          work.push_back(m.outputs[0]);
        }
      }
    }
    if (region_layers_.empty()) return false;
    // Every input of a region layer from outside must be a constant or a scalar (checked again
    // now that the region is whole).
    for (size_t c : region_layers_) {
      for (TensorId in : net_.layers()[c].inputs) {
        if (!region_.count(in) && !outside_ok(in)) return false;
      }
    }
    rewrite(layer);
    return true;
  }

 private:
  // An attention operand (q, k or v), or the start of a key/value repeat: the unsqueeze
  // [B, Hkv, S, E] -> [B, Hkv, 1, S, E] of transformers' repeat_kv, or a gather of the heads
  // (kiln's lowering of enable_gqa).
  bool ends_region(const Layer& m, TensorId t) const {
    if (std::holds_alternative<AttentionParams>(m.params)) {
      for (size_t j = 0; j < 3 && j < m.inputs.size(); ++j) {
        if (m.inputs[j] == t) return true;
      }
      return false;
    }
    if (const auto* g = std::get_if<GatherParams>(&m.params)) {
      return rank_ == 4 && m.inputs[0] == t && (g->axis == 1 || g->axis == -3);
    }
    const auto* s = std::get_if<ShuffleParams>(&m.params);
    if (!s || !s->first_perm.empty() || !s->second_perm.empty() || s->cast) return false;
    const Shape& in = net_.tensor(t).shape;
    const Shape& out = net_.tensor(m.outputs[0]).shape;
    return in.size() == 4 && out == Shape{in[0], in[1], 1, in[2], in[3]};
  }

  // A layer that computes the same on the unpermuted data: pointwise without growing its region
  // operand, or a slice or concat (along any axis, renumbered).
  bool follows(const Layer& m) const {
    if (m.outputs.size() != 1) return false;
    const Shape& out = net_.tensor(m.outputs[0]).shape;
    if (static_cast<int64_t>(out.size()) != rank_ || !is_static(out)) return false;
    if (layer_kind_traits(m.params).pointwise) {
      if (std::holds_alternative<FusedElementwiseParams>(m.params)) return false;
      for (TensorId in : m.inputs) {
        if (region_.count(in) && net_.tensor(in).shape != out) return false;
      }
      return true;
    }
    if (const auto* s = std::get_if<SliceParams>(&m.params)) {
      return m.inputs.size() == 1 && s->axes.size() == s->starts.size();
    }
    if (const auto* c = std::get_if<ConcatParams>(&m.params)) return !c->stack;
    return false;
  }

  // An input from outside the region: a scalar, or a constant of static shape no larger in rank
  // (it is permuted too, and folds).
  bool outside_ok(TensorId in) const {
    const TensorDesc& d = net_.tensor(in);
    if (numel_one(d.shape)) return true;
    const auto p = index_.producer(in);
    return p && std::holds_alternative<ConstantParams>(net_.layers()[*p].params) &&
           is_static(d.shape) && static_cast<int64_t>(d.shape.size()) <= rank_;
  }

  // Shape `s` (rank_) of the permuted space, unpermuted: u[perm[i]] = s[i].
  Shape unpermuted(const Shape& s) const {
    Shape u(s.size());
    for (size_t i = 0; i < s.size(); ++i) u[static_cast<size_t>(perm_[i])] = s[i];
    return u;
  }
  int64_t axis(int64_t a, const std::string& layer) const {
    return perm_[static_cast<size_t>(normalize_axis(a, rank_, layer))];
  }

  TensorId new_tensor(TensorId like) {
    TensorDesc d = net_.tensor(like);
    d.name += ":heads_last" + std::to_string(counter_++);
    d.shape = unpermuted(d.shape);
    d.values.reset();
    return net_.add_tensor(std::move(d));
  }

  void rewrite(size_t permute) {
    const Layer p = net_.layers()[permute];
    std::map<TensorId, TensorId> unpermuted = {{p.outputs[0], p.inputs[0]}};
    std::vector<Layer> out;
    const auto& layers = net_.layers();
    for (size_t i = 0; i < layers.size(); ++i) {
      Layer m = layers[i];
      if (!region_layers_.count(i)) {
        out.push_back(std::move(m));
        if (i == permute && exits_.count(p.outputs[0]) == 0) out.pop_back();  // read by none now
        continue;
      }
      for (TensorId& in : m.inputs) {
        if (auto it = unpermuted.find(in); it != unpermuted.end()) {
          in = it->second;
        } else if (!numel_one(net_.tensor(in).shape)) {
          in = permuted_constant(m.name, in, out);
        }
      }
      if (auto* s = std::get_if<SliceParams>(&m.params)) {
        for (int64_t& a : s->axes) a = axis(a, m.name);
      } else if (auto* c = std::get_if<ConcatParams>(&m.params)) {
        c->axis = axis(c->axis, m.name);
      }
      const TensorId y = m.outputs[0];
      m.outputs[0] = new_tensor(y);
      unpermuted[y] = m.outputs[0];
      out.push_back(m);
      if (exits_.count(y)) {  // the attention (or the repeat) reads y: permuted again, once
        ShuffleParams sp;
        sp.first_perm = perm_;
        out.push_back(
            Layer{m.name + ":heads" + std::to_string(counter_++), sp, {m.outputs[0]}, {y}});
      }
    }
    net_.set_layers(std::move(out));
  }

  // A constant read in the permuted space: right-aligned to the rank, then unpermuted (a
  // shuffle that the constant folding takes).
  TensorId permuted_constant(const std::string& near, TensorId in, std::vector<Layer>& out) {
    const TensorDesc& d = net_.tensor(in);
    ShuffleParams sp;
    sp.has_reshape = true;
    sp.reshape = Shape(static_cast<size_t>(rank_) - d.shape.size(), 1);
    sp.reshape.insert(sp.reshape.end(), d.shape.begin(), d.shape.end());
    Perm inverse(perm_.size());
    for (size_t i = 0; i < perm_.size(); ++i) inverse[static_cast<size_t>(perm_[i])] = i;
    sp.second_perm = inverse;
    TensorDesc u = d;
    u.name += ":heads_last" + std::to_string(counter_++);
    u.shape = unpermuted(sp.reshape);
    u.values.reset();
    const TensorId id = net_.add_tensor(std::move(u));
    out.push_back(Layer{near + ":const_heads_last" + std::to_string(counter_++), sp, {in}, {id}});
    return id;
  }

  Network& net_;
  const NetworkIndex& index_;
  Perm perm_;
  int64_t rank_ = 0;
  std::set<TensorId> region_, exits_;
  std::set<size_t> region_layers_;
  int& counter_;
};

}  // namespace

int sink_head_permutes(Network& net) {
  int moved = 0, counter = 0;
  // One permute at a time: each rewrite renumbers the layers.
  for (bool changed = true; changed;) {
    changed = false;
    const NetworkIndex index(net);
    Sinker sinker(net, index, counter);
    for (size_t i = 0; i < net.layers().size() && !changed; ++i) {
      if (is_permute(net, net.layers()[i]) && sinker.sink(i)) changed = true;
    }
    moved += changed;
  }
  return moved;
}

}  // namespace kiln::engine
