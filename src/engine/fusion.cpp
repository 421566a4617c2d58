// The builder's layer fusions (fusion.h).
#include "engine/fusion.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "engine/cuda/backend.h"
#include "util/errors.h"

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

// Calls rewrite(i) at each layer index; a rewrite that changed the network (returned true) removed
// layer i, so the layer now at i is tried next. Returns how many rewrites there were.
int rewrite_each(Network& net, const std::function<bool(size_t)>& rewrite) {
  int count = 0;
  for (size_t i = 0; i < net.layers().size();) {
    if (rewrite(i)) {
      ++count;
    } else {
      ++i;
    }
  }
  return count;
}

// Layer i absorbed into its consumer, layer j (> i): j becomes `merged`, i goes.
void merge_into_consumer(Network& net, size_t i, size_t j, Layer merged) {
  std::vector<Layer> kept;
  for (size_t k = 0; k < net.layers().size(); ++k) {
    if (k != i) kept.push_back(k == j ? std::move(merged) : net.layers()[k]);
  }
  net.set_layers(std::move(kept));
}

bool fusible_elementwise(const Network& net, const Layer& l) {
  if (l.outputs.size() != 1 || !is_floating(net.tensor(l.outputs[0]).dtype)) return false;
  for (TensorId id : l.inputs) {
    if (!is_floating(net.tensor(id).dtype)) return false;
  }
  if (const auto* c = std::get_if<CastParams>(&l.params)) return is_floating(c->to);
  return std::holds_alternative<ElementwiseParams>(l.params) ||
         std::holds_alternative<UnaryParams>(l.params) ||
         std::holds_alternative<ActivationParams>(l.params) ||
         std::holds_alternative<FusedElementwiseParams>(l.params);
}

}  // namespace

bool is_network_output(const Network& net, TensorId id) {
  const auto& outs = net.outputs();
  return std::find(outs.begin(), outs.end(), id) != outs.end();
}

const Layer* single_consumer(const Network& net, TensorId id, size_t* index) {
  if (is_network_output(net, id)) return nullptr;
  const Layer* found = nullptr;
  for (size_t i = 0; i < net.layers().size(); ++i) {
    const Layer& l = net.layers()[i];
    const auto uses = std::count(l.inputs.begin(), l.inputs.end(), id);
    if (uses == 0) continue;
    if (found || uses > 1) return nullptr;
    found = &l;
    *index = i;
  }
  return found;
}

// Convolution/matmul followed by (a matmul's bias,) activation, residual add, activation: one
// layer with post-ops.
void fuse_post_ops(Network& net, std::vector<std::string>& fusions) {
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
    i = 0;  // indices changed; rescan (networks are small enough)
  }
}

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

// Squeeze-excitation whose result only feeds a 1x1 convolution (efficientnet's projection, with
// its bias and residual) takes that convolution (SqueezeExcitationParams::project) where
// applies(samples, pixels, channels, out channels) says it pays: the projection then runs on x
// with its weights scaled per sample, and the excite pass is gone (bench/NOTES.md G29). Static
// channels-last shapes, stride 1 without padding or dilation, one dtype throughout, a residual of
// the output's shape. The layer runs where the convolution ran (after its residual exists).
// Returns how many it folded.
int fold_excitation_into_projection(
    Network& net, const std::function<bool(int64_t, int64_t, int64_t, int64_t)>& applies,
    std::vector<std::string>& fusions) {
  const auto all_are = [](const std::vector<int64_t>& v, int64_t want) {
    return std::all_of(v.begin(), v.end(), [&](int64_t d) { return d == want; });
  };
  const auto fold_at = [&](size_t i) {
    const Layer& se_layer = net.layers()[i];
    const auto* se = std::get_if<SqueezeExcitationParams>(&se_layer.params);
    if (!se || se->project || !se->channels_last) return false;
    size_t j = 0;
    const Layer* conv = single_consumer(net, se_layer.outputs[0], &j);
    const auto* cp = conv ? std::get_if<ConvolutionParams>(&conv->params) : nullptr;
    if (!cp || conv->inputs[0] != se_layer.outputs[0] || !cp->channels_last || cp->transposed ||
        cp->groups != 1 || !all_are(cp->strides, 1) || !all_are(cp->padding_begin, 0) ||
        !all_are(cp->padding_end, 0) || !all_are(cp->dilations, 1)) {
      return false;
    }
    const TensorDesc& xd = net.tensor(se_layer.inputs[0]);
    const Shape& w = net.tensor(conv->inputs[1]).shape;
    const TensorDesc& yd = net.tensor(conv->outputs[0]);
    const auto is_static = [](const Shape& s) {
      return std::all_of(s.begin(), s.end(), [](int64_t d) { return d >= 1; });
    };
    if (!is_static(xd.shape) || !is_static(yd.shape) || w.size() != xd.shape.size() ||
        w.back() != xd.shape.back() ||
        !std::all_of(w.begin() + 1, w.end() - 1, [](int64_t d) { return d == 1; })) {
      return false;
    }
    for (TensorId id : conv->inputs) {
      if (net.tensor(id).dtype != xd.dtype) return false;
    }
    if (yd.dtype != xd.dtype ||
        (cp->post.has_residual && net.tensor(conv->inputs.back()).shape != yd.shape)) {
      return false;
    }
    const int64_t samples = xd.shape[0], channels = xd.shape.back();
    if (!applies(samples, volume(xd.shape) / (samples * channels), channels, w[0])) return false;
    SqueezeExcitationParams fused = *se;
    fused.project = true;
    fused.projection = cp->post;
    fused.tf32 = cp->tf32;
    std::vector<TensorId> inputs = se_layer.inputs;
    inputs.insert(inputs.end(), conv->inputs.begin() + 1, conv->inputs.end());
    fusions.push_back(se_layer.name + " + " + conv->name + " -> " + conv->name +
                      " (squeeze-excitation + projection)");
    merge_into_consumer(net, i, j, Layer{conv->name, fused, inputs, conv->outputs});
    return true;
  };
  return rewrite_each(net, fold_at);
}

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

