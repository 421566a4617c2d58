// The kiln.Engine torch custom class: an engine inside a TorchScript module, with a versioned,
// validated serialized state.
#pragma once

#include <torch/custom_class.h>
#include <torch/script.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/runtime.h"

namespace kiln::runtime {

// Bump when the serialized state layout changes; loading another version is a clear error.
constexpr int64_t kEngineAbiVersion = 1;

// Plans kept outside a module's archive (the compiled-module cache, compiler/module_cache.h).
// While one is alive on a thread, an engine saved on that thread puts its plan here by name and an
// empty plan into its pickled state, and an engine loaded there with an empty plan takes its plan
// from here. One per thread at a time.
class DetachedPlans {
 public:
  DetachedPlans();
  ~DetachedPlans();
  DetachedPlans(const DetachedPlans&) = delete;
  DetachedPlans& operator=(const DetachedPlans&) = delete;

  // The one alive on this thread, or nullptr.
  static DetachedPlans* current();

  std::map<std::string, std::shared_ptr<const engine::Bytes>> plans;
  // The plans were checked against digests of their own: engines loaded from them do not compute
  // their checksums again.
  bool checked = false;
};

// Whether this libkiln_runtime can run cuda engines: kiln's CUDA backend and a libtorch with CUDA
// were both there when it was built (it may still find no device at run time).
bool cuda_supported();

class EngineHolder : public torch::CustomClassHolder {
 public:
  // `device` binds the engine: "cpu" for a cpu plan, "cuda" or "cuda:N" for a cuda plan; empty
  // means the plan's own target (cuda plans then run on cuda:0).
  EngineHolder(std::string name, std::vector<uint8_t> plan_bytes, const std::string& device = "");
  // A plan in bytes another owner keeps (a tensor loaded from an archive, a mapped cache entry):
  // the engine's weights are views of them, not copies.
  // `checked`: the bytes were checked by their owner (a cache entry's digests), so the plan's
  // own checksum is not computed again.
  EngineHolder(std::string name, std::shared_ptr<const engine::Bytes> plan,
               const std::string& device = "", bool checked = false);
  // What __getstate__ saves: (ABI version, name, device ("cpu" or "cuda:N"), plan bytes as a
  // uint8 tensor, input names, output names), names newline-separated.
  using State = std::tuple<int64_t, std::string, std::string, at::Tensor, std::string, std::string>;
  static c10::intrusive_ptr<EngineHolder> from_state(const State& state);
  State state() const;

  const std::string& name() const { return name_; }
  const engine::Bytes& plan_bytes() const { return *plan_; }
  const std::shared_ptr<const engine::Bytes>& plan() const { return plan_; }
  const engine::Engine& engine() const { return *engine_; }
  // "cpu" or "cuda:N".
  std::string device() const;
  std::vector<at::Tensor> execute(const std::vector<at::Tensor>& inputs);
  std::string inspect() const { return engine_->inspect_json(); }

 private:
  // Checks dtype and shape of input `i`, moving it to the engine's device where needed.
  at::Tensor prepare_input(size_t i, const at::Tensor& input, engine::ExecutionContext& ctx);
  // Output tensors on `device` in the context's output shapes, bound to the context.
  std::vector<at::Tensor> allocate_outputs(engine::ExecutionContext& ctx,
                                           const c10::Device& device) const;
  // The outputs as execution wrote them: data-dependent dims at their counts.
  std::vector<at::Tensor> written(const engine::ExecutionContext& ctx,
                                  std::vector<at::Tensor> outputs) const;
  std::vector<at::Tensor> execute_on_cpu(const std::vector<at::Tensor>& inputs);
  std::vector<at::Tensor> execute_on_cuda(const std::vector<at::Tensor>& inputs);
  // An idle context, preferring one last used on `stream` (cuda) so that no cross-stream wait
  // is needed; a new one when none is idle.
  std::unique_ptr<engine::ExecutionContext> acquire(void* stream = nullptr);
  void release(std::unique_ptr<engine::ExecutionContext> ctx);

  std::string name_;
  std::shared_ptr<const engine::Bytes> plan_;
  std::shared_ptr<const engine::Engine> engine_;
  // cuda engines: whole-engine CUDA graphs when every input shape is static (KILN_CUDA_GRAPHS=0
  // in the environment turns them off).
  bool cuda_graphs_ = false;
  std::atomic<bool> warned_host_inputs_{false};
  std::mutex pool_mutex_;
  std::vector<std::unique_ptr<engine::ExecutionContext>> pool_;  // idle contexts, reused
};

}  // namespace kiln::runtime
