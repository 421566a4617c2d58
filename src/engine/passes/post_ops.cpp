// Convolution/matmul + (bias,) activation, residual add, activation: one layer with post-ops.
#include "engine/passes/passes.h"

#include <algorithm>

namespace kiln::engine {

// Convolution/matmul followed by (a matmul's bias,) activation, residual add, activation: one
// layer with post-ops.
int fuse_post_ops(Network& net, std::vector<std::string>& fusions) {
  int fused_count = 0;
  for (size_t i = 0; i < net.layers().size(); ++i) {
    Layer& producer = net.mutable_layers()[i];
    PostOps* post = nullptr;
    if (auto* c = std::get_if<ConvolutionParams>(&producer.params)) post = &c->post;
    if (auto* m = std::get_if<MatMulParams>(&producer.params)) post = &m->post;
    if (!post || post->activation != ActivationKind::kNone || post->has_residual) continue;
    std::vector<size_t> absorbed;
    std::string line = producer.name;
    TensorId out = producer.outputs[0];
    const TensorDesc& out_desc = net.tensor(out);
    size_t j = 0;
    auto absorb_activation = [&](ActivationKind* kind, double* alpha, double* beta) {
      const Layer* next = single_consumer(net, out, &j);
      const auto* act = next ? std::get_if<ActivationParams>(&next->params) : nullptr;
      if (!act) return false;
      *kind = act->kind;
      *alpha = act->alpha;
      *beta = act->beta;
      absorbed.push_back(j);
      line += " + " + next->name;
      out = next->outputs[0];
      return true;
    };
    // A matmul's bias: an add of an [N] vector, N the static last dim of a matrix result (b of
    // rank >= 2), in either operand order (torch.addmm's and `x @ w + b`'s). Not a convolution's:
    // its bias is per channel, which an add of [C] is not.
    const Shape& b_shape = net.tensor(producer.inputs.size() > 1 ? producer.inputs[1] : out).shape;
    if (std::holds_alternative<MatMulParams>(producer.params) && !post->has_bias &&
        b_shape.size() >= 2 && !out_desc.shape.empty() && out_desc.shape.back() > 0) {
      const Layer* next = single_consumer(net, out, &j);
      const auto* add = next ? std::get_if<ElementwiseParams>(&next->params) : nullptr;
      if (add && add->op == BinaryOp::kAdd && next->inputs[0] != next->inputs[1]) {
        const TensorId other = next->inputs[0] == out ? next->inputs[1] : next->inputs[0];
        if (net.tensor(other).shape == Shape{out_desc.shape.back()} &&
            net.tensor(other).dtype == out_desc.dtype &&
            net.tensor(next->outputs[0]).shape == out_desc.shape) {
          post->has_bias = true;
          producer.inputs.push_back(other);
          absorbed.push_back(j);
          line += " + " + next->name;
          out = next->outputs[0];
        }
      }
    }
    absorb_activation(&post->activation, &post->alpha, &post->beta);
    const Layer* next = single_consumer(net, out, &j);
    const auto* add = next ? std::get_if<ElementwiseParams>(&next->params) : nullptr;
    if (add && add->op == BinaryOp::kAdd) {
      const TensorId other = next->inputs[0] == out ? next->inputs[1] : next->inputs[0];
      if (net.tensor(other).shape == out_desc.shape && net.tensor(other).dtype == out_desc.dtype &&
          net.tensor(next->outputs[0]).shape == out_desc.shape) {
        post->has_residual = true;
        producer.inputs.push_back(other);
        absorbed.push_back(j);
        line += " + " + next->name;
        out = next->outputs[0];
        absorb_activation(&post->activation2, &post->alpha2, &post->beta2);
      }
    }
    if (absorbed.empty()) continue;
    producer.outputs[0] = out;
    // The fused layer runs where the last absorbed layer ran, after the residual exists.
    Layer fused = producer;
    auto& layers = net.mutable_layers();
    const size_t last = *std::max_element(absorbed.begin(), absorbed.end());
    layers[last] = fused;
    absorbed.pop_back();
    absorbed.push_back(i);
    std::sort(absorbed.begin(), absorbed.end());
    std::vector<Layer> kept;
    for (size_t k = 0; k < layers.size(); ++k) {
      if (k == last || !std::binary_search(absorbed.begin(), absorbed.end(), k)) {
        kept.push_back(std::move(layers[k]));
      }
    }
    net.set_layers(std::move(kept));
    fusions.push_back(line + " -> " + fused.name);
    ++fused_count;
    i = 0;  // indices changed; rescan (networks are small enough)
  }
  return fused_count;
}

}  // namespace kiln::engine
