// A product by constant per-output-channel values right after a matmul or convolution with
// constant weights becomes those weights (and the bias) scaled: the layer scales of ConvNeXt,
// CaiT and DeiT III (`gamma * linear(x)`), which otherwise run as a pass of their own over the
// activation and keep the residual add after them out of the GEMM's epilogue.
//
// In f16 and bf16 the scaled weights are rounded once more, so the fold is made only where every
// nonzero scaled weight and bias stays a normal number of the dtype: a tiny scale (ConvNeXt's
// 1e-6 at initialization) would make f16 weights subnormal or zero, where the product after the
// GEMM, summed in f32 first, keeps more.
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"
#include "engine/scalar_math.h"

namespace kiln::engine {
namespace {

// A float constant's values as doubles, or nullopt.
std::optional<std::vector<double>> float_values(const Network& net, TensorId id) {
  const Weights* w = net.constant_data(id);
  if (!w || !w->data || !is_floating(w->dtype) || !is_static(w->shape)) return std::nullopt;
  const int64_t n = volume(w->shape);
  if (w->data->size() != static_cast<size_t>(n) * dtype_size(w->dtype)) return std::nullopt;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] = load_as<double>(w->dtype, w->data->data(), i);
  }
  return v;
}

// The smallest normal and the largest finite magnitude of a float dtype.
std::pair<double, double> normal_range(DataType t) {
  if (t == DataType::kF16) return {6.103515625e-05, 65504.0};
  if (t == DataType::kBF16) return {1.17549435e-38, 3.38953139e38};
  return {std::numeric_limits<float>::min(), std::numeric_limits<float>::max()};
}

// Whether every value is zero or within the dtype's normal range.
bool representable(const std::vector<double>& values, DataType t) {
  const auto [lo, hi] = normal_range(t);
  for (double v : values) {
    const double a = std::fabs(v);
    if (!std::isfinite(v) || (a != 0 && (a < lo || a > hi))) return false;
  }
  return true;
}

}  // namespace

