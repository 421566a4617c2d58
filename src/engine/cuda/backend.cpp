// The CUDA backend behind cuda/backend.h: device queries, per-engine weights on the device,
// per-context streams, arenas, handles and the layer dispatch.
#include "engine/cuda/backend.h"

#include <cublasLt.h>
#include <cudnn.h>

#include <cstring>
#include <functional>
#include <mutex>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/graphs.h"
#include "engine/cuda/kernels.h"
#include "engine/runtime.h"
#include "util/logging.h"

namespace kiln::engine::cuda {
namespace {

constexpr size_t kWeightAlignment = 256;

// Makes `device` current for a scope and restores the caller's device after. Never throws (it
// runs in destructors too): a failure here shows up in the next checked call.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    changed_ = previous_ != device && cudaSetDevice(device) == cudaSuccess;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// Stream-ordered device buffer that only grows.
struct GrowingBuffer {
  void* ptr = nullptr;
  size_t capacity = 0;
  void* reserve(size_t bytes, cudaStream_t stream, const char* what) {
    if (bytes <= capacity && ptr) return ptr;
    if (ptr) KILN_CUDA_CHECK(cudaFreeAsync(ptr, stream));
    ptr = nullptr;
    capacity = 0;
    const size_t size = std::max<size_t>((bytes + 255) / 256 * 256, 256);
    const cudaError_t status = cudaMallocAsync(&ptr, size, stream);
    KILN_CHECK(status == cudaSuccess, DeviceError, "cudaMallocAsync of ", size, " bytes for the ",
               what, " failed: ", cudaGetErrorString(status));
    capacity = size;
    return ptr;
  }
  void release() {
    if (ptr) cudaFree(ptr);
    ptr = nullptr;
    capacity = 0;
  }
};

}  // namespace

class EngineState {
 public:
  EngineState(const Network& net, int device) : weight_data_(net.weights()), device_(device) {}
  ~EngineState() {
    if (weights_) {
      DeviceGuard guard(device_);
      cudaFree(weights_);
      if (uploaded_) cudaEventDestroy(uploaded_);
    }
  }
  int device() const { return device_; }

  // Uploads every weight on the first call (on `stream`); later callers on other streams wait
  // for that upload through an event.
  const void* weight(const std::string& name, cudaStream_t stream, bool* waited) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!weights_ && !weight_data_.empty()) upload(stream);
      if (!*waited && uploaded_ && stream != upload_stream_) {
        KILN_CUDA_CHECK(cudaStreamWaitEvent(stream, uploaded_, 0));
      }
      *waited = true;
    }
    auto it = offsets_.find(name);
    KILN_CHECK(it != offsets_.end(), InternalError, "weight `", name, "` is not in the engine");
    return static_cast<const uint8_t*>(weights_) + it->second;
  }

 private:
  void upload(cudaStream_t stream) {
    size_t total = 0;
    for (const auto& [name, w] : weight_data_) {
      KILN_CHECK(w.data != nullptr, InvalidArgument, "weight `", name,
                 "` was stripped from this plan (a weightless plan); refit it before running");
      offsets_[name] = total;
      total += (w.data->size() + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment;
    }
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, std::max<size_t>(total, kWeightAlignment));
    KILN_CHECK(status == cudaSuccess, DeviceError, "cudaMalloc of ", total,
               " bytes for the engine's weights failed: ", cudaGetErrorString(status));
    for (const auto& [name, w] : weight_data_) {
      if (w.data->empty()) continue;
      KILN_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(ptr) + offsets_[name], w.data->data(),
                                      w.data->size(), cudaMemcpyHostToDevice, stream));
    }
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
    KILN_CUDA_CHECK(cudaEventRecord(uploaded_, stream));
    upload_stream_ = stream;
    weights_ = ptr;
  }

  const std::map<std::string, Weights> weight_data_;  // host copies share the network's bytes
  const int device_;
  std::mutex mutex_;
  void* weights_ = nullptr;
  std::map<std::string, size_t> offsets_;
  cudaEvent_t uploaded_ = nullptr;
  cudaStream_t upload_stream_ = nullptr;
};

class ContextState : public Resources {
 public:
  ContextState(std::shared_ptr<EngineState> engine, size_t num_layers)
      : engine_(std::move(engine)), states_(num_layers) {}
  ~ContextState() override {
    DeviceGuard guard(engine_->device());
    // Buffers may still be in use by enqueued work: cudaFree waits for it.
    arena_.release();
    workspace_.release();
    if (switch_event_) cudaEventDestroy(switch_event_);
    for (cudaEvent_t e : profile_events_) cudaEventDestroy(e);
    if (gate_) cudaFreeHost(const_cast<int*>(gate_));
    if (cublaslt_) cublasLtDestroy(static_cast<cublasLtHandle_t>(cublaslt_));
    if (cudnn_) cudnnDestroy(static_cast<cudnnHandle_t>(cudnn_));
  }

