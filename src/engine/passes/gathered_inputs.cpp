// A gather by constant 1-D indices whose only reader is a fused elementwise layer becomes part of
// it: the layer reads the gather's source at the indices (FusedElementwiseParams::gathers)
// instead of a gathered copy, one kernel and one pass over memory fewer. Rotary embeddings'
// rotate_half, a gather along the head dim after concat_slices, is read this way by the kernel
// that multiplies it by sin and adds x * cos.
#include <cstring>

#include "engine/layers/elementwise_rules.h"
#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"
#include "engine/scalar_math.h"

namespace kiln::engine {
namespace {

// The longest aligned run (16, 8, 4, 2 or 1) the indices come in: idx[c * r + e] == idx[c * r] + e
// with idx[c * r] and the source's axis size `d` multiples of r.
int64_t aligned_run(const std::vector<int32_t>& idx, int64_t d) {
  const auto n = static_cast<int64_t>(idx.size());
  for (int64_t r = 16; r > 1; r /= 2) {
    bool ok = n % r == 0 && d % r == 0;
    for (int64_t k = 0; k < n && ok; ++k) {
      const int32_t first = idx[static_cast<size_t>(k - k % r)];
      ok = first % r == 0 && idx[static_cast<size_t>(k)] == first + k % r;
    }
    if (ok) return r;
  }
  return 1;
}

}  // namespace

int fold_gathers_into_elementwise(Network& net, int max_inputs) {
  std::vector<Layer> layers = net.layers();
  const NetworkIndex index(net, layers);
  std::vector<bool> gone(layers.size(), false);
  std::vector<std::vector<Layer>> before(layers.size());  // index constants, placed before
  int folded = 0;
  for (size_t f = 0; f < layers.size(); ++f) {
    auto* fused = std::get_if<FusedElementwiseParams>(&layers[f].params);
    if (!fused) continue;
    const size_t regs = fused_registers(layers[f].name, *fused, layers[f].inputs.size());
    for (size_t j = 0; j < regs; ++j) {
      if (max_inputs > 0 && static_cast<int>(layers[f].inputs.size()) >= max_inputs) break;
      bool gathered = false;
      for (size_t k = 0; k < fused->gathers.size(); k += 3) {
        gathered = gathered || fused->gathers[k] == static_cast<int64_t>(j);
      }
      const TensorId in = layers[f].inputs[j];
      const auto p = index.producer(in);
      if (gathered || !p || gone[*p] || index.single_consumer(in) != f) continue;
      const Layer& g = layers[*p];
      const auto* gp = std::get_if<GatherParams>(&g.params);
      if (!gp || gp->mode != GatherMode::kDefault || g.inputs.size() != 2) continue;
      const auto ip = index.producer(g.inputs[1]);
      const auto* c = ip ? std::get_if<ConstantParams>(&layers[*ip].params) : nullptr;
      const TensorDesc data = net.tensor(g.inputs[0]);
      const int64_t rank = static_cast<int64_t>(data.shape.size());
      const int64_t axis = gp->axis < 0 ? gp->axis + rank : gp->axis;
      if (!c || !is_floating(data.dtype) || axis < 0 || axis >= rank || !is_static(data.shape)) {
        continue;
      }
      const Weights& w = net.weight(c->weight);
      const int64_t d = data.shape[static_cast<size_t>(axis)], n = volume(w.shape);
      // 1-D integer indices of at least two (a gathered dim of size 1 is merged away by the
      // kernels' dims), in range after wrapping.
      if (!w.data || w.shape.size() != 1 || n < 2 || !is_integer(w.dtype)) continue;
      std::vector<int32_t> idx;
      for (int64_t k = 0; k < n; ++k) {
        int64_t v = load_as<int64_t>(w.dtype, w.data->data(), k);
        if (v < 0) v += d;
        if (v < 0 || v >= d) break;
        idx.push_back(static_cast<int32_t>(v));
      }
      if (static_cast<int64_t>(idx.size()) != n) continue;
      const std::string name = g.name + ":gathered_indices";
      std::vector<uint8_t> bytes(idx.size() * sizeof(int32_t));
      std::memcpy(bytes.data(), idx.data(), bytes.size());
      net.add_weight(name, Weights::from_bytes(DataType::kI32, {n}, std::move(bytes)));
      const TensorId id = net.add_tensor(TensorDesc{name, DataType::kI32, {n}, {}});
      before[f].push_back(Layer{name, ConstantParams{name}, {}, {id}});
      layers[f].inputs[j] = g.inputs[0];
      layers[f].inputs.push_back(id);
      fused->gathers.insert(fused->gathers.end(),
                            {static_cast<int64_t>(j), axis, aligned_run(idx, d)});
      fused->fused_layers.push_back(g.name);
      gone[*p] = true;
      if (index.single_consumer(g.inputs[1]) == *p) gone[*ip] = true;
      ++folded;
    }
  }
  if (folded == 0) return 0;
  std::vector<Layer> result;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (gone[i]) continue;
    for (Layer& l : before[i]) result.push_back(std::move(l));
    result.push_back(std::move(layers[i]));
  }
  net.set_layers(std::move(result));
  return folded;
}

}  // namespace kiln::engine