int fold_scales_into_weights(Network& net, const std::set<std::string>& keep) {
  std::vector<Layer> layers = net.layers();
  const NetworkIndex index(net, layers);
  std::vector<bool> gone(layers.size(), false);
  std::vector<std::vector<Layer>> instead(layers.size());
  int folded = 0;
  // The constant tensor `id`'s weights' name, if it is a constant layer's (and not one to keep).
  const auto weight_name = [&](TensorId id) -> std::optional<std::string> {
    const auto p = index.producer(id);
    const auto* c = p ? std::get_if<ConstantParams>(&layers[*p].params) : nullptr;
    if (!c || keep.count(c->weight)) return std::nullopt;
    return c->weight;
  };
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& gemm = layers[i];
    const auto* mm = std::get_if<MatMulParams>(&gemm.params);
    const auto* conv = std::get_if<ConvolutionParams>(&gemm.params);
    const PostOps* post = mm ? &mm->post : conv ? &conv->post : nullptr;
    if (!post || post->activation != ActivationKind::kNone || post->has_residual ||
        gemm.inputs.size() != (post->has_bias ? 3u : 2u) || gone[i] || (conv && conv->transposed)) {
      continue;
    }
    const auto m = index.single_consumer(gemm.outputs[0]);
    const auto* mul = m ? std::get_if<ElementwiseParams>(&layers[*m].params) : nullptr;
    if (!mul || mul->op != BinaryOp::kMul || layers[*m].inputs.size() != 2 ||
        layers[*m].inputs[0] == layers[*m].inputs[1]) {
      continue;
    }
    const Layer& product = layers[*m];
    const TensorId y = gemm.outputs[0];
    const TensorId g = product.inputs[0] == y ? product.inputs[1] : product.inputs[0];
    const TensorDesc out = net.tensor(y), w_desc = net.tensor(gemm.inputs[1]);  // (copies)
    const TensorDesc g_desc = net.tensor(g);
    if (net.tensor(product.outputs[0]).shape != out.shape ||
        net.tensor(product.outputs[0]).dtype != out.dtype || w_desc.dtype != out.dtype ||
        !is_static(w_desc.shape) || out.shape.empty()) {
      continue;
    }
    // The output channel's dim of y and of the weights, and the channels.
    size_t y_dim = 0, w_dim = 0;
    if (mm) {
      if (w_desc.shape.size() != 2 || mm->transpose_a) continue;
      y_dim = out.shape.size() - 1;
      w_dim = mm->transpose_b ? 0 : 1;
    } else {
      y_dim = conv->channels_last ? out.shape.size() - 1 : 1;
      w_dim = 0;
    }
    if (y_dim >= out.shape.size()) continue;
    const int64_t channels = w_desc.shape[w_dim];
    if (out.shape[y_dim] != channels || channels <= 0) continue;
    // g: the channels along y's channel dim, ones elsewhere (broadcast over every other dim).
    const Shape& gs = g_desc.shape;
    if (!is_static(gs) || gs.size() > out.shape.size() || volume(gs) != channels) continue;
    bool per_channel = true;
    for (size_t d = 0; d < gs.size(); ++d) {
      const size_t yd = out.shape.size() - gs.size() + d;
      per_channel = per_channel && (gs[d] == 1 || (yd == y_dim && gs[d] == channels));
    }
    if (!per_channel && channels != 1) continue;
    const auto w_name = weight_name(gemm.inputs[1]), g_name = weight_name(g);
    const auto b_name = post->has_bias ? weight_name(gemm.inputs[2]) : std::optional<std::string>();
    if (!w_name || !g_name || (post->has_bias && !b_name)) continue;
    auto w = float_values(net, gemm.inputs[1]);
    const auto scale = float_values(net, g);
    auto b = post->has_bias ? float_values(net, gemm.inputs[2]) : std::nullopt;
    if (!w || !scale || (post->has_bias && (!b || static_cast<int64_t>(b->size()) != channels))) {
      continue;
    }
    // Weight element e's channel: its index along w_dim.
    int64_t inner = 1;
    for (size_t d = w_dim + 1; d < w_desc.shape.size(); ++d) inner *= w_desc.shape[d];
    for (size_t e = 0; e < w->size(); ++e) {
      (*w)[e] *= (*scale)[static_cast<size_t>((static_cast<int64_t>(e) / inner) % channels)];
    }
    if (b) {
      for (size_t c = 0; c < b->size(); ++c) (*b)[c] *= (*scale)[c];
    }
    const DataType b_dtype = post->has_bias ? net.tensor(gemm.inputs[2]).dtype : out.dtype;
    if (!representable(*w, w_desc.dtype) || (b && !representable(*b, b_dtype))) continue;
    // New constants (the old ones may have other readers), then the layer writing the product.
    Layer scaled = gemm;
    std::vector<Layer>& now = instead[*m];
    const auto constant = [&](const std::string& name, DataType t, const Shape& shape,
                              const std::vector<double>& values) {
      std::vector<uint8_t> bytes(values.size() * dtype_size(t));
      for (size_t k = 0; k < values.size(); ++k) {
        store_as<double>(t, bytes.data(), static_cast<int64_t>(k), values[k]);
      }
      net.add_weight(name, Weights::from_bytes(t, shape, std::move(bytes)));
      const TensorId id = net.add_tensor(TensorDesc{name, t, shape, {}});
      now.push_back(Layer{name, ConstantParams{name}, {}, {id}});
      return id;
    };
    scaled.inputs[1] = constant(*w_name + ":scaled:" + gemm.name, w_desc.dtype, w_desc.shape, *w);
    if (b) {
      scaled.inputs[2] =
          constant(*b_name + ":scaled:" + gemm.name, b_dtype, net.tensor(gemm.inputs[2]).shape, *b);
    }
    scaled.outputs = product.outputs;
    now.push_back(std::move(scaled));
    gone[i] = true;
    ++folded;
  }
  if (folded == 0) return 0;
  splice_layers(net, std::move(layers), gone, std::move(instead));
  remove_dead_layers(net);  // the unscaled weights and the scale, where nothing else reads them
  return folded;
}

}  // namespace kiln::engine
