// The passes' producer/consumer index (network_index.h).
#include "engine/passes/network_index.h"

#include <algorithm>

#include "engine/scalar_math.h"

namespace kiln::engine {

NetworkIndex::NetworkIndex(const Network& net, const std::vector<Layer>& layers)
    : producer_(net.num_tensors(), -1),
      consumers_(net.num_tensors()),
      is_output_(net.num_tensors(), false),
      removed_(layers.size(), false) {
  for (TensorId id : net.outputs()) is_output_[static_cast<size_t>(id)] = true;
  for (size_t i = 0; i < layers.size(); ++i) {
    for (TensorId id : layers[i].inputs) consumers_[static_cast<size_t>(id)].push_back(i);
    for (TensorId id : layers[i].outputs)
      producer_[static_cast<size_t>(id)] = static_cast<int64_t>(i);
  }
}

void NetworkIndex::cover(TensorId id) {
  const size_t n = static_cast<size_t>(id) + 1;
  if (n <= producer_.size()) return;
  producer_.resize(n, -1);
  consumers_.resize(n);
  is_output_.resize(n, false);
}

std::optional<size_t> NetworkIndex::producer(TensorId id) const {
  if (static_cast<size_t>(id) >= producer_.size()) return std::nullopt;
  const int64_t p = producer_[static_cast<size_t>(id)];
  if (p < 0 || removed_[static_cast<size_t>(p)]) return std::nullopt;
  return static_cast<size_t>(p);
}

std::vector<size_t> NetworkIndex::consumers(TensorId id) const {
  std::vector<size_t> live;
  if (static_cast<size_t>(id) >= consumers_.size()) return live;
  for (size_t i : consumers_[static_cast<size_t>(id)]) {
    if (!removed_[i]) live.push_back(i);
  }
  return live;
}

void NetworkIndex::replace(size_t layer, const Layer& before, const Layer& after) {
  for (TensorId id : after.inputs) cover(id);
  for (TensorId id : after.outputs) cover(id);
  for (TensorId id : before.inputs) {
    auto& users = consumers_[static_cast<size_t>(id)];
    const auto it = std::find(users.begin(), users.end(), layer);
    if (it != users.end()) users.erase(it);
  }
  for (TensorId id : after.inputs) {
    auto& users = consumers_[static_cast<size_t>(id)];
    users.insert(std::upper_bound(users.begin(), users.end(), layer), layer);
  }
  for (TensorId id : before.outputs) {
    if (producer_[static_cast<size_t>(id)] == static_cast<int64_t>(layer)) {
      producer_[static_cast<size_t>(id)] = -1;
    }
  }
  for (TensorId id : after.outputs)
    producer_[static_cast<size_t>(id)] = static_cast<int64_t>(layer);
}

std::optional<size_t> NetworkIndex::single_consumer(TensorId id) const {
  if (is_output(id)) return std::nullopt;
  const auto users = consumers(id);
  if (users.size() != 1) return std::nullopt;
  return users[0];
}

const Layer* single_consumer(const Network& net, TensorId id, size_t* index) {
  const auto& outs = net.outputs();
  if (std::find(outs.begin(), outs.end(), id) != outs.end()) return nullptr;
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

void splice_layers(Network& net, std::vector<Layer> layers, const std::vector<bool>& gone,
                   std::vector<std::vector<Layer>> instead) {
  std::vector<Layer> result;
  result.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!instead[i].empty()) {
      for (Layer& l : instead[i]) result.push_back(std::move(l));
    } else if (!gone[i]) {
      result.push_back(std::move(layers[i]));
    }
  }
  net.set_layers(std::move(result));
}

void merge_into_consumer(Network& net, size_t i, size_t j, Layer merged) {
  std::vector<Layer> kept;
  for (size_t k = 0; k < net.layers().size(); ++k) {
    if (k != i) kept.push_back(k == j ? std::move(merged) : net.layers()[k]);
  }
  net.set_layers(std::move(kept));
}

std::optional<double> scalar_constant(const Network& net, TensorId id) {
  const Weights* w = net.constant_data(id);
  if (!w || !w->data || !is_floating(w->dtype) || !is_static(w->shape) || volume(w->shape) != 1) {
    return std::nullopt;
  }
  return load_as<double>(w->dtype, w->data->data(), 0);
}

}  // namespace kiln::engine
