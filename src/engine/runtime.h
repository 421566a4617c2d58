// The engine runtime: an immutable Engine (shareable between threads) and per-caller
// ExecutionContexts that bind shapes and buffers and execute on the CPU backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/cpu/kernels.h"
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

struct EngineTarget {
  std::string device = "cpu";  // "cpu" or "cuda"
  int compute_capability = 0;  // cuda only, e.g. 90
};

class Engine {
 public:
  explicit Engine(Network network, EngineTarget target = {});
  const Network& network() const { return network_; }
  const EngineTarget& target() const { return target_; }

  size_t num_inputs() const { return network_.inputs().size(); }
  size_t num_outputs() const { return network_.outputs().size(); }
  const TensorDesc& input(size_t i) const;
  const TensorDesc& output(size_t i) const;
  // Index of the input/output called `name`; throws InvalidArgument listing the names.
  size_t input_index(const std::string& name) const;
  size_t output_index(const std::string& name) const;

  // Layers (kind, inputs, outputs with shapes and dtypes, parameters) as JSON.
  std::string inspect_json() const;

 private:
  Network network_;
  EngineTarget target_;
};

struct LayerTiming {
  std::string name, kind;
  double total_ms = 0;
  int runs = 0;
};

class ExecutionContext {
 public:
  explicit ExecutionContext(std::shared_ptr<const Engine> engine);
  ~ExecutionContext();
  ExecutionContext(const ExecutionContext&) = delete;
  ExecutionContext& operator=(const ExecutionContext&) = delete;

  // Throws ShapeMismatch if the rank or a dim is outside the input's profile.
  void set_input_shape(size_t index, const Shape& shape);
  // Output shapes for the input shapes set so far (every dynamic input must be set).
  const Shape& output_shape(size_t index);
  void bind_input(size_t index, const void* data);
  void bind_output(size_t index, void* data);
  void execute();

  // Convenience: checks dtypes, sets shapes, allocates outputs, binds and executes.
  std::vector<HostTensor> run(const std::vector<HostTensor>& inputs);

  void enable_profiling(bool on) { profiling_ = on; }
  const std::vector<LayerTiming>& profile() const { return timings_; }
  std::string profile_table() const;  // one line per layer, slowest first
  size_t arena_bytes() const { return plan_.arena_bytes; }
  size_t activation_bytes() const { return plan_.total_bytes; }

 private:
  void resolve_shapes();

  std::shared_ptr<const Engine> engine_;
  std::vector<Shape> input_shapes_;
  std::vector<bool> input_set_;
  bool resolved_ = false;
  std::vector<TensorDesc> descs_;      // concrete, per tensor
  std::vector<int64_t> arena_offset_;  // per tensor, -1 when not in the arena
  MemoryPlan plan_;
  std::shared_ptr<uint8_t> arena_storage_;
  size_t arena_capacity_ = 0;
  std::vector<const void*> bound_inputs_;
  std::vector<void*> bound_outputs_;
  std::vector<std::unique_ptr<cpu::KernelState>> states_;
  bool profiling_ = false;
  std::vector<LayerTiming> timings_;
};

}  // namespace kiln::engine
