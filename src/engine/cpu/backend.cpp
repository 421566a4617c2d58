// The CPU side of engine/backend.h: host memory, layers run to completion on the calling thread
// (and oneDNN's/OpenMP's), wall time per layer.
#include <chrono>
#include <cstring>

#include "engine/backend.h"
#include "engine/cpu/kernels.h"
#include "util/errors.h"

namespace kiln::engine::cpu {
namespace {

class CpuContext final : public ContextBackend {
 public:
  CpuContext(const Network& net, size_t num_layers) : net_(net), states_(num_layers) {}

  bool host_memory() const override { return true; }
  void check_pointer(const void*, const std::string&) const override {}
  void* arena(size_t bytes) override {
    if (bytes > arena_capacity_ || !arena_) {
      arena_ = allocate_host(bytes);
      arena_capacity_ = bytes;
    }
    return arena_.get();
  }
  const void* weight(const std::string& name) override {
    const Weights& w = net_.weight(name);
    KILN_CHECK(w.data != nullptr, InvalidArgument, "weight `", name,
               "` was stripped from this plan (a weightless plan); refit it before running");
    return w.data->data();
  }
  std::shared_ptr<void> allocate(size_t bytes) override { return allocate_host(bytes); }
  void set_tuning(Tuning) override {}
  void copy(void* dst, const void* src, size_t bytes, Copy) override {
    if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
  }
  void write_values(const TensorRef& dst, const std::vector<int64_t>& values) override {
    const std::vector<uint8_t> bytes = encode_values(dst.dtype, values);
    copy(dst.data, bytes.data(), bytes.size(), Copy::kFromHost);
  }

  void run_layer(size_t index, const Layer& layer, const std::vector<TensorRef>& inputs,
                 const std::vector<TensorRef>& outputs) override {
    cpu::run_layer(layer, inputs, outputs, states_.at(index));
  }
  void synchronize() override {}

  void set_stream(void*) override {
    KILN_THROW(InvalidArgument,
               "set_stream: the engine runs on the CPU; streams are for cuda engines");
  }
  void* stream() const override { return nullptr; }
  bool has_graphs() const override { return false; }
  void execute_graph(const std::vector<int64_t>&, const std::vector<const void*>&,
                     const std::vector<size_t>&, const std::vector<void*>&,
                     const std::vector<size_t>&, const EnqueueFn&) override {
    KILN_THROW(InvalidArgument, "the engine runs on the CPU; graphs are for cuda engines");
  }

  void profile_begin() override {
    marks_.clear();
    last_ = std::chrono::steady_clock::now();
  }
  void profile_mark(size_t layer) override {
    const auto now = std::chrono::steady_clock::now();
    marks_.emplace_back(layer, std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }
  std::vector<std::pair<size_t, double>> profile_end() override { return std::move(marks_); }

 private:
  const Network& net_;  // the engine's, which outlives its contexts
  std::vector<std::unique_ptr<KernelState>> states_;
  std::shared_ptr<uint8_t> arena_;
  size_t arena_capacity_ = 0;
  std::vector<std::pair<size_t, double>> marks_;
  std::chrono::steady_clock::time_point last_;
};

class CpuEngine final : public EngineBackend {
 public:
  explicit CpuEngine(const Network& net) : net_(net) {}
  std::unique_ptr<ContextBackend> create_context(size_t num_layers) const override {
    return std::make_unique<CpuContext>(net_, num_layers);
  }
  bool writes_placed(const Layer& layer, const std::vector<TensorDesc>& inputs,
                     const TensorDesc& output, const Placement& where) const override {
    return cpu::writes_placed(layer, inputs, output, where);
  }

 private:
  const Network& net_;
};

}  // namespace

std::shared_ptr<EngineBackend> create_engine_backend(const Network& net) {
  return std::make_shared<CpuEngine>(net);
}

}  // namespace kiln::engine::cpu
