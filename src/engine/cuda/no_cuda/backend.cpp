// The CUDA backend interface in a build without CUDA: every call that would need it throws
// Unsupported, and queries answer "no devices".
#include "engine/cuda/backend.h"

#include "engine/passes/pass.h"
#include "engine/runtime.h"
#include "util/errors.h"

namespace kiln::engine::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  KILN_THROW(Unsupported, what,
             ": this build of kiln has no CUDA backend (CMake found no CUDA toolkit; rebuild with "
             "CUDA, cuDNN and cuBLASLt installed)");
}

}  // namespace

class EngineState {};
class ContextState {};

bool built() {
  return false;
}
int device_count() {
  return 0;
}
int parse_device(const std::string& device) {
  no_cuda(("device `" + device + "`").c_str());
}
int compute_capability(int) {
  no_cuda("compute capability");
}
bool fused_attention_applies(const Shape&, const Shape&, const Shape&, DataType, bool) {
  return false;
}
void check_supported(const Network&) {
  no_cuda("building a cuda engine");
}
std::shared_ptr<EngineState> create_engine_state(const Network&, const EngineTarget&) {
  no_cuda("running a cuda engine");
}
int device_index(const EngineState&) {
  no_cuda("device index");
}
std::shared_ptr<ContextState> create_context_state(std::shared_ptr<EngineState>, size_t) {
  no_cuda("execution context");
}
void set_stream(ContextState&, void*) {
  no_cuda("set_stream");
}
void* stream(const ContextState&) {
  no_cuda("stream");
}
const void* weight(ContextState&, const std::string&) {
  no_cuda("weights");
}
void* arena(ContextState&, size_t) {
  no_cuda("arena");
}
void check_device_pointer(const ContextState&, const void*, const std::string&) {
  no_cuda("device pointers");
}
void run_layer(ContextState&, size_t, const Layer&, const std::vector<DeviceTensor>&,
               const std::vector<DeviceTensor>&) {
  no_cuda("run_layer");
}
void execute_graph(ContextState&, const std::vector<int64_t>&, const std::vector<const void*>&,
                   const std::vector<size_t>&, const std::vector<void*>&,
                   const std::vector<size_t>&, const EnqueueFn&) {
  no_cuda("execute_graph");
}
void write_values(ContextState&, const DeviceTensor&, const std::vector<int64_t>&) {
  no_cuda("write_values");
}
void copy_device_to_device(ContextState&, void*, const void*, size_t) {
  no_cuda("copy");
}
void copy_host_to_device(ContextState&, void*, const void*, size_t) {
  no_cuda("copy");
}
void copy_device_to_host(ContextState&, void*, const void*, size_t) {
  no_cuda("copy");
}
void synchronize(ContextState&) {
  no_cuda("synchronize");
}
void profile_begin(ContextState&) {
  no_cuda("profiling");
}
void profile_mark(ContextState&, size_t) {
  no_cuda("profiling");
}
std::vector<std::pair<size_t, double>> profile_end(ContextState&) {
  no_cuda("profiling");
}
std::shared_ptr<void> allocate(ContextState&, size_t) {
  no_cuda("allocate");
}

}  // namespace kiln::engine::cuda

namespace kiln::engine {

BackendRules cuda_backend_rules(const EngineTarget&) {
  KILN_THROW(Unsupported,
             "building a cuda engine: this build of kiln has no CUDA backend (CMake found no CUDA "
             "toolkit)");
}

}  // namespace kiln::engine
