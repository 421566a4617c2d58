// Engine and ExecutionContext: concrete shape resolution, arena planning, layer-by-layer execution.
#include "engine/runtime.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "engine/layer_kinds.h"
#include "engine/scalar_math.h"
#include "engine/serialize_fields.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

// Known values a layer's result may have and still be written to the device instead of the layer
// running (the CUDA backend writes up to 64 with one kernel).
constexpr int64_t kMaxWrittenValues = 64;

// Where a slice's output starts in its (dense) input, in bytes, when the output is one
// contiguous range of it: unit steps, and at most one axis keeping part of its range, with only
// size-1 axes before it and whole axes after it. nullopt otherwise, and for empty outputs.
std::optional<int64_t> contiguous_slice_offset(const SliceParams& p, const TensorDesc& in) {
  const Shape& shape = in.shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (!is_static(shape) || volume(shape) == 0) return std::nullopt;
  Shape start(shape.size(), 0), end = shape;
  for (size_t i = 0; i < p.axes.size(); ++i) {
    const int64_t axis = p.axes[i] < 0 ? p.axes[i] + rank : p.axes[i];
    const int64_t step = p.steps.empty() ? 1 : p.steps[i];
    if (step != 1 || axis < 0 || axis >= rank) return std::nullopt;
    const size_t a = static_cast<size_t>(axis);
    const int64_t size = shape[a];
    int64_t s = p.starts[i], e = p.ends[i];
    if (s < 0) s += size;
    if (e != kSliceEnd && e < 0) e += size;
    start[a] = std::clamp<int64_t>(s, 0, size);
    end[a] = e == kSliceEnd ? size : std::clamp<int64_t>(e, start[a], size);
  }
  size_t partial = shape.size();
  for (size_t d = 0; d < shape.size() && partial == shape.size(); ++d) {
    if (start[d] != 0 || end[d] != shape[d]) partial = d;
  }
  if (partial == shape.size()) return 0;
  if (end[partial] == start[partial]) return std::nullopt;
  for (size_t d = 0; d < partial; ++d) {
    if (shape[d] != 1) return std::nullopt;
  }
  int64_t stride = static_cast<int64_t>(dtype_size(in.dtype));
  for (size_t d = partial + 1; d < shape.size(); ++d) {
    if (start[d] != 0 || end[d] != shape[d]) return std::nullopt;
    stride *= shape[d];
  }
  return start[partial] * stride;
}

// The byte offset of what a gather copies out of its data (`data`) where that is one contiguous
// range of it: indices known while resolving (`idx`) that count up by one from a start s
// (negative ones wrapped) along the axis, whose outer dims are all of size 1. index_select /
// embedding (kDefault): the indices in order; torch.gather (kElements, indices of the data's rank):
// index [..., k, t...] = s + k for every trailing position t, the trailing dims whole. An index
// range of a dynamic slice, `position_ids[:, :seq]` as exported, then reads the buffer in place.
std::optional<int64_t> contiguous_gather_offset(const GatherParams& p, const TensorDesc& data,
                                                const TensorDesc& idx) {
  const Shape& shape = data.shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t axis = p.axis < 0 ? p.axis + rank : p.axis;
  if (!idx.values || idx.values->empty() || axis < 0 || axis >= rank || !is_static(shape)) {
    return std::nullopt;
  }
  const size_t a = static_cast<size_t>(axis);
  int64_t row = static_cast<int64_t>(dtype_size(data.dtype)), inner = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (k < a && shape[k] != 1) return std::nullopt;
    if (k > a) row *= shape[k], inner *= shape[k];
  }
  const int64_t total = static_cast<int64_t>(idx.values->size());
  if (p.mode == GatherMode::kElements) {
    // The index tensor: [1..., n, trailing dims of the data].
    if (idx.shape.size() != shape.size()) return std::nullopt;
    for (size_t k = 0; k < shape.size(); ++k) {
      if ((k < a && idx.shape[k] != 1) || (k > a && idx.shape[k] != shape[k])) {
        return std::nullopt;
      }
    }
  } else {
    inner = 1;  // one index a row
  }
  const int64_t d = shape[a], n = total / inner;
  const int64_t first = (*idx.values)[0];
  const int64_t start = first < 0 ? first + d : first;
  if (start < 0 || start + n > d) return std::nullopt;
  for (int64_t i = 0; i < total; ++i) {
    const int64_t v = (*idx.values)[static_cast<size_t>(i)];
    if ((v < 0 ? v + d : v) != start + i / inner) return std::nullopt;
  }
  return start * row;
}

}  // namespace

HostTensor::HostTensor(DataType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  KILN_CHECK(is_static(shape_), InvalidArgument, "host tensor needs a static shape, got ",
             shape_to_string(shape_));
  storage_ = allocate_host(nbytes());
}

