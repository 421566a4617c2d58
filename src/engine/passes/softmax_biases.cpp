// A constant added to a matmul's result just before a softmax over the last axis is the
// softmax's additive mask: swin's relative position bias on its attention scores (decomposed on
// the GPU in f32, written out on the CPU), T5's and ALiBi's biases likewise. The add, a pass over
// the scores and a kernel, goes; the softmax reads the constant broadcast as it reads a mask.
// Only constants of finite values: a masked softmax gives a row with nothing kept zeros where a
// plain one gives NaN, and with finite biases on a matmul's finite scores no row is such a row.
#include <cmath>
#include <optional>

#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"
#include "engine/scalar_math.h"

namespace kiln::engine {
namespace {

// `m` broadcasts to `x` (right-aligned, each dim 1 or x's, static).
bool broadcasts_to(const Shape& m, const Shape& x) {
  if (m.size() > x.size() || !is_static(m)) return false;
  for (size_t i = 0; i < m.size(); ++i) {
    const int64_t d = m[m.size() - 1 - i], xd = x[x.size() - 1 - i];
    if (d != 1 && d != xd) return false;
  }
  return true;
}

bool finite_floats(const Network& net, const Layer& constant) {
  const auto* c = std::get_if<ConstantParams>(&constant.params);
  if (!c) return false;
  const Weights& w = net.weight(c->weight);
  if (!is_floating(w.dtype) || !w.data) return false;
  const int64_t n = volume(w.shape);
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(load_as<double>(w.dtype, w.data->data(), i))) return false;
  }
  return true;
}

}  // namespace

int fold_softmax_biases(Network& net) {
  const std::vector<Layer>& layers = net.layers();
  const NetworkIndex index(net, layers);
  std::vector<bool> gone(layers.size(), false);
  std::vector<std::optional<Layer>> instead(layers.size());
  int rewritten = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& s = layers[i];
    const auto* p = std::get_if<SoftmaxParams>(&s.params);
    if (!p || p->log || s.inputs.size() != 1) continue;
    const Shape& x = net.tensor(s.inputs[0]).shape;
    if (x.empty() || normalize_axis(p->axis, x.size(), s.name) != static_cast<int>(x.size()) - 1)
      continue;
    const auto add = index.producer(s.inputs[0]);
    if (!add || !index.single_consumer(s.inputs[0]) || layers[*add].inputs.size() != 2) continue;
    const auto* e = std::get_if<ElementwiseParams>(&layers[*add].params);
    if (!e || e->op != BinaryOp::kAdd) continue;
    for (int side = 0; side < 2; ++side) {
      const TensorId scores = layers[*add].inputs[static_cast<size_t>(side)];
      const TensorId bias = layers[*add].inputs[static_cast<size_t>(1 - side)];
      const auto from = index.producer(scores), constant = index.producer(bias);
      if (!from || !constant || !std::holds_alternative<MatMulParams>(layers[*from].params) ||
          net.tensor(scores).shape != x ||
          net.tensor(scores).dtype != net.tensor(s.inputs[0]).dtype ||
          !broadcasts_to(net.tensor(bias).shape, x) || !finite_floats(net, layers[*constant]))
        continue;
      gone[*add] = true;
      instead[i] = Layer{s.name, *p, {scores, bias}, s.outputs};
      ++rewritten;
      break;
    }
  }
  if (rewritten == 0) return 0;
  std::vector<Layer> result;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (gone[i]) continue;
    result.push_back(instead[i] ? std::move(*instead[i]) : layers[i]);
  }
  net.set_layers(std::move(result));
  return rewritten;
}

}  // namespace kiln::engine
