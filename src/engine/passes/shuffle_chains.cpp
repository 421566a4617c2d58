// Chains of shuffles as one copy, or as one reshape where they keep every element in place.
#include "engine/passes/passes.h"

#include <map>
#include <optional>

#include "engine/passes/network_index.h"
#include "engine/passes/views.h"

namespace kiln::engine {

namespace {

// The layers that replace a chain's shuffles `chain` (first first; each output read only by the
// next), in place of its last, if composing them pays: one reshape where they keep every element
// in order, one copy (and a view) where more than one of them moved elements.
std::optional<std::vector<Layer>> compose_chain(Network& net,
                                                const std::vector<const Layer*>& chain) {
  if (chain.size() < 2) return std::nullopt;
  const Layer& last = *chain.back();
  const TensorId source = chain.front()->inputs[0];
  const Shape source_shape = net.tensor(source).shape;
  Shape shape = source_shape;
  std::optional<Modes> modes = contiguous_modes(shape);
  int moving = 0;
  const ShuffleParams* cast = nullptr;
  for (const Layer* l : chain) {
    const auto& p = std::get<ShuffleParams>(l->params);
    moving += shuffle_moves_data(p);
    if (p.cast && cast) return std::nullopt;  // two casts: as they are
    if (p.cast) cast = &p;
    const Shape& to = net.tensor(l->outputs[0]).shape;
    modes = shuffle_modes(p, *modes, shape, to);
    if (!modes) return std::nullopt;
    shape = to;
  }
  const auto composed = shuffle_for_modes(source_shape, *modes, shape);
  if (!composed || (composed->moves && moving < 2)) return std::nullopt;
  ShuffleParams move = composed->move;
  if (cast) {
    move.cast = true;
    move.to = cast->to;
  }
  const TensorDesc result = net.tensor(last.outputs[0]);  // (a copy: tensors are added below)
  if (composed->moved == result.shape) {
    return std::vector<Layer>{{last.name, move, {source}, last.outputs}};
  }
  TensorDesc moved = result;
  moved.name = result.name + ":moved";
  moved.shape = composed->moved;
  moved.values.reset();
  const TensorId m = net.add_tensor(std::move(moved));
  ShuffleParams view;
  view.has_reshape = true;
  view.reshape.assign(result.shape.begin(), result.shape.end());
  return std::vector<Layer>{{last.name + ":move", move, {source}, {m}},
                            {last.name, view, {m}, last.outputs}};
}

}  // namespace

// A chain of shuffles (each output read only by the next) is traced as a view of its first
// input (views.h). Where the composition keeps every element where it was, such as the layout
// pass's NHWC -> NCHW transpose followed by ViT's flatten and transpose back ([N, H, W, C] ->
// [N, C, H, W] -> [N, C, H * W] -> [N, H * W, C]), the chain is one reshape of its input. Where
// it moves elements and more than one shuffle of the chain does (shufflenet's channel shuffle
// after a transpose back to NCHW: [N, H, W, C] -> [N, C, H, W] -> [N, 2, C / 2, H, W] -> permute
// -> [N, C, H, W]), it is one shuffle that moves them and a reshape. The last shuffle becomes
// what replaces the chain; the rest are left for dead-layer removal. Static shapes only; a chain
// with more than one cast stays as it is; one that cannot be traced whole is composed in pieces.
// Returns how many chains (or pieces) it rewrote.
int fold_shuffle_chains(Network& net) {
  const NetworkIndex index(net);
  const auto& layers = net.layers();
  const auto shuffle_at = [&](TensorId id) -> std::optional<size_t> {
    const auto p = index.producer(id);
    if (!p || !std::holds_alternative<ShuffleParams>(layers[*p].params)) return std::nullopt;
    return p;
  };
  std::map<size_t, std::vector<Layer>> replaced;  // by layer index
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!std::holds_alternative<ShuffleParams>(layers[i].params)) continue;
    // Only where the chain ends: a shuffle read by one shuffle is inside a longer chain.
    if (const auto next = index.single_consumer(layers[i].outputs[0]);
        next && std::holds_alternative<ShuffleParams>(layers[*next].params)) {
      continue;
    }
    std::vector<size_t> chain = {i};  // first first
    for (auto prev = shuffle_at(layers[i].inputs[0]);
         prev && index.single_consumer(layers[*prev].outputs[0]);
         prev = shuffle_at(layers[*prev].inputs[0])) {
      chain.insert(chain.begin(), *prev);
    }
    // Static shapes; a chain that cannot be traced whole (a dim split one way and regrouped
    // another, as maxvit's window merge followed by its grid partition: not one strided view)
    // is composed in pieces that can, each ending where the next cannot be traced on.
    size_t begin = 0;
    while (begin + 1 < chain.size()) {
      size_t end = begin;  // the piece [begin, end]
      Shape shape = net.tensor(layers[chain[begin]].inputs[0]).shape;
      std::optional<Modes> modes =
          is_static(shape) ? std::optional<Modes>(contiguous_modes(shape)) : std::nullopt;
      for (size_t k = begin; k < chain.size() && modes; ++k) {
        const Shape& to = net.tensor(layers[chain[k]].outputs[0]).shape;
        modes = is_static(to) ? shuffle_modes(std::get<ShuffleParams>(layers[chain[k]].params),
                                              *modes, shape, to)
                              : std::nullopt;
        if (modes) end = k;
        shape = to;
      }
      if (!is_static(net.tensor(layers[chain[begin]].inputs[0]).shape)) {
        ++begin;
        continue;
      }
      std::vector<const Layer*> piece;
      for (size_t k = begin; k <= end; ++k) piece.push_back(&layers[chain[k]]);
      if (auto r = compose_chain(net, piece)) replaced[chain[end]] = std::move(*r);
      begin = end + 1;
    }
  }
  if (replaced.empty()) return 0;
  std::vector<Layer> out;
  out.reserve(layers.size() + replaced.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto r = replaced.find(i);
    if (r == replaced.end()) {
      out.push_back(layers[i]);
    } else {
      out.insert(out.end(), r->second.begin(), r->second.end());
    }
  }
  const int folded = static_cast<int>(replaced.size());
  net.set_layers(std::move(out));
  return folded;
}

}  // namespace kiln::engine
