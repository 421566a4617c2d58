// Layers that move no element become reshapes to their own shape, which both backends run as
// views of their input (no kernel, no copy): slices that keep every element (`x[:, :H, :W]` of a
// tensor that has H and W already, as swin crops the padding it did not need), pads of zero
// amounts, and concats of a single input.
#include "engine/passes/passes.h"

namespace kiln::engine {

namespace {

bool moves_nothing(const Network& net, const Layer& layer) {
  if (layer.inputs.empty() || layer.outputs.size() != 1) return false;
  const TensorDesc& in = net.tensor(layer.inputs[0]);
  const TensorDesc& out = net.tensor(layer.outputs[0]);
  if (in.dtype != out.dtype || in.shape != out.shape) return false;
  if (const auto* s = std::get_if<SliceParams>(&layer.params)) {
    // With unit steps, an output as long as the input along each sliced axis is all of it.
    if (layer.inputs.size() != 1 || !is_static(in.shape)) return false;
    for (int64_t step : s->steps) {
      if (step != 1) return false;
    }
    return true;
  }
  if (const auto* p = std::get_if<PadParams>(&layer.params)) {
    for (int64_t v : p->begin) {
      if (v != 0) return false;
    }
    for (int64_t v : p->end) {
      if (v != 0) return false;
    }
    return true;
  }
  if (const auto* c = std::get_if<ConcatParams>(&layer.params)) {
    return !c->stack && layer.inputs.size() == 1;
  }
  return false;
}

}  // namespace

int reshape_identity_layers(Network& net) {
  int changed = 0;
  std::vector<Layer> layers = net.layers();
  for (Layer& layer : layers) {
    if (!moves_nothing(net, layer)) continue;
    const Shape& shape = net.tensor(layer.outputs[0]).shape;
    ShuffleParams reshape;
    reshape.has_reshape = true;
    // 0 copies the input's dim, so dynamic dims stay as they are.
    for (int64_t d : shape) reshape.reshape.push_back(d == kDynamic ? 0 : d);
    layer = Layer{layer.name, reshape, {layer.inputs[0]}, layer.outputs};
    ++changed;
  }
  net.set_layers(std::move(layers));
  return changed;
}

}  // namespace kiln::engine
