// A float cast feeding a shuffle becomes part of the shuffle.
#include "engine/passes/passes.h"

namespace kiln::engine {

// A float cast whose result only feeds a shuffle becomes part of that shuffle
// (ShuffleParams::cast): one pass over the tensor where there were two, as with a channels-last
// network's input, cast to f16 and then transposed to NHWC (bench/NOTES.md G31). The shuffle runs
// where it ran. Returns how many it fused.
int fuse_cast_into_shuffle(Network& net, std::vector<std::string>& fusions) {
  const auto fuse_at = [&](size_t i) {
    const Layer& cast = net.layers()[i];
    const auto* cp = std::get_if<CastParams>(&cast.params);
    if (!cp || cast.inputs.size() != 1 || !is_floating(net.tensor(cast.inputs[0]).dtype) ||
        !is_floating(cp->to)) {
      return false;
    }
    size_t j = 0;
    const Layer* shuffle = single_consumer(net, cast.outputs[0], &j);
    const auto* sp = shuffle ? std::get_if<ShuffleParams>(&shuffle->params) : nullptr;
    if (!sp || sp->cast || shuffle->inputs.size() != 1) return false;
    ShuffleParams fused = *sp;
    fused.cast = true;
    fused.to = cp->to;
    fusions.push_back(cast.name + " + " + shuffle->name + " -> " + shuffle->name + " (cast)");
    merge_into_consumer(net, i, j, Layer{shuffle->name, fused, {cast.inputs[0]}, shuffle->outputs});
    return true;
  };
  return rewrite_each(net, fuse_at);
}

}  // namespace kiln::engine
