// The projection-merging passes: the q, k and v projections of a packed-head attention as one
// matmul (attention_heads.h), and projections of one input whose results one elementwise group
// combines as one matmul whose columns that group reads (passes.h).
#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "engine/passes/attention_heads.h"
#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"

namespace kiln::engine {

namespace {

// A projection that can join others: matmul(a, constant w [, constant bias]) with no other
// post-op.
struct Projection {
  size_t layer;
  const Weights* weight;
  const Weights* bias;  // null: no bias
  int64_t n;            // output columns
};

// Layer p, which writes `id`, as a projection (whoever reads `id`).
std::optional<Projection> projection_layer(const Network& net, const std::vector<Layer>& layers,
                                           size_t p, TensorId id) {
  const Layer& l = layers[p];
  const auto* m = std::get_if<MatMulParams>(&l.params);
  if (!m || m->transpose_a || m->post.has_residual || m->post.activation != ActivationKind::kNone ||
      m->post.activation2 != ActivationKind::kNone ||
      l.inputs.size() != (m->post.has_bias ? 3u : 2u) || l.outputs.size() != 1) {
    return std::nullopt;
  }
  const Weights* w = net.constant_data(l.inputs[1]);
  const Weights* b = m->post.has_bias ? net.constant_data(l.inputs[2]) : nullptr;
  if (!w || !w->data || w->shape.size() != 2 || (m->post.has_bias && (!b || !b->data))) {
    return std::nullopt;
  }
  const int64_t n = m->transpose_b ? w->shape[0] : w->shape[1];
  const Shape& out = net.tensor(id).shape;
  if (out.size() < 2 || out.back() != n || (b && (b->shape != Shape{n} || b->dtype != w->dtype))) {
    return std::nullopt;
  }
  return Projection{p, w, b, n};
}

// Where `id`, read by nothing but `reader`, is a projection's result.
std::optional<Projection> projection(const Network& net, const std::vector<Layer>& layers,
                                     const NetworkIndex& index, TensorId id, size_t reader) {
  const auto p = index.producer(id);
  if (!p || index.is_output(id)) return std::nullopt;
  for (size_t c : index.consumers(id)) {
    if (c != reader) return std::nullopt;
  }
  return projection_layer(net, layers, *p, id);
}

// The parts' weights side by side along the output columns ([sum N, K] when transposed, else
// [K, sum N]); their biases likewise, zeros for a part without.
Weights concat_weights(const std::vector<Projection>& parts, bool transposed) {
  const Weights& first = *parts[0].weight;
  const size_t esize = dtype_size(first.dtype);
  const int64_t k = transposed ? first.shape[1] : first.shape[0];
  int64_t n = 0;
  for (const Projection& p : parts) n += p.n;
  std::vector<uint8_t> bytes(static_cast<size_t>(n * k) * esize);
  int64_t col = 0;
  for (const Projection& p : parts) {
    const uint8_t* src = p.weight->data->data();
    if (transposed) {  // rows [col, col + n) of [sum N, K]
      std::memcpy(bytes.data() + static_cast<size_t>(col * k) * esize, src,
                  static_cast<size_t>(p.n * k) * esize);
    } else {  // columns [col, col + n) of each of the K rows
      for (int64_t r = 0; r < k; ++r) {
        std::memcpy(bytes.data() + static_cast<size_t>(r * n + col) * esize,
                    src + static_cast<size_t>(r * p.n) * esize, static_cast<size_t>(p.n) * esize);
      }
    }
    col += p.n;
  }
  return Weights::from_bytes(first.dtype, transposed ? Shape{n, k} : Shape{k, n}, std::move(bytes));
}

Weights concat_biases(const std::vector<Projection>& parts) {
  const size_t esize = dtype_size(parts[0].weight->dtype);
  int64_t n = 0;
  for (const Projection& p : parts) n += p.n;
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * esize, 0);  // zero in every float dtype
  int64_t col = 0;
  for (const Projection& p : parts) {
    if (p.bias) {
      std::memcpy(bytes.data() + static_cast<size_t>(col) * esize, p.bias->data->data(),
                  static_cast<size_t>(p.n) * esize);
    }
    col += p.n;
  }
  return Weights::from_bytes(parts[0].weight->dtype, {n}, std::move(bytes));
}

// Whether projections px and py can be one matmul: the same input, weights of one dtype and K,
// the same flags, results of one dtype and leading dims.
bool compatible(const Network& net, const std::vector<Layer>& layers, const Projection& px,
                const Projection& py) {
  const Layer &x = layers[px.layer], &y = layers[py.layer];
  const auto &mx = std::get<MatMulParams>(x.params), &my = std::get<MatMulParams>(y.params);
  const Shape &ox = net.tensor(x.outputs[0]).shape, &oy = net.tensor(y.outputs[0]).shape;
  const size_t k_dim = mx.transpose_b ? 1 : 0;
  return x.inputs[0] == y.inputs[0] && mx.transpose_b == my.transpose_b && mx.tf32 == my.tf32 &&
         px.weight->dtype == py.weight->dtype &&
         px.weight->shape[k_dim] == py.weight->shape[k_dim] &&
         net.tensor(x.outputs[0]).dtype == net.tensor(y.outputs[0]).dtype &&
         Shape(ox.begin(), ox.end() - 1) == Shape(oy.begin(), oy.end() - 1);
}

// The layers of one matmul of the parts' input by their weights side by side (and biases, zeros
// for a part without), appended to `place`; returns its result, a new tensor described by `out`.
TensorId add_merged_matmul(Network& net, const std::vector<Layer>& layers,
                           const std::vector<Projection>& parts, const TensorDesc& out,
                           std::vector<Layer>& place) {
  const Layer& first = layers[parts[0].layer];
  const MatMulParams& m0 = std::get<MatMulParams>(first.params);
  const TensorId result = net.add_tensor(out);
  const std::string weight_name = out.name + ":weight";
  net.add_weight(weight_name, concat_weights(parts, m0.transpose_b));
  const Weights& w = net.weight(weight_name);
  const TensorId weight = net.add_tensor(TensorDesc{weight_name, w.dtype, w.shape, std::nullopt});
  place.push_back(Layer{weight_name, ConstantParams{weight_name}, {}, {weight}});
  MatMulParams mm = m0;
  std::vector<TensorId> inputs = {first.inputs[0], weight};
  bool biased = false;
  for (const Projection& p : parts) biased = biased || p.bias != nullptr;
  mm.post.has_bias = biased;
  if (biased) {
    const std::string bias_name = out.name + ":bias";
    net.add_weight(bias_name, concat_biases(parts));
    const Weights& b = net.weight(bias_name);
    const TensorId bias = net.add_tensor(TensorDesc{bias_name, b.dtype, b.shape, std::nullopt});
    place.push_back(Layer{bias_name, ConstantParams{bias_name}, {}, {bias}});
    inputs.push_back(bias);
  }
  place.push_back(Layer{out.name, mm, inputs, {result}});
  return result;
}

// The network's layers become `layers` less those the index removed, each list of `before`
// placed before its layer; then the parts' weights, now unread, go.
void replace_layers(Network& net, std::vector<Layer>& layers, const NetworkIndex& index,
                    std::map<size_t, std::vector<Layer>>& before) {
  std::vector<Layer> kept;
  for (size_t i = 0; i < layers.size(); ++i) {
    for (Layer& l : before[i]) kept.push_back(std::move(l));
    if (!index.removed(i)) kept.push_back(std::move(layers[i]));
  }
  net.set_layers(std::move(kept));
  remove_dead_layers(net);
}

}  // namespace

