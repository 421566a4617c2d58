// Layers no output depends on, and the weights only they used, go.
#include "engine/passes/passes.h"

#include <set>

namespace kiln::engine {

int remove_dead_layers(Network& net) {
  std::set<TensorId> live(net.outputs().begin(), net.outputs().end());
  std::vector<bool> keep(net.layers().size(), false);
  for (size_t i = net.layers().size(); i-- > 0;) {
    const Layer& l = net.layers()[i];
    for (TensorId id : l.outputs) keep[i] = keep[i] || live.count(id);
    if (keep[i]) live.insert(l.inputs.begin(), l.inputs.end());
  }
  std::vector<Layer> layers;
  for (size_t i = 0; i < keep.size(); ++i) {
    if (keep[i]) layers.push_back(net.layers()[i]);
  }
  const int removed = static_cast<int>(net.layers().size() - layers.size());
  net.set_layers(std::move(layers));
  net.remove_unused_weights();
  return removed;
}

}  // namespace kiln::engine
