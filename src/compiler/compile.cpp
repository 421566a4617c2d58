// kiln::compile: lower, partition, analyze shapes, convert and build each engine segment, stitch.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>

#include <unistd.h>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "compiler/capability.h"
#include "compiler/engine_cache.h"
#include "compiler/module_cache.h"
#include "compiler/spec_json.h"
#include "compiler/stitch.h"
#include "conversion/convert.h"
#include "conversion/dtypes.h"
#include "engine/builder.h"
#include "engine/cuda/backend.h"
#include "engine/plan.h"
#include "ir/export_sizes.h"
#include "kiln/kiln.h"
#include "lowering/lower.h"
#include "partitioning/atomic.h"
#include "partitioning/coverage.h"
#include "partitioning/partitioning.h"
#include "partitioning/shape_analysis.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/logging.h"

namespace kiln {
namespace {

using partitioning::Profile;
using partitioning::Segment;
using partitioning::Target;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

engine::DataType engine_dtype(DType d) {
  switch (d) {
    case DType::kF32:
      return engine::DataType::kF32;
    case DType::kF16:
      return engine::DataType::kF16;
    case DType::kBF16:
      return engine::DataType::kBF16;
    case DType::kI64:
      return engine::DataType::kI64;
    case DType::kI32:
      return engine::DataType::kI32;
    case DType::kI8:
      return engine::DataType::kI8;
    case DType::kU8:
      return engine::DataType::kU8;
    case DType::kBool:
      return engine::DataType::kBool;
  }
  return engine::DataType::kF32;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? "," : "") + (shape[i] < 0 ? std::string("?") : std::to_string(shape[i]));
  }
  return s + ")";
}

// Converting an engine segment failed at `node` (of the partitioned graph), with `error`: the
// node goes to PyTorch and compile() partitions again.
struct NodeRefused {
  const torch::jit::Node* node;
  Error error;
};

// The memory this machine has available (MemAvailable), for a resource-partitioning budget the
// spec leaves at 0.
uint64_t available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  KILN_CHECK(pages > 0 && page > 0, Unsupported,
             "enable_resource_partitioning: cannot read the available memory; set "
             "cpu_memory_budget");
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

// An engine backend of CompileSpec::backend_priority.
struct Backend {
  std::string name;  // "cuda" or "cpu"
  Device device;
  std::set<std::string> ops;  // backend_support_map's entry; empty: every op kiln converts
};