// Chains (and trees) of float elementwise layers whose intermediates have one consumer become
// one FusedElementwise layer, placed where the chain's last layer was.
void fuse_elementwise(Network& net, std::vector<std::string>& fusions) {
  const auto& layers = net.layers();
  std::map<TensorId, size_t> producer;
  for (size_t i = 0; i < layers.size(); ++i) {
    for (TensorId id : layers[i].outputs) producer[id] = i;
  }
  // root[i]: the layer whose fused group absorbs layer i.
  std::vector<size_t> root(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) root[i] = i;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!fusible_elementwise(net, layers[i]) ||
        std::holds_alternative<FusedElementwiseParams>(layers[i].params)) {
      continue;
    }
    size_t j;
    const Layer* next = single_consumer(net, layers[i].outputs[0], &j);
    if (next && fusible_elementwise(net, *next) &&
        !std::holds_alternative<FusedElementwiseParams>(next->params)) {
      root[i] = j;
    }
  }
  auto find_root = [&](size_t i) {
    while (root[i] != i) i = root[i];
    return i;
  };
  std::map<size_t, std::vector<size_t>> groups;
  for (size_t i = 0; i < layers.size(); ++i) groups[find_root(i)].push_back(i);

  std::vector<Layer> out_layers;
  std::set<size_t> absorbed;
  std::map<size_t, Layer> replacement;
  for (const auto& [r, members] : groups) {
    if (members.size() < 2) continue;
    std::set<size_t> member_set(members.begin(), members.end());
    FusedElementwiseParams params;
    std::vector<TensorId> inputs;
    std::map<TensorId, int64_t> reg;
    std::string line;
    std::function<int64_t(TensorId)> emit = [&](TensorId id) -> int64_t {
      if (auto it = reg.find(id); it != reg.end()) return it->second;
      auto p = producer.find(id);
      if (p == producer.end() || !member_set.count(p->second)) {
        inputs.push_back(id);  // inputs occupy the first registers; renumbered below
        return reg[id] = -static_cast<int64_t>(inputs.size());
      }
      const Layer& l = layers[p->second];
      const int64_t a = emit(l.inputs[0]);
      const int64_t b = l.inputs.size() > 1 ? emit(l.inputs[1]) : 0;
      int64_t kind = 0, op = 0;
      double alpha = 0, beta = 0;
      if (const auto* e = std::get_if<ElementwiseParams>(&l.params)) {
        kind = 0, op = static_cast<int64_t>(e->op);
      } else if (const auto* u = std::get_if<UnaryParams>(&l.params)) {
        kind = 1, op = static_cast<int64_t>(u->op);
      } else if (const auto* act = std::get_if<ActivationParams>(&l.params)) {
        kind = 2, op = static_cast<int64_t>(act->kind), alpha = act->alpha, beta = act->beta;
      } else {
        kind = 3, op = static_cast<int64_t>(std::get<CastParams>(l.params).to);
      }
      params.program.insert(params.program.end(), {kind, op, a, b});
      params.constants.insert(params.constants.end(), {alpha, beta});
      params.fused_layers.push_back(l.name);
      line += (line.empty() ? "" : " + ") + l.name;
      return reg[id] = static_cast<int64_t>(params.fused_layers.size() - 1) + (1 << 20);
    };
    emit(layers[r].outputs[0]);
    // Registers: inputs were numbered -1, -2, ...; ops 2^20 + k. Map to [inputs..., ops...].
    const int64_t n_in = static_cast<int64_t>(inputs.size());
    for (size_t k = 0; k < params.program.size(); k += 4) {
      for (size_t f : {k + 2, k + 3}) {
        int64_t& v = params.program[f];
        if (f == k + 3 && params.program[k] != 0) {
          v = 0;
          continue;
        }
        v = v < 0 ? -v - 1 : n_in + (v - (1 << 20));
      }
    }
    Layer fused{layers[r].name, params, inputs, layers[r].outputs};
    replacement[r] = fused;
    for (size_t m : members) {
      if (m != r) absorbed.insert(m);
    }
    fusions.push_back(line + " -> " + fused.name + " (fused elementwise)");
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (absorbed.count(i)) continue;
    out_layers.push_back(replacement.count(i) ? replacement[i] : layers[i]);
  }
  net.set_layers(std::move(out_layers));
}

}  // namespace kiln::engine