HostTensor random_host_tensor(DataType dtype, const Shape& shape, std::mt19937_64& rng) {
  HostTensor t(dtype, shape);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (is_floating(dtype)) {
      store_as<float>(dtype, t.data(), i, dist(rng));
    } else {
      store_as<int64_t>(dtype, t.data(), i, static_cast<int64_t>(rng() % 4));
    }
  }
  return t;
}

Engine::Engine(Network network, EngineTarget target)
    : network_(std::move(network)), target_(std::move(target)) {
  KILN_CHECK(!network_.outputs().empty(), InvalidArgument, "engine has no outputs");
  backend_ = create_engine_backend(network_, target_);
}

Engine::~Engine() = default;

const TensorDesc& Engine::input(size_t i) const {
  KILN_CHECK(i < num_inputs(), InvalidArgument, "input index ", i, " out of range (engine has ",
             num_inputs(), ")");
  return network_.tensor(network_.inputs()[i]);
}

const TensorDesc& Engine::output(size_t i) const {
  KILN_CHECK(i < num_outputs(), InvalidArgument, "output index ", i, " out of range (engine has ",
             num_outputs(), ")");
  return network_.tensor(network_.outputs()[i]);
}

size_t Engine::input_index(const std::string& name) const {
  std::string names;
  for (size_t i = 0; i < num_inputs(); ++i) {
    if (input(i).name == name) return i;
    names += (i ? ", " : "") + input(i).name;
  }
  KILN_THROW(InvalidArgument, "engine has no input `", name, "` (inputs: ", names, ")");
}

size_t Engine::output_index(const std::string& name) const {
  std::string names;
  for (size_t i = 0; i < num_outputs(); ++i) {
    if (output(i).name == name) return i;
    names += (i ? ", " : "") + output(i).name;
  }
  KILN_THROW(InvalidArgument, "engine has no output `", name, "` (outputs: ", names, ")");
}

std::string Engine::inspect_json() const {
  return engine::inspect_json(network_, target_);
}

std::string inspect_json(const Network& network, const EngineTarget& target) {
  using nlohmann::json;
  auto tensor_json = [&](TensorId id) {
    const TensorDesc& t = network.tensor(id);
    return json{{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}};
  };
  json layers = json::array();
  for (const Layer& l : network.layers()) {
    json j{{"name", l.name}, {"kind", layer_kind_name(l.params)}};
    j["inputs"] = json::array();
    for (TensorId id : l.inputs) j["inputs"].push_back(tensor_json(id));
    j["outputs"] = json::array();
    for (TensorId id : l.outputs) j["outputs"].push_back(tensor_json(id));
    j["params"] = json::parse(params_to_json(l.params));
    layers.push_back(std::move(j));
  }
  json io{{"inputs", json::array()}, {"outputs", json::array()}};
  for (TensorId id : network.inputs()) {
    json in = tensor_json(id);
    const Profile& p = network.profile(id);
    in["profile"] = {{"min", p.min}, {"opt", p.opt}, {"max", p.max}};
    io["inputs"].push_back(in);
  }
  for (TensorId id : network.outputs()) io["outputs"].push_back(tensor_json(id));
  json kinds = json::object();
  for (const Layer& l : network.layers()) {
    const char* kind = layer_kind_name(l.params);
    kinds[kind] = kinds.value(kind, 0) + 1;
  }
  const json summary{{"layers", network.layers().size()},
                     {"shuffles", count_moving_shuffles(network.layers())},
                     {"kinds", kinds}};
  return json{{"target", target.device},
              {"switches", target.switches},
              {"summary", summary},
              {"io", io},
              {"layers", layers}}
      .dump(1);
}

ExecutionContext::ExecutionContext(std::shared_ptr<const Engine> engine)
    : engine_(std::move(engine)) {
  KILN_CHECK(engine_ != nullptr, InvalidArgument, "execution context needs an engine");
  const Network& net = engine_->network();
  input_shapes_.resize(net.inputs().size());
  input_set_.assign(net.inputs().size(), false);
  for (size_t i = 0; i < net.inputs().size(); ++i) {
    const Shape& s = net.tensor(net.inputs()[i]).shape;
    if (is_static(s)) {
      input_shapes_[i] = s;
      input_set_[i] = true;
    }
  }
  bound_inputs_.assign(net.inputs().size(), nullptr);
  bound_outputs_.assign(net.outputs().size(), nullptr);
  backend_ = engine_->backend().create_context(net.layers().size());
}

ExecutionContext::~ExecutionContext() = default;

void ExecutionContext::set_input_shape(size_t index, const Shape& shape) {
  const TensorDesc& in = engine_->input(index);
  const Profile& p = engine_->network().profile(engine_->network().inputs()[index]);
  KILN_CHECK(shape.size() == in.shape.size(), ShapeMismatch, "input `", in.name,
             "`: expected rank ", in.shape.size(), " ", shape_to_string(in.shape), ", got ",
             shape_to_string(shape));
  for (size_t d = 0; d < shape.size(); ++d) {
    KILN_CHECK(shape[d] >= p.min[d] && shape[d] <= p.max[d], ShapeMismatch, "input `", in.name,
               "`: shape ", shape_to_string(shape), " is outside the profile (min ",
               shape_to_string(p.min), ", max ", shape_to_string(p.max), ") at dim ", d);
  }
  if (input_shapes_[index] != shape || !input_set_[index]) resolved_ = false;
  input_shapes_[index] = shape;
  input_set_[index] = true;
}

