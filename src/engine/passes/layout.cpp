// The channels-last layout pass (layout.h). Transposes are Shuffle layers with only a first_perm:
// [0, 2, 3, 1] into channels-last, [0, 3, 1, 2] back. A layer reading a tensor through a "back"
// transpose is moved onto the channels-last data when all its other inputs can follow (scalars,
// constants, other channels-last data); its outputs then get the "back" transpose, and a "into"
// transpose that reads a "back" transpose's output is replaced by the data it transposed.
#include "engine/passes/layout.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "engine/layer_kinds.h"
#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"
#include "engine/passes/views.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

using Perm = std::vector<int64_t>;

// The layouts of `rank` dims (4: 2-d convolutions' [N, C, H, W]; 5: 3-d ones' [N, C, D, H, W]):
// into channels-last ([0, 2, ..., rank - 1, 1]) and back ([0, rank - 1, 1, ..., rank - 2]).
bool has_layout(size_t rank) {
  return rank == 4 || rank == 5;
}
Perm to_last(size_t rank) {
  Perm p = {0};
  for (size_t d = 2; d < rank; ++d) p.push_back(static_cast<int64_t>(d));
  p.push_back(1);
  return p;
}
Perm to_first(size_t rank) {
  Perm p = {0, static_cast<int64_t>(rank) - 1};
  for (size_t d = 1; d + 1 < rank; ++d) p.push_back(static_cast<int64_t>(d));
  return p;
}

// A transpose into channels-last (`into`) or back, of a tensor of 4 or 5 dims.
bool is_transpose(const Layer& l, bool into) {
  const auto* s = std::get_if<ShuffleParams>(&l.params);
  if (!s || l.inputs.size() != 1 || s->has_reshape || !s->second_perm.empty() ||
      !has_layout(s->first_perm.size())) {
    return false;
  }
  const size_t rank = s->first_perm.size();
  return s->first_perm == (into ? to_last(rank) : to_first(rank));
}

bool is_static_numel_one(const Shape& s) {
  return is_static(s) && volume(s) == 1;
}

class Pass {
 public:
  Pass(Network& net, LayoutReport& report) : net_(net), report_(report) {}

  void rewrite_convolutions(const std::function<bool(const Network&, const Layer&)>& wants) {
    std::vector<Layer> out;
    for (Layer l : net_.layers()) {
      auto* c = std::get_if<ConvolutionParams>(&l.params);
      // 2-d and 3-d convolutions. A residual fused already must be a whole tensor of the data's
      // rank (not broadcast) to be transposed.
      const size_t rank = c ? net_.tensor(l.inputs[0]).shape.size() : 0;
      const bool residual_whole =
          !c || !c->post.has_residual || net_.tensor(l.inputs.back()).shape.size() == rank;
      if (!c || c->transposed || c->channels_last || !has_layout(rank) ||
          net_.tensor(l.inputs[1]).shape.size() != rank || !residual_whole || !wants(net_, l)) {
        out.push_back(std::move(l));
        continue;
      }
      std::vector<size_t> permuted = {0, 1};  // data, weights, and the residual if fused already
      if (c->post.has_residual) permuted.push_back(l.inputs.size() - 1);
      for (size_t k : permuted) {
        const TensorId t = channels_last_tensor(l.inputs[k]);
        out.push_back(transpose(l.name, l.inputs[k], t, true));
        l.inputs[k] = t;
      }
      c->channels_last = true;
      const TensorId y = l.outputs[0];
      l.outputs[0] = channels_last_tensor(y);
      out.push_back(l);
      out.push_back(transpose(l.name, l.outputs[0], y, false));
      ++report_.convolutions;
    }
    net_.set_layers(std::move(out));
  }

  // Cancels and sinks until nothing changes (each layer moves at most once, so this ends).
  void propagate() {
    for (;;) {
      index_producers();
      bool changed = cancel();
      auto& layers = net_.mutable_layers();
      for (size_t i = 0; i < layers.size() && !changed; ++i) changed = sink(i);
      if (!changed) return;
    }
  }

 private:
  std::string unique(const std::string& base, const char* what) {
    return base + ":" + what + std::to_string(counter_++);
  }

