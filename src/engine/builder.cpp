// The builder's passes: precision choice (precision.cpp), constant folding, dead-layer removal,
// post-op and elementwise fusion, then memory planning at the opt shapes for the report.
#include "engine/builder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "engine/attention_heads.h"
#include "engine/cpu/kernels.h"
#include "engine/cuda/backend.h"
#include "util/errors.h"
#include "util/logging.h"

namespace kiln::engine {
namespace {

// Folding makes weights; past this size a folded result costs more plan bytes than it saves.
constexpr int64_t kMaxFoldedBytes = 64 << 20;

bool is_network_output(const Network& net, TensorId id) {
  const auto& outs = net.outputs();
  return std::find(outs.begin(), outs.end(), id) != outs.end();
}

int fold_constants(Network& net, bool refittable) {
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
    // Shape tensors whose values inference already knows fold regardless of refit.
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
    bool all_constant = !layer.inputs.empty() && !refittable;
    for (TensorId id : layer.inputs) all_constant = all_constant && constant.count(id);
    int64_t out_bytes = 0;
    for (TensorId id : layer.outputs) {
      const TensorDesc& t = net.tensor(id);
      out_bytes += is_static(t.shape) ? volume(t.shape) * static_cast<int64_t>(dtype_size(t.dtype))
                                      : kMaxFoldedBytes + 1;
    }
    if (!all_constant || out_bytes > kMaxFoldedBytes) {
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

// The only consumer of `id`, if it has exactly one and is not a network output.
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

// Convolution/matmul followed by activation, residual add, activation: one layer with post-ops.
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

// Unmasked, non-causal attention that the fused CUDA kernel does not take (f32, or head sizes it
// does not handle) as matmul(q * scale, k^T) -> softmax -> matmul(., v), in the attention's
// dtype (after the precision pass): both products then run as cuBLASLt batched GEMMs on tensor
// cores, where the general attention kernel is a simple one. Masked, causal and packed-head
// attention keep the attention layer.
int decompose_attention(Network& net) {
  std::vector<Layer> out;
  int rewritten = 0;
  for (const Layer& l : net.layers()) {
    const auto* a = std::get_if<AttentionParams>(&l.params);
    if (a == nullptr || a->has_mask || a->causal || a->heads > 0) {
      out.push_back(l);
      continue;
    }
    const TensorDesc q = net.tensor(l.inputs[0]), k = net.tensor(l.inputs[1]),
                     v = net.tensor(l.inputs[2]);
    const DataType dt = q.dtype;
    const int64_t e = q.shape.back();
    if (e == kDynamic || k.dtype != dt || v.dtype != dt || net.tensor(l.outputs[0]).dtype != dt ||
        cuda::fused_attention_applies(q.shape, k.shape, v.shape, dt, false)) {
      out.push_back(l);
      continue;
    }
    const double scale = a->scale != 0 ? a->scale : 1.0 / std::sqrt(static_cast<double>(e));
    const auto tensor = [&](const std::string& suffix, DataType t, Shape shape) {
      return net.add_tensor(TensorDesc{l.name + suffix, t, std::move(shape), {}});
    };
    const std::string weight = l.name + ":scale";
    net.add_weight(weight, Weights::from_floats({1}, {static_cast<float>(scale)}));
    TensorId scale_t = tensor(":scale", DataType::kF32, {1});
    out.push_back(Layer{weight, ConstantParams{weight}, {}, {scale_t}});
    if (dt != DataType::kF32) {  // folds into a constant of the attention's dtype
      const TensorId cast = tensor(":scale_cast", dt, {1});
      out.push_back(Layer{l.name + ":scale_cast", CastParams{dt}, {scale_t}, {cast}});
      scale_t = cast;
    }
    const TensorId qs = tensor(":q_scaled", dt, q.shape);
    out.push_back(Layer{
        l.name + ":q_scaled", ElementwiseParams{BinaryOp::kMul}, {l.inputs[0], scale_t}, {qs}});
    const Shape out_shape = net.tensor(l.outputs[0]).shape;
    Shape scores_shape = out_shape;
    scores_shape.back() = k.shape[k.shape.size() - 2];
    const TensorId scores = tensor(":scores", dt, scores_shape);
    MatMulParams qk;
    qk.transpose_b = true;
    out.push_back(Layer{l.name + ":scores", qk, {qs, l.inputs[1]}, {scores}});
    const TensorId probs = tensor(":probs", dt, scores_shape);
    out.push_back(Layer{l.name + ":softmax", SoftmaxParams{-1, false}, {scores}, {probs}});
    out.push_back(Layer{l.name, MatMulParams{}, {probs, l.inputs[2]}, l.outputs});
    ++rewritten;
  }
  net.set_layers(std::move(out));
  return rewritten;
}

// Lets f32 convolutions and matmuls use TF32 tensor-core math (their params' tf32): PyTorch's
// cuDNN convolutions do by default, and fp32 convolutions in FMA math ran 3x slower than them
// (bench/NOTES.md G14). Returns how many layers it marked.
int allow_tf32(Network& net) {
  int marked = 0;
  std::vector<Layer> layers = net.layers();
  for (Layer& l : layers) {
    if (l.outputs.empty() || net.tensor(l.outputs[0]).dtype != DataType::kF32) continue;
    if (auto* c = std::get_if<ConvolutionParams>(&l.params)) {
      c->tf32 = true;
      ++marked;
    } else if (auto* m = std::get_if<MatMulParams>(&l.params)) {
      m->tf32 = true;
      ++marked;
    }
  }
  net.set_layers(std::move(layers));
  return marked;
}

// A chain of shuffles (each output used only by the next) whose composition keeps every element
// where it was, such as the layout pass's NHWC -> NCHW transpose followed by ViT's flatten and
// transpose back ([N, H, W, C] -> [N, C, H, W] -> [N, C, H * W] -> [N, H * W, C]), is one
// reshape of the chain's input: the last shuffle becomes that reshape, and the rest are left
// for dead-layer removal. Static shapes only. Returns how many chains it folded.
int fold_shuffle_chains(Network& net) {
  std::map<TensorId, size_t> producer;
  for (size_t i = 0; i < net.layers().size(); ++i) {
    for (TensorId id : net.layers()[i].outputs) producer[id] = i;
  }
  const auto shuffle_at = [&](TensorId id) -> const Layer* {
    const auto it = producer.find(id);
    if (it == producer.end()) return nullptr;
    const Layer& l = net.layers()[it->second];
    return std::holds_alternative<ShuffleParams>(l.params) ? &l : nullptr;
  };
  int folded = 0;
  std::vector<Layer> layers = net.layers();
  for (Layer& last : layers) {
    if (!std::holds_alternative<ShuffleParams>(last.params)) continue;
    // The chain, first shuffle first.
    std::vector<const Layer*> chain = {&last};
    size_t unused = 0;
    for (const Layer* prev = shuffle_at(last.inputs[0]);
         prev && single_consumer(net, prev->outputs[0], &unused);
         prev = shuffle_at(prev->inputs[0])) {
      chain.insert(chain.begin(), prev);
    }
    if (chain.size() < 2) continue;
    const TensorId source = chain.front()->inputs[0];
    Shape shape = net.tensor(source).shape;
    if (!is_static(shape)) continue;
    std::optional<std::vector<int64_t>> strides = contiguous_strides(shape);
    for (const Layer* l : chain) {
      const Shape& out = net.tensor(l->outputs[0]).shape;
      strides = is_static(out)
                    ? forward_shuffle(std::get<ShuffleParams>(l->params), shape, *strides, out)
                    : std::nullopt;
      if (!strides) break;
      shape = out;
    }
    if (!strides || *strides != contiguous_strides(shape)) continue;
    ShuffleParams reshape;
    reshape.has_reshape = true;
    reshape.reshape.assign(shape.begin(), shape.end());
    last = Layer{last.name, reshape, {source}, last.outputs};
    ++folded;
  }
  net.set_layers(std::move(layers));
  return folded;
}

// f16/bf16 matmuls whose fused activation is the erf GELU take its tanh form, which cuBLASLt
// computes in the GEMM's epilogue: the separate pass over the FFN's widest tensor goes (BERT
// and ViT, bench/NOTES.md G16). The two forms differ by at most 4.7e-4 in absolute terms (at
// |x| = 2.70; the difference is even in x): under half an f16 ulp wherever |GELU| >= 0.5, and of
// the order of the f16 rounding of the values it is summed with in the next layer (an ulp is
// 4.9e-4 to 9.8e-4 at 0.5 to 2). Only layers whose epilogue takes it (no bias, or a bias of the
// output's dtype over its last dim) are marked. Returns how many layers it changed.
int gelu_tanh_epilogues(Network& net) {
  int marked = 0;
  std::vector<Layer> layers = net.layers();
  for (Layer& l : layers) {
    auto* m = std::get_if<MatMulParams>(&l.params);
    if (!m || m->post.activation != ActivationKind::kGelu) continue;
    const TensorDesc& out = net.tensor(l.outputs[0]);
    if ((out.dtype != DataType::kF16 && out.dtype != DataType::kBF16) || out.shape.empty()) {
      continue;
    }
    if (m->post.has_bias) {
      const TensorDesc& bias = net.tensor(l.inputs.at(2));
      // (A dynamic last dim, kDynamic < 0, never equals the bias's size.)
      if (bias.dtype != out.dtype || volume(bias.shape) != out.shape.back()) continue;
    }
    m->post.activation = ActivationKind::kGeluTanh;
    ++marked;
  }
  net.set_layers(std::move(layers));
  return marked;
}

// kAuto can be overridden for experiments: KILN_CONV_LAYOUT=channels_last|channels_first|auto.
ConvLayout conv_layout(ConvLayout configured) {
  if (configured != ConvLayout::kAuto) return configured;
  const char* env = std::getenv("KILN_CONV_LAYOUT");
  if (!env || !*env || std::string(env) == "auto") return configured;
  const std::string v = env;
  KILN_CHECK(v == "channels_last" || v == "channels_first", InvalidArgument, "KILN_CONV_LAYOUT=`",
             v, "`: expected channels_last, channels_first or auto");
  return v == "channels_last" ? ConvLayout::kChannelsLast : ConvLayout::kChannelsFirst;
}

}  // namespace

std::string BuildReport::to_string() const {
  std::ostringstream os;
  os << "layers: " << layers_before << " -> " << layers_after << " (" << dead_layers_removed
     << " dead removed, " << layers_folded << " folded into constants)\n";
  if (precision.low != DataType::kF32) os << precision.summary() << "\n";
  if (attention_decomposed > 0) {
    os << "attention: " << attention_decomposed << " layers as matmul + softmax + matmul\n";
  }
  if (attention_heads_folded > 0) {
    os << "attention: " << attention_heads_folded
       << " layers read packed heads (head split and merge views folded)\n";
  }
  if (tf32_layers > 0) os << "tf32: " << tf32_layers << " f32 convolutions/matmuls\n";
  if (shuffle_chains_folded > 0) {
    os << "shuffles: " << shuffle_chains_folded << " chains that keep element order as reshapes\n";
  }
  if (gelu_tanh_layers > 0) {
    os << "gelu: " << gelu_tanh_layers << " f16/bf16 matmuls fuse GELU in its tanh form\n";
  }
  if (squeeze_excitations > 0) {
    os << "squeeze-excitation: " << squeeze_excitations << " blocks as one layer";
    if (excitation_projections > 0) {
      os << ", " << excitation_projections << " of them with their projection";
    }
    os << "\n";
  }
  if (layout.convolutions > 0) {
    os << "layout: " << layout.convolutions << " convolutions channels-last, "
       << layout.layers_moved << " other layers follow, " << layout.transposes
       << " transposes of activations\n";
  }
  for (const auto& f : fusions) os << "fused: " << f << "\n";
  os << "activation memory: arena " << arena_bytes << " bytes vs " << activation_bytes
     << " bytes unshared";
  if (activation_bytes) os << " (" << (100.0 * arena_bytes / activation_bytes) << "%)";
  os << "\n";
  return os.str();
}

Plan build(const Network& network, const BuilderConfig& config, BuildReport* report) {
  EngineTarget target;
  if (config.device != "cpu") {
    KILN_CHECK(config.device.rfind("cuda", 0) == 0, InvalidArgument, "builder: device `",
               config.device, "` is not cpu, cuda or cuda:N");
    KILN_CHECK(cuda::built(), Unsupported, "builder: device `", config.device,
               "`: this build of kiln has no CUDA backend (CMake found no CUDA toolkit)");
    target.device = "cuda";
    target.device_index = cuda::parse_device(config.device);
    target.compute_capability = cuda::compute_capability(target.device_index);
  }
  KILN_CHECK(std::find(config.enabled_precisions.begin(), config.enabled_precisions.end(),
                       DataType::kF32) != config.enabled_precisions.end(),
             InvalidArgument, "builder: enabled precisions must include f32");
  for (DataType t : config.enabled_precisions) {
    KILN_CHECK(is_floating(t), InvalidArgument, "builder: precision ", dtype_name(t),
               " is not a floating type");
  }
  KILN_CHECK(!network.outputs().empty(), InvalidArgument, "builder: the network has no outputs");

  BuildReport r;
  Plan plan{network, target};
  Network& net = plan.network;
  r.layers_before = static_cast<int>(net.layers().size());
  // Before folding, so that the casts of f32 weights fold into low-precision constants. The CPU
  // backend computes in f32: only cuda plans lower their precision.
  if (target.device == "cuda") {
    choose_precisions(net, config.enabled_precisions, cuda_precision_support(), &r.precision);
    r.attention_decomposed = decompose_attention(net);
    // After the decomposition, whose matmuls are f32 ones too.
    if (config.tf32) r.tf32_layers = allow_tf32(net);
  }
  // After the precisions (the cuda kernel takes packed heads in f16/bf16 only). The CPU kernel
  // takes any packing (it gathers the heads itself).
  r.attention_heads_folded = fold_attention_heads(
      net,
      [&](const AttentionParams& p, const std::vector<TensorDesc>& sources, const TensorDesc& out) {
        if (target.device != "cuda") return true;
        const int64_t B = out.shape[0], L = out.shape[1], S = sources[1].shape[1];
        const Shape q = {B, p.heads, L, p.head_size}, kv = {B, p.heads, S, p.head_size};
        if (!cuda::fused_attention_applies(q, kv, kv, out.dtype, false)) return false;
        for (size_t i = 0; i < 3; ++i) {  // 16-byte rows and column offsets
          if (sources[i].shape[2] % 8 != 0 || p.columns[i] % 8 != 0) return false;
        }
        return true;
      });
  // After precisions (the choice depends on them), before folding (weight transposes fold).
  const ConvLayout layout = conv_layout(config.conv_layout);
  if (layout != ConvLayout::kChannelsFirst && !config.refittable) {
    const bool cuda = target.device == "cuda";
    const bool all = layout == ConvLayout::kChannelsLast;
    r.layout = assign_channels_last(net, [&](const Network& n, const Layer& conv) {
      const DataType t = n.tensor(conv.outputs[0]).dtype;
      // f32 with TF32 runs on tensor cores too, whose cuDNN kernels want NHWC as well.
      return all || (cuda && (t == DataType::kF16 || t == DataType::kBF16 ||
                              (t == DataType::kF32 && config.tf32)));
    });
  }
  r.layers_folded = fold_constants(net, config.refittable);
  r.shuffle_chains_folded = fold_shuffle_chains(net);
  r.dead_layers_removed = remove_dead_layers(net);
  if (r.layout.convolutions > 0) r.layout.transposes = count_layout_transposes(net);
  fuse_post_ops(net, r.fusions);
  // After the post-ops (the activations join the 1x1 convolutions), before the elementwise
  // fusion (which would take the multiply).
  if (config.squeeze_excitation.value_or(target.device == "cuda")) {
    r.squeeze_excitations = fuse_squeeze_excitation(
        net,
        [&](int64_t channels, int64_t squeeze, bool channels_last) {
          return target.device != "cuda" ||
                 cuda::squeeze_excitation_applies(channels, squeeze, channels_last);
        },
        r.fusions);
    // KILN_SE_PROJECTION=off keeps the projections as convolutions (for measurements: G29).
    const char* projection_env = std::getenv("KILN_SE_PROJECTION");
    if (target.device == "cuda" && !(projection_env && std::string(projection_env) == "off")) {
      r.excitation_projections =
          fold_excitation_into_projection(net, cuda::excitation_projection_applies, r.fusions);
    }
  }
  // KILN_CAST_SHUFFLE=off keeps casts apart from the shuffles they feed (measurements: G31).
  const char* cast_env = std::getenv("KILN_CAST_SHUFFLE");
  if (target.device == "cuda" && !(cast_env && std::string(cast_env) == "off")) {
    r.casts_into_shuffles = fuse_cast_into_shuffle(net, r.fusions);
  }
  if (target.device == "cuda" && config.gelu_tanh_epilogues) {
    r.gelu_tanh_layers = gelu_tanh_epilogues(net);
  }
  fuse_elementwise(net, r.fusions);
  r.layers_after = static_cast<int>(net.layers().size());
  if (target.device == "cuda") cuda::check_supported(net);

  // Memory at the opt shapes (planning needs no device: a CPU engine of the same network).
  auto engine = std::make_shared<const Engine>(net, EngineTarget{});
  ExecutionContext ctx(engine);
  for (size_t i = 0; i < net.inputs().size(); ++i) {
    ctx.set_input_shape(i, net.profile(net.inputs()[i]).opt);
  }
  ctx.output_shape(0);
  r.arena_bytes = ctx.arena_bytes();
  r.activation_bytes = ctx.activation_bytes();
  KILN_CHECK(r.arena_bytes <= config.workspace_bytes || config.workspace_bytes == 0,
             InvalidArgument, "builder: activations need ", r.arena_bytes,
             " bytes at the opt shapes, over the workspace limit of ", config.workspace_bytes);
  KILN_LOG(kInfo, "built engine: ", r.to_string());
  if (report) *report = r;
  return plan;
}

}  // namespace kiln::engine