void ExecutionContext::resolve_shapes() {
  if (resolved_) return;
  const auto start = std::chrono::steady_clock::now();
  const Network& net = engine_->network();
  for (size_t i = 0; i < input_set_.size(); ++i) {
    KILN_CHECK(input_set_[i], InvalidArgument, "input `", engine_->input(i).name,
               "` has a dynamic shape that was not set");
  }
  // The current resolution is kept for its shapes (data-dependent tensors back at their bounds);
  // one kept for these shapes is taken again.
  if (!res_shapes_.empty()) {
    restore_bounds();
    resolutions_.emplace_front(std::move(res_shapes_), std::move(res_));
    res_shapes_.clear();
    if (resolutions_.size() > kResolutions) resolutions_.pop_back();
  }
  for (auto it = resolutions_.begin(); it != resolutions_.end(); ++it) {
    if (it->first != input_shapes_) continue;
    res_ = std::move(it->second);
    res_shapes_ = std::move(it->first);
    resolutions_.erase(it);
    resolved_ = true;
    return;
  }
  res_ = Resolution{};
  res_.descs.assign(net.num_tensors(), TensorDesc{});
  res_.data_dependent.assign(net.num_tensors(), false);
  for (size_t i = 0; i < net.num_tensors(); ++i)
    res_.descs[i] = net.tensor(static_cast<TensorId>(i));
  for (size_t i = 0; i < net.inputs().size(); ++i) {
    TensorDesc& d = res_.descs[static_cast<size_t>(net.inputs()[i])];
    d.shape = input_shapes_[i];
  }
  const auto& layers = net.layers();
  for (const Layer& layer : layers) {
    if (const auto* c = std::get_if<ConstantParams>(&layer.params)) {
      // Integer and bool constants' values, for the values tracked while resolving.
      TensorDesc& d = res_.descs[static_cast<size_t>(layer.outputs[0])];
      const Weights& w = net.weight(c->weight);
      if (!d.values && w.data && volume(w.shape) <= kMaxRunTimeValues &&
          (w.dtype == DataType::kI64 || w.dtype == DataType::kI32 || w.dtype == DataType::kBool)) {
        d.values = tracked_values(w.dtype, w.data->data(), volume(w.shape));
      }
      continue;
    }
    std::vector<const TensorDesc*> in;
    for (TensorId id : layer.inputs) in.push_back(&res_.descs[static_cast<size_t>(id)]);
    std::vector<TensorDesc> outs = infer_layer_outputs(layer, in, ValueTracking::kRun);
    KILN_CHECK(outs.size() == layer.outputs.size(), InternalError, "layer `", layer.name,
               "`: inferred ", outs.size(), " outputs, plan has ", layer.outputs.size());
    // Data-dependent dims (nonzero's count) are planned at their bound; so is everything
    // computed from them, whose shapes execution resolves again as the counts become known.
    bool tainted = false;
    for (TensorId id : layer.inputs)
      tainted = tainted || res_.data_dependent[static_cast<size_t>(id)];
    const bool counts = layer_kind_traits(layer.params).data_dependent;
    if (counts) outs[0].shape[0] = volume(in[0]->shape);
    for (size_t k = 0; k < outs.size(); ++k) {
      TensorDesc& d = res_.descs[static_cast<size_t>(layer.outputs[k])];
      KILN_CHECK(is_static(outs[k].shape), Unsupported, "layer `", layer.name, "`: output shape ",
                 shape_to_string(outs[k].shape),
                 " depends on tensor values that are only known while running");
      d.shape = outs[k].shape;
      d.values = outs[k].values;
      if (tainted || (counts && k == 0)) {
        res_.data_dependent[static_cast<size_t>(layer.outputs[k])] = true;
        d.values.reset();  // (values of the bound, not of the run)
      }
    }
  }
  res_.bound_shapes.assign(net.num_tensors(), Shape{});
  res_.any_data_dependent = false;
  for (size_t t = 0; t < net.num_tensors(); ++t) {
    if (res_.data_dependent[t])
      res_.bound_shapes[t] = res_.descs[t].shape, res_.any_data_dependent = true;
  }

  // Arena: every layer output that is not a network output, a constant or a view.
  std::vector<bool> is_output(net.num_tensors(), false);
  for (TensorId id : net.outputs()) is_output[static_cast<size_t>(id)] = true;
  // A reshape of dense data (a shuffle without permutations or cast) is a view: its output shares
  // its input's bytes (or, through a chain of views, the first one's), and the layer never runs.
  // So is a slice that keeps one contiguous range of its input (q, k and v taken from a packed
  // [3, ...] projection), where the range starts at the arena's alignment, which kernels may
  // rely on. Not for network outputs (written to the caller's buffer) or values known while
  // resolving.
  res_.alias_of.assign(net.num_tensors(), -1);
  res_.alias_offset.assign(net.num_tensors(), 0);
  res_.view_layer.assign(layers.size(), false);
  res_.view_source.assign(layers.size(), 0);
  const auto root = [&](TensorId id) {
    const int64_t a = res_.alias_of[static_cast<size_t>(id)];
    return a >= 0 ? static_cast<size_t>(a) : static_cast<size_t>(id);
  };
  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& layer = layers[li];
    std::optional<int64_t> offset;
    size_t source = 0, arity = 1;  // the input the view shares bytes with; the layer's inputs
    if (const auto* sh = std::get_if<ShuffleParams>(&layer.params)) {
      if (!shuffle_moves_data(*sh)) offset = 0;
    } else if (const auto* sl = std::get_if<SliceParams>(&layer.params)) {
      offset = contiguous_slice_offset(*sl, res_.descs[static_cast<size_t>(layer.inputs[0])]);
      if (offset && *offset % static_cast<int64_t>(kArenaAlignment) != 0) offset.reset();
    } else if (const auto* g = std::get_if<GatherParams>(&layer.params);
               g && layer.inputs.size() == 2) {
      arity = 2;
      offset = contiguous_gather_offset(*g, res_.descs[static_cast<size_t>(layer.inputs[0])],
                                        res_.descs[static_cast<size_t>(layer.inputs[1])]);
      if (offset && *offset % static_cast<int64_t>(kArenaAlignment) != 0) offset.reset();
    } else if (std::holds_alternative<SelectParams>(layer.params) && layer.inputs.size() == 3 &&
               layer.inputs[1] == layer.inputs[2]) {
      // where(c, a, a): a, where the condition does not broadcast it larger.
      source = 1, arity = 3;
      const TensorDesc& a = res_.descs[static_cast<size_t>(layer.inputs[1])];
      const TensorDesc& o = res_.descs[static_cast<size_t>(layer.outputs[0])];
      if (a.shape == o.shape && a.dtype == o.dtype) offset = 0;
    }
    // Gathers and selects are views where their results have known values too: the view serves
    // every reader on the device.
    const bool computed = arity > 1;
    if (!offset || layer.inputs.size() != arity) continue;
    const size_t out = static_cast<size_t>(layer.outputs[0]);
    const size_t in = static_cast<size_t>(layer.inputs[source]);
    if (is_output[out] || (!computed && res_.descs[out].values.has_value()) ||
        res_.data_dependent[out] || res_.data_dependent[in]) {
      continue;
    }
    res_.view_source[li] = source;
    res_.alias_of[out] = static_cast<int64_t>(root(layer.inputs[source]));
    res_.alias_offset[out] = res_.alias_offset[in] + *offset;
    res_.view_layer[li] = true;
  }
  // Layers whose outputs are known on the host and read by no kernel (a fill's shape, a
  // reshape's target, arithmetic on them): they need not run. From the last layer back, a tensor
  // is read on the device when a network output, or an input of a layer that runs other than
  // its shape input (layers whose outputs are known read no input: their values are written).
  // Known values read on the device are written there when few (shape tensors); a layer whose
  // known result is too large for that runs as it would have, its values dropped. A view read on
  // the device reads only its data there (a gather's indices stay on the host).
  res_.host_layer.assign(layers.size(), false);
  std::vector<bool> device_read = is_output;
  for (size_t li = layers.size(); li-- > 0;) {
    const Layer& layer = layers[li];
    if (std::holds_alternative<ConstantParams>(layer.params)) continue;
    if (res_.view_layer[li]) {
      if (device_read[static_cast<size_t>(layer.outputs[0])]) {
        device_read[static_cast<size_t>(layer.inputs[res_.view_source[li]])] = true;
      }
      continue;
    }
    bool known = true, read = false, few = true;
    for (TensorId id : layer.outputs) {
      const TensorDesc& d = res_.descs[static_cast<size_t>(id)];
      known = known && d.values.has_value();
      read = read || device_read[static_cast<size_t>(id)];
      few = few && d.values && static_cast<int64_t>(d.values->size()) <= kMaxWrittenValues;
    }
    if (known && (!read || few)) {
      res_.host_layer[li] = !read;
      continue;
    }
    if (known) {
      for (TensorId id : layer.outputs) res_.descs[static_cast<size_t>(id)].values.reset();
    }
    const int shape_input = layer_kind_traits(layer.params).shape_input;
    for (size_t i = 0; i < layer.inputs.size(); ++i) {
      if (static_cast<int>(i) != shape_input)
        device_read[static_cast<size_t>(layer.inputs[i])] = true;
    }
  }
  std::vector<int> first(net.num_tensors(), -1), last(net.num_tensors(), -1);
  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& layer = layers[li];
    if (res_.host_layer[li]) continue;
    // A view's readers keep the bytes it shares alive.
    for (TensorId id : layer.inputs) last[root(id)] = static_cast<int>(li);
    if (std::holds_alternative<ConstantParams>(layer.params) || res_.view_layer[li]) continue;
    for (TensorId id : layer.outputs) {
      first[static_cast<size_t>(id)] = static_cast<int>(li);
      last[static_cast<size_t>(id)] = std::max(last[static_cast<size_t>(id)], static_cast<int>(li));
    }
  }
  std::vector<BufferLifetime> lifetimes;
  std::vector<TensorId> planned;
  for (size_t t = 0; t < net.num_tensors(); ++t) {
    if (first[t] < 0 || is_output[t]) continue;
    lifetimes.push_back(
        {static_cast<size_t>(volume(res_.descs[t].shape)) * dtype_size(res_.descs[t].dtype),
         first[t], last[t]});
    planned.push_back(static_cast<TensorId>(t));
  }
  res_.plan = plan_memory(lifetimes);
  res_.arena_offset.assign(net.num_tensors(), -1);
  for (size_t i = 0; i < planned.size(); ++i) {
    res_.arena_offset[static_cast<size_t>(planned[i])] = static_cast<int64_t>(res_.plan.offsets[i]);
  }
  // Engine weights never change while the engine lives: kernels may key caches by address.
  res_.constant.assign(net.num_tensors(), false);
  for (const Layer& l : layers) {
    if (std::holds_alternative<ConstantParams>(l.params)) {
      res_.constant[static_cast<size_t>(l.outputs[0])] = true;
    }
  }
  for (size_t t = 0; t < net.num_tensors(); ++t) {
    if (res_.alias_of[t] >= 0)
      res_.constant[t] = res_.constant[static_cast<size_t>(res_.alias_of[t])];
  }
  res_.at_profile_point = true;
  for (size_t i = 0; i < input_shapes_.size(); ++i) {
    const Profile& p = net.profile(net.inputs()[i]);
    const Shape& s = input_shapes_[i];
    res_.at_profile_point = res_.at_profile_point && (s == p.min || s == p.opt || s == p.max);
  }
  res_shapes_ = input_shapes_;
  resolved_ = true;
  if (profiling_) {
    resolve_ms_ +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    ++resolves_;
  }
}

