// RMS norm written out, as transformers' LlamaRMSNorm, T5's layer norm and hand-written models
// compute it,
//   y = x * rsqrt(mean(x^2 over the last k dims, keepdim) + eps)   [then * w]
// (x^2 as pow(x, 2) or x * x; the add and the muls with their operands in either order), becomes
// one normalization layer (NormalizationKind::kRms), with w as its scale when w is a constant of
// the normalized dims' shape and the norm's result goes only to that multiply. Five or six
// layers over the widest tensor of a decoder's block become one pass that reads x once, and the
// square sums in float (in f16, pow(x, 2) overflows from |x| = 256 on; torch computes the norm in
// f32 where the model casts x up, as Llama does). The layers the rewrite bypasses go with
// dead_layers when nothing else reads them.
#include <optional>

#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"

namespace kiln::engine {
namespace {

const ElementwiseParams* binary_of(const Layer& l, BinaryOp op) {
  const auto* p = std::get_if<ElementwiseParams>(&l.params);
  return p && p->op == op && l.inputs.size() == 2 ? p : nullptr;
}

class Matcher {
 public:
  Matcher(const Network& net, const std::vector<Layer>& layers, const NetworkIndex& index)
      : net_(net), layers_(layers), index_(index) {}

  // The layer writing `id`, if one does.
  const Layer* producer(TensorId id) const {
    const auto p = index_.producer(id);
    return p ? &layers_[*p] : nullptr;
  }

  // eps, when `r` is rsqrt(mean(square(x), trailing `dims` dims, keepdim) + eps).
  std::optional<double> rms_scale_of(TensorId r, TensorId x, int64_t* dims) const {
    const Layer* rsqrt = producer(r);
    const auto* u = rsqrt ? std::get_if<UnaryParams>(&rsqrt->params) : nullptr;
    if (!u || u->op != UnaryOp::kRsqrt || rsqrt->inputs.size() != 1) return std::nullopt;
    const Layer* add = producer(rsqrt->inputs[0]);
    if (!add || !binary_of(*add, BinaryOp::kAdd)) return std::nullopt;
    for (int side = 0; side < 2; ++side) {
      const auto eps = scalar_constant(net_, add->inputs[1 - side]);
      if (!eps || *eps < 0) continue;
      const Layer* mean = producer(add->inputs[side]);
      const auto* m = mean ? std::get_if<ReduceParams>(&mean->params) : nullptr;
      if (!m || m->op != ReduceOp::kMean || !m->keep_dims || mean->inputs.size() != 1) continue;
      const auto k = trailing_dims(m->axes, static_cast<int64_t>(net_.tensor(x).shape.size()));
      if (!k || !is_square_of(mean->inputs[0], x)) continue;
      *dims = *k;
      return eps;
    }
    return std::nullopt;
  }

  // A constant of the normalized dims' shape and x's dtype: the norm's scale.
  bool is_scale(TensorId w, TensorId x, int64_t dims) const {
    const TensorDesc& wd = net_.tensor(w);
    const Shape& xs = net_.tensor(x).shape;
    return net_.constant_data(w) != nullptr && wd.dtype == net_.tensor(x).dtype &&
           wd.shape == Shape(xs.end() - dims, xs.end());
  }

 private:
  // k when `axes` are the last k of `rank` dims (each once, any order, negative or not).
  static std::optional<int64_t> trailing_dims(const std::vector<int64_t>& axes, int64_t rank) {
    if (axes.empty() || static_cast<int64_t>(axes.size()) > rank) return std::nullopt;
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    const int64_t k = static_cast<int64_t>(axes.size());
    for (int64_t a : axes) {
      const int64_t d = a < 0 ? a + rank : a;
      if (d < rank - k || d >= rank || seen[static_cast<size_t>(d)]) return std::nullopt;
      seen[static_cast<size_t>(d)] = true;
    }
    return k;
  }

  // `sq` is pow(x, 2) or x * x.
  bool is_square_of(TensorId sq, TensorId x) const {
    const Layer* l = producer(sq);
    if (!l) return false;
    if (binary_of(*l, BinaryOp::kMul)) return l->inputs[0] == x && l->inputs[1] == x;
    if (!binary_of(*l, BinaryOp::kPow) || l->inputs[0] != x) return false;
    const auto e = scalar_constant(net_, l->inputs[1]);
    return e && *e == 2.0;
  }

  const Network& net_;
  const std::vector<Layer>& layers_;
  const NetworkIndex& index_;
};

}  // namespace

int fuse_rms_norms(Network& net) {
  std::vector<Layer> layers = net.layers();
  const NetworkIndex index(net, layers);
  const Matcher match(net, layers, index);
  std::vector<bool> gone(layers.size(), false);
  int fused = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (gone[i] || !binary_of(layers[i], BinaryOp::kMul)) continue;
    for (int side = 0; side < 2; ++side) {
      const TensorId x = layers[i].inputs[static_cast<size_t>(1 - side)];
      const TensorDesc& xd = net.tensor(x);
      const TensorDesc& out = net.tensor(layers[i].outputs[0]);
      if (!is_floating(xd.dtype) || out.dtype != xd.dtype || out.shape != xd.shape) continue;
      int64_t dims = 0;
      const auto eps = match.rms_scale_of(layers[i].inputs[static_cast<size_t>(side)], x, &dims);
      if (!eps) continue;
      NormalizationParams p;
      p.kind = NormalizationKind::kRms;
      p.epsilon = *eps;
      p.normalized_dims = dims;
      p.has_affine = false;
      Layer norm{layers[i].name, p, {x}, layers[i].outputs};
      // The scale: a constant multiplying the norm's result, its only reader. The norm then takes
      // the scale's place (the constant exists there).
      const auto j = index.single_consumer(layers[i].outputs[0]);
      if (j && !gone[*j] && binary_of(layers[*j], BinaryOp::kMul)) {
        const Layer& scale = layers[*j];
        const TensorId w = scale.inputs[scale.inputs[0] == layers[i].outputs[0] ? 1 : 0];
        if (net.tensor(scale.outputs[0]).shape == xd.shape && match.is_scale(w, x, dims)) {
          std::get<NormalizationParams>(norm.params).has_affine = true;
          norm.inputs.push_back(w);
          norm.outputs = scale.outputs;
          layers[*j] = std::move(norm);
          gone[i] = true;
          ++fused;
          break;
        }
      }
      layers[i] = std::move(norm);
      ++fused;
      break;
    }
  }
  std::vector<Layer> kept;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!gone[i]) kept.push_back(std::move(layers[i]));
  }
  net.set_layers(std::move(kept));
  return fused;
}

}  // namespace kiln::engine
