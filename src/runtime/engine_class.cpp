// kiln.Engine: construction from plan bytes, pickling, and a pool of execution contexts so one
// module can run from many threads.
#include "runtime/engine_class.h"

#include <cstring>

#include "engine/plan.h"
#include "util/errors.h"

namespace kiln::runtime {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : "\n") + n;
  return out;
}

std::vector<std::string> io_names(const engine::Engine& e, bool inputs) {
  std::vector<std::string> names;
  const size_t n = inputs ? e.num_inputs() : e.num_outputs();
  for (size_t i = 0; i < n; ++i) names.push_back(inputs ? e.input(i).name : e.output(i).name);
  return names;
}

}  // namespace

EngineHolder::EngineHolder(std::string name, std::vector<uint8_t> plan_bytes)
    : name_(std::move(name)), plan_bytes_(std::move(plan_bytes)) {
  engine::Plan plan = engine::deserialize_plan(plan_bytes_.data(), plan_bytes_.size());
  engine_ = std::make_shared<const engine::Engine>(std::move(plan.network), plan.target);
}

EngineHolder::State EngineHolder::state() const {
  at::Tensor plan = at::empty({static_cast<int64_t>(plan_bytes_.size())}, at::kByte);
  std::memcpy(plan.data_ptr(), plan_bytes_.data(), plan_bytes_.size());
  return {kEngineAbiVersion,
          name_,
          engine_->target().device,
          plan,
          join(io_names(*engine_, true)),
          join(io_names(*engine_, false))};
}

c10::intrusive_ptr<EngineHolder> EngineHolder::from_state(const State& state) {
  const auto& [abi, name, device, plan, inputs, outputs] = state;
  KILN_CHECK(abi == kEngineAbiVersion, CorruptInput, "kiln.Engine `", name,
             "` was saved with ABI version ", abi, ", this runtime reads ", kEngineAbiVersion,
             "; recompile the module with this kiln");
  KILN_CHECK(plan.defined() && plan.scalar_type() == at::kByte && plan.dim() == 1, CorruptInput,
             "kiln.Engine `", name, "`: the plan is not a 1-D uint8 tensor");
  const at::Tensor bytes = plan.contiguous();
  std::vector<uint8_t> data(bytes.data_ptr<uint8_t>(), bytes.data_ptr<uint8_t>() + bytes.numel());
  c10::intrusive_ptr<EngineHolder> holder;
  try {
    holder = c10::make_intrusive<EngineHolder>(name, std::move(data));
  } catch (const CorruptInput& e) {
    KILN_THROW(CorruptInput, "kiln.Engine `", name, "`: ", e.message());
  }
  KILN_CHECK(holder->engine_->target().device == device, CorruptInput, "kiln.Engine `", name,
             "`: state says device ", device, " but its plan targets ",
             holder->engine_->target().device);
  KILN_CHECK(join(io_names(*holder->engine_, true)) == inputs &&
                 join(io_names(*holder->engine_, false)) == outputs,
             CorruptInput, "kiln.Engine `", name, "`: input/output names disagree with its plan");
  return holder;
}

std::unique_ptr<engine::ExecutionContext> EngineHolder::acquire() {
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (!pool_.empty()) {
      auto ctx = std::move(pool_.back());
      pool_.pop_back();
      return ctx;
    }
  }
  return std::make_unique<engine::ExecutionContext>(engine_);
}

void EngineHolder::release(std::unique_ptr<engine::ExecutionContext> ctx) {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  pool_.push_back(std::move(ctx));
}

}  // namespace kiln::runtime
