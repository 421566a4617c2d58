// The builder's passes: precision choice (precision.cpp), constant folding, dead-layer removal,
// the layer fusions (fusion.cpp), then memory planning at the opt shapes for the report.
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
#include "engine/fusion.h"
#include "engine/scale_shift.h"
#include "util/env.h"
#include "util/errors.h"
#include "util/logging.h"

namespace kiln::engine {
namespace {

// Folding makes weights; past this size a folded result costs more plan bytes than it saves.
constexpr int64_t kMaxFoldedBytes = 64 << 20;

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
  // First, so that the passes below (precision, layout, folding, fusion) see the scale and shift
  // as elementwise layers like any other. Refittable plans keep their weights as named.
  if (!config.refittable) batch_norm_to_scale_shift(net);
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
      // cpu: oneDNN's NHWC kernels read and write the data as it is, where its blocked ones need
      // a reorder of the input and of the output on every run. cuda: f32 with TF32 runs on tensor
      // cores too, whose cuDNN kernels want NHWC as f16/bf16 ones do.
      return all || !cuda || t == DataType::kF16 || t == DataType::kBF16 ||
             (t == DataType::kF32 && config.tf32);
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
    if (target.device == "cuda" && !switched_off("KILN_SE_PROJECTION")) {
      r.excitation_projections =
          fold_excitation_into_projection(net, cuda::excitation_projection_applies, r.fusions);
    }
  }
  // KILN_CAST_SHUFFLE=off keeps casts apart from the shuffles they feed (measurements: G31).
  if (target.device == "cuda" && !switched_off("KILN_CAST_SHUFFLE")) {
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
