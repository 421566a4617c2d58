// The one interface the runtime runs a network through, with two implementations: cpu/backend.cpp
// (host memory, layers run to completion) and cuda/backend.cpp (device memory, layers enqueued on
// a stream). The runtime owns everything that does not depend on where layers run: shapes, the
// arena plan, views, bindings, the execute loop and the profile table (runtime.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/network.h"

namespace kiln::engine {

struct EngineTarget;

// An algorithm a kernel of layer `layer` (its index in the network) chose for the operation `key`
// (the kernel's own description of it: dtypes, shapes, alignments), as the kernel's own bytes (a
// cuDNN algorithm, a cuBLASLt configuration). Kept by the engine for all its contexts, and in
// plans built on their device (builder.h: BuilderConfig::choose_at_build).
struct KernelChoice {
  uint64_t layer = 0;
  std::vector<int64_t> key;
  std::vector<uint8_t> data;
};

// A row-major tensor where a backend keeps it: host memory for the CPU, device memory of the
// engine's device for CUDA. Dense, unless it sits in a wider tensor (an input of an in-place
// concat, ConcatParams::in_place): then its elements come in rows of `row` elements (the dims from
// the concat's axis on), row r starting `pitch` elements after row r - 1. Only the layers
// reads_placed / writes_placed name (network.h) are given such tensors, and as outputs those the
// engine backend's writes_placed takes.
struct TensorRef {
  DataType dtype = DataType::kF32;
  Shape shape;
  void* data = nullptr;
  // The runtime's promise that these bytes never change while the engine lives (an engine
  // weight), so a kernel may cache what it derives from them keyed by `data` alone.
  bool constant = false;
  int64_t row = 0, pitch = 0;  // 0: dense
  int64_t numel() const { return volume(shape); }
  bool dense() const { return pitch == 0; }
  // Each dim's stride in elements (contiguous_strides when dense).
  std::vector<int64_t> strides() const { return placed_strides(shape, row, pitch); }
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Host memory aligned to 64 bytes (uninitialized); DeviceError past the machine's physical memory.
std::shared_ptr<uint8_t> allocate_host(size_t bytes);

// One ExecutionContext's side of a backend: its memory, its kernels' state, and (CUDA) its stream.
class ContextBackend {
 public:
  virtual ~ContextBackend() = default;

  // Memory. Whether tensors are host pointers (then the caller's buffers bind directly);
  // InvalidArgument/DeviceError naming `what` unless `ptr` is memory this backend reads.
  virtual bool host_memory() const = 0;
  virtual void check_pointer(const void* ptr, const std::string& what) const = 0;
  // The activation arena, grown to at least `bytes` (ordered on the stream for CUDA).
  virtual void* arena(size_t bytes) = 0;
  // Where weight `name` is read from (CUDA uploads every weight on first use).
  virtual const void* weight(const std::string& name) = 0;
  // Backend memory freed when the last reference goes.
  virtual std::shared_ptr<void> allocate(size_t bytes) = 0;
  enum class Copy { kWithin, kFromHost, kToHost };
  virtual void copy(void* dst, const void* src, size_t bytes, Copy direction) = 0;
  // Writes host-computed integer values (shape tensors) into `dst`.
  virtual void write_values(const TensorRef& dst, const std::vector<int64_t>& values) = 0;

  // How far kernels may choose algorithms for the shapes of the runs that follow (heuristic
  // queries, timed candidates; choices kept per shape): kFull at a static engine's shapes and at
  // a dynamic one's profile points (every input at its min, opt or max); kBudgeted at other
  // shapes the context has run before, where a call may be bounded in the host time it spends
  // choosing (the CUDA backend's KILN_CUDA_TUNING_MS, 10 ms unset) and leave the rest to the
  // shape's next calls; kOff at a shape never seen, where kernels keep the choices made at the
  // nearest shape that chose, so that it costs little more than a cached one. The CPU has nothing
  // to choose.
  enum class Tuning { kOff, kBudgeted, kFull };
  virtual void set_tuning(Tuning tuning) = 0;

  // Runs (CPU) or enqueues (CUDA) layer `index` of the network.
  virtual void run_layer(size_t index, const Layer& layer, const std::vector<TensorRef>& inputs,
                         const std::vector<TensorRef>& outputs) = 0;
  // Waits for everything run_layer and copy started (a no-op on the CPU).
  virtual void synchronize() = 0;

  // Streams (CUDA): a cudaStream_t, nullptr the legacy default stream. The CPU has none:
  // set_stream is InvalidArgument there and stream() nullptr.
  virtual void set_stream(void* stream) = 0;
  virtual void* stream() const = 0;

  // Whole-engine graphs (CUDA): runs `enqueue` (every layer, reading `inputs`, writing
  // `outputs`) through a graph per `key` (the input shapes), inputs and outputs staged through
  // backend-owned buffers so that bindings may change between calls; a key is captured only
  // after an eager run at it that made every choice for its shapes (set_tuning), so graphs
  // hold tuned choices.
  virtual bool has_graphs() const = 0;
  using EnqueueFn = std::function<void(const std::vector<const void*>& inputs,
                                       const std::vector<void*>& outputs)>;
  virtual void execute_graph(const std::vector<int64_t>& key,
                             const std::vector<const void*>& inputs,
                             const std::vector<size_t>& input_bytes,
                             const std::vector<void*>& outputs,
                             const std::vector<size_t>& output_bytes, const EnqueueFn& enqueue) = 0;

  // Per-layer time, free of the host's enqueue time on CUDA: profile_begin() before the layers,
  // profile_mark(layer) after each, profile_end() returns (layer, ms) pairs, each the time since
  // the mark before.
  virtual void profile_begin() = 0;
  virtual void profile_mark(size_t layer) = 0;
  virtual std::vector<std::pair<size_t, double>> profile_end() = 0;
};

// One Engine's side of a backend (CUDA: its device and its weights there), shared by the
// engine's contexts.
class EngineBackend {
 public:
  virtual ~EngineBackend() = default;
  virtual std::unique_ptr<ContextBackend> create_context(size_t num_layers) const = 0;
  // The kernels' choices the engine holds (runtime.h: Engine::kernel_choices).
  virtual std::vector<KernelChoice> choices() const { return {}; }
  // Whether its kernel of `layer` writes its output placed as `where` says (network.h:
  // WritesPlacedFn; the concats of engine::writes_placed always do, and are not asked).
  virtual bool writes_placed(const Layer& layer, const std::vector<TensorDesc>& inputs,
                             const TensorDesc& output, const Placement& where) const {
    (void)layer, (void)inputs, (void)output, (void)where;
    return false;
  }
};

// The backend of `target.device` ("cpu" or "cuda"): DeviceError for a missing device or one of
// another compute capability, Unsupported for cuda in a build without CUDA.
std::shared_ptr<EngineBackend> create_engine_backend(const Network& net,
                                                     const EngineTarget& target);

namespace cpu {
std::shared_ptr<EngineBackend> create_engine_backend(const Network& net);
}  // namespace cpu
namespace cuda {
std::shared_ptr<EngineBackend> create_engine_backend(const Network& net,
                                                     const EngineTarget& target);
}  // namespace cuda

}  // namespace kiln::engine