const Shape& ExecutionContext::output_shape(size_t index) {
  engine_->output(index);  // validates the index
  resolve_shapes();
  return res_.descs[static_cast<size_t>(engine_->network().outputs()[index])].shape;
}

void ExecutionContext::bind_input(size_t index, const void* data) {
  const TensorDesc& in = engine_->input(index);
  if (data != nullptr && data != bound_inputs_[index]) {
    backend_->check_pointer(data, "input `" + in.name + "`");
  }
  bound_inputs_[index] = data;
}

void ExecutionContext::bind_output(size_t index, void* data) {
  const TensorDesc& out = engine_->output(index);
  if (data != nullptr && data != bound_outputs_[index]) {
    backend_->check_pointer(data, "output `" + out.name + "`");
  }
  bound_outputs_[index] = data;
}

void ExecutionContext::set_stream(void* stream) {
  backend_->set_stream(stream);
}

void* ExecutionContext::stream() const {
  return backend_->stream();
}

void ExecutionContext::enable_cuda_graphs(bool on) {
  KILN_CHECK(backend_->has_graphs() || !on, InvalidArgument,
             "enable_cuda_graphs: the engine runs on the CPU; graphs are for cuda engines");
  graphs_ = on;
}

void ExecutionContext::execute() {
  resolve_shapes();
  restore_bounds();  // (a call that failed half-way leaves counts)
  // Kernels time their candidates (and ask the heuristics) at a static engine's shapes and at
  // profile points, and within a budget a call at shapes run before; the first call at any other
  // shape keeps choices made before, so that it costs little (ContextBackend::set_tuning).
  auto seen = seen_shapes_.find(input_shapes_);
  backend_->set_tuning(res_.at_profile_point        ? ContextBackend::Tuning::kFull
                       : seen != seen_shapes_.end() ? ContextBackend::Tuning::kBudgeted
                                                    : ContextBackend::Tuning::kOff);
  if (seen == seen_shapes_.end()) {
    if (seen_shapes_.size() >= kSeenShapes) {
      seen_shapes_.erase(
          std::min_element(seen_shapes_.begin(), seen_shapes_.end(),
                           [](const auto& a, const auto& b) { return a.second < b.second; }));
    }
    seen = seen_shapes_.emplace(input_shapes_, 0).first;
  }
  seen->second = ++calls_;
  const Network& net = engine_->network();
  std::vector<size_t> in_bytes(net.inputs().size()), out_bytes(net.outputs().size());
  for (size_t i = 0; i < in_bytes.size(); ++i) {
    in_bytes[i] =
        static_cast<size_t>(volume(input_shapes_[i])) * dtype_size(engine_->input(i).dtype);
    KILN_CHECK(bound_inputs_[i] != nullptr || in_bytes[i] == 0, InvalidArgument, "input `",
               engine_->input(i).name, "` is not bound");
  }
  for (size_t i = 0; i < out_bytes.size(); ++i) {
    const TensorDesc& d = res_.descs[static_cast<size_t>(net.outputs()[i])];
    out_bytes[i] = static_cast<size_t>(volume(d.shape)) * dtype_size(d.dtype);
    KILN_CHECK(bound_outputs_[i] != nullptr || out_bytes[i] == 0, InvalidArgument, "output `",
               engine_->output(i).name, "` is not bound");
  }
  if (graphs_ && !profiling_ && !res_.any_data_dependent) {
    std::vector<int64_t> key;  // one graph per set of input shapes
    for (const Shape& s : input_shapes_) {
      key.push_back(static_cast<int64_t>(s.size()));
      key.insert(key.end(), s.begin(), s.end());
    }
    backend_->execute_graph(key, bound_inputs_, in_bytes, bound_outputs_, out_bytes,
                            [this](const std::vector<const void*>& in,
                                   const std::vector<void*>& out) { enqueue(in, out); });
  } else {
    enqueue(bound_inputs_, bound_outputs_);
  }
  // What was written (data-dependent dims as counted), then the bounds again for the next call.
  executed_shapes_.clear();
  for (TensorId id : net.outputs())
    executed_shapes_.push_back(res_.descs[static_cast<size_t>(id)].shape);
  restore_bounds();
}

