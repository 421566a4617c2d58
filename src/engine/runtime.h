// The engine runtime: an immutable Engine (shareable between threads) and per-caller
// ExecutionContexts that bind shapes and buffers and execute on the engine's backend
// (engine/backend.h): the CPU, or a CUDA device (buffers are then device pointers and execute()
// only enqueues on a stream).
#pragma once

#include <list>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/memory_plan.h"
#include "engine/network.h"

namespace kiln::engine {

// A dense host tensor with 64-byte aligned storage.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DataType dtype, Shape shape);  // uninitialized contents
  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return volume(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  void* data() const { return storage_.get(); }
  template <class T>
  T* as() const {
    return static_cast<T*>(data());
  }

 private:
  DataType dtype_ = DataType::kF32;
  Shape shape_;
  std::shared_ptr<uint8_t> storage_;
};

// A kernel the builder generated for this plan (cuda: NVRTC-compiled machine code for the plan's
// compute capability), so that loading the plan compiles nothing. `key` names the computation
// (cuda/codegen.h: layers find their kernel by it), `source` is kept for inspection.
struct GeneratedKernel {
  std::string key;
  std::string source;
  std::vector<uint8_t> image;
};

struct EngineTarget {
  std::string device = "cpu";  // "cpu" or "cuda"
  int compute_capability = 0;  // cuda only, e.g. 90
  // cuda only: the CUDA device the engine is bound to. A run-time choice, not stored in plans:
  // set it after loading a plan (load_plan leaves 0).
  int device_index = 0;
  // The measurement switches the plan was built with ("cast_into_shuffle=off"; BuilderConfig), in
  // the order given: stored in the plan and shown by the inspector, so a timing says what it ran.
  std::vector<std::string> switches;
  // cuda only: the generated kernels of the plan's layers, keys unique.
  std::vector<GeneratedKernel> kernels;
  // cuda only: the kernels' choices made while building (at the profile points), and the device
  // and libraries they were made with (cuda::choice_environment): an engine elsewhere ignores
  // them and chooses again. (layer, key) pairs unique.
  std::string choice_environment;
  std::vector<KernelChoice> choices;
};

class Engine {
 public:
  // A cuda target checks its device (DeviceError if it is missing or of another compute
  // capability; Unsupported in a build without CUDA). Weights go to the device on first use.
  explicit Engine(Network network, EngineTarget target = {});
  ~Engine();
  Engine(const Engine&) = delete;  // the backend refers to network_
  Engine& operator=(const Engine&) = delete;
  const Network& network() const { return network_; }
  const EngineTarget& target() const { return target_; }
  bool on_cuda() const { return target_.device == "cuda"; }
  const EngineBackend& backend() const { return *backend_; }

  size_t num_inputs() const { return network_.inputs().size(); }
  size_t num_outputs() const { return network_.outputs().size(); }
  const TensorDesc& input(size_t i) const;
  const TensorDesc& output(size_t i) const;
  // Index of the input/output called `name`; throws InvalidArgument listing the names.
  size_t input_index(const std::string& name) const;
  size_t output_index(const std::string& name) const;

  // Layers (kind, inputs, outputs with shapes and dtypes, parameters) as JSON
  // (engine::inspect_json of its network and target).
  std::string inspect_json() const;

  // The kernels' choices this engine holds: the plan's (where made on this device and
  // libraries) and those its contexts made since, in (layer, key) order; none on the CPU.
  std::vector<KernelChoice> kernel_choices() const { return backend_->choices(); }

