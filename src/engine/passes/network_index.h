// Who produces and who reads each tensor of a layer list: the one producer/consumer index the
// builder's passes share. Built in one scan; a pass that rewrites the list builds a new one (or
// marks removed layers, for passes that rewrite in place and compact at the end).
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "engine/network.h"

namespace kiln::engine {

class NetworkIndex {
 public:
  explicit NetworkIndex(const Network& net) : NetworkIndex(net, net.layers()) {}
  // Over `layers`, a working copy of net's layers (tensor ids are net's).
  NetworkIndex(const Network& net, const std::vector<Layer>& layers);

  // The index of the layer that writes `id`, if a live one does.
  std::optional<size_t> producer(TensorId id) const;
  // The live layers reading `id`, once per use, in layer order.
  std::vector<size_t> consumers(TensorId id) const;
  bool is_output(TensorId id) const {
    return static_cast<size_t>(id) < is_output_.size() && is_output_[static_cast<size_t>(id)];
  }
  // The only live layer reading `id`, if exactly one reads it, once, and `id` is not a network
  // output (so a fusion may make it disappear).
  std::optional<size_t> single_consumer(TensorId id) const;
  // Layer `layer` no longer produces or reads anything.
  void remove(size_t layer) { removed_[layer] = true; }
  // Layer `layer`, which was `before`, is now `after` (other inputs and outputs, which may be
  // tensors added to the network since the index was built).
  void replace(size_t layer, const Layer& before, const Layer& after);
  bool removed(size_t layer) const { return removed_[layer]; }

 private:
  void cover(TensorId id);  // sizes the per-tensor tables to hold `id`

  std::vector<int64_t> producer_;               // per tensor, -1: none
  std::vector<std::vector<size_t>> consumers_;  // per tensor
  std::vector<bool> is_output_;
  std::vector<bool> removed_;  // per layer
};

// The only layer of `net` reading `id`, if exactly one reads it, once, and `id` is not a network
// output; its index in `*index`. A scan: for a pass that asks once per rewrite.
const Layer* single_consumer(const Network& net, TensorId id, size_t* index);

// The one value of a constant float tensor of one element.
std::optional<double> scalar_constant(const Network& net, TensorId id);

// Calls rewrite(i) at each layer index; a rewrite that changed the network (returned true) removed
// layer i, so the layer now at i is tried next. Returns how many rewrites there were.
int rewrite_each(Network& net, const std::function<bool(size_t)>& rewrite);

// The network's layers become `layers` with layer i replaced by `instead[i]` where that is not
// empty, and left out where `gone[i]` (a pass that rewrites on a copy of the layer list).
void splice_layers(Network& net, std::vector<Layer> layers, const std::vector<bool>& gone,
                   std::vector<std::vector<Layer>> instead);

// Layer i absorbed into its consumer, layer j (> i): j becomes `merged`, i goes.
void merge_into_consumer(Network& net, size_t i, size_t j, Layer merged);

}  // namespace kiln::engine