void ExecutionContext::restore_bounds() {
  if (!res_.any_data_dependent) return;
  for (size_t t = 0; t < res_.descs.size(); ++t) {
    if (res_.data_dependent[t]) res_.descs[t].shape = res_.bound_shapes[t];
  }
}

const Shape& ExecutionContext::executed_output_shape(size_t index) const {
  engine_->output(index);  // validates the index
  KILN_CHECK(index < executed_shapes_.size(), InvalidArgument,
             "executed_output_shape: nothing has been executed with these input shapes");
  return executed_shapes_[index];
}

void ExecutionContext::enqueue(const std::vector<const void*>& inputs,
                               const std::vector<void*>& outputs) {
  const Network& net = engine_->network();
  std::vector<void*> where(net.num_tensors(), nullptr);
  for (size_t i = 0; i < net.inputs().size(); ++i) {
    where[static_cast<size_t>(net.inputs()[i])] = const_cast<void*>(inputs[i]);
  }
  uint8_t* arena_base = static_cast<uint8_t*>(backend_->arena(res_.plan.arena_bytes));
  for (size_t t = 0; t < net.num_tensors(); ++t) {
    if (res_.arena_offset[t] >= 0) where[t] = arena_base + res_.arena_offset[t];
  }
  // Outputs produced by layers are written straight into the caller's buffers.
  std::vector<bool> produced(net.num_tensors(), false);
  for (const Layer& l : net.layers()) {
    if (std::holds_alternative<ConstantParams>(l.params)) {
      const std::string& name = std::get<ConstantParams>(l.params).weight;
      where[static_cast<size_t>(l.outputs[0])] = const_cast<void*>(backend_->weight(name));
      continue;
    }
    for (TensorId id : l.outputs) produced[static_cast<size_t>(id)] = true;
  }
  for (size_t i = 0; i < net.outputs().size(); ++i) {
    const size_t t = static_cast<size_t>(net.outputs()[i]);
    if (produced[t]) where[t] = outputs[i];
  }
  for (size_t t = 0; t < net.num_tensors(); ++t) {
    if (res_.alias_of[t] < 0) continue;
    uint8_t* base = static_cast<uint8_t*>(where[static_cast<size_t>(res_.alias_of[t])]);
    where[t] = base == nullptr ? nullptr : base + res_.alias_offset[t];
  }

  if (profiling_ && timings_.empty()) {
    for (const Layer& l : net.layers()) timings_.push_back({l.name, layer_kind_name(l.params)});
  }
  execute_layers(where);
  // Outputs that are inputs or constants are copied.
  for (size_t i = 0; i < net.outputs().size(); ++i) {
    const size_t t = static_cast<size_t>(net.outputs()[i]);
    if (produced[t] || where[t] == nullptr) continue;
    const size_t bytes =
        static_cast<size_t>(volume(res_.descs[t].shape)) * dtype_size(res_.descs[t].dtype);
    backend_->copy(outputs[i], where[t], bytes, ContextBackend::Copy::kWithin);
  }
}

