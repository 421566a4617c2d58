// A concat of strided slices of one tensor that together take every element once is a
// space-to-depth shuffle: swin's patch merging, cat(x[:, 0::2, 0::2], x[:, 1::2, 0::2],
// x[:, 0::2, 1::2], x[:, 1::2, 1::2], -1), is x viewed as [B, H/2, 2, W/2, 2, C], permuted to
// [B, H/2, W/2, 2 (W's), 2 (H's), C] and viewed as [B, H/2, W/2, 4C]; YOLOv5's Focus is the same
// along the channels of NCHW data. Four slice copies and a concat (or slices written into the
// concat's output) become one copy that the shuffle chains can compose with the views around it.
// Each part may be a chain of slices (on any axes, the same axis twice) and reshapes that keep
// the shape; slices left unread go with dead_layers.
#include <algorithm>
#include <map>
#include <optional>

#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"

namespace kiln::engine {
namespace {

// Which elements of the source one concat input takes, per source axis: start, step, count.
struct Strided {
  TensorId source;
  std::vector<int64_t> start, step, count;
};

// The layer that computes `id` from one tensor by a slice or a reshape that keeps the shape, if
// that is how `id` is computed.
const Layer* link_of(const Network& net, const std::vector<Layer>& layers,
                     const NetworkIndex& index, TensorId id) {
  const auto p = index.producer(id);
  if (!p || layers[*p].inputs.size() != 1) return nullptr;
  const Layer& l = layers[*p];
  if (const auto* sh = std::get_if<ShuffleParams>(&l.params)) {
    const bool view = sh->first_perm.empty() && sh->second_perm.empty() && !sh->cast &&
                      net.tensor(l.inputs[0]).shape == net.tensor(l.outputs[0]).shape;
    return view ? &l : nullptr;
  }
  return std::holds_alternative<SliceParams>(l.params) ? &l : nullptr;
}

// The tensors `id` is computed from through such links, `id` first.
std::vector<TensorId> chain_of(const Network& net, const std::vector<Layer>& layers,
                               const NetworkIndex& index, TensorId id) {
  std::vector<TensorId> chain = {id};
  while (const Layer* l = link_of(net, layers, index, chain.back())) chain.push_back(l->inputs[0]);
  return chain;
}

// Which elements of `source` (on `id`'s chain) `id` takes.
std::optional<Strided> strided_part(const Network& net, const std::vector<Layer>& layers,
                                    const NetworkIndex& index, TensorId id, TensorId source) {
  std::vector<const Layer*> chain;  // from the part back towards the source
  while (id != source) {
    const Layer* l = link_of(net, layers, index, id);
    if (!l) return std::nullopt;
    chain.push_back(l);
    id = l->inputs[0];
  }
  const Shape& shape = net.tensor(id).shape;
  if (std::count(shape.begin(), shape.end(), kDynamic) > 1) return std::nullopt;
  const size_t rank = shape.size();
  Strided part{id, std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1), shape};
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const auto* s = std::get_if<SliceParams>(&(*it)->params);
    if (!s) continue;
    const Shape& in = net.tensor((*it)->inputs[0]).shape;
    const Shape& out = net.tensor((*it)->outputs[0]).shape;
    if (in.size() != rank || out.size() != rank) return std::nullopt;
    for (size_t j = 0; j < s->axes.size(); ++j) {
      const int64_t r = static_cast<int64_t>(rank);
      const int64_t a = s->axes[j] < 0 ? s->axes[j] + r : s->axes[j];
      if (a < 0 || a >= r || j >= s->starts.size()) return std::nullopt;
      const size_t ax = static_cast<size_t>(a);
      const int64_t d = in[ax];
      if (d < 0) return std::nullopt;  // a slice of a dynamic dim
      const int64_t step = j < s->steps.size() ? s->steps[j] : 1;
      if (step < 1) return std::nullopt;
      const int64_t start =
          std::clamp<int64_t>(s->starts[j] < 0 ? s->starts[j] + d : s->starts[j], 0, d);
      part.start[ax] += start * part.step[ax];
      part.step[ax] *= step;
    }
    for (size_t ax = 0; ax < rank; ++ax) part.count[ax] = out[ax];
  }
  return part;
}

}  // namespace

