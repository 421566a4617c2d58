// The CUDA backend interface in a build without CUDA: every call that would need it throws
// Unsupported, and queries answer "no devices".
#include "engine/cuda/backend.h"

#include "engine/backend.h"
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
std::string choice_environment(int) {
  no_cuda("choice environment");
}
int64_t algorithm_searches() {
  return 0;
}
bool fused_attention_applies(const Shape&, const Shape&, const Shape&, DataType) {
  return false;
}
bool fused_attention_fits(DataType, int64_t, int) {
  return false;
}
bool fused_attention_mask_applies(DataType) {
  return false;
}
void check_supported(const Network&) {
  no_cuda("building a cuda engine");
}
int generate_kernels(const Network&, EngineTarget&) {
  no_cuda("generating kernels");
}
std::shared_ptr<EngineBackend> create_engine_backend(const Network&, const EngineTarget&) {
  no_cuda("creating a cuda engine");
}

}  // namespace kiln::engine::cuda

namespace kiln::engine {

BackendRules cuda_backend_rules(const EngineTarget&) {
  KILN_THROW(Unsupported,
             "building a cuda engine: this build of kiln has no CUDA backend (CMake found no CUDA "
             "toolkit)");
}

}  // namespace kiln::engine