namespace {

// "f16[32,56,56,96] f16[24,1,1,96] -> f16[32,56,56,24]": what a profile line ran on.
std::string layer_shapes(const Layer& layer, const std::vector<TensorDesc>& descs) {
  const auto one = [&](TensorId id) {
    const TensorDesc& d = descs[static_cast<size_t>(id)];
    return std::string(dtype_name(d.dtype)) + shape_to_string(d.shape);
  };
  std::string s;
  for (TensorId id : layer.inputs) s += (s.empty() ? "" : " ") + one(id);
  s += " ->";
  for (TensorId id : layer.outputs) s += " " + one(id);
  return s;
}

}  // namespace

void ExecutionContext::execute_layers(const std::vector<void*>& where) {
  const auto& layers = engine_->network().layers();
  if (profiling_) {
    for (size_t li = 0; li < layers.size(); ++li) {
      if (timings_[li].shapes.empty()) timings_[li].shapes = layer_shapes(layers[li], res_.descs);
    }
    backend_->profile_begin();
  }
  std::vector<TensorRef> ins, outs;
  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& layer = layers[li];
    if (std::holds_alternative<ConstantParams>(layer.params) || res_.view_layer[li] ||
        res_.host_layer[li]) {
      continue;
    }
    resolve_data_dependent(layer);
    ins.clear();
    outs.clear();
    bool values_known = true;  // shape tensors: computed on the host while shapes resolved
    for (TensorId id : layer.inputs) {
      const size_t t = static_cast<size_t>(id);
      ins.push_back({res_.descs[t].dtype, res_.descs[t].shape, where[t], res_.constant[t]});
    }
    for (TensorId id : layer.outputs) {
      const size_t t = static_cast<size_t>(id);
      outs.push_back({res_.descs[t].dtype, res_.descs[t].shape, where[t]});
      values_known = values_known && res_.descs[t].values.has_value();
    }
    if (values_known) {
      for (size_t k = 0; k < outs.size(); ++k) {
        backend_->write_values(outs[k], *res_.descs[static_cast<size_t>(layer.outputs[k])].values);
      }
    } else if (profiling_) {
      const auto start = std::chrono::steady_clock::now();
      backend_->run_layer(li, layer, ins, outs);
      timings_[li].host_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
    } else {
      backend_->run_layer(li, layer, ins, outs);
    }
    if (res_.any_data_dependent && layer_kind_traits(layer.params).data_dependent) {
      read_count(layer, where);
    }
    if (profiling_) backend_->profile_mark(li);
  }
  if (profiling_) {
    for (const auto& [li, ms] : backend_->profile_end()) {
      timings_[li].total_ms += ms;
      ++timings_[li].runs;
    }
  }
}

