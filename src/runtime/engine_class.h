// The kiln.Engine torch custom class: an engine inside a TorchScript module, with a versioned,
// validated serialized state.
#pragma once

#include <torch/custom_class.h>
#include <torch/script.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/runtime.h"

namespace kiln::runtime {

// Bump when the serialized state layout changes; loading another version is a clear error.
constexpr int64_t kEngineAbiVersion = 1;

class EngineHolder : public torch::CustomClassHolder {
 public:
  EngineHolder(std::string name, std::vector<uint8_t> plan_bytes);
  // What __getstate__ saves: (ABI version, name, device, plan bytes as a uint8 tensor,
  // input names, output names), names newline-separated.
  using State = std::tuple<int64_t, std::string, std::string, at::Tensor, std::string, std::string>;
  static c10::intrusive_ptr<EngineHolder> from_state(const State& state);
  State state() const;

  const std::string& name() const { return name_; }
  const engine::Engine& engine() const { return *engine_; }
  std::vector<at::Tensor> execute(const std::vector<at::Tensor>& inputs);
  std::string inspect() const { return engine_->inspect_json(); }

 private:
  std::unique_ptr<engine::ExecutionContext> acquire();
  void release(std::unique_ptr<engine::ExecutionContext> ctx);

  std::string name_;
  std::vector<uint8_t> plan_bytes_;
  std::shared_ptr<const engine::Engine> engine_;
  std::mutex pool_mutex_;
  std::vector<std::unique_ptr<engine::ExecutionContext>> pool_;  // idle contexts, reused
};

}  // namespace kiln::runtime
