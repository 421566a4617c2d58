// The CUDA backend behind cuda/backend.h: device queries, per-engine weights on the device,
// per-context streams, arenas, handles and the layer dispatch.
#include "engine/cuda/backend.h"

#include "engine/backend.h"

#include <cublasLt.h>
#include <cudnn.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

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

// Stream-ordered device buffer that only grows; a move bumps `*moves` (graphs captured before
// read the old buffer).
struct GrowingBuffer {
  void* ptr = nullptr;
  size_t capacity = 0;
  void* reserve(size_t bytes, cudaStream_t stream, const char* what, uint64_t* moves) {
    if (bytes <= capacity && ptr) return ptr;
    if (ptr) ++*moves;
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
  EngineState(const Network& net, int device, KernelOptions options,
              const std::vector<GeneratedKernel>& kernels, const std::vector<KernelChoice>& choices)
      : weight_data_(net.weights()), device_(device), options_(options) {
    for (const GeneratedKernel& k : kernels) kernels_.emplace(k.key, Library{k.image, nullptr, {}});
    for (const KernelChoice& c : choices) choices_.emplace(std::make_pair(c.layer, c.key), c.data);
  }
  ~EngineState() {
    for (auto& [key, lib] : kernels_) {
      if (lib.library) cudaLibraryUnload(lib.library);
    }
    if (weights_) {
      DeviceGuard guard(device_);
      cudaFree(weights_);
      if (uploaded_) cudaEventDestroy(uploaded_);
    }
  }
  int device() const { return device_; }
  const KernelOptions& options() const { return options_; }

  // Entry point `entry` of the plan's generated kernel `key`, loaded on first use; nullptr when
  // the plan has no such kernel.
  const void* generated_kernel(const std::string& key, const char* entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = kernels_.find(key);
    if (it == kernels_.end()) return nullptr;
    Library& lib = it->second;
    if (!lib.library) {
      DeviceGuard guard(device_);
      const cudaError_t status = cudaLibraryLoadData(&lib.library, lib.image.data(), nullptr,
                                                     nullptr, 0, nullptr, nullptr, 0);
      KILN_CHECK(status == cudaSuccess, DeviceError, "loading the generated kernel `", key,
                 "`: ", cudaGetErrorString(status));
    }
    auto e = lib.entries.find(entry);
    if (e == lib.entries.end()) {
      cudaKernel_t kernel = nullptr;
      const cudaError_t status = cudaLibraryGetKernel(&kernel, lib.library, entry);
      KILN_CHECK(status == cudaSuccess, DeviceError, "the generated kernel `", key,
                 "` has no entry `", entry, "`: ", cudaGetErrorString(status));
      e = lib.entries.emplace(entry, reinterpret_cast<const void*>(kernel)).first;
    }
    return e->second;
  }

  // The kernels' choices, shared by the engine's contexts (Resources::kept_choice).
  std::optional<std::vector<uint8_t>> choice(size_t layer, const std::vector<int64_t>& key) {
    std::lock_guard<std::mutex> lock(choices_mutex_);
    auto it = choices_.find(std::make_pair(static_cast<uint64_t>(layer), key));
    if (it == choices_.end()) return std::nullopt;
    return it->second;
  }
  void keep_choice(size_t layer, const std::vector<int64_t>& key, std::vector<uint8_t> choice) {
    std::lock_guard<std::mutex> lock(choices_mutex_);
    if (choices_.size() >= kMaxChoices) return;  // a bound for engines run at endless shapes
    choices_[std::make_pair(static_cast<uint64_t>(layer), key)] = std::move(choice);
  }
  std::vector<KernelChoice> choices() const {
    std::lock_guard<std::mutex> lock(choices_mutex_);
    std::vector<KernelChoice> out;
    for (const auto& [at, data] : choices_) out.push_back({at.first, at.second, data});
    return out;
  }

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

  struct Library {
    std::vector<uint8_t> image;
    cudaLibrary_t library;
    std::map<std::string, const void*> entries;
  };
  std::map<std::string, Library> kernels_;
  // Choices by (layer, key): at most kMaxChoices (a plan's own, then what contexts add).
  static constexpr size_t kMaxChoices = size_t{1} << 16;
  mutable std::mutex choices_mutex_;
  std::map<std::pair<uint64_t, std::vector<int64_t>>, std::vector<uint8_t>> choices_;
  const std::map<std::string, Weights> weight_data_;  // host copies share the network's bytes
  const int device_;
  const KernelOptions options_;
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

  const KernelOptions& options() const override { return engine_->options(); }
  const void* generated_kernel(const std::string& key, const char* entry) override {
    return engine_->generated_kernel(key, entry);
  }
  cudaStream_t stream() const override { return stream_; }
  int device() const override { return engine_->device(); }
  void* workspace(size_t bytes) override {
    return workspace_.reserve(bytes, stream_, "workspace", &memory_moves);
  }
  void device_memory_moved() override { ++memory_moves; }
  bool tune() override {
    if (capturing) {
      // A capture chooses nothing (a choice's timing cannot be captured); a choice still to be
      // made keeps its graph from being kept, unless repeated shapes settle on kept choices.
      if (options().repeat_tuning) tuning_deferred = true;
      return false;
    }
    if (tuning == Tuning::kOff) {
      tuning_deferred = true;
      return false;
    }
    if (tuning == Tuning::kBudgeted && !options().repeat_tuning) return false;  // settled
    if (tuning == Tuning::kBudgeted && tuning_granted && !layer_tuning &&
        tuning_spent_ms >= tuning_budget) {
      tuning_deferred = true;
      return false;
    }
    tuning_granted = layer_tuning = true;
    return true;
  }
  bool new_shape() const override { return tuning == Tuning::kOff && !capturing; }
  std::optional<std::vector<uint8_t>> kept_choice(const std::vector<int64_t>& key) override {
    return engine_->choice(layer, key);
  }
  void keep_choice(const std::vector<int64_t>& key, std::vector<uint8_t> choice) override {
    engine_->keep_choice(layer, key, std::move(choice));
  }
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
  GraphCache graphs{graph_cache_size()};
  // Bumped whenever device memory that enqueued work reads moves (arena, workspace, a kernel's
  // state): graphs captured before are dropped.
  uint64_t memory_moves = 0;
  // ContextBackend::set_tuning, and what the call has spent of its choosing time: whether a layer
  // chose, whether the current one does, and whether one was refused (the call left choices to
  // the shape's next calls).
  using Tuning = ContextBackend::Tuning;
  Tuning tuning = Tuning::kFull;
  const double tuning_budget = tuning_budget_ms();
  double tuning_spent_ms = 0;
  bool tuning_granted = false, layer_tuning = false, tuning_deferred = false;
  bool capturing = false;  // the call is captured into a graph (CudaContext::execute_graph)
  size_t layer = 0;        // the layer running (CudaContext::run_layer)
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

KernelOptions kernel_options(const std::vector<std::string>& switches) {
  KernelOptions o;
  for (const std::string& s : switches) {  // validated by the builder's apply_switch
    if (s == "cuda_pointwise=cudnn") o.pointwise_on_cudnn = true;
    if (s == "cuda_pointwise=auto") o.pointwise_on_cudnn = false;
    if (s == "cuda_depthwise=strip") o.depthwise_tiled = false;
    if (s == "cuda_depthwise=auto") o.depthwise_tiled = true;
    if (s == "cuda_grouped=auto") o.grouped = GroupedPath::kAuto;
    if (s == "cuda_grouped=cudnn") o.grouped = GroupedPath::kCudnn;
    if (s == "cuda_grouped=kernel") o.grouped = GroupedPath::kKernel;
    if (s == "gemm_fold=off" || s == "gemm_fold=on") o.gemm_fold = s == "gemm_fold=on";
    if (s == "gemm_timing=off" || s == "gemm_timing=on") o.gemm_timing = s == "gemm_timing=on";
    if (s == "gemm_split_k=off" || s == "gemm_split_k=on") o.gemm_split_k = s == "gemm_split_k=on";
    if (s == "gemm_skinny=off") o.gemm_skinny = SkinnyGemm::kOff;
    if (s == "gemm_skinny=on") o.gemm_skinny = SkinnyGemm::kOn;
    if (s == "gemm_skinny=only") o.gemm_skinny = SkinnyGemm::kOnly;
    if (s == "programmatic_launch=off" || s == "programmatic_launch=on") {
      o.programmatic_launch = s == "programmatic_launch=on";
    }
    if (s == "attention_key_split=off" || s == "attention_key_split=on") {
      o.attention_key_split = s == "attention_key_split=on";
    }
    if (s == "attention_cudnn=auto") o.attention_cudnn = AttentionCudnn::kAuto;
    if (s == "attention_cudnn=on") o.attention_cudnn = AttentionCudnn::kOn;
    if (s == "attention_cudnn=off") o.attention_cudnn = AttentionCudnn::kOff;
    if (s == "cuda_codegen=off" || s == "cuda_codegen=on") o.codegen = s == "cuda_codegen=on";
    if (s == "reuse_algorithms=off" || s == "reuse_algorithms=on") {
      o.reuse_algorithms = s == "reuse_algorithms=on";
    }
    if (s == "first_call_gemm=off" || s == "first_call_gemm=on") {
      o.first_call_gemm = s == "first_call_gemm=on";
    }
    if (s == "repeat_tuning=off" || s == "repeat_tuning=on") {
      o.repeat_tuning = s == "repeat_tuning=on";
    }
  }
  return o;
}

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

namespace {
std::atomic<int64_t> searches{0};
}  // namespace

void count_algorithm_search() {
  searches.fetch_add(1, std::memory_order_relaxed);
}

int64_t algorithm_searches() {
  return searches.load(std::memory_order_relaxed);
}

std::string choice_environment(int index) {
  const int cc = compute_capability(index);
  static std::mutex mutex;
  static std::map<int, std::string> known;  // cudaGetDeviceProperties is slow: once a device
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(index);
  if (it != known.end()) return it->second;
  cudaDeviceProp prop{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  int runtime = 0;
  KILN_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  std::string env = std::string(prop.name) + " sm_" + std::to_string(cc) + ", CUDA runtime " +
                    std::to_string(runtime) + ", cuDNN " + std::to_string(cudnnGetVersion()) +
                    ", cuBLASLt " + std::to_string(cublasLtGetVersion());
  return known.emplace(index, std::move(env)).first->second;
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

bool fused_attention_applies(const Shape& q, const Shape& k, const Shape& v, DataType dtype) {
  if (dtype != DataType::kF16 && dtype != DataType::kBF16 && dtype != DataType::kF32) return false;
  if (q.size() < 2 || k.size() != q.size() || v.size() != q.size()) return false;
  const int64_t e = q.back();
  if (e <= 0 || e > 128 || e % 16 != 0 || k.back() != e || v.back() != e) return false;
  if (k[k.size() - 2] != v[v.size() - 2]) return false;
  for (size_t d = 0; d + 2 < q.size(); ++d) {
    if (k[d] != q[d] || v[d] != q[d]) return false;
  }
  return true;
}

bool fused_attention_mask_applies(DataType t) {
  return t == DataType::kBool || t == DataType::kF16 || t == DataType::kBF16 || t == DataType::kF32;
}

namespace {

// The runtime's view of a ContextState (engine/backend.h); every call runs with the engine's
// device current.
class CudaContext final : public ContextBackend {
 public:
  CudaContext(std::shared_ptr<EngineState> engine, size_t num_layers)
      : ctx_(std::move(engine), num_layers) {}

  bool host_memory() const override { return false; }
  void check_pointer(const void* ptr, const std::string& what) const override {
    cudaPointerAttributes attr{};
    const cudaError_t status = cudaPointerGetAttributes(&attr, ptr);
    if (status != cudaSuccess) cudaGetLastError();
    KILN_CHECK(status == cudaSuccess &&
                   (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged),
               InvalidArgument, what, ": expected device memory of CUDA device ", ctx_.device(),
               ", got a host pointer");
    KILN_CHECK(attr.type == cudaMemoryTypeManaged || attr.device == ctx_.device(), DeviceError,
               what, ": memory of CUDA device ", attr.device,
               ", but the engine is bound to device ", ctx_.device());
  }
  void* arena(size_t bytes) override {
    DeviceGuard guard(ctx_.device());
    return ctx_.arena_buffer().reserve(bytes, ctx_.stream(), "activation arena",
                                       &ctx_.memory_moves);
  }
  const void* weight(const std::string& name) override {
    DeviceGuard guard(ctx_.device());
    return ctx_.engine().weight(name, ctx_.stream(), &ctx_.waited_for_weights);
  }
  std::shared_ptr<void> allocate(size_t bytes) override {
    DeviceGuard guard(ctx_.device());
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, std::max<size_t>(bytes, 256));
    KILN_CHECK(status == cudaSuccess, DeviceError, "cudaMalloc of ", bytes,
               " bytes failed: ", cudaGetErrorString(status));
    const int device = ctx_.device();
    return std::shared_ptr<void>(p, [device](void* q) {
      DeviceGuard g(device);
      cudaFree(q);
    });
  }
  void copy(void* dst, const void* src, size_t bytes, Copy direction) override {
    if (bytes == 0 || (direction == Copy::kWithin && dst == src)) return;
    const cudaMemcpyKind kind = direction == Copy::kWithin     ? cudaMemcpyDeviceToDevice
                                : direction == Copy::kFromHost ? cudaMemcpyHostToDevice
                                                               : cudaMemcpyDeviceToHost;
    DeviceGuard guard(ctx_.device());
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, ctx_.stream()));
  }
  void write_values(const TensorRef& dst, const std::vector<int64_t>& values) override {
    {
      DeviceGuard guard(ctx_.device());
      if (launch_write_values(ctx_.stream(), dst, values)) return;
    }
    // A pageable source: the copy is staged before cudaMemcpyAsync returns.
    const std::vector<uint8_t> bytes = encode_values(dst.dtype, values);
    copy(dst.data, bytes.data(), bytes.size(), Copy::kFromHost);
  }

  void set_tuning(Tuning tuning) override {
    ctx_.tuning = tuning;
    ctx_.tuning_spent_ms = 0;
    ctx_.tuning_granted = ctx_.layer_tuning = ctx_.tuning_deferred = ctx_.capturing = false;
  }

  void run_layer(size_t index, const Layer& layer, const std::vector<TensorRef>& inputs,
                 const std::vector<TensorRef>& outputs) override {
    bool empty = true;
    for (const auto& o : outputs) empty = empty && o.numel() == 0;
    if (empty) return;
    const KernelEntry& entry = kernel_table().get(layer.params);
    KILN_CHECK(entry.fn != nullptr, Unsupported, "layer `", layer.name, "` (",
               layer_kind_name(layer.params), "): the CUDA backend has no kernel for this kind");
    DeviceGuard guard(ctx_.device());
    ctx_.layer = index;
    KernelArgs args{layer, inputs, outputs, ctx_.state(index), ctx_};
    if (ctx_.tuning != Tuning::kBudgeted) {
      entry.fn(args);
      return;
    }
    // What a layer that chose spent counts against the call's choosing time.
    const auto start = std::chrono::steady_clock::now();
    entry.fn(args);
    if (ctx_.layer_tuning) {
      ctx_.tuning_spent_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      ctx_.layer_tuning = false;
    }
  }
  void synchronize() override {
    DeviceGuard guard(ctx_.device());
    KILN_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
  }

  void set_stream(void* stream) override { ctx_.set_stream(static_cast<cudaStream_t>(stream)); }
  void* stream() const override { return ctx_.stream(); }
  bool has_graphs() const override { return true; }
  void execute_graph(const std::vector<int64_t>& key, const std::vector<const void*>& inputs,
                     const std::vector<size_t>& input_bytes, const std::vector<void*>& outputs,
                     const std::vector<size_t>& output_bytes, const EnqueueFn& enqueue) override {
    DeviceGuard guard(ctx_.device());
    // A capture chooses nothing (Resources::tune): it runs the choices of the complete eager run
    // before it, kept per shape.
    if (ctx_.graphs.will_capture(ctx_.stream(), key, &ctx_.memory_moves)) {
      set_tuning(Tuning::kOff);
      ctx_.capturing = true;
    }
    ctx_.graphs.execute(ctx_.stream(), key, inputs, input_bytes, outputs, output_bytes, enqueue,
                        &ctx_.memory_moves, [this] { return !ctx_.tuning_deferred; });
  }

  void profile_begin() override { ctx_.profile_begin(); }
  void profile_mark(size_t layer) override {
    DeviceGuard guard(ctx_.device());
    ctx_.profile_mark(layer);
  }
  std::vector<std::pair<size_t, double>> profile_end() override { return ctx_.profile_end(); }

 private:
  ContextState ctx_;
};

class CudaEngine final : public EngineBackend {
 public:
  explicit CudaEngine(std::shared_ptr<EngineState> state) : state_(std::move(state)) {}
  std::unique_ptr<ContextBackend> create_context(size_t num_layers) const override {
    return std::make_unique<CudaContext>(state_, num_layers);
  }
  std::vector<KernelChoice> choices() const override { return state_->choices(); }

 private:
  std::shared_ptr<EngineState> state_;
};

}  // namespace

std::shared_ptr<EngineBackend> create_engine_backend(const Network& net,
                                                     const EngineTarget& target) {
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
  // Choices made with another device or other libraries may not exist or run here: they are
  // made again.
  const bool choices_hold = !target.choices.empty() &&
                            target.choice_environment == choice_environment(target.device_index);
  if (!target.choices.empty() && !choices_hold) {
    KILN_LOG(kInfo, "the plan's ", target.choices.size(), " kernel choices were made on `",
             target.choice_environment, "`, this is `", choice_environment(target.device_index),
             "`: choosing again");
  }
  return std::make_shared<CudaEngine>(std::make_shared<EngineState>(
      net, target.device_index, kernel_options(target.switches), target.kernels,
      choices_hold ? target.choices : std::vector<KernelChoice>{}));
}

const KernelTable& kernel_table() {
  static const KernelTable table = KernelTable::of<KernelTable>(
      {register_elementwise, register_matmul, register_convolution, register_pooling,
       register_reduce, register_normalization, register_shuffle, register_gather, register_fill,
       register_resize, register_attention, register_squeeze_excitation});
  return table;
}

}  // namespace kiln::engine::cuda