 private:
  Network network_;
  EngineTarget target_;
  std::shared_ptr<EngineBackend> backend_;
};

struct LayerTiming {
  std::string name, kind;
  std::string shapes;  // the layer's inputs -> outputs as first run, e.g. f16[8,64] f16[64] -> ...
  double total_ms = 0;
  // Host time enqueuing it (cuda: what the kernel does at the shape before its launch, and the
  // launch; the cpu runs it in this time).
  double host_ms = 0;
  int runs = 0;
};

// A tensor of random values: floats uniform in [-1, 1), integers (usually indices) in [0, 4),
// bools either way.
HostTensor random_host_tensor(DataType dtype, const Shape& shape, std::mt19937_64& rng);

// A network's layers, inputs with their profiles, outputs, the target's device and switches and
// a summary (layers, moving shuffles, layers of each kind) as JSON: what `kiln-run --inspect`
// prints. Needs no device, so a plan can be inspected where it cannot run.
std::string inspect_json(const Network& network, const EngineTarget& target);

class ExecutionContext {
 public:
  explicit ExecutionContext(std::shared_ptr<const Engine> engine);
  ~ExecutionContext();
  ExecutionContext(const ExecutionContext&) = delete;
  ExecutionContext& operator=(const ExecutionContext&) = delete;

  // Throws ShapeMismatch if the rank or a dim is outside the input's profile.
  void set_input_shape(size_t index, const Shape& shape);
  // Output shapes for the input shapes set so far (every dynamic input must be set): what to
  // allocate. A data-dependent dim (the rows of a nonzero) is given at its bound (the most it can
  // be); executed_output_shape says what execute() wrote.
  const Shape& output_shape(size_t index);
  // The shape of what the last execute() wrote to output `index`: output_shape with each
  // data-dependent dim as counted (the data is a dense prefix of the buffer). Such engines
  // synchronize their stream once per count while executing, and never replay CUDA graphs.
  const Shape& executed_output_shape(size_t index) const;
  // Host pointers for a CPU engine; device pointers (of the engine's device) for a cuda engine.
  void bind_input(size_t index, const void* data);
  void bind_output(size_t index, void* data);
  // CPU: runs to completion. cuda: enqueues the whole engine on the stream and returns (no
  // device or stream synchronization); outputs are ready when the stream gets there.
  void execute();

  // cuda engines: the cudaStream_t that execute() enqueues on (nullptr, the default, is the
  // legacy default stream). InvalidArgument on a CPU engine.
  void set_stream(void* stream);
  void* stream() const;
  // cuda engines: whole-engine CUDA graphs. execute() then replays a graph captured for the
  // current input shapes (one per shape, up to 16); a new shape runs once eagerly and is captured
  // on its next execution. Inputs and outputs are staged through context-owned device buffers
  // (one device copy each way), so bindings may change between calls. Needs a stream set by
  // set_stream (the legacy default stream cannot be captured: it runs eagerly).
  void enable_cuda_graphs(bool on);

  // Convenience: checks dtypes, sets shapes, allocates outputs, binds and executes. For a cuda
  // engine it copies the inputs to the device, executes, waits for the stream and copies back.
  std::vector<HostTensor> run(const std::vector<HostTensor>& inputs);
  // run() once at each of the engine's profile points (every input at its min, then at its opt,
  // then at its max; a point equal to an earlier one runs once) on random data (random_host_tensor
  // from `seed`); returns how many ran. A cuda engine's kernels make or adopt their choices for
  // those shapes and load their modules meanwhile (the builder's choose_at_build, and a loaded
  // module's engines: kiln.Engine warms its first context so).
  int run_profile_points(uint64_t seed = 0);

  // Per-layer times while on: wall time of each layer on the CPU; on cuda, device time between
  // events around each layer, the layers enqueued eagerly (no graph) behind a gate so that
  // enqueue time on the host does not count; it is counted apart (LayerTiming::host_ms), with
  // the host time resolving shapes at new input shapes takes.
  void enable_profiling(bool on) { profiling_ = on; }
  const std::vector<LayerTiming>& profile() const { return timings_; }
  std::string profile_table() const;  // one line per layer, slowest first
  size_t arena_bytes() const { return res_.plan.arena_bytes; }
  size_t activation_bytes() const { return res_.plan.total_bytes; }