int shuffle_strided_concats(Network& net) {
  std::vector<Layer> layers = net.layers();
  const NetworkIndex index(net, layers);
  int rewritten = 0;
  std::vector<std::vector<Layer>> instead(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& layer = layers[i];
    const auto* c = std::get_if<ConcatParams>(&layer.params);
    if (!c || c->stack || layer.inputs.size() < 2) continue;
    const TensorDesc out = net.tensor(layer.outputs[0]);
    const int64_t rank = static_cast<int64_t>(out.shape.size());
    const int64_t axis = c->axis < 0 ? c->axis + rank : c->axis;
    // The parts' source: the first tensor of the first input's chain that every chain reaches.
    std::vector<std::vector<TensorId>> chains;
    for (TensorId in : layer.inputs) chains.push_back(chain_of(net, layers, index, in));
    std::optional<TensorId> source;
    for (TensorId t : chains[0]) {
      if (std::all_of(chains.begin(), chains.end(), [&](const std::vector<TensorId>& ch) {
            return std::find(ch.begin(), ch.end(), t) != ch.end();
          })) {
        source = t;
        break;
      }
    }
    std::vector<Strided> parts;
    for (TensorId in : layer.inputs) {
      auto part = source ? strided_part(net, layers, index, in, *source) : std::nullopt;
      if (!part) break;
      parts.push_back(std::move(*part));
    }
    std::optional<std::vector<Layer>> shuffles;
    if (parts.size() == layer.inputs.size() && axis >= 0 && axis < rank) {
      const Shape& src = net.tensor(parts[0].source).shape;
      // The strided axes (static): every part steps them by the same factor, from a start below
      // it, and takes all it can; the concat axis and the others are taken whole. At most one dim
      // is dynamic (the batch), which the views carry as -1.
      std::vector<size_t> strided;
      bool ok = static_cast<int64_t>(src.size()) == rank;
      for (size_t d = 0; ok && d < src.size(); ++d) {
        const int64_t t = parts[0].step[d];
        for (const Strided& p : parts) {
          ok = ok && p.step[d] == t && p.start[d] < t && src[d] != 0 && (t == 1 || src[d] > 0) &&
               src[d] % t == 0 && p.count[d] == src[d] / t && (t > 1 || p.start[d] == 0);
        }
        if (t > 1) strided.push_back(d);
      }
      const auto a = static_cast<size_t>(axis);
      int64_t phases = 1;
      for (size_t d : strided) phases *= parts[0].step[d];
      ok = ok && !strided.empty() && strided.size() <= 4 && parts[0].step[a] == 1 &&
           static_cast<int64_t>(parts.size()) == phases;
      // The order of the strided axes in which the parts count their starts (most significant
      // first): swin's and Focus's parts count H fastest, so W comes first.
      std::optional<std::vector<size_t>> order;
      std::vector<size_t> perm = strided;
      while (ok && !order) {
        bool counts = true;
        for (size_t k = 0; counts && k < parts.size(); ++k) {
          int64_t number = 0;
          for (size_t d : perm) number = number * parts[k].step[d] + parts[k].start[d];
          counts = number == static_cast<int64_t>(k);
        }
        if (counts) order = perm;
        if (!std::next_permutation(perm.begin(), perm.end())) break;
      }
      if (ok && order) {
        // src viewed with each strided axis split into [src/t, t], then the t's moved in front of
        // the concat axis, in `order`, and the result viewed as the concat's output.
        Shape split;
        std::map<size_t, size_t> phase_dim;  // strided axis -> its t's dim in `split`
        std::vector<int64_t> outer(src.size());
        for (size_t d = 0; d < src.size(); ++d) {
          const int64_t t = parts[0].step[d];
          outer[d] = static_cast<int64_t>(split.size());
          split.push_back(src[d] / t);
          if (t > 1) {
            phase_dim[d] = split.size();
            split.push_back(t);
          }
        }
        std::vector<int64_t> to;
        for (size_t d = 0; d < src.size(); ++d) {
          if (d == a) {
            for (size_t s : *order) to.push_back(static_cast<int64_t>(phase_dim[s]));
          }
          to.push_back(outer[d]);
        }
        const std::string& name = layer.name;
        const TensorId view = net.add_tensor(TensorDesc{name + ":phases", out.dtype, split, {}});
        shuffles = std::vector<Layer>{
            Layer{name + ":phases", ShuffleParams{{}, true, split, {}}, {parts[0].source}, {view}},
            Layer{name, ShuffleParams{to, true, out.shape, {}}, {view}, layer.outputs}};
      }
    }
    if (!shuffles) continue;
    instead[i] = std::move(*shuffles);
    ++rewritten;
  }
  if (rewritten > 0) {
    const std::vector<bool> none(layers.size(), false);  // the slices go with dead_layers
    splice_layers(net, std::move(layers), none, std::move(instead));
  }
  return rewritten;
}

}  // namespace kiln::engine
