// Engine and ExecutionContext: concrete shape resolution, arena planning, layer-by-layer execution.
#include "engine/runtime.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "engine/serialize_fields.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

std::shared_ptr<uint8_t> aligned_alloc_bytes(size_t bytes) {
  const size_t size = std::max<size_t>((bytes + 63) / 64 * 64, 64);
  void* p = std::aligned_alloc(64, size);
  KILN_CHECK(p != nullptr, DeviceError, "out of host memory allocating ", bytes, " bytes");
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

}  // namespace

HostTensor::HostTensor(DataType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  KILN_CHECK(is_static(shape_), InvalidArgument, "host tensor needs a static shape, got ",
             shape_to_string(shape_));
  storage_ = aligned_alloc_bytes(nbytes());
}

Engine::Engine(Network network, EngineTarget target)
    : network_(std::move(network)), target_(std::move(target)) {
  KILN_CHECK(!network_.outputs().empty(), InvalidArgument, "engine has no outputs");
}

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
  using nlohmann::json;
  auto tensor_json = [&](TensorId id) {
    const TensorDesc& t = network_.tensor(id);
    return json{{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}};
  };
  json layers = json::array();
  for (const Layer& l : network_.layers()) {
    json j{{"name", l.name}, {"kind", layer_kind_name(l.params)}};
    j["inputs"] = json::array();
    for (TensorId id : l.inputs) j["inputs"].push_back(tensor_json(id));
    j["outputs"] = json::array();
    for (TensorId id : l.outputs) j["outputs"].push_back(tensor_json(id));
    j["params"] = json::parse(params_to_json(l.params));
    layers.push_back(std::move(j));
  }
  json io{{"inputs", json::array()}, {"outputs", json::array()}};
  for (TensorId id : network_.inputs()) {
    json in = tensor_json(id);
    const Profile& p = network_.profile(id);
    in["profile"] = {{"min", p.min}, {"opt", p.opt}, {"max", p.max}};
    io["inputs"].push_back(in);
  }
  for (TensorId id : network_.outputs()) io["outputs"].push_back(tensor_json(id));
  return json{{"target", target_.device}, {"io", io}, {"layers", layers}}.dump(1);
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
  states_.resize(net.layers().size());
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
  const Network& net = engine_->network();
  for (size_t i = 0; i < input_set_.size(); ++i) {
    KILN_CHECK(input_set_[i], InvalidArgument, "input `", engine_->input(i).name,
               "` has a dynamic shape that was not set");
  }
  descs_.assign(net.num_tensors(), TensorDesc{});
  for (size_t i = 0; i < net.num_tensors(); ++i) descs_[i] = net.tensor(static_cast<TensorId>(i));
  for (size_t i = 0; i < net.inputs().size(); ++i) {
    TensorDesc& d = descs_[static_cast<size_t>(net.inputs()[i])];
    d.shape = input_shapes_[i];
  }
  const auto& layers = net.layers();
  for (const Layer& layer : layers) {
    if (std::holds_alternative<ConstantParams>(layer.params)) continue;
    std::vector<const TensorDesc*> in;
    for (TensorId id : layer.inputs) in.push_back(&descs_[static_cast<size_t>(id)]);
    std::vector<TensorDesc> outs = infer_layer_outputs(layer, in);
    KILN_CHECK(outs.size() == layer.outputs.size(), InternalError, "layer `", layer.name,
               "`: inferred ", outs.size(), " outputs, plan has ", layer.outputs.size());
    for (size_t k = 0; k < outs.size(); ++k) {
      TensorDesc& d = descs_[static_cast<size_t>(layer.outputs[k])];
      KILN_CHECK(is_static(outs[k].shape), Unsupported, "layer `", layer.name, "`: output shape ",
                 shape_to_string(outs[k].shape),
                 " depends on tensor values that are only known while running");
      d.shape = outs[k].shape;
      d.values = outs[k].values;
    }
  }

  // Arena: every layer output that is not a network output and not a constant.
  std::vector<bool> is_output(net.num_tensors(), false);
  for (TensorId id : net.outputs()) is_output[static_cast<size_t>(id)] = true;
  std::vector<int> first(net.num_tensors(), -1), last(net.num_tensors(), -1);
  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& layer = layers[li];
    for (TensorId id : layer.inputs) last[static_cast<size_t>(id)] = static_cast<int>(li);
    if (std::holds_alternative<ConstantParams>(layer.params)) continue;
    for (TensorId id : layer.outputs) {
      first[static_cast<size_t>(id)] = static_cast<int>(li);
      last[static_cast<size_t>(id)] = std::max(last[static_cast<size_t>(id)], static_cast<int>(li));
    }
  }
  std::vector<BufferLifetime> lifetimes;
  std::vector<TensorId> planned;
  for (size_t t = 0; t < net.num_tensors(); ++t) {
    if (first[t] < 0 || is_output[t]) continue;
    lifetimes.push_back({static_cast<size_t>(volume(descs_[t].shape)) * dtype_size(descs_[t].dtype),
                         first[t], last[t]});
    planned.push_back(static_cast<TensorId>(t));
  }
  plan_ = plan_memory(lifetimes);
  arena_offset_.assign(net.num_tensors(), -1);
  for (size_t i = 0; i < planned.size(); ++i) {
    arena_offset_[static_cast<size_t>(planned[i])] = static_cast<int64_t>(plan_.offsets[i]);
  }
  if (plan_.arena_bytes > arena_capacity_) {
    arena_storage_ = aligned_alloc_bytes(plan_.arena_bytes);
    arena_capacity_ = plan_.arena_bytes;
  }
  resolved_ = true;
}