void ExecutionContext::resolve_data_dependent(const Layer& layer) {
  if (!res_.any_data_dependent) return;
  bool tainted = false;
  for (TensorId id : layer.inputs)
    tainted = tainted || res_.data_dependent[static_cast<size_t>(id)];
  if (!tainted) return;
  std::vector<const TensorDesc*> in;
  for (TensorId id : layer.inputs) in.push_back(&res_.descs[static_cast<size_t>(id)]);
  std::vector<TensorDesc> outs = infer_layer_outputs(layer, in);
  if (layer_kind_traits(layer.params).data_dependent) outs[0].shape[0] = volume(in[0]->shape);
  for (size_t k = 0; k < outs.size(); ++k) {
    const size_t t = static_cast<size_t>(layer.outputs[k]);
    // Within the bound memory was planned for (sizes grow with the counts they follow).
    KILN_CHECK(is_static(outs[k].shape) && volume(outs[k].shape) <= volume(res_.bound_shapes[t]),
               InternalError, "layer `", layer.name, "`: output ", shape_to_string(outs[k].shape),
               " at the counts of this run exceeds the ", shape_to_string(res_.bound_shapes[t]),
               " planned for it");
    res_.descs[t].shape = outs[k].shape;
  }
}

void ExecutionContext::read_count(const Layer& layer, const std::vector<void*>& where) {
  int64_t count = 0;
  backend_->copy(&count, where[static_cast<size_t>(layer.outputs[1])], sizeof(count),
                 ContextBackend::Copy::kToHost);
  backend_->synchronize();
  TensorDesc& d = res_.descs[static_cast<size_t>(layer.outputs[0])];
  KILN_CHECK(count >= 0 && count <= d.shape[0], InternalError, "layer `", layer.name, "` counted ",
             count, " rows, past the bound of ", d.shape[0]);
  d.shape[0] = count;
}

int ExecutionContext::run_profile_points(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Network& net = engine_->network();
  std::set<std::vector<Shape>> done;
  for (const Shape Profile::*point : {&Profile::min, &Profile::opt, &Profile::max}) {
    std::vector<Shape> shapes;
    for (TensorId id : net.inputs()) shapes.push_back(net.profile(id).*point);
    if (!done.insert(shapes).second) continue;
    std::vector<HostTensor> inputs;
    for (size_t i = 0; i < shapes.size(); ++i) {
      inputs.push_back(random_host_tensor(engine_->input(i).dtype, shapes[i], rng));
    }
    run(inputs);
  }
  return static_cast<int>(done.size());
}

