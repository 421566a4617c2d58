// Bool attention masks become additive biases of the attention's dtype, made once for every
// attention layer that reads the mask.
#include <map>
#include <utility>

#include "engine/passes/passes.h"

namespace kiln::engine {

// cuDNN's fused attention takes a mask only as an additive bias: an f16/bf16 attention layer with a
// bool mask converted it into its workspace on every call, one kernel a layer (3.3 us at BERT's
// batch 1, twelve a run: NOTES.md G68). Here each bool mask read by such layers becomes one bias
// for all of them, log(float(mask)) (0 where kept, -inf where not: what the flash kernel reads
// with the same key-padding bits as the bool, and what the CPU kernel gives the same zero rows),
// which the elementwise fusion joins to the kernel that computes the mask, or the folding turns
// into a constant. Returns how many attention layers it changed.
int attention_mask_biases(Network& net) {
  std::map<std::pair<TensorId, DataType>, TensorId> biases;
  std::vector<Layer> layers;
  int changed = 0;
  for (Layer l : net.layers()) {
    const auto* a = std::get_if<AttentionParams>(&l.params);
    if (a && a->has_mask && l.inputs.size() == 4) {
      const TensorId mask = l.inputs[3];
      const DataType t = net.tensor(l.outputs[0]).dtype;
      if (net.tensor(mask).dtype == DataType::kBool &&
          (t == DataType::kF16 || t == DataType::kBF16)) {
        auto [it, added] = biases.try_emplace({mask, t}, TensorId{});
        if (added) {
          const TensorDesc m = net.tensor(mask);
          const std::string name = m.name + ":as_" + dtype_name(t);
          const TensorId ones = net.add_tensor(TensorDesc{name + ":ones", t, m.shape, {}});
          layers.push_back(Layer{name + ":ones", CastParams{t}, {mask}, {ones}});
          it->second = net.add_tensor(TensorDesc{name, t, m.shape, {}});
          layers.push_back(Layer{name, UnaryParams{UnaryOp::kLog}, {ones}, {it->second}});
        }
        l.inputs[3] = it->second;
        ++changed;
      }
    }
    layers.push_back(std::move(l));
  }
  if (changed > 0) net.set_layers(std::move(layers));
  return changed;
}

}  // namespace kiln::engine