const Shape& ExecutionContext::output_shape(size_t index) {
  engine_->output(index);  // validates the index
  resolve_shapes();
  return descs_[static_cast<size_t>(engine_->network().outputs()[index])].shape;
}

void ExecutionContext::bind_input(size_t index, const void* data) {
  engine_->input(index);
  bound_inputs_[index] = data;
}

void ExecutionContext::bind_output(size_t index, void* data) {
  engine_->output(index);
  bound_outputs_[index] = data;
}

void ExecutionContext::execute() {
  resolve_shapes();
  const Network& net = engine_->network();
  std::vector<void*> where(net.num_tensors(), nullptr);
  for (size_t i = 0; i < net.inputs().size(); ++i) {
    KILN_CHECK(bound_inputs_[i] != nullptr || volume(input_shapes_[i]) == 0, InvalidArgument,
               "input `", engine_->input(i).name, "` is not bound");
    where[static_cast<size_t>(net.inputs()[i])] = const_cast<void*>(bound_inputs_[i]);
  }
  for (size_t t = 0; t < net.num_tensors(); ++t) {
    if (arena_offset_[t] >= 0) where[t] = arena_storage_.get() + arena_offset_[t];
  }
  // Outputs produced by layers are written straight into the caller's buffers.
  std::vector<bool> produced(net.num_tensors(), false);
  for (const Layer& l : net.layers()) {
    if (std::holds_alternative<ConstantParams>(l.params)) {
      const std::string& name = std::get<ConstantParams>(l.params).weight;
      const Weights& w = net.weight(name);
      KILN_CHECK(w.data != nullptr, InvalidArgument, "weight `", name,
                 "` was stripped from this plan (a weightless plan); refit it before running");
      where[static_cast<size_t>(l.outputs[0])] = const_cast<uint8_t*>(w.data->data());
      continue;
    }
    for (TensorId id : l.outputs) produced[static_cast<size_t>(id)] = true;
  }
  for (size_t i = 0; i < net.outputs().size(); ++i) {
    const size_t t = static_cast<size_t>(net.outputs()[i]);
    KILN_CHECK(bound_outputs_[i] != nullptr || volume(descs_[t].shape) == 0, InvalidArgument,
               "output `", engine_->output(i).name, "` is not bound");
    if (produced[t]) where[t] = bound_outputs_[i];
  }

  if (profiling_ && timings_.empty()) {
    for (const Layer& l : net.layers()) timings_.push_back({l.name, layer_kind_name(l.params)});
  }
  const auto& layers = net.layers();
  std::vector<cpu::TensorView> ins, outs;
  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& layer = layers[li];
    if (std::holds_alternative<ConstantParams>(layer.params)) continue;
    ins.clear();
    outs.clear();
    for (TensorId id : layer.inputs) {
      const TensorDesc& d = descs_[static_cast<size_t>(id)];
      ins.push_back({d.dtype, d.shape, where[static_cast<size_t>(id)]});
    }
    for (TensorId id : layer.outputs) {
      const TensorDesc& d = descs_[static_cast<size_t>(id)];
      outs.push_back({d.dtype, d.shape, where[static_cast<size_t>(id)]});
    }
    const auto start = std::chrono::steady_clock::now();
    cpu::run_layer(layer, ins, outs, states_[li]);
    if (profiling_) {
      timings_[li].total_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      ++timings_[li].runs;
    }
  }
  // Outputs that are inputs or constants are copied.
  for (size_t i = 0; i < net.outputs().size(); ++i) {
    const size_t t = static_cast<size_t>(net.outputs()[i]);
    if (produced[t] || where[t] == nullptr) continue;
    std::memcpy(bound_outputs_[i], where[t],
                static_cast<size_t>(volume(descs_[t].shape)) * dtype_size(descs_[t].dtype));
  }
}

std::vector<HostTensor> ExecutionContext::run(const std::vector<HostTensor>& inputs) {
  KILN_CHECK(inputs.size() == engine_->num_inputs(), InvalidArgument, "engine takes ",
             engine_->num_inputs(), " inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorDesc& in = engine_->input(i);
    KILN_CHECK(inputs[i].dtype() == in.dtype, ShapeMismatch, "input `", in.name, "`: expected ",
               dtype_name(in.dtype), ", got ", dtype_name(inputs[i].dtype()));
    set_input_shape(i, inputs[i].shape());
    bind_input(i, inputs[i].data());
  }
  std::vector<HostTensor> outputs;
  for (size_t i = 0; i < engine_->num_outputs(); ++i) {
    outputs.emplace_back(engine_->output(i).dtype, output_shape(i));
    bind_output(i, outputs.back().data());
  }
  execute();
  return outputs;
}

std::string ExecutionContext::profile_table() const {
  std::vector<LayerTiming> sorted = timings_;
  std::sort(sorted.begin(), sorted.end(),
            [](const LayerTiming& a, const LayerTiming& b) { return a.total_ms > b.total_ms; });
  double total = 0;
  for (const auto& t : sorted) total += t.total_ms;
  std::ostringstream os;
  os << "layer                                    kind               avg ms     share\n";
  for (const auto& t : sorted) {
    if (t.runs == 0) continue;
    char line[256];
    std::snprintf(line, sizeof(line), "%-40.40s %-16s %9.4f %8.1f%%\n", t.name.c_str(),
                  t.kind.c_str(), t.total_ms / t.runs, total > 0 ? 100.0 * t.total_ms / total : 0);
    os << line;
  }
  return os.str();
}

}  // namespace kiln::engine