  TensorId channels_last_tensor(TensorId like) {
    TensorDesc d = net_.tensor(like);
    d.name = unique(d.name, "nhwc");
    d.shape = to_channels_last(d.shape);
    d.values.reset();
    return net_.add_tensor(std::move(d));
  }

  Layer transpose(const std::string& near, TensorId in, TensorId out, bool into) {
    const size_t rank = net_.tensor(in).shape.size();
    ShuffleParams p;
    p.first_perm = into ? to_last(rank) : to_first(rank);
    return Layer{unique(near, into ? "to_nhwc" : "to_nchw"), p, {in}, {out}};
  }

  // Who writes and who reads each tensor (once per round of propagate, and after a seed).
  void index_producers() {
    producer_.clear();
    readers_.clear();
    const auto& layers = net_.layers();
    for (size_t i = 0; i < layers.size(); ++i) {
      for (TensorId id : layers[i].outputs) producer_[id] = i;
      for (TensorId id : layers[i].inputs) readers_[id].push_back(i);
    }
    outputs_.clear();
    outputs_.insert(net_.outputs().begin(), net_.outputs().end());
  }

  // The layers reading `id` (once per use).
  const std::vector<size_t>& readers(TensorId id) const {
    static const std::vector<size_t> none;
    const auto it = readers_.find(id);
    return it == readers_.end() ? none : it->second;
  }

  // The only layer reading `id`, if one reads it once and it is no network output.
  std::optional<size_t> single_reader(TensorId id) const {
    const auto& r = readers(id);
    if (r.size() != 1 || outputs_.count(id)) return std::nullopt;
    return r[0];
  }

  const Layer* producer(TensorId id) const {
    auto it = producer_.find(id);
    return it == producer_.end() ? nullptr : &net_.layers()[it->second];
  }

  // A constant, or computed from constants only (the casts the precision pass put on f32
  // weights, which fold_constants folds after this pass): a permutation of it folds too.
  bool is_constant(TensorId id, int depth = 0) const {
    const Layer* p = producer(id);
    if (!p || depth > 16) return false;
    if (std::holds_alternative<ConstantParams>(p->params)) return true;
    if (p->inputs.empty() || !layer_kind_traits(p->params).reads_values) return false;
    for (TensorId in : p->inputs) {
      if (!is_constant(in, depth + 1)) return false;
    }
    return true;
  }

  // The channels-last tensor `id` is the "back" transpose of, or -1.
  TensorId channels_last_source(TensorId id) const {
    const Layer* p = producer(id);
    return p && is_transpose(*p, false) ? p->inputs[0] : -1;
  }

  // An "into" transpose of a "back" transpose's output reads the original instead.
  bool cancel() {
    bool changed = false;
    for (Layer& l : net_.mutable_layers()) {
      for (TensorId& id : l.inputs) {
        const Layer* into = producer(id);
        if (!into || !is_transpose(*into, true)) continue;
        const TensorId source = channels_last_source(into->inputs[0]);
        if (source < 0) continue;
        id = source;
        changed = true;
      }
    }
    return changed;
  }

  // Whether an input can be read channels-last at `rank` dims: channels-last data, a scalar, or
  // a constant.
  bool can_follow(TensorId in, size_t rank) const {
    if (channels_last_source(in) >= 0) return net_.tensor(in).shape.size() == rank;
    const TensorDesc& d = net_.tensor(in);
    if (is_static_numel_one(d.shape)) return true;
    return is_constant(in) && is_static(d.shape) && d.shape.size() <= rank && volume(d.shape) > 0;
  }

  // What layer l's input `in` (can_follow) becomes: the source tensor, a permuted constant
  // (a Shuffle appended to `before`), or itself (a scalar).
  TensorId follow(const Layer& l, TensorId in, size_t rank, std::vector<Layer>& before) {
    if (const TensorId source = channels_last_source(in); source >= 0) return source;
    const TensorDesc& d = net_.tensor(in);
    if (is_static_numel_one(d.shape)) return in;
    // Right-aligned to the rank (broadcasting), then permuted: folds into a constant.
    ShuffleParams p;
    p.has_reshape = true;
    p.reshape = Shape(rank - d.shape.size(), 1);
    p.reshape.insert(p.reshape.end(), d.shape.begin(), d.shape.end());
    p.second_perm = to_last(rank);
    TensorDesc permuted = d;
    permuted.name = unique(d.name, "nhwc");
    permuted.shape = to_channels_last(p.reshape);
    permuted.values.reset();
    const TensorId id = net_.add_tensor(std::move(permuted));
    before.push_back(Layer{unique(l.name, "const_to_nhwc"), p, {in}, {id}});
    return id;
  }

