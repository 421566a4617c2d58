// Chains of shuffles that keep every element in place as one reshape.
#include "engine/passes/passes.h"

#include <optional>

#include "engine/passes/attention_heads.h"

namespace kiln::engine {

// A chain of shuffles (each output used only by the next) whose composition keeps every element
// where it was, such as the layout pass's NHWC -> NCHW transpose followed by ViT's flatten and
// transpose back ([N, H, W, C] -> [N, C, H, W] -> [N, C, H * W] -> [N, H * W, C]), is one
// reshape of the chain's input: the last shuffle becomes that reshape, and the rest are left
// for dead-layer removal. Static shapes only. Returns how many chains it folded.
int fold_shuffle_chains(Network& net) {
  const NetworkIndex index(net);
  const auto shuffle_at = [&](TensorId id) -> const Layer* {
    const auto p = index.producer(id);
    if (!p) return nullptr;
    const Layer& l = net.layers()[*p];
    return std::holds_alternative<ShuffleParams>(l.params) ? &l : nullptr;
  };
  int folded = 0;
  std::vector<Layer> layers = net.layers();
  for (Layer& last : layers) {
    if (!std::holds_alternative<ShuffleParams>(last.params)) continue;
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
    std::optional<std::vector<int64_t>> strides = contiguous_strides(shape);
    for (const Layer* l : chain) {
      const Shape& out = net.tensor(l->outputs[0]).shape;
      strides = is_static(out)
                    ? forward_shuffle(std::get<ShuffleParams>(l->params), shape, *strides, out)
                    : std::nullopt;
      if (!strides) break;
      shape = out;
    }
    if (!strides || *strides != contiguous_strides(shape)) continue;
    ShuffleParams reshape;
    reshape.has_reshape = true;
    reshape.reshape.assign(shape.begin(), shape.end());
    last = Layer{last.name, reshape, {source}, last.outputs};
    ++folded;
  }
  net.set_layers(std::move(layers));
  return folded;
}

}  // namespace kiln::engine
