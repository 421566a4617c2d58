// Network definition: adding inputs, constants and layers, each validated and shape-inferred.
#include "engine/network.h"

#include <cstring>

#include "engine/cpu/kernels.h"
#include "engine/layers/infer.h"
#include "engine/scalar_math.h"
#include "util/errors.h"

namespace kiln::engine {

bool reads_placed(const Layer& layer) {
  const LayerParams& p = layer.params;
  if (const auto* c = std::get_if<ConcatParams>(&p)) return !c->stack;
  if (const auto* f = std::get_if<FusedElementwiseParams>(&p)) return f->gathers.empty();
  return std::holds_alternative<ElementwiseParams>(p) || std::holds_alternative<UnaryParams>(p) ||
         std::holds_alternative<ActivationParams>(p);
}

bool writes_placed(const Layer& layer) {
  const auto* c = std::get_if<ConcatParams>(&layer.params);
  return c != nullptr && !c->stack;
}

int count_moving_shuffles(const std::vector<Layer>& layers) {
  int n = 0;
  for (const Layer& l : layers) {
    const auto* p = std::get_if<ShuffleParams>(&l.params);
    n += p != nullptr && shuffle_moves_data(*p);
  }
  return n;
}

namespace {

// Shape tensors: integer tensors small enough that their values are worth tracking at build time.
constexpr int64_t kMaxTrackedValues = 64;

}  // namespace

Weights Weights::from_floats(const Shape& shape, const std::vector<float>& values) {
  KILN_CHECK(static_cast<int64_t>(values.size()) == volume(shape), InvalidArgument,
             "weights: ", values.size(), " values for shape ", shape_to_string(shape));
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return from_bytes(DataType::kF32, shape, std::move(bytes));
}

Weights Weights::from_ints(const Shape& shape, const std::vector<int64_t>& values) {
  KILN_CHECK(static_cast<int64_t>(values.size()) == volume(shape), InvalidArgument,
             "weights: ", values.size(), " values for shape ", shape_to_string(shape));
  std::vector<uint8_t> bytes(values.size() * 8);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return from_bytes(DataType::kI64, shape, std::move(bytes));
}

Weights Weights::from_bytes(DataType dtype, const Shape& shape, std::vector<uint8_t> bytes) {
  KILN_CHECK(is_static(shape), InvalidArgument, "weights need a static shape, got ",
             shape_to_string(shape));
  KILN_CHECK(bytes.size() == static_cast<size_t>(volume(shape)) * dtype_size(dtype),
             InvalidArgument, "weights: ", bytes.size(), " bytes for ", dtype_name(dtype), " ",
             shape_to_string(shape));
  Weights w;
  w.dtype = dtype;
  w.shape = shape;
  w.data = std::make_shared<const Bytes>(std::move(bytes));
  return w;
}

TensorId Network::add_tensor(TensorDesc desc) {
  tensors_.push_back(std::move(desc));
  return static_cast<TensorId>(tensors_.size() - 1);
}

const TensorDesc& Network::tensor(TensorId id) const {
  KILN_CHECK(id >= 0 && static_cast<size_t>(id) < tensors_.size(), InvalidArgument, "tensor id ",
             id, " does not exist (network has ", tensors_.size(), ")");
  return tensors_[static_cast<size_t>(id)];
}

TensorDesc& Network::mutable_tensor(TensorId id) {
  return const_cast<TensorDesc&>(static_cast<const Network*>(this)->tensor(id));
}

TensorId Network::add_input(const std::string& name, DataType dtype, const Shape& shape,
                            std::optional<Profile> profile) {
  for (TensorId in : inputs_) {
    KILN_CHECK(tensor(in).name != name, InvalidArgument, "input `", name, "` added twice");
  }
  for (int64_t d : shape) {
    KILN_CHECK(d >= 0 || d == kDynamic, InvalidArgument, "input `", name, "`: bad dim ", d, " in ",
               shape_to_string(shape));
  }
  Profile p;
  if (is_static(shape)) {
    p = {shape, shape, shape};
    if (profile) {
      KILN_CHECK(profile->min == shape && profile->opt == shape && profile->max == shape,
                 InvalidArgument, "input `", name, "`: static shape ", shape_to_string(shape),
                 " with a profile that differs from it");
    }
  } else {
    KILN_CHECK(profile.has_value(), InvalidArgument, "input `", name, "` has dynamic shape ",
               shape_to_string(shape), " but no min/opt/max profile");
    p = *profile;
    for (const Shape* s : {&p.min, &p.opt, &p.max}) {
      KILN_CHECK(s->size() == shape.size() && is_static(*s), InvalidArgument, "input `", name,
                 "`: profile shape ", shape_to_string(*s), " does not fit ",
                 shape_to_string(shape));
    }
    for (size_t i = 0; i < shape.size(); ++i) {
      KILN_CHECK(p.min[i] <= p.opt[i] && p.opt[i] <= p.max[i], InvalidArgument, "input `", name,
                 "`: profile dim ", i, " needs min <= opt <= max, got ", p.min[i], ", ", p.opt[i],
                 ", ", p.max[i]);
      KILN_CHECK(shape[i] == kDynamic || (p.min[i] == shape[i] && p.max[i] == shape[i]),
                 InvalidArgument, "input `", name, "`: profile changes static dim ", i);
    }
  }
  TensorDesc desc{name, dtype, shape, std::nullopt};
  const TensorId id = add_tensor(std::move(desc));
  add_input_raw(id, p);
  return id;
}

void Network::add_input_raw(TensorId id, Profile profile) {
  inputs_.push_back(id);
  profiles_[id] = std::move(profile);
}

const Profile& Network::profile(TensorId input) const {
  auto it = profiles_.find(input);
  KILN_CHECK(it != profiles_.end(), InvalidArgument, "tensor `", tensor(input).name,
             "` is not a network input");
  return it->second;
}

void Network::mark_output(TensorId id, const std::string& name) {
  tensor(id);  // validates the id
  for (TensorId out : outputs_) {
    KILN_CHECK(out != id, InvalidArgument, "tensor `", tensor(id).name, "` marked output twice");
  }
  if (!name.empty()) tensors_[static_cast<size_t>(id)].name = name;
  outputs_.push_back(id);
}

void Network::add_weight(const std::string& name, Weights w) {
  weights_[name] = std::move(w);
}

const Weights& Network::weight(const std::string& name) const {
  auto it = weights_.find(name);
  KILN_CHECK(it != weights_.end(), InvalidArgument, "no weight named `", name, "`");
  return it->second;
}

TensorId Network::add_constant(const std::string& name, Weights w) {
  KILN_CHECK(w.data != nullptr, InvalidArgument, "constant `", name, "` has no data");
  KILN_CHECK(weights_.count(name) == 0, InvalidArgument, "weight `", name, "` added twice");
  TensorDesc desc{name, w.dtype, w.shape, std::nullopt};
  if ((w.dtype == DataType::kI64 || w.dtype == DataType::kI32) && w.shape.size() <= 1 &&
      volume(w.shape) <= kMaxTrackedValues) {
    desc.values = tracked_values(w.dtype, w.data->data(), volume(w.shape));
  }
  const TensorId id = add_tensor(std::move(desc));
  add_weight(name, std::move(w));
  constant_of_[id] = name;
  layers_.push_back(Layer{name, ConstantParams{name}, {}, {id}});
  return id;
}

const Weights* Network::constant_data(TensorId id) const {
  auto it = constant_of_.find(id);
  if (it != constant_of_.end()) return &weights_.at(it->second);
  // Networks rebuilt from plans register constants through their layers.
  for (const Layer& l : layers_) {
    if (const auto* c = std::get_if<ConstantParams>(&l.params); c && l.outputs[0] == id) {
      return &weight(c->weight);
    }
  }
  return nullptr;
}

void Network::remove_unused_weights() {
  std::map<std::string, Weights> used;
  constant_of_.clear();
  for (const Layer& l : layers_) {
    if (const auto* c = std::get_if<ConstantParams>(&l.params)) {
      used[c->weight] = weight(c->weight);
      constant_of_[l.outputs[0]] = c->weight;
    }
  }
  weights_ = std::move(used);
}

std::vector<TensorId> Network::add_layer(const std::string& name, LayerParams params,
                                         const std::vector<TensorId>& inputs) {
  KILN_CHECK(!std::holds_alternative<ConstantParams>(params), InvalidArgument, "layer `", name,
             "`: use add_constant for constants");
  std::vector<const TensorDesc*> in;
  for (TensorId id : inputs) {
    KILN_CHECK(id >= 0 && static_cast<size_t>(id) < tensors_.size(), InvalidArgument, "layer `",
               name, "`: input tensor id ", id, " does not exist");
    in.push_back(&tensors_[static_cast<size_t>(id)]);
  }
  Layer layer{name, std::move(params), inputs, {}};
  std::vector<TensorDesc> outs = infer_layer_outputs(layer, in);
  for (auto& desc : outs) layer.outputs.push_back(add_tensor(std::move(desc)));
  std::vector<TensorId> ids = layer.outputs;
  layers_.push_back(std::move(layer));
  return ids;
}

std::vector<TensorDesc> infer_layer_outputs(const Layer& layer,
                                            const std::vector<const TensorDesc*>& inputs,
                                            ValueTracking tracking) {
  std::vector<InferInput> infer_inputs;
  for (const TensorDesc* t : inputs) {
    infer_inputs.push_back({t->dtype, t->shape, t->values ? &*t->values : nullptr});
  }
  std::vector<InferOutput> outs = infer_layer(layer.name, layer.params, infer_inputs);
  std::vector<TensorDesc> descs;
  for (size_t i = 0; i < outs.size(); ++i) {
    descs.push_back({outs.size() == 1 ? layer.name : layer.name + ":" + std::to_string(i),
                     outs[i].dtype, outs[i].shape, std::nullopt});
  }

  if (std::holds_alternative<ShapeParams>(layer.params) && is_static(inputs[0]->shape)) {
    descs[0].values = inputs[0]->shape;
    return descs;
  }
  // Shape tensors: when every input's values are known, compute this layer's values now by
  // running its CPU kernel on them.
  const bool run = tracking == ValueTracking::kRun;
  const auto tracked = [&](DataType t) {
    return t == DataType::kI64 || (run && (t == DataType::kI32 || t == DataType::kBool));
  };
  bool all_known = !inputs.empty();
  for (const TensorDesc* t : inputs) all_known = all_known && t->values && tracked(t->dtype);
  if (!all_known || descs.size() != 1 || !tracked(descs[0].dtype) || !is_static(descs[0].shape) ||
      (!run && descs[0].shape.size() > 1) ||
      volume(descs[0].shape) > (run ? kMaxRunTimeValues : kMaxTrackedValues) ||
      !cpu::kernel_table().get(layer.params)) {
    return descs;
  }
  std::vector<std::vector<uint8_t>> in_data;
  in_data.reserve(inputs.size());  // the views below point into it
  std::vector<cpu::TensorView> in_views;
  for (const TensorDesc* t : inputs) {
    in_data.push_back(encode_values(t->dtype, *t->values));
    in_views.push_back({t->dtype, t->shape, in_data.back().data()});
  }
  const int64_t n = volume(descs[0].shape);
  std::vector<uint8_t> result(static_cast<size_t>(n) * dtype_size(descs[0].dtype));
  std::vector<cpu::TensorView> out_views{{descs[0].dtype, descs[0].shape, result.data()}};
  std::unique_ptr<cpu::KernelState> state;
  cpu::run_layer(layer, in_views, out_views, state);
  descs[0].values = tracked_values(descs[0].dtype, result.data(), n);
  return descs;
}

std::vector<uint8_t> encode_values(DataType dtype, const std::vector<int64_t>& values) {
  std::vector<uint8_t> bytes(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    store_as<int64_t>(dtype, bytes.data(), static_cast<int64_t>(i), values[i]);
  }
  return bytes;
}

std::vector<int64_t> tracked_values(DataType dtype, const void* data, int64_t count) {
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    out[static_cast<size_t>(i)] = load_as<int64_t>(dtype, data, i);
  return out;
}

}  // namespace kiln::engine