 private:
  void resolve_shapes();
  // resolve_shapes' placement of in-place concats' inputs in their outputs (alias_of, row, pitch,
  // view_layer).
  void place_concats(const std::vector<bool>& is_output);
  // Every layer once, reading `inputs` and writing `outputs` (on the stream for cuda engines).
  void enqueue(const std::vector<const void*>& inputs, const std::vector<void*>& outputs);
  void execute_layers(const std::vector<void*>& where);
  // Tensors computed from data-dependent dims: `layer`'s output shapes at the counts known so far.
  void resolve_data_dependent(const Layer& layer);
  // After a data-dependent layer ran: its count (output 1) read back, its output 0 sized by it.
  void read_count(const Layer& layer, const std::vector<void*>& where);
  // Data-dependent tensors' shapes back to their bounds (what output_shape gives).
  void restore_bounds();

  std::shared_ptr<const Engine> engine_;
  std::vector<Shape> input_shapes_;
  std::vector<bool> input_set_;
  bool resolved_ = false;
  // What resolve_shapes computes for one set of input shapes.
  struct Resolution {
    std::vector<TensorDesc> descs;      // concrete, per tensor
    std::vector<int64_t> arena_offset;  // per tensor, -1 when not in the arena
    // Per tensor: the tensor whose bytes it shares (the output of a reshape, of a slice that
    // keeps a contiguous range, of a gather of a known contiguous range, of where(c, a, a); none
    // moves data), or -1, and where in those bytes it starts; and per layer, whether it is such a
    // view and so never runs, and which of its inputs it shares.
    std::vector<int64_t> alias_of;
    std::vector<int64_t> alias_offset;
    std::vector<bool> view_layer;
    std::vector<size_t> view_source;  // the input a view layer shares bytes with
    // Per tensor: placed in an in-place concat's output (ConcatParams::in_place) as rows of `row`
    // elements `pitch` elements apart (TensorRef), or 0 and 0 where dense. Such a concat is a
    // view layer of all its inputs.
    std::vector<int64_t> row, pitch;
    // Per layer: whether it writes an output so placed (a concat, or a layer the engine backend
    // writes placed: EngineBackend::writes_placed).
    std::vector<bool> writes_placed;
    // Per layer: whether its outputs are values known on the host (shape arithmetic) that
    // nothing reads on the device (they only size other tensors), so it never runs.
    std::vector<bool> host_layer;
    // Per tensor: whether its shape depends on a data-dependent dim, and the shape it was
    // planned at (the bounds).
    std::vector<bool> data_dependent;
    bool any_data_dependent = false;
    std::vector<Shape> bound_shapes;
    // Per tensor: whether its bytes are an engine weight (directly or through views).
    std::vector<bool> constant;
    MemoryPlan plan;
    // Whether the inputs' shapes are a profile point (all of a static engine's are).
    bool at_profile_point = true;
  };
  // The resolution of the current input shapes (resolved_), and those of the input shapes
  // resolved before, most recent first (up to kResolutions): a shape that comes back is not
  // resolved again (no shape inference or memory planning per layer).
  Resolution res_;
  std::vector<Shape> res_shapes_;  // the input shapes res_ is for; empty before any
  static constexpr size_t kResolutions = 16;
  std::list<std::pair<std::vector<Shape>, Resolution>> resolutions_;
  // The input shapes executed before (up to kSeenShapes, each with the call that last ran it,
  // to drop the oldest): kernels choose at profile points and, within a budget, at shapes that
  // repeat.
  static constexpr size_t kSeenShapes = 1024;
  std::map<std::vector<Shape>, uint64_t> seen_shapes_;
  uint64_t calls_ = 0;
  // Per output, the shape the last execution wrote.
  std::vector<Shape> executed_shapes_;
  std::vector<const void*> bound_inputs_;
  std::vector<void*> bound_outputs_;
  bool profiling_ = false;
  std::vector<LayerTiming> timings_;
  double resolve_ms_ = 0;  // profiling: host time resolving shapes (new input shapes)
  int resolves_ = 0;
  std::unique_ptr<ContextBackend> backend_;
  std::vector<std::shared_ptr<void>> staging_;  // run()'s backend copies, reused
  std::vector<size_t> staging_bytes_;
  bool graphs_ = false;
};

}  // namespace kiln::engine
