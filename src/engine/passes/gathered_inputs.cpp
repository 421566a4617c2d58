// A gather by constant 1-D indices whose only reader is a fused elementwise layer becomes part of
// it: the layer reads the gather's source at the indices (FusedElementwiseParams::gathers)
// instead of a gathered copy, one kernel and one pass over memory fewer. Rotary embeddings'
// rotate_half, a gather along the head dim after concat_slices, is read this way by the kernel
// that multiplies it by sin and adds x * cos.
//
// A lone elementwise layer (which fuse_elementwise leaves as it is) becomes a fused layer of one
// operation to take a gather in. And a gather may sit behind a view (a reshape that moves no
// data) where every input of the reader has the reader's shape: the reader then runs at the
// gather's shape, its other inputs and its result viewed as that. Swin's window reverse after a
// shifted window's attention, `x + roll(windows).view(B, H, W, C)`, is a row gather then a view
// then the residual add: one kernel instead of two.
#include <cstring>
#include <optional>

#include "engine/layers/elementwise_rules.h"
#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"
#include "engine/scalar_math.h"

namespace kiln::engine {
namespace {

// The longest aligned run (16, 8, 4, 2 or 1) the indices come in: idx[c * r + e] == idx[c * r] + e
// with idx[c * r] and the source's axis size `d` multiples of r.
int64_t aligned_run(const std::vector<int32_t>& idx, int64_t d) {
  const auto n = static_cast<int64_t>(idx.size());
  for (int64_t r = 16; r > 1; r /= 2) {
    bool ok = n % r == 0 && d % r == 0;
    for (int64_t k = 0; k < n && ok; ++k) {
      const int32_t first = idx[static_cast<size_t>(k - k % r)];
      ok = first % r == 0 && idx[static_cast<size_t>(k)] == first + k % r;
    }
    if (ok) return r;
  }
  return 1;
}

// A gather that layer `reader` could read in place through its input `in`: the gather (by
// constant 1-D integer indices in range, of a static float source) and the view between them, if
// any. Each is its input's only reader.
struct FoldableGather {
  size_t gather;
  std::optional<size_t> view;
  int64_t axis;
  std::vector<int32_t> indices;
};

std::optional<FoldableGather> foldable_gather(const Network& net, const std::vector<Layer>& layers,
                                              const NetworkIndex& index,
                                              const std::vector<bool>& gone, TensorId in,
                                              size_t reader) {
  auto p = index.producer(in);
  if (!p || gone[*p] || index.single_consumer(in) != reader) return std::nullopt;
  std::optional<size_t> view;
  if (const auto* sh = std::get_if<ShuffleParams>(&layers[*p].params)) {
    const Layer& v = layers[*p];
    if (shuffle_moves_data(*sh) || v.inputs.size() != 1) return std::nullopt;
    view = *p;
    p = index.producer(v.inputs[0]);
    if (!p || gone[*p] || index.single_consumer(v.inputs[0]) != *view) return std::nullopt;
  }
  const Layer& g = layers[*p];
  const auto* gp = std::get_if<GatherParams>(&g.params);
  if (!gp || gp->mode != GatherMode::kDefault || g.inputs.size() != 2) return std::nullopt;
  const auto ip = index.producer(g.inputs[1]);
  const auto* c = ip ? std::get_if<ConstantParams>(&layers[*ip].params) : nullptr;
  const TensorDesc& data = net.tensor(g.inputs[0]);
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  const int64_t axis = gp->axis < 0 ? gp->axis + rank : gp->axis;
  if (!c || !is_floating(data.dtype) || axis < 0 || axis >= rank || !is_static(data.shape)) {
    return std::nullopt;
  }
  const Weights& w = net.weight(c->weight);
  const int64_t d = data.shape[static_cast<size_t>(axis)], n = volume(w.shape);
  // 1-D integer indices of at least two (a gathered dim of size 1 is merged away by the
  // kernels' dims), in range after wrapping.
  if (!w.data || w.shape.size() != 1 || n < 2 || !is_integer(w.dtype)) return std::nullopt;
  std::vector<int32_t> idx;
  for (int64_t k = 0; k < n; ++k) {
    int64_t v = load_as<int64_t>(w.dtype, w.data->data(), k);
    if (v < 0) v += d;
    if (v < 0 || v >= d) return std::nullopt;
    idx.push_back(static_cast<int32_t>(v));
  }
  return FoldableGather{*p, view, axis, std::move(idx)};
}

// Whether every input of layer `l` and its result have one static shape (no broadcast), so
// that it can run at any shape of as many elements, its tensors viewed as that.
bool of_one_shape(const Network& net, const Layer& l) {
  const Shape& s = net.tensor(l.outputs[0]).shape;
  if (!is_static(s)) return false;
  for (TensorId id : l.inputs) {
    if (net.tensor(id).shape != s) return false;
  }
  return true;
}

// Lone elementwise layer `l` (fusible_elementwise) as a fused layer of one operation.
Layer as_fused(const Layer& l) {
  FusedElementwiseParams f;
  int64_t kind = 0, op = 0;
  double alpha = 0, beta = 0;
  if (const auto* e = std::get_if<ElementwiseParams>(&l.params)) {
    op = static_cast<int64_t>(e->op);
  } else if (const auto* u = std::get_if<UnaryParams>(&l.params)) {
    kind = 1, op = static_cast<int64_t>(u->op);
  } else if (const auto* a = std::get_if<ActivationParams>(&l.params)) {
    kind = 2, op = static_cast<int64_t>(a->kind), alpha = a->alpha, beta = a->beta;
  } else {
    kind = 3, op = static_cast<int64_t>(std::get<CastParams>(l.params).to);
  }
  std::vector<TensorId> inputs = {l.inputs[0]};
  int64_t b = 0;
  if (kind == 0 && l.inputs[1] != l.inputs[0]) {
    inputs.push_back(l.inputs[1]);
    b = 1;
  }
  f.program = {kind, op, 0, b};
  f.constants = {alpha, beta};
  f.fused_layers = {l.name};
  return Layer{l.name, f, inputs, l.outputs};
}

}  // namespace

int fold_gathers_into_elementwise(Network& net, int max_inputs) {
  std::vector<Layer> layers = net.layers();
  const NetworkIndex index(net, layers);
  std::vector<bool> gone(layers.size(), false);
  // Index constants and views of the inputs, placed before a layer; views of results, after.
  std::vector<std::vector<Layer>> before(layers.size()), after(layers.size());
  int folded = 0;
  for (size_t f = 0; f < layers.size(); ++f) {
    const bool lone = !std::holds_alternative<FusedElementwiseParams>(layers[f].params);
    if (lone) {
      const Layer& l = layers[f];
      if (!fusible_elementwise(net, l) || l.inputs.empty() || l.inputs.size() > 2) continue;
      bool any = false;
      for (TensorId in : l.inputs) {
        const auto fg = foldable_gather(net, layers, index, gone, in, f);
        any = any || (fg && (!fg->view || of_one_shape(net, l)));
      }
      if (!any || (max_inputs > 0 && max_inputs <= static_cast<int>(l.inputs.size()))) continue;
      layers[f] = as_fused(l);
    }
    auto* fused = std::get_if<FusedElementwiseParams>(&layers[f].params);
    const size_t regs = fused_registers(layers[f].name, *fused, layers[f].inputs.size());
    bool reshaped = false;  // the layer now runs at a gather's shape
    for (size_t j = 0; j < regs && !reshaped; ++j) {
      if (max_inputs > 0 && static_cast<int>(layers[f].inputs.size()) >= max_inputs) break;
      bool gathered = false;
      for (size_t k = 0; k < fused->gathers.size(); k += 3) {
        gathered = gathered || fused->gathers[k] == static_cast<int64_t>(j);
      }
      if (gathered) continue;
      const auto fg = foldable_gather(net, layers, index, gone, layers[f].inputs[j], f);
      if (!fg) continue;
      const Layer& g = layers[fg->gather];
      if (fg->view) {
        // The layer runs at the gather's shape: only where nothing else was gathered (whose
        // axes are of the layer's shape) and every tensor of it has one shape.
        if (!fused->gathers.empty() || !of_one_shape(net, layers[f])) continue;
        const Shape at = net.tensor(g.outputs[0]).shape;
        if (!is_static(at)) continue;
        const auto view = [&](const std::string& name, TensorId from, TensorId to) {
          ShuffleParams s;
          s.has_reshape = true;
          s.reshape = net.tensor(to).shape;
          return Layer{name, s, {from}, {to}};
        };
        Layer& l = layers[f];
        for (size_t k = 0; k < l.inputs.size(); ++k) {
          if (k == j) continue;
          const TensorDesc d = net.tensor(l.inputs[k]);
          const std::string name = l.name + ":input" + std::to_string(k) + ":viewed";
          const TensorId v = net.add_tensor(TensorDesc{name, d.dtype, at, {}});
          before[f].push_back(view(name, l.inputs[k], v));
          for (size_t m = k + 1; m < l.inputs.size(); ++m) {
            if (l.inputs[m] == l.inputs[k] && m != j) l.inputs[m] = v;
          }
          l.inputs[k] = v;
        }
        const TensorDesc o = net.tensor(l.outputs[0]);
        const std::string name = l.name + ":at_gather";
        const TensorId r = net.add_tensor(TensorDesc{name, o.dtype, at, {}});
        after[f].push_back(view(l.name + ":viewed", r, l.outputs[0]));
        l.outputs[0] = r;
        gone[*fg->view] = true;
        fused->fused_layers.push_back(layers[*fg->view].name);
        reshaped = true;
      }
      const int64_t n = static_cast<int64_t>(fg->indices.size());
      const int64_t d = net.tensor(g.inputs[0]).shape[static_cast<size_t>(fg->axis)];
      const std::string name = g.name + ":gathered_indices";
      std::vector<uint8_t> bytes(fg->indices.size() * sizeof(int32_t));
      std::memcpy(bytes.data(), fg->indices.data(), bytes.size());
      net.add_weight(name, Weights::from_bytes(DataType::kI32, {n}, std::move(bytes)));
      const TensorId id = net.add_tensor(TensorDesc{name, DataType::kI32, {n}, {}});
      before[f].insert(before[f].begin(), Layer{name, ConstantParams{name}, {}, {id}});
      layers[f].inputs[j] = g.inputs[0];
      layers[f].inputs.push_back(id);
      fused->gathers.insert(fused->gathers.end(),
                            {static_cast<int64_t>(j), fg->axis, aligned_run(fg->indices, d)});
      fused->fused_layers.push_back(g.name);
      gone[fg->gather] = true;
      const auto ip = index.producer(g.inputs[1]);
      if (index.single_consumer(g.inputs[1]) == fg->gather) gone[*ip] = true;
      ++folded;
    }
  }
  if (folded == 0) return 0;
  std::vector<Layer> result;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (gone[i]) continue;
    for (Layer& l : before[i]) result.push_back(std::move(l));
    result.push_back(std::move(layers[i]));
    for (Layer& l : after[i]) result.push_back(std::move(l));
  }
  net.set_layers(std::move(result));
  return folded;
}

}  // namespace kiln::engine
