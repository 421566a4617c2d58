// Batch norms with constant statistics as a per-channel scale and shift (scale_shift.h).
#include "engine/passes/scale_shift.h"

#include <cmath>
#include <cstring>
#include <optional>

namespace kiln::engine {
namespace {

// A constant f32 tensor of `count` values, as doubles; nullopt otherwise.
std::optional<std::vector<double>> constant_values(const Network& net, TensorId id, int64_t count) {
  const Weights* w = net.constant_data(id);
  if (!w || !w->data || w->dtype != DataType::kF32 || !is_static(w->shape) ||
      volume(w->shape) != count) {
    return std::nullopt;
  }
  std::vector<double> values(static_cast<size_t>(count));
  for (size_t i = 0; i < values.size(); ++i) {
    float v;
    std::memcpy(&v, w->data->data() + i * sizeof(float), sizeof(float));
    values[i] = v;
  }
  return values;
}

}  // namespace

int batch_norm_to_scale_shift(Network& net) {
  int rewritten = 0;
  std::vector<Layer> out;
  for (const Layer& l : net.layers()) {
    const auto* p = std::get_if<NormalizationParams>(&l.params);
    if (!p || p->kind != NormalizationKind::kBatch) {
      out.push_back(l);
      continue;
    }
    const TensorDesc x = net.tensor(l.inputs[0]);
    const int64_t channels = x.shape.size() >= 2 ? x.shape[1] : kDynamic;
    if (channels == kDynamic || x.dtype != DataType::kF32) {
      out.push_back(l);
      continue;
    }
    const size_t first = p->has_affine ? 3 : 1;
    const auto mean = constant_values(net, l.inputs[first], channels);
    const auto var = constant_values(net, l.inputs[first + 1], channels);
    std::optional<std::vector<double>> weight, bias;
    if (p->has_affine) {
      weight = constant_values(net, l.inputs[1], channels);
      bias = constant_values(net, l.inputs[2], channels);
    }
    if (!mean || !var || (p->has_affine && (!weight || !bias))) {
      out.push_back(l);
      continue;
    }
    std::vector<float> a(static_cast<size_t>(channels)), b(a.size());
    for (size_t c = 0; c < a.size(); ++c) {
      const double scale = (weight ? (*weight)[c] : 1.0) / std::sqrt((*var)[c] + p->epsilon);
      a[c] = static_cast<float>(scale);
      b[c] = static_cast<float>((bias ? (*bias)[c] : 0.0) - (*mean)[c] * scale);
    }
    // [C, 1, ...]: broadcasts over the batch and the spatial dims of [N, C, ...].
    Shape shape(x.shape.size() - 1, 1);
    shape[0] = channels;
    const auto constant = [&](const std::string& suffix, const std::vector<float>& values) {
      const std::string name = l.name + suffix;
      net.add_weight(name, Weights::from_floats(shape, values));
      const TensorId id = net.add_tensor(TensorDesc{name, DataType::kF32, shape, std::nullopt});
      out.push_back(Layer{name, ConstantParams{name}, {}, {id}});
      return id;
    };
    const TensorId scale_t = constant(":scale", a), shift_t = constant(":shift", b);
    const TensorId scaled =
        net.add_tensor(TensorDesc{l.name + ":scaled", x.dtype, x.shape, std::nullopt});
    out.push_back(Layer{
        l.name + ":scaled", ElementwiseParams{BinaryOp::kMul}, {l.inputs[0], scale_t}, {scaled}});
    out.push_back(
        Layer{l.name, ElementwiseParams{BinaryOp::kAdd}, {scaled, shift_t}, {l.outputs[0]}});
    ++rewritten;
  }
  net.set_layers(std::move(out));  // the statistics' constant layers die in remove_dead_layers
  return rewritten;
}

}  // namespace kiln::engine
