// An activation after a reshape runs before it instead: the same values, and the activation then
// follows its producer directly, where post_ops can take it into a GEMM's epilogue (GPT-2's
// `addmm(bias, x, w).view(B, L, 4 D)` before gelu_new: matmul, bias add, reshape, activation).
// Only where the reshape is the activation's only input and each is its input's only reader.
#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"

namespace kiln::engine {

int activations_before_reshapes(Network& net) {
  int moved = 0;
  std::vector<Layer> layers = net.layers();
  const NetworkIndex index(net, layers);
  // Layers a move rewrote, which the index no longer describes.
  std::vector<bool> moved_here(layers.size(), false);
  for (size_t r = 0; r < layers.size(); ++r) {
    if (moved_here[r]) continue;
    const auto* sh = std::get_if<ShuffleParams>(&layers[r].params);
    if (!sh || shuffle_moves_data(*sh) || layers[r].inputs.size() != 1) continue;
    const TensorId x = layers[r].inputs[0];
    const auto a = index.single_consumer(layers[r].outputs[0]);
    if (!a || moved_here[*a] || !index.single_consumer(x) ||
        !std::holds_alternative<ActivationParams>(layers[*a].params) ||
        layers[*a].inputs.size() != 1) {
      continue;
    }
    const TensorDesc& in = net.tensor(x);
    const TensorId activated = net.add_tensor(TensorDesc{layers[*a].name + ":before_reshape",
                                                         net.tensor(layers[*a].outputs[0]).dtype,
                                                         in.shape,
                                                         {}});
    Layer act = layers[*a];
    Layer reshape = layers[r];
    act.inputs = {x};
    act.outputs = {activated};
    reshape.inputs = {activated};
    reshape.outputs = layers[*a].outputs;
    // The activation takes the reshape's place (x exists there), the reshape the activation's.
    layers[r] = std::move(act);
    layers[*a] = std::move(reshape);
    moved_here[r] = moved_here[*a] = true;
    ++moved;
  }
  net.set_layers(std::move(layers));
  return moved;
}

}  // namespace kiln::engine
