// The network definition: tensors, weights, inputs with optimization profiles, and layers.
// Adding a layer validates it and infers its outputs (symbolically for dynamic dims).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/layers.h"
#include "engine/types.h"

namespace kiln::engine {

using TensorId = int32_t;

struct TensorDesc {
  std::string name;
  DataType dtype = DataType::kF32;
  Shape shape;
  // Known contents of small integer tensors (shape tensors), when computable without running:
  // constants, shapes of static inputs, and arithmetic on those.
  std::optional<std::vector<int64_t>> values;
};

// Allowed range of an input's shape; static inputs have min == opt == max.
struct Profile {
  Shape min, opt, max;
};

// A weight's bytes: its own, or a view of memory another owner keeps alive (a plan's buffer, a
// cache entry mapped from its file), so that loading a plan copies no weights.
class Bytes {
 public:
  explicit Bytes(std::vector<uint8_t> owned)
      : owned_(std::move(owned)), data_(owned_.data()), size_(owned_.size()) {}
  // `size` bytes at `data`, which stay valid while `keepalive` lives.
  Bytes(const uint8_t* data, size_t size, std::shared_ptr<const void> keepalive)
      : data_(data), size_(size), keepalive_(std::move(keepalive)) {}
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  std::vector<uint8_t> owned_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> keepalive_;
};

// Named weights (the name is what refit uses). Data is shared, never copied by the network.
struct Weights {
  DataType dtype = DataType::kF32;
  Shape shape;
  std::shared_ptr<const Bytes> data;
  static Weights from_floats(const Shape& shape, const std::vector<float>& values);
  static Weights from_ints(const Shape& shape, const std::vector<int64_t>& values);
  static Weights from_bytes(DataType dtype, const Shape& shape, std::vector<uint8_t> bytes);
};

struct Layer {
  std::string name;
  LayerParams params;
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
};

// The layers every backend runs on tensors placed in wider ones (TensorRef::row and pitch; the
// concat_in_place pass): reading them, concats and the elementwise family (binary, unary,
// activation, fused chains without gathered inputs); writing one, concats. A backend may write
// more (WritesPlacedFn).
bool reads_placed(const Layer& layer);
bool writes_placed(const Layer& layer);

// Where a layer's output would be placed: its first element `offset` elements into a buffer, in
// rows of `row` elements (its width along the concat's axis times every dim after it) each
// `pitch` elements after the last. -1: not known (a build's dynamic dims).
struct Placement {
  int64_t offset = -1, row = -1, pitch = -1;
};
// Whether a backend runs `layer` writing its output placed so (besides writes_placed's layers),
// its inputs and output of these descriptions (dims may be kDynamic while building): the
// builder's concat_in_place pass asks it with the network's shapes (a layer it may place), the
// runtime with a run's (where it does place). BackendRules::writes_placed and
// EngineBackend::writes_placed are the backend's.
using WritesPlacedFn = std::function<bool(const Layer& layer, const std::vector<TensorDesc>& inputs,
                                          const TensorDesc& output, const Placement& where)>;

// The layers of `layers` that are shuffles moving elements (shuffle_moves_data): the transposes
// and layout changes a plan still runs.
int count_moving_shuffles(const std::vector<Layer>& layers);

class Network {
 public:
  // A dynamic dim is kDynamic in `shape`; its range comes from `profile` (required then).
  TensorId add_input(const std::string& name, DataType dtype, const Shape& shape,
                     std::optional<Profile> profile = std::nullopt);
  void mark_output(TensorId tensor, const std::string& name = "");
  TensorId add_constant(const std::string& name, Weights weights);

  // Validates the layer against its inputs (rank, axes, dtypes, broadcasting) and adds its
  // outputs; throws InvalidArgument/ShapeMismatch/Unsupported naming the layer.
  std::vector<TensorId> add_layer(const std::string& name, LayerParams params,
                                  const std::vector<TensorId>& inputs);
  TensorId add(const std::string& name, LayerParams params, const std::vector<TensorId>& inputs) {
    return add_layer(name, std::move(params), inputs).at(0);
  }

  const TensorDesc& tensor(TensorId id) const;
  TensorDesc& mutable_tensor(TensorId id);
  size_t num_tensors() const { return tensors_.size(); }
  const std::vector<Layer>& layers() const { return layers_; }
  std::vector<Layer>& mutable_layers() { return layers_; }
  const std::vector<TensorId>& inputs() const { return inputs_; }
  const std::vector<TensorId>& outputs() const { return outputs_; }
  std::vector<TensorId>& mutable_outputs() { return outputs_; }
  const Profile& profile(TensorId input) const;
  const std::map<std::string, Weights>& weights() const { return weights_; }
  const Weights& weight(const std::string& name) const;
  // The tensor a Constant layer produced, if `id` is one.
  const Weights* constant_data(TensorId id) const;

  // Used by the plan loader and builder passes to rebuild a network without re-validating.
  TensorId add_tensor(TensorDesc desc);
  void add_input_raw(TensorId id, Profile profile);
  void add_weight(const std::string& name, Weights w);
  void append_layer_raw(Layer layer) { layers_.push_back(std::move(layer)); }
  void set_layers(std::vector<Layer> layers) { layers_ = std::move(layers); }
  void remove_unused_weights();

 private:
  std::vector<TensorDesc> tensors_;
  std::vector<Layer> layers_;
  std::vector<TensorId> inputs_, outputs_;
  std::map<TensorId, Profile> profiles_;
  std::map<std::string, Weights> weights_;
  std::map<TensorId, std::string> constant_of_;  // tensor -> weight name
};

// How far values are tracked: while building, shape tensors (1-D i64, up to 64 values); while an
// execution context resolves a shape, every integer or bool tensor of up to 8,192 values
// computed from values known then (shapes, constants): index ranges, masks' indices, slices of
// position buffers. Kernels that read such a tensor then need not run (resolve.cpp).
enum class ValueTracking { kBuild, kRun };
constexpr int64_t kMaxRunTimeValues = int64_t{1} << 13;

// Infers a layer's output descriptors from its inputs' and, where every input's values are known
// and the output is one that `tracking` follows, their values too. Shared by Network::add_layer
// and execution contexts.
std::vector<TensorDesc> infer_layer_outputs(const Layer& layer,
                                            const std::vector<const TensorDesc*>& inputs,
                                            ValueTracking tracking = ValueTracking::kBuild);

// Values of an integer or bool tensor (`dtype`, `count` elements at `data`) as tracked values, and
// tracked values as the bytes of a tensor of `dtype`.
std::vector<int64_t> tracked_values(DataType dtype, const void* data, int64_t count);
std::vector<uint8_t> encode_values(DataType dtype, const std::vector<int64_t>& values);

}  // namespace kiln::engine