  cudaStream_t stream() const override { return stream_; }
  int device() const override { return engine_->device(); }
  void* workspace(size_t bytes) override { return workspace_.reserve(bytes, stream_, "workspace"); }
  void* cublaslt() override {
    if (!cublaslt_) {
      cublasLtHandle_t h = nullptr;
      const cublasStatus_t status = cublasLtCreate(&h);
      KILN_CHECK(status == CUBLAS_STATUS_SUCCESS, DeviceError, "cublasLtCreate failed: status ",
                 static_cast<int>(status));
      cublaslt_ = h;
    }
    return cublaslt_;
  }
  void* cudnn() override {
    if (!cudnn_) {
      cudnnHandle_t h = nullptr;
      const cudnnStatus_t status = cudnnCreate(&h);
      KILN_CHECK(status == CUDNN_STATUS_SUCCESS, DeviceError,
                 "cudnnCreate failed: ", cudnnGetErrorString(status));
      cudnn_ = h;
      cudnn_stream_set_ = false;
    }
    if (!cudnn_stream_set_) {
      const cudnnStatus_t status = cudnnSetStream(static_cast<cudnnHandle_t>(cudnn_), stream_);
      KILN_CHECK(status == CUDNN_STATUS_SUCCESS, DeviceError,
                 "cudnnSetStream failed: ", cudnnGetErrorString(status));
      cudnn_stream_set_ = true;
    }
    return cudnn_;
  }

  void set_stream(cudaStream_t s) {
    if (s == stream_) return;
    // The arena and workspace move to the new stream with this context: order the new stream
    // after the work already enqueued on the old one (an event, no host wait).
    DeviceGuard guard(device());
    if (!switch_event_) {
      KILN_CUDA_CHECK(cudaEventCreateWithFlags(&switch_event_, cudaEventDisableTiming));
    }
    if (cudaEventRecord(switch_event_, stream_) == cudaSuccess) {
      KILN_CUDA_CHECK(cudaStreamWaitEvent(s, switch_event_, 0));
    } else {
      cudaGetLastError();  // the old stream is gone, and its work with it
    }
    cudnn_stream_set_ = false;
    stream_ = s;
  }
  EngineState& engine() { return *engine_; }
  GraphCache graphs;
  GrowingBuffer& arena_buffer() { return arena_; }
  std::unique_ptr<KernelState>& state(size_t layer) { return states_.at(layer); }
  bool waited_for_weights = false;

  // Profiling (see backend.h): the gate flag in host-mapped memory and one event per mark.
  void profile_begin() {
    DeviceGuard guard(device());
    if (!gate_) {
      void* p = nullptr;
      KILN_CUDA_CHECK(cudaHostAlloc(&p, 2 * sizeof(int), cudaHostAllocMapped));
      gate_ = static_cast<int*>(p);
      void* d = nullptr;
      KILN_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
      gate_device_ = static_cast<int*>(d);
    }
    gate_[0] = 0;
    gate_[1] = 0;
    marks_.clear();
    launch_gate(stream_, gate_device_, 2'000'000'000LL);
    record(kNoLayer);
  }
  void profile_mark(size_t layer) { record(layer); }
  std::vector<std::pair<size_t, double>> profile_end() {
    DeviceGuard guard(device());
    gate_[0] = 1;
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (gate_[1] != 0) {
      KILN_LOG(kWarning,
               "profiling: the host took over 2 s to enqueue the layers (or waited on "
               "the device meanwhile); layer times include host time");
    }
    std::vector<std::pair<size_t, double>> out;
    for (size_t i = 1; i < marks_.size(); ++i) {
      float ms = 0;
      KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, profile_events_[i - 1], profile_events_[i]));
      out.emplace_back(marks_[i], static_cast<double>(ms));
    }
    return out;
  }

 private:
  static constexpr size_t kNoLayer = static_cast<size_t>(-1);
  void record(size_t layer) {
    if (profile_events_.size() <= marks_.size()) {
      cudaEvent_t e = nullptr;
      KILN_CUDA_CHECK(cudaEventCreate(&e));
      profile_events_.push_back(e);
    }
    KILN_CUDA_CHECK(cudaEventRecord(profile_events_[marks_.size()], stream_));
    marks_.push_back(layer);
  }

  std::shared_ptr<EngineState> engine_;
  cudaStream_t stream_ = nullptr;
  GrowingBuffer arena_, workspace_;
  void* cublaslt_ = nullptr;
  void* cudnn_ = nullptr;
  bool cudnn_stream_set_ = false;
  cudaEvent_t switch_event_ = nullptr;
  std::vector<std::unique_ptr<KernelState>> states_;
  volatile int* gate_ = nullptr;
  int* gate_device_ = nullptr;
  std::vector<cudaEvent_t> profile_events_;
  std::vector<size_t> marks_;
};

