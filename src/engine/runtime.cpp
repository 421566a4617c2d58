// Engine and ExecutionContext: bindings, layer-by-layer execution, profiles, the inspector's JSON.
// Resolving a set of input shapes (shapes, values, views, the arena plan): resolve.cpp.
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
    bool placed_in = false, placed_out = false;
    for (TensorId id : layer.inputs) {
      const size_t t = static_cast<size_t>(id);
      ins.push_back({res_.descs[t].dtype, res_.descs[t].shape, where[t], res_.constant[t],
                     res_.row[t], res_.pitch[t]});
      placed_in = placed_in || res_.pitch[t] != 0;
    }
    for (TensorId id : layer.outputs) {
      const size_t t = static_cast<size_t>(id);
      outs.push_back(
          {res_.descs[t].dtype, res_.descs[t].shape, where[t], false, res_.row[t], res_.pitch[t]});
      values_known = values_known && res_.descs[t].values.has_value();
      placed_out = placed_out || res_.pitch[t] != 0;
    }
    KILN_CHECK((!placed_in || reads_placed(layer)) && (!placed_out || res_.writes_placed[li]),
               InternalError, "layer `", layer.name, "` (", layer_kind_name(layer.params),
               ") was given a tensor placed in a concat's output, which it cannot take");
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