int merge_attention_projections(Network& net, const PackedHeads& accept,
                                std::vector<std::string>& fusions) {
  std::vector<Layer> layers = net.layers();
  NetworkIndex index(net, layers);
  std::map<size_t, std::vector<Layer>> before;  // merged layers, at their first part's place
  int merged = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto* a = std::get_if<AttentionParams>(&layers[i].params);
    if (!a || a->heads <= 0 || layers[i].inputs.size() < 3 || a->columns.size() != 3) continue;
    // The distinct operands that are projections, then the most of them that can be one matmul
    // (all three in self-attention, k and v in cross-attention).
    std::vector<TensorId> candidates;
    std::vector<Projection> found;
    for (size_t j = 0; j < 3; ++j) {
      const TensorId id = layers[i].inputs[j];
      if (std::find(candidates.begin(), candidates.end(), id) != candidates.end()) continue;
      if (const auto p = projection(net, layers, index, id, i)) {
        candidates.push_back(id);
        found.push_back(*p);
      }
    }
    std::vector<TensorId> operands;
    std::vector<Projection> parts;
    for (size_t seed = 0; seed < found.size(); ++seed) {
      std::vector<TensorId> ids = {candidates[seed]};
      std::vector<Projection> group = {found[seed]};
      for (size_t o = seed + 1; o < found.size(); ++o) {
        if (compatible(net, layers, found[seed], found[o])) {
          ids.push_back(candidates[o]);
          group.push_back(found[o]);
        }
      }
      if (group.size() > parts.size()) operands = std::move(ids), parts = std::move(group);
    }
    if (parts.size() < 2) continue;
    const Layer& first = layers[parts[0].layer];
    // The merged result and where each operand's columns start in it.
    TensorDesc out = net.tensor(first.outputs[0]);
    std::map<TensorId, int64_t> offset;
    int64_t width = 0;
    std::string names;
    for (size_t j = 0; j < parts.size(); ++j) {
      offset[operands[j]] = width;
      width += parts[j].n;
      names += (j ? " + " : "") + layers[parts[j].layer].name;
    }
    out.shape.back() = width;
    out.name = first.name + ":projections";
    out.values.reset();
    AttentionParams packed = *a;
    std::vector<TensorDesc> sources;
    // The operands were [B, rows, width] (fold_attention_heads), so is the merged result; B and
    // rows may be dynamic.
    if (out.shape.size() != 3 || out.shape[0] == 0 || out.shape[1] == 0 || width <= 0) continue;
    for (size_t j = 0; j < 3; ++j) {
      const auto at = offset.find(layers[i].inputs[j]);
      if (at != offset.end()) {
        packed.columns[j] += at->second;
        sources.push_back(out);
      } else {
        sources.push_back(net.tensor(layers[i].inputs[j]));
      }
    }
    if (a->has_mask) sources.push_back(net.tensor(layers[i].inputs[3]));
    if (!accept(packed, sources, net.tensor(layers[i].outputs[0]))) continue;

    const TensorId result = add_merged_matmul(net, layers, parts, out, before[parts[0].layer]);
    for (const Projection& p : parts) index.remove(p.layer);
    Layer rewritten = layers[i];
    rewritten.params = packed;
    for (size_t j = 0; j < 3; ++j) {
      if (offset.count(rewritten.inputs[j])) rewritten.inputs[j] = result;
    }
    layers[i] = std::move(rewritten);
    fusions.push_back(names + " -> " + out.name);
    ++merged;
  }
  if (merged > 0) replace_layers(net, layers, index, before);
  return merged;
}