bool built() {
  return true;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clears the error so later calls do not see it
    return 0;
  }
  return n;
}

int parse_device(const std::string& device) {
  if (device == "cuda") return 0;
  const std::string prefix = "cuda:";
  KILN_CHECK(device.rfind(prefix, 0) == 0 && device.size() > prefix.size() &&
                 device.find_first_not_of("0123456789", prefix.size()) == std::string::npos &&
                 device.size() < prefix.size() + 4,
             InvalidArgument, "device `", device, "` is not cpu, cuda or cuda:N");
  return std::stoi(device.substr(prefix.size()));
}

int compute_capability(int index) {
  const int n = device_count();
  KILN_CHECK(index >= 0 && index < n, DeviceError, "no CUDA device ", index, " (this machine has ",
             n, ")");
  int major = 0, minor = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index));
  return major * 10 + minor;
}

void check_supported(const Network& net) {
  const KernelTable& table = kernel_table();
  for (const Layer& layer : net.layers()) {
    if (std::holds_alternative<ConstantParams>(layer.params)) continue;
    const KernelEntry& entry = table.get(layer.params);
    const char* kind = layer_kind_name(layer.params);
    KILN_CHECK(entry.fn != nullptr, Unsupported, "layer `", layer.name, "` (", kind,
               "): the CUDA backend has no kernel for this kind");
    std::vector<DataType> in, out;
    for (TensorId id : layer.inputs) in.push_back(net.tensor(id).dtype);
    for (TensorId id : layer.outputs) out.push_back(net.tensor(id).dtype);
    KILN_CHECK(entry.output_dtypes & dtype_bit(out.at(0)), Unsupported, "layer `", layer.name,
               "` (", kind, "): the CUDA backend has no ", dtype_name(out[0]),
               " kernel for this kind");
    if (entry.support) {
      const std::string why = entry.support(layer, in, out);
      KILN_CHECK(why.empty(), Unsupported, "layer `", layer.name, "` (", kind,
                 "): the CUDA backend cannot run it: ", why);
    }
  }
}

std::shared_ptr<EngineState> create_engine_state(const Network& net, const EngineTarget& target) {
  const int n = device_count();
  KILN_CHECK(target.device_index >= 0 && target.device_index < n, DeviceError,
             "engine built for cuda (sm_", target.compute_capability, ") is bound to CUDA device ",
             target.device_index, ", but this machine has ",
             n == 0 ? std::string("no CUDA device") : std::to_string(n) + " CUDA device(s)");
  const int cc = compute_capability(target.device_index);
  KILN_CHECK(target.compute_capability == 0 || cc == target.compute_capability, DeviceError,
             "engine built for compute capability ", target.compute_capability,
             " cannot run on CUDA device ", target.device_index, " (compute capability ", cc,
             "): rebuild the engine on this GPU");
  return std::make_shared<EngineState>(net, target.device_index);
}

int device_index(const EngineState& engine) {
  return engine.device();
}

std::shared_ptr<ContextState> create_context_state(std::shared_ptr<EngineState> engine,
                                                   size_t num_layers) {
  return std::make_shared<ContextState>(std::move(engine), num_layers);
}

void set_stream(ContextState& ctx, void* stream) {
  ctx.set_stream(static_cast<cudaStream_t>(stream));
}

void* stream(const ContextState& ctx) {
  return ctx.stream();
}

const void* weight(ContextState& ctx, const std::string& name) {
  DeviceGuard guard(ctx.device());
  return ctx.engine().weight(name, ctx.stream(), &ctx.waited_for_weights);
}

void* arena(ContextState& ctx, size_t bytes) {
  DeviceGuard guard(ctx.device());
  return ctx.arena_buffer().reserve(bytes, ctx.stream(), "activation arena");
}

void check_device_pointer(const ContextState& ctx, const void* ptr, const std::string& what) {
  cudaPointerAttributes attr{};
  const cudaError_t status = cudaPointerGetAttributes(&attr, ptr);
  if (status != cudaSuccess) cudaGetLastError();
  KILN_CHECK(status == cudaSuccess &&
                 (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged),
             InvalidArgument, what, ": expected device memory of CUDA device ", ctx.device(),
             ", got a host pointer");
  KILN_CHECK(attr.type == cudaMemoryTypeManaged || attr.device == ctx.device(), DeviceError, what,
             ": memory of CUDA device ", attr.device, ", but the engine is bound to device ",
             ctx.device());
}

