// Chains of shuffles as one copy, or as one reshape where they keep every element in place.
#include "engine/passes/passes.h"

#include <algorithm>
#include <map>
#include <optional>

#include "engine/passes/network_index.h"
#include "engine/passes/views.h"

namespace kiln::engine {

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
    for (size_t begin = 0; begin + 1 < chain.size();) {
      const TensorId source = layers[chain[begin]].inputs[0];
      const Shape shape = net.tensor(source).shape;  // (a copy: tensors are added below)
      if (!is_static(shape)) {
        ++begin;
        continue;
      }
      TracedShuffles t{contiguous_modes(shape), shape};
      size_t end = begin;  // past the piece
      while (end < chain.size() && trace_shuffle(net, layers[chain[end]], t)) ++end;
      // One reshape where the piece keeps the elements in order, one copy (and a view) where
      // more than one of its shuffles moved them.
      const auto c = end - begin >= 2 ? shuffle_for_modes(shape, t.modes, t.shape) : std::nullopt;
      if (c && (!c->moves || t.moving >= 2)) {
        const Layer& last = layers[chain[end - 1]];
        const std::string name = net.tensor(last.outputs[0]).name;
        replaced[chain[end - 1]] = composed_layers(net, *c, t, source, last.outputs[0], last.name,
                                                   last.name + ":move", name + ":moved");
      }
      begin = std::max(end, begin + 1);
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