int merge_elementwise_projections(Network& net, std::vector<std::string>& fusions) {
  std::vector<Layer> layers = net.layers();
  NetworkIndex index(net, layers);
  // The fused group a result joins: the layers of its chain of single-consumer fusible layers,
  // and the last of them (the group's root), if it has one.
  struct Chain {
    std::vector<size_t> layers;
    size_t root;
  };
  const auto chain_of = [&](TensorId id) -> std::optional<Chain> {
    Chain c;
    for (auto next = index.single_consumer(id); next && fusible_elementwise(net, layers[*next]);
         next = index.single_consumer(layers[*next].outputs[0])) {
      c.layers.push_back(*next);
    }
    if (c.layers.empty()) return std::nullopt;
    c.root = c.layers.back();
    return c;
  };
  // Candidates by (input, root), in layer order.
  std::map<std::pair<TensorId, size_t>, std::vector<std::pair<Projection, Chain>>> groups;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!std::holds_alternative<MatMulParams>(layers[i].params) || layers[i].outputs.size() != 1) {
      continue;
    }
    const TensorId id = layers[i].outputs[0];
    if (!is_static(net.tensor(id).shape) || index.is_output(id)) continue;
    auto p = projection_layer(net, layers, i, id);
    auto c = p ? chain_of(id) : std::nullopt;
    if (p && c) groups[{layers[i].inputs[0], c->root}].push_back({*p, *c});
  }
  std::map<size_t, std::vector<Layer>> before;  // merged layers, at their first part's place
  int merged = 0;
  for (const auto& [key, found] : groups) {
    std::vector<Projection> parts;
    std::set<size_t> joined;  // the fused group's layers
    for (const auto& [p, c] : found) {
      if (!parts.empty() && !compatible(net, layers, parts[0], p)) continue;
      parts.push_back(p);
      joined.insert(c.layers.begin(), c.layers.end());
    }
    if (parts.size() < 2 || joined.size() < 2) continue;
    TensorDesc out = net.tensor(layers[parts[0].layer].outputs[0]);
    int64_t width = 0;
    std::string names;
    for (size_t j = 0; j < parts.size(); ++j) {
      width += parts[j].n;
      names += (j ? " + " : "") + layers[parts[j].layer].name;
    }
    out.shape.back() = width;
    out.name = layers[parts[0].layer].name + ":projections";
    out.values.reset();
    std::vector<Layer>& place = before[parts[0].layer];
    const TensorId result = add_merged_matmul(net, layers, parts, out, place);
    // Each part's columns of it, as the tensor the part wrote.
    int64_t col = 0;
    for (const Projection& p : parts) {
      const Layer& part = layers[p.layer];
      std::vector<int64_t> columns(static_cast<size_t>(p.n));
      std::iota(columns.begin(), columns.end(), col);
      col += p.n;
      const std::string idx_name = part.name + ":columns";
      net.add_weight(idx_name, Weights::from_ints({p.n}, columns));
      const TensorId idx = net.add_tensor(TensorDesc{idx_name, DataType::kI64, {p.n}, {}});
      place.push_back(Layer{idx_name, ConstantParams{idx_name}, {}, {idx}});
      GatherParams g;
      g.axis = static_cast<int64_t>(out.shape.size()) - 1;
      place.push_back(Layer{part.name, g, {result, idx}, part.outputs});
      index.remove(p.layer);
    }
    fusions.push_back(names + " -> " + out.name);
    ++merged;
  }
  if (merged > 0) replace_layers(net, layers, index, before);
  return merged;
}

}  // namespace kiln::engine
