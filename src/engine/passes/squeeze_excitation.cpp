// Squeeze-excitation in torch's form as one SqueezeExcitation layer.
#include "engine/passes/passes.h"

#include <algorithm>
#include <iterator>

namespace kiln::engine {

namespace {

// A 1x1 convolution over [N, C, 1...] whose result only gets a bias and one activation, with
// weights of its input's dtype: a fully connected layer of squeeze-excitation.
bool is_excitation_fc(const Network& net, const Layer& l, DataType t) {
  const auto* c = std::get_if<ConvolutionParams>(&l.params);
  if (!c || c->transposed || c->groups != 1 || c->post.has_residual ||
      c->post.activation2 != ActivationKind::kNone) {
    return false;
  }
  const Shape& w = net.tensor(l.inputs[1]).shape;
  if (w.size() != net.tensor(l.inputs[0]).shape.size() || w.size() < 3) return false;
  // Kernel dims: [O, k..., C] channels-last, [O, C, k...] otherwise.
  const size_t first = c->channels_last ? 1 : 2, end = c->channels_last ? w.size() - 1 : w.size();
  for (size_t d = first; d < end; ++d) {
    if (w[d] != 1) return false;
  }
  for (int64_t v : c->padding_begin) {
    if (v != 0) return false;
  }
  for (int64_t v : c->padding_end) {
    if (v != 0) return false;
  }
  for (TensorId id : l.inputs) {
    if (net.tensor(id).dtype != t) return false;
  }
  return net.tensor(l.outputs[0]).dtype == t;
}

}  // namespace

// Squeeze-excitation in its torch form (a global average pool, a 1x1 convolution with an
// activation, another, and the product of the result with the pool's input) becomes one
// SqueezeExcitation layer where the product was: four launches of which three are tiny become a
// pooling pass and a scaling pass (efficientnet_b0 has 16, bench/NOTES.md G21). Static shapes,
// where applies(channels, squeeze width, channels_last) says the backend takes it and the second
// convolution's weight is a constant. Returns how many it fused.
int fuse_squeeze_excitation(Network& net,
                            const std::function<bool(int64_t, int64_t, bool)>& applies,
                            std::vector<std::string>& fusions) {
  // Fuses the pattern starting at layer i, if it is one.
  const auto fuse_at = [&](size_t i) {
    const Layer& pool = net.layers()[i];
    const auto* pp = std::get_if<PoolingParams>(&pool.params);
    if (!pp || pp->kind != PoolingKind::kAverage) return false;
    const TensorId x = pool.inputs[0];
    const TensorDesc& xd = net.tensor(x);
    const Shape& ps = net.tensor(pool.outputs[0]).shape;
    const size_t nd = pp->adaptive ? pp->output_size.size() : pp->kernel.size();
    if (!is_floating(xd.dtype) || xd.shape.size() != nd + 2 ||
        std::any_of(xd.shape.begin(), xd.shape.end(), [](int64_t d) { return d <= 0; })) {
      return false;  // dynamic (kDynamic < 0) or empty
    }
    bool global = true;  // every output extent 1, each window the whole input extent
    for (size_t d = 0; d < nd; ++d) {
      const size_t dim = pp->channels_last ? d + 1 : d + 2;
      global = global && ps[dim] == 1 &&
               (pp->adaptive || (pp->kernel[d] == xd.shape[dim] &&
                                 (pp->padding_begin.empty() || pp->padding_begin[d] == 0) &&
                                 (pp->padding_end.empty() || pp->padding_end[d] == 0)));
    }
    const int64_t channels = pp->channels_last ? xd.shape.back() : xd.shape[1];
    if (!global || net.tensor(pool.outputs[0]).dtype != xd.dtype) {
      return false;
    }
    size_t j1, j2, jm;
    const Layer* fc1 = single_consumer(net, pool.outputs[0], &j1);
    if (!fc1 || fc1->inputs[0] != pool.outputs[0] || !is_excitation_fc(net, *fc1, xd.dtype)) {
      return false;
    }
    const Layer* fc2 = single_consumer(net, fc1->outputs[0], &j2);
    if (!fc2 || fc2->inputs[0] != fc1->outputs[0] || !is_excitation_fc(net, *fc2, xd.dtype)) {
      return false;
    }
    const Layer* mul = single_consumer(net, fc2->outputs[0], &jm);
    const auto* mp = mul ? std::get_if<ElementwiseParams>(&mul->params) : nullptr;
    if (!mp || mp->op != BinaryOp::kMul || mul->inputs.size() != 2) return false;
    const TensorId g = fc2->outputs[0];
    if (!((mul->inputs[0] == g && mul->inputs[1] == x) ||
          (mul->inputs[1] == g && mul->inputs[0] == x)) ||
        net.tensor(g).shape != ps || net.tensor(mul->outputs[0]).shape != xd.shape ||
        net.tensor(mul->outputs[0]).dtype != xd.dtype) {
      return false;
    }
    const auto& c1 = std::get<ConvolutionParams>(fc1->params);
    const auto& c2 = std::get<ConvolutionParams>(fc2->params);
    const int64_t squeeze = net.tensor(fc1->inputs[1]).shape[0];
    // The CUDA kernel transposes the second weight once, at its first run: it must be a constant.
    if (!applies(channels, squeeze, pp->channels_last) || !net.constant_data(fc2->inputs[1]) ||
        volume(net.tensor(fc1->inputs[1]).shape) != squeeze * channels ||
        net.tensor(fc2->inputs[1]).shape[0] != channels ||
        volume(net.tensor(fc2->inputs[1]).shape) != channels * squeeze) {
      return false;
    }
    SqueezeExcitationParams se;
    se.activation1 = c1.post.activation, se.alpha1 = c1.post.alpha, se.beta1 = c1.post.beta;
    se.activation2 = c2.post.activation, se.alpha2 = c2.post.alpha, se.beta2 = c2.post.beta;
    se.has_bias1 = c1.post.has_bias, se.has_bias2 = c2.post.has_bias;
    se.channels_last = pp->channels_last;
    std::vector<TensorId> inputs = {x, fc1->inputs[1]};
    if (se.has_bias1) inputs.push_back(fc1->inputs[2]);
    inputs.push_back(fc2->inputs[1]);
    if (se.has_bias2) inputs.push_back(fc2->inputs[2]);
    fusions.push_back(pool.name + " + " + fc1->name + " + " + fc2->name + " + " + mul->name +
                      " -> " + mul->name + " (squeeze-excitation)");
    Layer replacement{mul->name, se, inputs, mul->outputs};
    std::vector<Layer> kept;
    const size_t dropped[] = {i, j1, j2};
    for (size_t k = 0; k < net.layers().size(); ++k) {
      if (std::find(std::begin(dropped), std::end(dropped), k) != std::end(dropped)) continue;
      kept.push_back(k == jm ? replacement : net.layers()[k]);
    }
    net.set_layers(std::move(kept));
    return true;
  };
  return rewrite_each(net, fuse_at);
}

}  // namespace kiln::engine