std::vector<HostTensor> ExecutionContext::run(const std::vector<HostTensor>& inputs) {
  KILN_CHECK(inputs.size() == engine_->num_inputs(), InvalidArgument, "engine takes ",
             engine_->num_inputs(), " inputs, got ", inputs.size());
  // Host tensors bind directly where the backend reads host memory; elsewhere they go through
  // buffers of the backend's, kept for the next call.
  const bool direct = backend_->host_memory();
  const size_t n_in = inputs.size(), n_out = engine_->num_outputs();
  staging_.resize(n_in + n_out);
  staging_bytes_.resize(n_in + n_out, 0);
  auto staged = [&](size_t slot, size_t bytes) {
    if (!staging_[slot] || staging_bytes_[slot] < bytes) {
      staging_[slot] = backend_->allocate(bytes);
      staging_bytes_[slot] = bytes;
    }
    return staging_[slot].get();
  };
  for (size_t i = 0; i < n_in; ++i) {
    const TensorDesc& in = engine_->input(i);
    KILN_CHECK(inputs[i].dtype() == in.dtype, ShapeMismatch, "input `", in.name, "`: expected ",
               dtype_name(in.dtype), ", got ", dtype_name(inputs[i].dtype()));
    set_input_shape(i, inputs[i].shape());
    if (direct) {
      bind_input(i, inputs[i].data());
      continue;
    }
    void* d = staged(i, inputs[i].nbytes());
    backend_->copy(d, inputs[i].data(), inputs[i].nbytes(), ContextBackend::Copy::kFromHost);
    bind_input(i, d);
  }
  std::vector<HostTensor> outputs;
  for (size_t i = 0; i < n_out; ++i) {
    outputs.emplace_back(engine_->output(i).dtype, output_shape(i));
    bind_output(i, direct ? outputs.back().data() : staged(n_in + i, outputs.back().nbytes()));
  }
  execute();
  // Outputs with data-dependent dims: what was written is a prefix of the bound's buffer.
  for (size_t i = 0; i < n_out; ++i) {
    const Shape& written = executed_shapes_[i];
    if (written == outputs[i].shape()) continue;
    HostTensor shrunk(outputs[i].dtype(), written);
    if (direct) std::memcpy(shrunk.data(), outputs[i].data(), shrunk.nbytes());
    outputs[i] = std::move(shrunk);
  }
  if (!direct) {
    for (size_t i = 0; i < n_out; ++i) {
      backend_->copy(outputs[i].data(), bound_outputs_[i], outputs[i].nbytes(),
                     ContextBackend::Copy::kToHost);
    }
  }
  backend_->synchronize();
  return outputs;
}

std::string ExecutionContext::profile_table() const {
  std::vector<LayerTiming> sorted = timings_;
  std::sort(sorted.begin(), sorted.end(),
            [](const LayerTiming& a, const LayerTiming& b) { return a.total_ms > b.total_ms; });
  double total = 0;
  for (const auto& t : sorted) total += t.total_ms;
  std::ostringstream os;
  os << "layer                                    kind               avg ms     share  host ms  "
        "shapes\n";
  for (const auto& t : sorted) {
    if (t.runs == 0) continue;
    char line[256];
    std::snprintf(line, sizeof(line), "%-40.40s %-16s %9.4f %8.1f%% %8.4f  ", t.name.c_str(),
                  t.kind.c_str(), t.total_ms / t.runs, total > 0 ? 100.0 * t.total_ms / total : 0,
                  t.host_ms / t.runs);
    os << line << t.shapes << "\n";
  }
  double per_run = 0, host_per_run = 0;
  std::map<std::string, std::pair<double, int>> host_by_kind;  // host ms per run, layers
  for (const auto& t : sorted) {
    if (t.runs == 0) continue;
    per_run += t.total_ms / t.runs;
    host_per_run += t.host_ms / t.runs;
    auto& k = host_by_kind[t.kind];
    k.first += t.host_ms / t.runs;
    k.second += 1;
  }
  char line[160];
  std::snprintf(line, sizeof(line), "%-57s %9.4f %18.4f\n", "total (sum of layer averages)",
                per_run, host_per_run);
  os << line;
  if (resolves_ > 0) {
    std::snprintf(line, sizeof(line), "shapes resolved %d times on the host, %.4f ms each\n",
                  resolves_, resolve_ms_ / resolves_);
    os << line;
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> kinds(host_by_kind.begin(),
                                                                    host_by_kind.end());
  std::sort(kinds.begin(), kinds.end(),
            [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  os << "host ms per run by kind:";
  for (const auto& [kind, v] : kinds) {
    std::snprintf(line, sizeof(line), " %s %.4f (%d)", kind.c_str(), v.first, v.second);
    os << line;
  }
  os << "\n";
  return os.str();
}

}  // namespace kiln::engine