  bool sink(size_t i) {
    Layer m = net_.layers()[i];
    if (m.outputs.size() != 1 || m.inputs.empty()) return false;
    if (std::holds_alternative<ShuffleParams>(m.params)) return sink_shuffles(i);
    size_t rank = 0;  // of the channels-last data read
    for (TensorId id : m.inputs) {
      if (channels_last_source(id) >= 0) rank = net_.tensor(id).shape.size();
    }
    if (rank == 0) return false;
    const Perm into = to_last(rank), back = to_first(rank);
    const int64_t irank = static_cast<int64_t>(rank);
    const Shape out_shape = net_.tensor(m.outputs[0]).shape;
    if (out_shape.size() != rank) {
      // Only a reduction may drop dims (checked below).
      if (!std::holds_alternative<ReduceParams>(m.params)) return false;
    }
    bool transpose_output = true;
    std::vector<size_t> followed;  // inputs that must follow
    if (layer_kind_traits(m.params).pointwise) {
      // Gathered inputs are read along an axis of their own.
      const auto* f = std::get_if<FusedElementwiseParams>(&m.params);
      if (f && !f->gathers.empty()) return false;
      // Not where broadcasting makes the output larger than the channels-last operand.
      bool same = false;
      for (TensorId id : m.inputs) {
        same = same || (channels_last_source(id) >= 0 && net_.tensor(id).shape == out_shape);
      }
      if (!same) return false;
      for (size_t k = 0; k < m.inputs.size(); ++k) followed.push_back(k);
    } else if (auto* pool = std::get_if<PoolingParams>(&m.params)) {
      const size_t nd = pool->adaptive ? pool->output_size.size() : pool->kernel.size();
      if (pool->channels_last || nd + 2 != rank || channels_last_source(m.inputs[0]) < 0) {
        return false;
      }
      pool->channels_last = true;
      followed = {0};
    } else if (auto* cat = std::get_if<ConcatParams>(&m.params)) {
      if (cat->stack) return false;
      cat->axis = back[static_cast<size_t>(normalize_axis(cat->axis, irank, m.name))];
      for (size_t k = 0; k < m.inputs.size(); ++k) followed.push_back(k);
    } else if (auto* slice = std::get_if<SliceParams>(&m.params)) {
      // Static bounds only (a slice with bound inputs reads them along the old axes). A slice
      // of channels may be a view channels-first (batch 1) and is a copy channels-last: it
      // moves only where what reads it can move too (or is a transpose into channels-last).
      if (m.inputs.size() != 1 || !readers_can_follow(m.outputs[0])) return false;
      for (int64_t& a : slice->axes) {
        a = back[static_cast<size_t>(normalize_axis(a, irank, m.name))];
      }
      followed = {0};
    } else if (auto* soft = std::get_if<SoftmaxParams>(&m.params)) {
      // A masked or causal softmax is over the last axis.
      if (channels_last_source(m.inputs[0]) < 0 || m.inputs.size() > 1 || soft->causal) {
        return false;
      }
      soft->axis = back[static_cast<size_t>(normalize_axis(soft->axis, irank, m.name))];
      followed = {0};
    } else if (auto* red = std::get_if<ReduceParams>(&m.params)) {
      if (channels_last_source(m.inputs[0]) < 0 || red->axes.empty()) return false;
      std::vector<bool> reduced(rank, false);
      for (int64_t a : red->axes) {
        reduced[static_cast<size_t>(normalize_axis(a, irank, m.name))] = true;
      }
      std::vector<int64_t> axes;
      for (size_t a = 0; a < rank; ++a) {
        if (reduced[a]) axes.push_back(back[a]);
      }
      std::sort(axes.begin(), axes.end());
      if (!red->keep_dims) {
        // The kept dims must come out in the same order in both layouts.
        std::vector<int64_t> kept;
        for (size_t j = 0; j < rank; ++j) {
          if (!reduced[static_cast<size_t>(into[j])]) kept.push_back(into[j]);
        }
        if (!std::is_sorted(kept.begin(), kept.end())) return false;
        transpose_output = false;
      }
      red->axes = axes;
      followed = {0};
    } else {
      return false;
    }
    for (size_t k : followed) {
      if (!can_follow(m.inputs[k], rank)) return false;
    }
    std::vector<Layer> before;
    for (size_t k : followed) m.inputs[k] = follow(m, m.inputs[k], rank, before);
    std::vector<Layer> after;
    if (transpose_output) {
      const TensorId y = m.outputs[0];
      m.outputs[0] = channels_last_tensor(y);
      after.push_back(transpose(m.name, m.outputs[0], y, false));
    }
    auto& layers = net_.mutable_layers();
    layers[i] = m;
    layers.insert(layers.begin() + static_cast<std::ptrdiff_t>(i) + 1, after.begin(), after.end());
    layers.insert(layers.begin() + static_cast<std::ptrdiff_t>(i), before.begin(), before.end());
    ++report_.layers_moved;
    return true;
  }