// The backends of `spec` in priority order, checked; empty when the spec names none.
std::vector<Backend> backends_of(const CompileSpec& spec) {
  for (const auto& [name, ops] : spec.backend_support_map) {
    KILN_CHECK(std::find(spec.backend_priority.begin(), spec.backend_priority.end(), name) !=
                   spec.backend_priority.end(),
               InvalidArgument, "backend_support_map: backend `", name,
               "` is not in backend_priority; list the backends in the order they take ops");
  }
  std::vector<Backend> out;
  for (const std::string& name : spec.backend_priority) {
    KILN_CHECK(name == "cuda" || name == "cpu", InvalidArgument,
               "backend_priority: unknown backend `", name,
               "` (kiln's engines are `cuda` and `cpu`; `inductor` is a backend of the Python "
               "package, kiln.compile and torch.compile's kiln backend; what no backend takes runs "
               "in PyTorch)");
    for (const Backend& b : out) {
      KILN_CHECK(b.name != name, InvalidArgument, "backend_priority: `", name, "` is listed twice");
    }
    Backend b;
    b.name = name;
    if (name == "cuda") {
      b.device.kind = Device::Kind::kCuda;
      b.device.index = spec.device.kind == Device::Kind::kCuda ? spec.device.index : 0;
    }
    if (auto it = spec.backend_support_map.find(name); it != spec.backend_support_map.end()) {
      KILN_CHECK(!it->second.empty(), InvalidArgument, "backend_support_map: backend `", name,
                 "` lists no op (leave it out of the map to let it take every op kiln converts)");
      for (const std::string& op : it->second) {
        KILN_CHECK(op.find("::") != std::string::npos && op.find("::") > 0, InvalidArgument,
                   "backend_support_map: `", op, "` of backend `", name,
                   "` is not an op name like aten::add or aten::add.Tensor");
        b.ops.insert(op);
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

// What partitioning asks: the converter registry (which remembers refusals for a compile's
// retries), through the backends of backend_priority when the spec names any.
struct PartitionCapability {
  compiler::RegistryCapability registry;
  std::optional<partitioning::BackendCapability> by_backend;

  explicit PartitionCapability(const std::vector<Backend>& backends) {
    std::vector<partitioning::BackendSupport> supports;
    for (const Backend& b : backends) supports.push_back({b.name, b.ops, &registry});
    if (!supports.empty()) by_backend.emplace(std::move(supports));
  }
  PartitionCapability(const PartitionCapability&) = delete;  // by_backend points at registry
  PartitionCapability& operator=(const PartitionCapability&) = delete;

  const partitioning::Capability& get() const {
    if (by_backend) return *by_backend;
    return registry;
  }
};

// Everything compile() and the standalone-engine entry points share.
struct Pipeline {
  const torch::jit::Module& module;
  const std::string& method;
  const CompileSpec& spec;
  CompileReport* report;
  // refit(): the compiled module's plans by segment position, taking new weights instead of being
  // built; the positions used so far.
  std::map<std::string, const runtime::EngineHolder*>* reuse = nullptr;
  std::set<std::string> reused;
  // CompileSpec::engine_cache.
  std::optional<compiler::EngineCache> cache;
  // CompileSpec::backend_priority with each backend's device and ops; empty: one backend.
  std::vector<Backend> backends;
  Clock::time_point phase_start = Clock::now();
  std::string phase_name_;

  void phase(Phase p, const std::string& detail = "") {
    end_phase();
    phase_name_ = phase_name(p);
    phase_start = Clock::now();
    if (spec.progress) spec.progress(p, detail);
    KILN_LOG(kInfo, "compile: ", phase_name_, detail.empty() ? "" : ": ", detail);
  }
  void end_phase() {
    if (!phase_name_.empty() && report)
      report->phase_ms.emplace_back(phase_name_, ms_since(phase_start));
    phase_name_.clear();
  }

  std::shared_ptr<torch::jit::Graph> lower() {
    KILN_CHECK(method == "forward", Unsupported, "compile: only `forward` can be compiled, not `",
               method, "`");
    phase(Phase::kLower);
    lowering::LoweringOptions options;
    options.torch_executed_modules = spec.torch_executed_modules;
    for (const Input& in : spec.inputs) {
      options.input_types.push_back(
          std::make_pair(conversion::to_scalar_type(engine_dtype(in.dtype)),
                         static_cast<int64_t>(in.opt_shape.size())));
      std::vector<std::optional<int64_t>> dims;
      for (size_t d = 0; d < in.opt_shape.size(); ++d) {
        if (d < in.min_shape.size() && d < in.max_shape.size() &&
            in.min_shape[d] == in.max_shape[d]) {
          dims.push_back(in.opt_shape[d]);
        } else {
          dims.push_back(std::nullopt);
        }
      }
      options.input_sizes.push_back(std::move(dims));
    }
    auto graph = lowering::lower_module(module, options);
    if (spec.debug) KILN_LOG(kDebug, "lowered graph:\n", graph->toString());
    return graph;
  }

  partitioning::PartitionSettings settings(bool full) const {
    partitioning::PartitionSettings s;
    s.min_block_size = spec.min_block_size;
    s.torch_executed_ops = {spec.torch_executed_ops.begin(), spec.torch_executed_ops.end()};
    s.torch_executed_modules = {spec.torch_executed_modules.begin(),
                                spec.torch_executed_modules.end()};
    s.require_full_compilation = full;
    if (spec.enable_resource_partitioning) {
      const uint64_t budget = spec.cpu_memory_budget ? spec.cpu_memory_budget : available_memory();
      s.max_engine_weight_bytes = std::max<uint64_t>(
          1, static_cast<uint64_t>(static_cast<double>(budget) / kBuildMemoryMultiplier));
    }
    return s;
  }

  std::vector<partitioning::InputProfile> profiles(const torch::jit::Graph& graph) const {
    const size_t args = graph.inputs().size() - 1;  // input 0 is self
    KILN_CHECK(spec.inputs.size() == args, InvalidArgument, "compile: forward takes ", args,
               " argument", args == 1 ? "" : "s", " but the spec gives ", spec.inputs.size(),
               " input", spec.inputs.size() == 1 ? "" : "s");
    std::vector<partitioning::InputProfile> out;
    out.push_back(partitioning::InputProfile::of_value(module._ivalue()));
    for (size_t i = 0; i < args; ++i) {
      const Input& in = spec.inputs[i];
      const torch::jit::Value* v = graph.inputs()[i + 1];
      KILN_CHECK(v->type()->kind() == c10::TypeKind::TensorType, Unsupported, "compile: argument ",
                 i, " (%", v->debugName(), ") is ", v->type()->annotation_str(),
                 "; kiln compiles modules whose arguments are tensors");
      KILN_CHECK(
          in.min_shape.size() == in.opt_shape.size() && in.opt_shape.size() == in.max_shape.size(),
          InvalidArgument, "compile: input ", i, ": min, opt and max have different ranks");
      for (size_t d = 0; d < in.opt_shape.size(); ++d) {
        KILN_CHECK(in.min_shape[d] >= 0 && in.min_shape[d] <= in.opt_shape[d] &&
                       in.opt_shape[d] <= in.max_shape[d],
                   InvalidArgument, "compile: input ", i, " dimension ", d,
                   " needs 0 <= min <= opt <= max, got ", in.min_shape[d], ", ", in.opt_shape[d],
                   ", ", in.max_shape[d]);
      }
      out.push_back(
          partitioning::InputProfile::range(in.min_shape, in.opt_shape, in.max_shape,
                                            conversion::to_scalar_type(engine_dtype(in.dtype))));
      if (in.dim_symbols.size() == in.opt_shape.size()) out.back().dim_symbols = in.dim_symbols;
    }
    return out;
  }

  // Where an engine segment runs: its backend's device, or the compile's.
  std::string device_of(const Segment& s) const {
    if (s.backend.empty()) return spec.device.str();
    for (const Backend& b : backends) {
      if (b.name == s.backend) return b.device.str();
    }
    KILN_THROW(InternalError, "compile: a segment of unknown backend `", s.backend, "`");
  }

  engine::BuilderConfig builder_config(const std::string& device) const {
    engine::BuilderConfig config;
    config.device = device;  // "cpu" or "cuda:N"
    config.enabled_precisions.clear();
    for (DType d : spec.enabled_precisions) config.enabled_precisions.push_back(engine_dtype(d));
    // f32 is always allowed: layers that cannot run in a lower precision stay in it.
    if (std::find(config.enabled_precisions.begin(), config.enabled_precisions.end(),
                  engine::DataType::kF32) == config.enabled_precisions.end()) {
      config.enabled_precisions.push_back(engine::DataType::kF32);
    }
    config.workspace_bytes = spec.workspace_size;
    config.tf32 = !spec.disable_tf32;
    config.gelu_tanh_epilogues = !spec.exact_gelu;
    config.print_after_all = spec.print_after_all;
    config.refittable = spec.refittable;
    for (const std::string& sw : spec.switches) engine::apply_switch(config, sw);
    return config;
  }

  conversion::ConversionSettings conversion_settings() const {
    conversion::ConversionSettings s;
    s.enabled_precisions = builder_config(spec.device.str()).enabled_precisions;
    s.truncate_long_and_double = spec.truncate_long_and_double;
    s.assume_dynamic_shape_support = spec.assume_dynamic_shape_support;
    s.refittable = spec.refittable;
    return s;
  }

  // Converts and builds one engine segment (at `position` in the partitioned graph); returns the
  // serialized plan.
  std::vector<uint8_t> build_engine(const Segment& s, const std::string& position,
                                    const std::string& name, SegmentReport& sr) {
    KILN_CHECK(s.has_shapes, InternalError, "compile: engine segment `", name,
               "` has no analyzed shapes");
    std::unordered_map<const torch::jit::Node*, torch::jit::Node*> origin;
    auto graph = partitioning::segment_graph(s, &origin);
    std::vector<conversion::InputSpec> inputs;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const auto& min = s.shapes[Profile::kMin].inputs[i];
      const auto& opt = s.shapes[Profile::kOpt].inputs[i];
      const auto& max = s.shapes[Profile::kMax].inputs[i];
      KILN_CHECK(opt.is_tensor, InternalError, "compile: engine segment `", name, "` input %",
                 s.inputs[i]->debugName(), " is not a tensor");
      conversion::InputSpec in;
      in.dtype = conversion::to_engine_dtype(opt.dtype, "input %" + s.inputs[i]->debugName());
      in.min = min.sizes;
      in.opt = opt.sizes;
      in.max = max.sizes;
      inputs.push_back(in);
    }
    conversion::ConvertedSegment converted;
    const torch::jit::Node* failed = nullptr;
    try {
      converted = conversion::convert_graph(*graph, inputs, conversion::default_registry(),
                                            conversion_settings(), &failed);
    } catch (const Error& e) {
      Error named(e.kind(), "engine `" + name + "`: " + e.message());
      if (auto it = origin.find(failed); failed && it != origin.end()) {
        throw NodeRefused{it->second, named};
      }
      throw named;
    }
    if (sr.output_shapes_opt.empty()) {  // shapes from the profiles: the outputs' from the network
      for (engine::TensorId t : converted.network.outputs()) {
        sr.output_shapes_opt.push_back(shape_text(converted.network.tensor(t).shape));
      }
    }
    const std::string device = device_of(s);
    if (reuse) return refit_engine(position, name, converted.network, device, sr);
    const engine::BuilderConfig config = builder_config(device);
    std::string cache_key;
    if (cache) {
      cache_key = compiler::engine_cache_key(converted.network, config);
      if (auto entry = cache->get(cache_key)) {
        if (auto bytes = from_cache(*entry, converted.network, name, device, sr))
          return std::move(*bytes);
      }
    }
    const auto start = Clock::now();
    engine::BuildReport build_report;
    engine::Plan plan = engine::build(converted.network, config, &build_report);
    const double build_ms = ms_since(start);
    KILN_LOG(kInfo, "engine `", name, "`: ", build_report.to_string());
    sr.layers = build_report.layers_after;
    sr.shuffles = build_report.shuffles;
    sr.generated_kernels = build_report.generated_kernels;
    std::vector<uint8_t> bytes = engine::serialize_plan(plan);
    // Refittable plans go in without the weights a hit writes (weightless), the rest whole; a
    // whole plan only when its build took longer than reading it back would (at 500 MB/s): the
    // CPU builds resnet50's plan of 94 MB in about 85 ms.
    constexpr double kReadBytesPerMs = 500e3;
    if (cache && (plan.source.refittable || build_ms > bytes.size() / kReadBytesPerMs)) {
      if (plan.source.refittable) {
        for (const std::string& slot : plan.source.slots) {
          if (!plan.network.weights().count(slot)) continue;
          const engine::Weights& w = plan.network.weight(slot);
          plan.network.add_weight(slot, engine::Weights{w.dtype, w.shape, nullptr});
        }
      }
      cache->put(cache_key, engine::serialize_plan(plan), build_ms);
      sr.plan = "cache miss";
    } else if (cache) {
      sr.plan = "cache skip";
    }
    return bytes;
  }

  // The plan of a cache entry for the engine converted to `network`, refit with its weights where
  // refittable; nullopt, with a warning, when the entry cannot be used (it is built again).
  std::optional<std::vector<uint8_t>> from_cache(const compiler::CacheEntry& entry,
                                                 const engine::Network& network,
                                                 const std::string& name, const std::string& device,
                                                 SegmentReport& sr) {
    try {
      engine::Plan plan = engine::deserialize_plan(entry.plan.data(), entry.plan.size());
      if (plan.source.refittable) {
        engine::refit(plan, network, builder_config(device), "engine `" + name + "`");
      }
      for (const auto& [weight, w] : plan.network.weights()) {
        KILN_CHECK(w.data != nullptr, CorruptInput, "weight `", weight, "` has no data");
      }
      sr.layers = static_cast<int>(plan.network.layers().size());
      sr.shuffles = engine::count_moving_shuffles(plan.network.layers());
      sr.generated_kernels = static_cast<int>(plan.target.kernels.size());
      sr.plan = "cache hit";
      sr.build_saved_ms = entry.build_ms;
      return engine::serialize_plan(plan);
    } catch (const Error& e) {
      KILN_LOG(kWarning, "engine cache: the entry for engine `", name, "` in ", cache->dir(),
               " is unusable (", e.message(), "); building the engine again");
      return std::nullopt;
    }
  }

  // The compiled engine at `position` with the weights of `network`, the conversion of the new
  // module's segment there.
  std::vector<uint8_t> refit_engine(const std::string& position, const std::string& name,
                                    const engine::Network& network, const std::string& device,
                                    SegmentReport& sr) {
    auto it = reuse->find(position);
    KILN_CHECK(it != reuse->end(), InvalidArgument, "refit: the new module's engine `", name,
               "` has no counterpart in the compiled module (the new module partitions "
               "differently: another graph or other ops)");
    const engine::Bytes& bytes = it->second->plan_bytes();
    engine::Plan plan = engine::deserialize_plan(bytes.data(), bytes.size());
    engine::refit(plan, network, builder_config(device),
                  "refit: engine `" + it->second->name() + "`");
    reused.insert(position);
    sr.layers = static_cast<int>(plan.network.layers().size());
    sr.shuffles = engine::count_moving_shuffles(plan.network.layers());
    sr.generated_kernels = static_cast<int>(plan.target.kernels.size());
    sr.plan = "refit";
    return engine::serialize_plan(plan);
  }
};

// Deterministic engine names: segment position and a hash of the segment graph and its shapes.
std::string engine_name(const std::string& position, const Segment& s) {
  Hasher h;
  h.update(partitioning::segment_graph(s)->toString());
  for (const auto& profile : s.shapes) {
    for (const auto& d : profile.inputs) {
      for (int64_t v : d.sizes) h.update(v);
      h.update(static_cast<int64_t>(d.dtype));
    }
  }
  std::ostringstream os;
  os << "engine_" << position << "_" << std::hex << std::setw(8) << std::setfill('0')
     << (h.digest() & 0xffffffffu);
  return os.str();
}

// A tuple or list construct whose only user is the graph's return: it packs the outputs as the
// caller expects them, computes nothing, and is not counted as an op left in PyTorch.
bool packs_outputs(const torch::jit::Node* n) {
  if (n->kind() != c10::prim::TupleConstruct && n->kind() != c10::prim::ListConstruct) return false;
  const torch::jit::Node* ret = n->owningGraph()->return_node();
  for (const torch::jit::Use& u : n->output()->uses()) {
    if (u.user != ret) return false;
  }
  return !n->output()->uses().empty();
}

std::string reasons_of(const Segment& s, const partitioning::PartitionedGraph& p) {
  std::map<std::string, int> counts;
  for (const torch::jit::Node* n : s.nodes) {
    if (packs_outputs(n)) continue;
    auto it = p.decisions.find(n);
    if (it != p.decisions.end() && !it->second.supported) {
      counts[std::string(partitioning::reason_name(it->second.reason))]++;
    }
  }
  std::string out;
  for (const auto& [r, c] : counts) out += (out.empty() ? "" : ", ") + r + " x" + std::to_string(c);
  return out;
}

void build_engines(Pipeline& pipe, const partitioning::PartitionedGraph& p,
                   const std::vector<Segment>& segments, const std::string& prefix,
                   compiler::SegmentEngines& engines, size_t& built, size_t total) {
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    const std::string position = prefix + std::to_string(i);
    SegmentReport sr;
    sr.target = partitioning::target_name(s.target);
    sr.device = s.target == Target::kEngine ? pipe.device_of(s) : pipe.spec.device.str();
    for (const torch::jit::Node* n : s.nodes) {
      if (!s.copied.count(n)) sr.ops.push_back(n->kind().toQualString());
    }
    if (s.has_shapes) {
      for (const auto& d : s.shapes[Profile::kOpt].inputs)
        sr.input_shapes_opt.push_back(d.is_tensor ? shape_text(d.sizes) : d.type);
      for (const auto& d : s.shapes[Profile::kOpt].outputs)
        sr.output_shapes_opt.push_back(d.is_tensor ? shape_text(d.sizes) : d.type);
    }
    if (s.target == Target::kEngine) {
      sr.engine_name = engine_name(position, s);
      const auto start = Clock::now();
      ++built;
      if (pipe.spec.progress) {
        pipe.spec.progress(Phase::kBuild, "engine " + std::to_string(built) + " of " +
                                              std::to_string(total) + " (" + sr.engine_name + ", " +
                                              std::to_string(sr.ops.size()) + " ops)");
      }
      auto bytes = pipe.build_engine(s, position, sr.engine_name, sr);
      engines[&s] =
          c10::make_intrusive<runtime::EngineHolder>(sr.engine_name, std::move(bytes), sr.device);
      sr.build_ms = ms_since(start);
      if (pipe.report) pipe.report->engine_ops += sr.ops.size();
    } else {
      sr.fallback_reason = reasons_of(s, p);
      size_t ops = 0;
      for (const torch::jit::Node* n : s.nodes) ops += !s.copied.count(n) && !packs_outputs(n);
      if (pipe.report) pipe.report->torch_ops += s.blocks.empty() ? ops : 1;
    }
    if (pipe.report) pipe.report->segments.push_back(sr);
    for (size_t b = 0; b < s.blocks.size(); ++b) {
      build_engines(pipe, p, s.blocks[b].segments, position + "_" + std::to_string(b) + "_",
                    engines, built, total);
    }
  }
}

// A cuda compile needs what running its engines needs, so that it fails before any work. Shape
// analysis still runs the PyTorch segments on the CPU (it needs sizes only, not values).
void check_device(const Device& device) {
  if (device.kind != Device::Kind::kCuda) return;
  KILN_CHECK(
      runtime::cuda_supported(), Unsupported, "compile: device ", device.str(),
      " needs kiln's CUDA backend and a libtorch with CUDA; this build has ",
      engine::cuda::built() ? "the CUDA backend but a CPU-only libtorch" : "no CUDA backend");
  const int count = engine::cuda::device_count();
  KILN_CHECK(device.index >= 0 && device.index < count, DeviceError, "compile: device ",
             device.str(), " does not exist (this machine has ", count, " CUDA device",
             count == 1 ? "" : "s", ")");
}

// The PyTorch segments of a cuda compile run on the device too: their tensor constants (frozen
// weights the lowering left outside engines) move there, as `module.to(device)` would have moved
// them, and so do the devices their ops are given (a traced `torch.arange(n, device=...)`).
// Zero-dim constants stay where they are: PyTorch takes CPU scalars next to CUDA tensors.
void move_tensor_constants(torch::jit::Block* block, const c10::Device& device) {
  std::vector<torch::jit::Node*> constants;
  for (torch::jit::Node* n : block->nodes()) {
    for (torch::jit::Block* b : n->blocks()) move_tensor_constants(b, device);
    if (n->kind() != c10::prim::Constant) continue;
    if (n->output()->type()->cast<c10::TensorType>()) constants.push_back(n);
  }
  for (torch::jit::Node* n : constants) {
    const auto value = torch::jit::toIValue(n->output());
    if (!value || !value->isTensor()) continue;
    const at::Tensor t = value->toTensor();
    if (!t.defined() || t.dim() == 0 || t.device() == device) continue;
    torch::jit::WithInsertPoint guard(n);
    const at::Tensor on_device = t.to(device).detach();  // constants never require grad
    torch::jit::Value* moved = block->owningGraph()->insertConstant(on_device);
    moved->setType(c10::TensorType::create(on_device));
    n->output()->replaceAllUsesWith(moved);
    n->destroy();
  }
}

size_t count_engines(const std::vector<Segment>& segments) {
  size_t n = 0;
  for (const Segment& s : segments) {
    n += s.target == Target::kEngine;
    for (const auto& b : s.blocks) n += count_engines(b.segments);
  }
  return n;
}

}  // namespace

namespace {

// compile(), and refit() with the compiled module's plans in `reuse`.
torch::jit::Module compile_module(const torch::jit::Module& module, const CompileSpec& spec,
                                  CompileReport* report,
                                  std::map<std::string, const runtime::EngineHolder*>* reuse) {
  check_device(spec.device);
  std::vector<Backend> backends = backends_of(spec);
  for (const Backend& b : backends) check_device(b.device);
  engine::BuilderConfig checked;  // bad switches fail before anything compiles
  for (const std::string& sw : spec.switches) engine::apply_switch(checked, sw);
  CompileReport local;
  if (!report) report = &local;
  *report = {};
  const std::string method = "forward";
  Pipeline pipe{module, method, spec, report};
  pipe.reuse = reuse;
  pipe.backends = std::move(backends);
  KILN_CHECK(!spec.engine_cache || spec.engine_cache_size > 0, InvalidArgument,
             "engine_cache_size: the engine cache needs room for at least one byte, got 0");
  const auto start = Clock::now();
  std::optional<std::string> module_key;
  if (spec.engine_cache && !reuse) {
    pipe.cache.emplace(spec.engine_cache_dir.empty() ? compiler::EngineCache::default_dir()
                                                     : spec.engine_cache_dir,
                       spec.engine_cache_size);
    // The same module compiled the same way before: its compiled module, loaded.
    compiler::ModuleLookup lookup = compiler::look_up_module(*pipe.cache, module, spec, *report);
    if (lookup.hit) return *lookup.hit;
    module_key = std::move(lookup.key);
  }
  auto graph = pipe.lower();

  // A node whose converter accepted it and then failed goes to PyTorch, and the graph is
  // partitioned again (unless the spec asks for one engine): a model that runs in PyTorch
  // compiles.
  PartitionCapability partition_capability(pipe.backends);
  compiler::RegistryCapability& capability = partition_capability.registry;
  partitioning::PartitionedGraph partitioned;
  compiler::SegmentEngines engines;
  for (;;) {
    pipe.phase(Phase::kPartition);
    partitioned = partitioning::partition(graph, partition_capability.get(),
                                          pipe.settings(spec.require_full_compilation));
    report->fallback.clear();
    for (const auto& [node, decision] : partitioned.decisions) {
      if (!decision.supported && !packs_outputs(node)) {
        report->fallback.push_back(partitioning::overload_name(node) + ": " +
                                   partitioning::reason_name(decision.reason) +
                                   (decision.detail.empty() ? "" : " (" + decision.detail + ")"));
      }
    }
    std::sort(report->fallback.begin(), report->fallback.end());

    pipe.phase(Phase::kShapeAnalysis);
    try {
      const auto profiles = pipe.profiles(*graph);
      if (!partitioning::shapes_from_profiles(partitioned, profiles)) {
        partitioning::analyze_shapes(partitioned, profiles);
      }
    } catch (const partitioning::EngineSegmentFailed& f) {
      // An engine segment the generated inputs make fail (an integer division by zero, a
      // solver given a singular matrix) runs in PyTorch, where the model's own inputs go.
      bool progress = false;
      for (const torch::jit::Node* n : f.nodes) {
        if (capability.refused(n)) continue;
        capability.refuse(n, partitioning::Reason::kRunFailed, f.message());
        progress = true;
      }
      if (spec.require_full_compilation || !progress) throw;
      KILN_LOG(kInfo, "compile: ", f.message(), "; its ", f.nodes.size(), " ops run in PyTorch");
      continue;
    }

    pipe.phase(Phase::kConvert);
    engines.clear();
    pipe.reused.clear();
    report->segments.clear();
    report->engine_ops = report->torch_ops = 0;
    size_t built = 0;
    try {
      build_engines(pipe, partitioned, partitioned.segments, "", engines, built,
                    count_engines(partitioned.segments));
      break;
    } catch (const NodeRefused& r) {
      if (spec.require_full_compilation || capability.refused(r.node)) throw r.error;
      KILN_LOG(kInfo, "compile: ", r.error.message(), "; `", partitioning::overload_name(r.node),
               "` runs in PyTorch");
      capability.refuse(r.node, partitioning::Reason::kConversionFailed, r.error.message());
    }
  }

  for (const auto& [position, holder] :
       reuse ? *reuse : std::map<std::string, const runtime::EngineHolder*>{}) {
    KILN_CHECK(pipe.reused.count(position), InvalidArgument,
               "refit: the compiled module's engine `", holder->name(),
               "` has no counterpart in the new module (the new module partitions differently: "
               "another graph or other ops)");
  }

  pipe.phase(Phase::kStitch);
  std::string type_name = module.type()->name() ? module.type()->name()->name() : "Module";
  auto compiled = compiler::stitch(partitioned, engines, "__torch__.kiln.Compiled_" + type_name,
                                   spec.device.str());
  if (spec.device.kind == Device::Kind::kCuda) {
    move_tensor_constants(compiled.get_method(method).graph()->block(),
                          c10::Device(spec.device.str()));
  }
  compiler::insert_tied_dim_guards(*compiled.get_method(method).graph(), spec.inputs);
  ir::clear_export_sizes(compiled.get_method(method).graph()->block());
  compiled.register_attribute(compiler::kSpecAttribute, c10::StringType::get(),
                              c10::IValue(compiler::spec_to_json(spec)));
  pipe.end_phase();
  if (module_key) {
    const auto store = Clock::now();
    compiler::store_compiled(*pipe.cache, *module_key, compiled, *report, ms_since(start));
    report->phase_ms.emplace_back("store", ms_since(store));
  }
  return compiled;
}

}  // namespace

void register_atomic_subgraph(const std::string& name, const std::vector<std::string>& ops) {
  partitioning::AtomicPattern pattern;
  pattern.name = name;
  for (const std::string& step : ops) {
    std::set<std::string> names;
    size_t from = 0;
    for (;;) {
      const size_t bar = step.find('|', from);
      const std::string op = step.substr(from, bar == std::string::npos ? bar : bar - from);
      if (!op.empty()) names.insert(op);
      if (bar == std::string::npos) break;
      from = bar + 1;
    }
    pattern.steps.push_back(std::move(names));
  }
  partitioning::register_atomic_pattern(std::move(pattern));
}

torch::jit::Module compile(const torch::jit::Module& module, const CompileSpec& spec,
                           CompileReport* report) {
  return compile_module(module, spec, report, nullptr);
}

torch::jit::Module refit(const torch::jit::Module& compiled, const torch::jit::Module& module,
                         CompileReport* report) {
  KILN_CHECK(compiled.hasattr(compiler::kSpecAttribute), InvalidArgument,
             "refit: the compiled module has no `", compiler::kSpecAttribute,
             "` attribute: it was not made by kiln's compile() (or by a kiln older than refit)");
  CompileSpec spec = compiler::spec_from_json(
      compiled.attr(compiler::kSpecAttribute).toStringRef(),
      std::string("refit: the compiled module's `") + compiler::kSpecAttribute + "`");
  KILN_CHECK(spec.refittable, Unsupported,
             "refit: the module was compiled without refittable, so its engines may hold weights "
             "folded into others; compile with refittable (kilnc --refittable, "
             "kiln.compile(..., refittable=True)) to refit it");
  // Engines by position: an engine's attribute is `engine_<position>_<hash>`.
  std::vector<c10::intrusive_ptr<runtime::EngineHolder>> holders;
  std::map<std::string, const runtime::EngineHolder*> reuse;
  for (const auto& attr : compiled.named_attributes(/*recurse=*/false)) {
    if (!attr.value.isCustomClass()) continue;
    auto holder = attr.value.toCustomClass<runtime::EngineHolder>();
    const std::string& name = holder->name();
    const size_t last = name.rfind('_');
    KILN_CHECK(name.rfind("engine_", 0) == 0 && last != std::string::npos && last > 7, CorruptInput,
               "refit: the compiled module's engine `", name,
               "` is not named engine_<position>_<hash>");
    reuse[name.substr(7, last - 7)] = holder.get();
    holders.push_back(std::move(holder));
  }
  spec.progress = nullptr;
  return compile_module(module, spec, report, &reuse);
}

namespace {

// The partition of `method` with the spec's settings (forced ops and modules, backends) and no
// block size, nothing converted or built: which ops the engines would take.
partitioning::CoverageReport coverage_of(const torch::jit::Module& module,
                                         const std::string& method, const CompileSpec& spec) {
  Pipeline pipe{module, method, spec, nullptr};
  pipe.backends = backends_of(spec);
  auto graph = pipe.lower();
  const PartitionCapability capability(pipe.backends);
  auto settings = pipe.settings(false);
  settings.min_block_size = 1;
  settings.max_engine_weight_bytes = 0;
  const auto partitioned = partitioning::partition(graph, capability.get(), settings);
  return partitioning::coverage(partitioned);
}

}  // namespace

bool check_method_op_support(const torch::jit::Module& module, const std::string& method,
                             std::string* report) {
  const auto cov = coverage_of(module, method, CompileSpec{});
  if (report) *report = partitioning::to_text(cov);
  return cov.supported == cov.total;
}

std::string op_coverage_json(const torch::jit::Module& module, const CompileSpec& spec) {
  return partitioning::to_json(coverage_of(module, "forward", spec)).dump();
}

std::vector<uint8_t> convert_method_to_engine(const torch::jit::Module& module,
                                              const std::string& method, const CompileSpec& spec) {
  Pipeline pipe{module, method, spec, nullptr};
  auto graph = pipe.lower();
  compiler::RegistryCapability capability;
  auto partitioned = partitioning::partition(graph, capability, pipe.settings(true));
  const auto profiles = pipe.profiles(*graph);
  if (!partitioning::shapes_from_profiles(partitioned, profiles)) {
    partitioning::analyze_shapes(partitioned, profiles);
  }
  const Segment* only = nullptr;
  for (const Segment& s : partitioned.segments) {
    if (s.target == Target::kEngine) {
      KILN_CHECK(only == nullptr, Unsupported,
                 "convert_method_to_engine: the method needs more than one engine");
      only = &s;
    } else {
      // Packing the outputs into a tuple is all a fully supported method leaves to PyTorch.
      for (const torch::jit::Node* n : s.nodes) {
        KILN_CHECK(partitioning::is_bookkeeping(n), Unsupported, "convert_method_to_engine: `",
                   n->kind().toQualString(), "` would run in PyTorch");
      }
    }
  }
  KILN_CHECK(only != nullptr, Unsupported, "convert_method_to_engine: nothing to convert");
  KILN_CHECK(only->inputs.size() + 1 == graph->inputs().size(), Unsupported,
             "convert_method_to_engine: the engine does not take the method's arguments directly");
  SegmentReport unused;
  try {
    return pipe.build_engine(*only, "0", engine_name("0", *only), unused);
  } catch (const NodeRefused& r) {
    throw r.error;
  }
}

}  // namespace kiln
