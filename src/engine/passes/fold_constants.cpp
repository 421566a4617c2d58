// Layers whose inputs are all constants run once, at build time, and become constants.
#include "engine/passes/passes.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "engine/cpu/kernels.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

// Folding makes weights; past this size a folded result costs more plan bytes than it saves,
// unless it is no larger than the constants it is computed from (a cast of a large embedding
// table to f16 replaces the f32 table, which then goes unused).
constexpr int64_t kMaxFoldedBytes = 64 << 20;
// A fill of a static shape (zeros, arange, ...) is a constant too, but one that costs a few bytes
// of plan instead of many: only small ones fold, so that masks built from them fold as a whole
// while a large zeros only feeding run-time layers stays a fill.
constexpr int64_t kMaxFoldedFillBytes = 1 << 20;

}  // namespace

int fold_constants(Network& net) {
  int folded = 0;
  std::vector<Layer> layers;
  std::set<TensorId> constant;
  for (const Layer& layer : net.layers()) {
    if (std::holds_alternative<ConstantParams>(layer.params)) {
      constant.insert(layer.outputs[0]);
      layers.push_back(layer);
      continue;
    }
    const TensorDesc& out0 = net.tensor(layer.outputs[0]);
    // Shape tensors whose values inference already knows.
    if (layer.outputs.size() == 1 && out0.values && is_static(out0.shape)) {
      const std::string name = layer.name + ":folded";
      std::vector<int64_t> values = *out0.values;
      Weights w = Weights::from_ints(out0.shape, values);
      if (out0.dtype != DataType::kI64) {
        std::vector<uint8_t> bytes(values.size() * dtype_size(out0.dtype));
        for (size_t i = 0; i < values.size(); ++i) {
          const int32_t v = static_cast<int32_t>(values[i]);
          std::memcpy(bytes.data() + i * 4, &v, 4);
        }
        w = Weights::from_bytes(out0.dtype, out0.shape, std::move(bytes));
      }
      net.add_weight(name, std::move(w));
      layers.push_back(Layer{name, ConstantParams{name}, {}, {layer.outputs[0]}});
      constant.insert(layer.outputs[0]);
      ++folded;
      continue;
    }
    const bool fill = std::holds_alternative<FillParams>(layer.params) && layer.inputs.empty();
    bool all_constant = fill || !layer.inputs.empty();
    for (TensorId id : layer.inputs) all_constant = all_constant && constant.count(id);
    int64_t in_bytes = 0;
    for (TensorId id : layer.inputs) {
      const TensorDesc& t = net.tensor(id);
      if (is_static(t.shape))
        in_bytes += volume(t.shape) * static_cast<int64_t>(dtype_size(t.dtype));
    }
    const int64_t max_bytes = fill ? kMaxFoldedFillBytes : std::max(kMaxFoldedBytes, in_bytes);
    int64_t out_bytes = 0;
    for (TensorId id : layer.outputs) {
      const TensorDesc& t = net.tensor(id);
      out_bytes += is_static(t.shape) ? volume(t.shape) * static_cast<int64_t>(dtype_size(t.dtype))
                                      : max_bytes + 1;
    }
    if (!all_constant || out_bytes > max_bytes) {
      layers.push_back(layer);
      continue;
    }
    std::vector<cpu::TensorView> ins, outs;
    for (TensorId id : layer.inputs) {
      const Weights* w = nullptr;
      for (const Layer& l : layers) {
        if (l.outputs[0] == id) w = &net.weight(std::get<ConstantParams>(l.params).weight);
      }
      KILN_CHECK(w && w->data, InternalError, "folding `", layer.name, "`: constant input missing");
      ins.push_back({w->dtype, w->shape, const_cast<uint8_t*>(w->data->data())});
    }
    std::vector<std::vector<uint8_t>> buffers;
    for (TensorId id : layer.outputs) {
      const TensorDesc& t = net.tensor(id);
      buffers.emplace_back(static_cast<size_t>(volume(t.shape)) * dtype_size(t.dtype));
    }
    for (size_t k = 0; k < layer.outputs.size(); ++k) {
      const TensorDesc& t = net.tensor(layer.outputs[k]);
      outs.push_back({t.dtype, t.shape, buffers[k].data()});
    }
    std::unique_ptr<cpu::KernelState> state;
    cpu::run_layer(layer, ins, outs, state);
    for (size_t k = 0; k < layer.outputs.size(); ++k) {
      const TensorDesc& t = net.tensor(layer.outputs[k]);
      const std::string name = layer.name + ":folded" + (k ? std::to_string(k) : "");
      net.add_weight(name, Weights::from_bytes(t.dtype, t.shape, std::move(buffers[k])));
      layers.push_back(Layer{name, ConstantParams{name}, {}, {layer.outputs[k]}});
      constant.insert(layer.outputs[k]);
    }
    ++folded;
  }
  net.set_layers(std::move(layers));
  return folded;
}

}  // namespace kiln::engine