  // The layers that write `composed` (chain `t` of `source`) to a new channels-last tensor for
  // `last`'s output; the last of them writes it.
  std::vector<Layer> channels_last_shuffle(const Layer& last, TensorId source,
                                           const ComposedShuffle& composed,
                                           const TracedShuffles& t) {
    const TensorId y = channels_last_tensor(last.outputs[0]);
    return composed_layers(net_, composed, t, source, y, last.name, unique(last.name, "move"),
                           unique(net_.tensor(y).name, "moved"));
  }

  // Whether every reader of `id` is a layer this pass moves onto channels-last data (or a
  // transpose into it, which cancels), and `id` is no network output.
  bool readers_can_follow(TensorId id) const {
    if (outputs_.count(id)) return false;
    for (size_t k : readers(id)) {
      const LayerParams& p = net_.layers()[k].params;
      if (!layer_kind_traits(p).pointwise && !std::holds_alternative<ShuffleParams>(p) &&
          !std::holds_alternative<PoolingParams>(p) && !std::holds_alternative<ConcatParams>(p) &&
          !std::holds_alternative<SoftmaxParams>(p) && !std::holds_alternative<ReduceParams>(p) &&
          !std::holds_alternative<SliceParams>(p)) {
        return false;
      }
    }
    return true;
  }

  // Shuffles from a "back" transpose's output, each read only by the next, until one gives a
  // tensor of the layout's rank again (shufflenet's channel shuffle: [N, C, H, W] -> [N, 2, C / 2,
  // H, W] -> permute -> [N, C, H, W]), become one shuffle of the channels-last data (views.h) and
  // a "back" transpose of its result; the chain goes. Static shapes only. Where nothing after the
  // chain takes the channels-last result, the shuffle chain pass makes the new shuffle and the
  // transpose one copy again, as it would have made the transpose and the chain.
  bool sink_shuffles(size_t i) {
    const auto& layers = net_.layers();
    // (A transpose into channels-last cancels instead.)
    if (is_transpose(layers[i], true) || is_transpose(layers[i], false)) return false;
    const TensorId source = channels_last_source(layers[i].inputs[0]);
    if (source < 0 || !is_static(net_.tensor(source).shape)) return false;
    const Shape source_shape = net_.tensor(source).shape;
    const size_t rank = source_shape.size();
    // The chain, by index; every output but the last read by the next shuffle alone.
    std::vector<size_t> chain = {i};
    while (net_.tensor(layers[chain.back()].outputs[0]).shape.size() != rank) {
      const auto next = single_reader(layers[chain.back()].outputs[0]);
      if (!next || !std::holds_alternative<ShuffleParams>(layers[*next].params)) return false;
      chain.push_back(*next);
    }
    // Modes of the chain's result, channels-last, over the source: the source read through the
    // "back" transpose, the chain, then the transpose into channels-last.
    ShuffleParams back_p, into_p;
    back_p.first_perm = to_first(rank);
    into_p.first_perm = to_last(rank);
    const Shape first = to_channels_first(source_shape);
    const auto back = shuffle_modes(back_p, contiguous_modes(source_shape), source_shape, first);
    if (!back) return false;
    TracedShuffles t{*back, first};
    for (size_t k : chain) {
      if (!trace_shuffle(net_, layers[k], t)) return false;
    }
    const Shape result_shape = to_channels_last(t.shape);
    const auto modes = shuffle_modes(into_p, t.modes, t.shape, result_shape);
    const auto composed =
        modes ? shuffle_for_modes(source_shape, *modes, result_shape) : std::nullopt;
    if (!composed) return false;
    const Layer last = layers[chain.back()];
    std::vector<Layer> replacement = channels_last_shuffle(last, source, *composed, t);
    const TensorId y = replacement.back().outputs[0];
    replacement.push_back(transpose(last.name, y, last.outputs[0], false));
    // The chain's other shuffles go (each read only by the next); the last is replaced in place.
    auto& mutable_layers = net_.mutable_layers();
    const size_t at = chain.back();
    mutable_layers.erase(mutable_layers.begin() + static_cast<std::ptrdiff_t>(at));
    mutable_layers.insert(mutable_layers.begin() + static_cast<std::ptrdiff_t>(at),
                          replacement.begin(), replacement.end());
    chain.pop_back();
    std::sort(chain.rbegin(), chain.rend());
    for (size_t k : chain) {
      mutable_layers.erase(mutable_layers.begin() + static_cast<std::ptrdiff_t>(k));
    }
    report_.layers_moved += 1;
    return true;
  }

