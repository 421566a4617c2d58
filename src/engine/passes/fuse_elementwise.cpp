// Chains and trees of float elementwise layers as one FusedElementwise layer.
#include "engine/passes/passes.h"

#include <functional>
#include <map>
#include <set>

#include "engine/layer_kinds.h"
#include "engine/layers/elementwise_rules.h"

namespace kiln::engine {

FusedOp fused_op(const Layer& l) {
  if (const auto* e = std::get_if<ElementwiseParams>(&l.params)) {
    return {0, static_cast<int64_t>(e->op), 0, 0, 0, 0};
  }
  if (const auto* u = std::get_if<UnaryParams>(&l.params)) {
    return {1, static_cast<int64_t>(u->op), 0, 0, 0, 0};
  }
  if (const auto* a = std::get_if<ActivationParams>(&l.params)) {
    return {2, static_cast<int64_t>(a->kind), 0, 0, a->alpha, a->beta};
  }
  return {3, static_cast<int64_t>(std::get<CastParams>(l.params).to), 0, 0, 0, 0};
}

bool fusible_elementwise(const Network& net, const Layer& l) {
  if (l.outputs.size() != 1 || !is_floating(net.tensor(l.outputs[0]).dtype)) return false;
  for (TensorId id : l.inputs) {
    if (!is_floating(net.tensor(id).dtype)) return false;
  }
  if (const auto* c = std::get_if<CastParams>(&l.params)) return is_floating(c->to);
  return layer_kind_traits(l.params).fusible;
}

// Chains (and trees) of float elementwise layers whose intermediates have one consumer become
// one FusedElementwise layer, placed where the chain's last layer was.
int fuse_elementwise(Network& net, std::vector<std::string>& fusions, int max_inputs, int max_ops) {
  const auto& layers = net.layers();
  const NetworkIndex index(net);
  // root[i]: the layer whose fused group absorbs layer i. Layers come in topological order, so
  // when layer i joins its consumer's group, the group under i is complete; `inputs` and `ops`
  // hold each group's distinct inputs and layers so far, and a join that would pass the limits
  // does not happen (i's group stays a layer of its own).
  std::vector<size_t> root(layers.size());
  std::vector<std::set<TensorId>> inputs_of(layers.size());
  std::vector<int> ops_of(layers.size(), 1);
  for (size_t i = 0; i < layers.size(); ++i) {
    root[i] = i;
    inputs_of[i].insert(layers[i].inputs.begin(), layers[i].inputs.end());
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!fusible_elementwise(net, layers[i]) ||
        std::holds_alternative<FusedElementwiseParams>(layers[i].params)) {
      continue;
    }
    const auto j = index.single_consumer(layers[i].outputs[0]);
    if (!j || !fusible_elementwise(net, layers[*j]) ||
        std::holds_alternative<FusedElementwiseParams>(layers[*j].params)) {
      continue;
    }
    std::set<TensorId> merged = inputs_of[*j];
    merged.erase(layers[i].outputs[0]);
    merged.insert(inputs_of[i].begin(), inputs_of[i].end());
    const int ops = ops_of[*j] + ops_of[i];
    if ((max_inputs > 0 && static_cast<int>(merged.size()) > max_inputs) ||
        (max_ops > 0 && ops > max_ops)) {
      continue;
    }
    root[i] = *j;
    inputs_of[*j] = std::move(merged);
    ops_of[*j] = ops;
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
      const auto p = index.producer(id);
      if (!p || !member_set.count(*p)) {
        inputs.push_back(id);  // inputs occupy the first registers; renumbered below
        return reg[id] = -static_cast<int64_t>(inputs.size());
      }
      const Layer& l = layers[*p];
      const int64_t a = emit(l.inputs[0]);
      const int64_t b = l.inputs.size() > 1 ? emit(l.inputs[1]) : 0;
      const FusedOp f = fused_op(l);
      params.program.insert(params.program.end(), {f.kind, f.op, a, b});
      params.constants.insert(params.constants.end(), {f.alpha, f.beta});
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
  return static_cast<int>(replacement.size());
}

}  // namespace kiln::engine
