// A concat along an axis of slices of one tensor along that axis, each slice (or its negation)
// read only by the concat, is one gather of the tensor by a constant index list, times a constant
// +1/-1 along the axis where some part was negated. Rotary embeddings' rotate_half,
// cat(-x[..., h:], x[..., :h]), is such a concat: two slices, a negation and a concat (four
// kernels, three passes over x) become one gather, and the sign joins the elementwise multiply
// that follows in the generated kernel. A roll written as cat(x[..., k:], x[..., :k]) is one too.
// Slices with steps, of other axes or of different tensors are left as they are.
#include <algorithm>
#include <optional>

#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"
#include "engine/scalar_math.h"

namespace kiln::engine {
namespace {

// One part of the concat: a slice of `source` along the axis, [start, start + length), negated or
// not, and the layers that computed it (to remove).
struct Part {
  TensorId source;
  int64_t start, length;
  bool negated;
  std::vector<size_t> layers;
};

std::optional<Part> part_of(const Network& net, const std::vector<Layer>& layers,
                            const NetworkIndex& index, TensorId id, int64_t axis) {
  Part part{};
  auto p = index.producer(id);
  if (!p || !index.single_consumer(id)) return std::nullopt;
  if (const auto* u = std::get_if<UnaryParams>(&layers[*p].params)) {
    if (u->op != UnaryOp::kNeg || layers[*p].inputs.size() != 1) return std::nullopt;
    part.negated = true;
    part.layers.push_back(*p);
    id = layers[*p].inputs[0];
    p = index.producer(id);
    if (!p || !index.single_consumer(id)) return std::nullopt;
  }
  const auto* s = std::get_if<SliceParams>(&layers[*p].params);
  if (!s || s->axes.size() != 1 || layers[*p].inputs.size() != 1) return std::nullopt;
  const TensorId source = layers[*p].inputs[0];
  const Shape& in = net.tensor(source).shape;
  const int64_t rank = static_cast<int64_t>(in.size());
  const int64_t a = s->axes[0] < 0 ? s->axes[0] + rank : s->axes[0];
  if (a != axis || (!s->steps.empty() && s->steps[0] != 1) || !is_static(in)) return std::nullopt;
  const int64_t d = in[static_cast<size_t>(a)];
  part.source = source;
  part.start = std::clamp<int64_t>(s->starts[0] < 0 ? s->starts[0] + d : s->starts[0], 0, d);
  part.length = net.tensor(id).shape[static_cast<size_t>(a)];
  part.layers.push_back(*p);
  return part;
}

}  // namespace

int gather_concat_slices(Network& net) {
  std::vector<Layer> layers = net.layers();
  const NetworkIndex index(net, layers);
  std::vector<bool> gone(layers.size(), false);
  // Per layer index, the layers that take its place (the concat's replacement).
  std::vector<std::vector<Layer>> instead(layers.size());
  int rewritten = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto* c = std::get_if<ConcatParams>(&layers[i].params);
    if (!c || c->stack || layers[i].inputs.size() < 2) continue;
    const TensorDesc out = net.tensor(layers[i].outputs[0]);  // (a copy: tensors are added below)
    const int64_t rank = static_cast<int64_t>(out.shape.size());
    const int64_t axis = c->axis < 0 ? c->axis + rank : c->axis;
    if (axis < 0 || axis >= rank || !is_static(out.shape)) continue;
    std::vector<Part> parts;
    bool ok = true;
    for (TensorId in : layers[i].inputs) {
      auto part = part_of(net, layers, index, in, axis);
      ok =
          part && (parts.empty() || part->source == parts[0].source) &&
          std::none_of(part->layers.begin(), part->layers.end(), [&](size_t l) { return gone[l]; });
      if (!ok) break;
      parts.push_back(std::move(*part));
    }
    if (!ok) continue;
    std::vector<int64_t> indices;
    std::vector<double> signs;
    bool negated = false;
    for (const Part& part : parts) {
      for (int64_t j = 0; j < part.length; ++j) {
        indices.push_back(part.start + j);
        signs.push_back(part.negated ? -1.0 : 1.0);
      }
      negated = negated || part.negated;
    }
    const DataType xt = net.tensor(parts[0].source).dtype;
    if (negated && !is_floating(xt)) continue;
    const int64_t n = static_cast<int64_t>(indices.size());
    const std::string& name = layers[i].name;
    std::vector<Layer>& now = instead[i];
    const std::string idx_name = name + ":indices";
    net.add_weight(idx_name, Weights::from_ints({n}, indices));
    const TensorId idx = net.add_tensor(TensorDesc{idx_name, DataType::kI64, {n}, {}});
    now.push_back(Layer{idx_name, ConstantParams{idx_name}, {}, {idx}});
    TensorId gathered = layers[i].outputs[0];
    if (negated)
      gathered = net.add_tensor(TensorDesc{name + ":gathered", out.dtype, out.shape, {}});
    GatherParams g;
    g.axis = axis;
    now.push_back(Layer{name, g, {parts[0].source, idx}, {gathered}});
    if (negated) {
      // The signs along the axis, broadcast over the dims after it, in x's dtype.
      Shape sign_shape(static_cast<size_t>(rank - axis), 1);
      sign_shape[0] = n;
      std::vector<uint8_t> bytes(static_cast<size_t>(n) * dtype_size(xt));
      for (int64_t j = 0; j < n; ++j) store_as<double>(xt, bytes.data(), j, signs[j]);
      const std::string sign_name = name + ":signs";
      net.add_weight(sign_name, Weights::from_bytes(xt, sign_shape, std::move(bytes)));
      const TensorId sign = net.add_tensor(TensorDesc{sign_name, xt, sign_shape, {}});
      now.push_back(Layer{sign_name, ConstantParams{sign_name}, {}, {sign}});
      now.push_back(Layer{name + ":signed",
                          ElementwiseParams{BinaryOp::kMul},
                          {gathered, sign},
                          layers[i].outputs});
    }
    for (const Part& part : parts) {
      for (size_t l : part.layers) gone[l] = true;
    }
    ++rewritten;
  }
  if (rewritten > 0) splice_layers(net, std::move(layers), gone, std::move(instead));
  return rewritten;
}

}  // namespace kiln::engine