 public:
  // For assign_channels_last's trials: the shuffle writing `y` (static shapes, no layout
  // transpose, `y` of the layout's rank) writes it channels-last instead, followed by a "back"
  // transpose to `y`. Returns false where it does not apply.
  bool seed(TensorId y) {
    index_producers();
    const auto it = producer_.find(y);
    if (it == producer_.end()) return false;
    const Layer s = net_.layers()[it->second];
    const auto* p = std::get_if<ShuffleParams>(&s.params);
    const Shape& out = net_.tensor(y).shape;
    if (!p || s.inputs.size() != 1 || s.outputs.size() != 1 || is_transpose(s, true) ||
        is_transpose(s, false) || !has_layout(out.size()) || !is_static(out) ||
        !is_static(net_.tensor(s.inputs[0]).shape)) {
      return false;
    }
    const Shape in = net_.tensor(s.inputs[0]).shape;
    TracedShuffles t{contiguous_modes(in), in};
    if (!trace_shuffle(net_, s, t)) return false;
    ShuffleParams into_p;
    into_p.first_perm = to_last(out.size());
    const Shape result_shape = to_channels_last(out);
    const auto modes = shuffle_modes(into_p, t.modes, out, result_shape);
    const auto composed = modes ? shuffle_for_modes(in, *modes, result_shape) : std::nullopt;
    if (!composed) return false;
    std::vector<Layer> replacement = channels_last_shuffle(s, s.inputs[0], *composed, t);
    replacement.push_back(transpose(s.name, replacement.back().outputs[0], y, false));
    auto& layers = net_.mutable_layers();
    layers.erase(layers.begin() + static_cast<std::ptrdiff_t>(it->second));
    layers.insert(layers.begin() + static_cast<std::ptrdiff_t>(it->second), replacement.begin(),
                  replacement.end());
    return true;
  }

  int counter() const { return counter_; }
  void set_counter(int c) { counter_ = c; }

 private:
  Network& net_;
  LayoutReport& report_;
  std::map<TensorId, size_t> producer_;
  std::map<TensorId, std::vector<size_t>> readers_;
  std::set<TensorId> outputs_;
  int counter_ = 0;
};

