// Chains of shuffles as one copy, or as one reshape where they keep every element in place.
#include "engine/passes/passes.h"

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
// with more than one cast stays as it is. Returns how many chains it rewrote.
int fold_shuffle_chains(Network& net) {
  const NetworkIndex index(net);
  const auto shuffle_at = [&](TensorId id) -> const Layer* {
    const auto p = index.producer(id);
    if (!p) return nullptr;
    const Layer& l = net.layers()[*p];
    return std::holds_alternative<ShuffleParams>(l.params) ? &l : nullptr;
  };
  int folded = 0;
  std::vector<Layer> out;
  out.reserve(net.layers().size());
  for (const Layer& last : net.layers()) {
    out.push_back(last);
    if (!std::holds_alternative<ShuffleParams>(last.params)) continue;
    // Only where the chain ends: a shuffle read by one shuffle is inside a longer chain.
    if (const auto next = index.single_consumer(last.outputs[0]);
        next && std::holds_alternative<ShuffleParams>(net.layers()[*next].params)) {
      continue;
    }
    // The chain, first shuffle first.
    std::vector<const Layer*> chain = {&last};
    for (const Layer* prev = shuffle_at(last.inputs[0]);
         prev && index.single_consumer(prev->outputs[0]); prev = shuffle_at(prev->inputs[0])) {
      chain.insert(chain.begin(), prev);
    }
    if (chain.size() < 2) continue;
    const TensorId source = chain.front()->inputs[0];
    Shape shape = net.tensor(source).shape;
    if (!is_static(shape)) continue;
    std::optional<Modes> modes = contiguous_modes(shape);
    int moving = 0, casts = 0;
    const ShuffleParams* cast = nullptr;
    for (const Layer* l : chain) {
      const auto& p = std::get<ShuffleParams>(l->params);
      moving += shuffle_moves_data(p);
      if (p.cast) {
        ++casts;
        cast = &p;
      }
      const Shape& to = net.tensor(l->outputs[0]).shape;
      modes = is_static(to) ? shuffle_modes(p, *modes, shape, to) : std::nullopt;
      if (!modes) break;
      shape = to;
    }
    if (!modes || casts > 1) continue;
    const auto composed = shuffle_for_modes(net.tensor(source).shape, *modes, shape);
    // One copy where there were several, or a reshape (with the chain's cast, if any).
    if (!composed || (composed->moves && moving < 2)) continue;
    ShuffleParams move = composed->move;
    if (cast) {
      move.cast = true;
      move.to = cast->to;
    }
    const TensorDesc result = net.tensor(last.outputs[0]);  // (a copy: tensors are added below)
    if (composed->moved == result.shape) {
      out.back() = Layer{last.name, move, {source}, last.outputs};
    } else {
      TensorDesc moved = result;
      moved.name = result.name + ":moved";
      moved.shape = composed->moved;
      moved.values.reset();
      const TensorId m = net.add_tensor(std::move(moved));
      ShuffleParams view;
      view.has_reshape = true;
      view.reshape.assign(result.shape.begin(), result.shape.end());
      out.back() = Layer{last.name + ":move", move, {source}, {m}};
      out.push_back(Layer{last.name, view, {m}, last.outputs});
    }
    ++folded;
  }
  net.set_layers(std::move(out));
  return folded;
}

}  // namespace kiln::engine