void run_layer(ContextState& ctx, size_t index, const Layer& layer,
               const std::vector<DeviceTensor>& inputs, const std::vector<DeviceTensor>& outputs) {
  bool empty = true;
  for (const auto& o : outputs) empty = empty && o.numel() == 0;
  if (empty) return;
  const KernelEntry& entry = kernel_table().get(layer.params);
  KILN_CHECK(entry.fn != nullptr, Unsupported, "layer `", layer.name, "` (",
             layer_kind_name(layer.params), "): the CUDA backend has no kernel for this kind");
  DeviceGuard guard(ctx.device());
  KernelArgs args{layer, inputs, outputs, ctx.state(index), ctx};
  entry.fn(args);
}

void execute_graph(ContextState& ctx, const std::vector<int64_t>& key,
                   const std::vector<const void*>& inputs, const std::vector<size_t>& input_bytes,
                   const std::vector<void*>& outputs, const std::vector<size_t>& output_bytes,
                   const EnqueueFn& enqueue) {
  DeviceGuard guard(ctx.device());
  ctx.graphs.execute(ctx.stream(), key, inputs, input_bytes, outputs, output_bytes, enqueue);
}

void write_values(ContextState& ctx, const DeviceTensor& dst, const std::vector<int64_t>& values) {
  {
    DeviceGuard guard(ctx.device());
    if (launch_write_values(ctx.stream(), dst, values)) return;
  }
  const size_t es = dtype_size(dst.dtype);
  std::vector<uint8_t> bytes(values.size() * es);
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t v = values[i];
    uint8_t* p = bytes.data() + i * es;
    switch (dst.dtype) {
      case DataType::kF32: {
        const float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case DataType::kF16: {
        const uint16_t h = float_to_half(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBF16: {
        const uint16_t h = float_to_bf16(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kI32: {
        const int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kBool:
        *p = v != 0;
        break;
      default:  // i64, i8, u8: the low bytes, little endian
        std::memcpy(p, &v, es);
        break;
    }
  }
  // A pageable source: the copy is staged before cudaMemcpyAsync returns.
  copy_host_to_device(ctx, dst.data, bytes.data(), bytes.size());
}

void copy_device_to_device(ContextState& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  DeviceGuard guard(ctx.device());
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.stream()));
}

void copy_host_to_device(ContextState& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(ctx.device());
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.stream()));
}

void copy_device_to_host(ContextState& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(ctx.device());
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.stream()));
}

void synchronize(ContextState& ctx) {
  DeviceGuard guard(ctx.device());
  KILN_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
}

bool fused_attention_applies(const Shape& q, const Shape& k, const Shape& v, DataType dtype,
                             bool has_mask) {
  if (has_mask || (dtype != DataType::kF16 && dtype != DataType::kBF16)) return false;
  if (q.size() < 2 || k.size() != q.size() || v.size() != q.size()) return false;
  const int64_t e = q.back();
  if (e <= 0 || e > 128 || e % 16 != 0 || k.back() != e || v.back() != e) return false;
  if (k[k.size() - 2] != v[v.size() - 2]) return false;
  for (size_t d = 0; d + 2 < q.size(); ++d) {
    if (k[d] != q[d] || v[d] != q[d]) return false;
  }
  return true;
}

void profile_begin(ContextState& ctx) {
  ctx.profile_begin();
}
void profile_mark(ContextState& ctx, size_t layer) {
  DeviceGuard guard(ctx.device());
  ctx.profile_mark(layer);
}
std::vector<std::pair<size_t, double>> profile_end(ContextState& ctx) {
  return ctx.profile_end();
}

std::shared_ptr<void> allocate(ContextState& ctx, size_t bytes) {
  DeviceGuard guard(ctx.device());
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, std::max<size_t>(bytes, 256));
  KILN_CHECK(status == cudaSuccess, DeviceError, "cudaMalloc of ", bytes,
             " bytes failed: ", cudaGetErrorString(status));
  const int device = ctx.device();
  return std::shared_ptr<void>(p, [device](void* q) {
    DeviceGuard g(device);
    cudaFree(q);
  });
}

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    register_elementwise(t);
    register_matmul(t);
    register_convolution(t);
    register_pooling(t);
    register_reduce(t);
    register_normalization(t);
    register_shuffle(t);
    register_gather(t);
    register_fill(t);
    register_resize(t);
    register_attention(t);
    register_squeeze_excitation(t);
    return t;
  }();
  return table;
}

}  // namespace kiln::engine::cuda