// The shuffles of activations that would move data once the builder has removed dead layers
// and composed chains of shuffles (what the layout's choices are judged by; those of constants
// fold).
int moving_shuffles_after_cleanup(Network net) {
  remove_dead_layers(net);
  fold_shuffle_chains(net);
  remove_dead_layers(net);
  std::set<TensorId> constant;
  int n = 0;
  for (const Layer& l : net.layers()) {
    bool folds = !l.inputs.empty() || std::holds_alternative<ConstantParams>(l.params);
    for (TensorId in : l.inputs) folds = folds && constant.count(in) > 0;
    if (folds) {
      constant.insert(l.outputs.begin(), l.outputs.end());
      continue;
    }
    const auto* p = std::get_if<ShuffleParams>(&l.params);
    n += p != nullptr && shuffle_moves_data(*p);
  }
  return n;
}

// Whether `id`, or what pointwise layers compute from it, is read by a transpose into
// channels-last or by a layer that also reads channels-last data through a "back" transpose:
// only there can writing `id` channels-last save a copy.
bool meets_channels_last(const Network& net, const NetworkIndex& index, TensorId id) {
  const auto& layers = net.layers();
  std::vector<TensorId> frontier = {id};
  for (int depth = 0; depth < 8 && !frontier.empty(); ++depth) {
    std::vector<TensorId> next;
    for (TensorId t : frontier) {
      for (size_t k : index.consumers(t)) {
        const Layer& c = layers[k];
        if (is_transpose(c, true)) return true;
        for (TensorId in : c.inputs) {
          const auto p = index.producer(in);
          if (p && is_transpose(layers[*p], false)) return true;
        }
        if (layer_kind_traits(c.params).pointwise && c.outputs.size() == 1) {
          next.push_back(c.outputs[0]);
        }
      }
    }
    frontier = std::move(next);
  }
  return false;
}

}  // namespace

LayoutReport assign_channels_last(Network& net,
                                  const std::function<bool(const Network&, const Layer&)>& wants) {
  LayoutReport report;
  Pass pass(net, report);
  pass.rewrite_convolutions(wants);
  if (report.convolutions == 0) return report;
  pass.propagate();
  // Copies that write 4-d (5-d) data channels-first which channels-last layers then read
  // (maxvit's window merge before a batch norm and a convolution, and the residual add beside
  // it): the last shuffle of each chain of shuffles (each read only by the next) that moves data
  // and meets channels-last data is tried writing channels-last, its result's transposes then
  // sunk as above, and kept where that leaves fewer copies in the built network.
  std::vector<TensorId> candidates;
  {
    const NetworkIndex index(net);
    const auto& layers = net.layers();
    for (const Layer& l : layers) {
      if (!std::holds_alternative<ShuffleParams>(l.params) || l.outputs.size() != 1 ||
          l.inputs.empty() || is_transpose(l, true) || is_transpose(l, false) ||
          !has_layout(net.tensor(l.outputs[0]).shape.size())) {
        continue;
      }
      bool moves = false;
      for (const Layer* k = &l; k && !moves;) {
        moves = shuffle_moves_data(std::get<ShuffleParams>(k->params));
        const auto prev = index.producer(k->inputs[0]);
        k = prev && std::holds_alternative<ShuffleParams>(layers[*prev].params) &&
                    index.single_consumer(layers[*prev].outputs[0]) && !layers[*prev].inputs.empty()
                ? &layers[*prev]
                : nullptr;
      }
      if (moves && meets_channels_last(net, index, l.outputs[0])) {
        candidates.push_back(l.outputs[0]);
      }
    }
  }
  if (candidates.empty()) return report;
  int best = moving_shuffles_after_cleanup(net);
  for (TensorId y : candidates) {
    Network trial = net;
    LayoutReport trial_report = report;
    Pass p(trial, trial_report);
    p.set_counter(pass.counter());
    if (!p.seed(y)) continue;
    p.propagate();
    const int moving = moving_shuffles_after_cleanup(trial);
    if (moving >= best) continue;
    best = moving;
    net = std::move(trial);
    report = trial_report;
    pass.set_counter(p.counter());
  }
  return report;
}

int count_layout_transposes(const Network& net) {
  std::set<TensorId> constant;
  int n = 0;
  for (const Layer& l : net.layers()) {
    if (std::holds_alternative<ConstantParams>(l.params)) constant.insert(l.outputs[0]);
    if ((is_transpose(l, true) || is_transpose(l, false)) && !constant.count(l.inputs[0])) {
      ++n;
    }
  }
  return n;
}

}  // namespace kiln::engine
