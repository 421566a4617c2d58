// kiln.Engine: construction from plan bytes, pickling, and a pool of execution contexts so one
// module can run from many threads.
#include "runtime/engine_class.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/cuda/backend.h"
#include "engine/plan.h"
#include "runtime/torch_cuda.h"
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

bool cuda_graphs_allowed() {
  const char* env = std::getenv("KILN_CUDA_GRAPHS");
  return env == nullptr || std::string(env) != "0";
}

}  // namespace

EngineHolder::EngineHolder(std::string name, std::vector<uint8_t> plan_bytes,
                           const std::string& device)
    : name_(std::move(name)), plan_bytes_(std::move(plan_bytes)) {
  engine::Plan plan = engine::deserialize_plan(plan_bytes_.data(), plan_bytes_.size());
  engine::EngineTarget target = plan.target;
  if (target.device == "cuda") {
    const std::string wanted = device.empty() ? "cuda" : device;
    KILN_CHECK(wanted.rfind("cuda", 0) == 0, InvalidArgument, "kiln.Engine `", name_,
               "`: its plan targets cuda, so it cannot run on ", wanted);
    KILN_CHECK(cuda_supported(), Unsupported, "kiln.Engine `", name_,
               "`: a cuda engine, but this libkiln_runtime was built without CUDA support (kiln's "
               "CUDA backend: ",
               engine::cuda::built() ? "yes" : "no",
               ", libtorch with CUDA: ", torch_cuda::kTorchHasCuda ? "yes" : "no", ")");
    target.device_index = engine::cuda::parse_device(wanted);
    // One graph per set of input shapes (graphs.h), so dynamic engines replay too.
    cuda_graphs_ = cuda_graphs_allowed();
  } else {
    KILN_CHECK(device.empty() || device == "cpu", InvalidArgument, "kiln.Engine `", name_,
               "`: its plan targets ", target.device, ", so it cannot run on ", device);
  }
  engine_ = std::make_shared<const engine::Engine>(std::move(plan.network), target);
}

std::string EngineHolder::device() const {
  const engine::EngineTarget& t = engine_->target();
  return t.device == "cuda" ? "cuda:" + std::to_string(t.device_index) : t.device;
}

EngineHolder::State EngineHolder::state() const {
  at::Tensor plan = at::empty({static_cast<int64_t>(plan_bytes_.size())}, at::kByte);
  std::memcpy(plan.data_ptr(), plan_bytes_.data(), plan_bytes_.size());
  return {kEngineAbiVersion,
          name_,
          device(),
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
    // The constructor parses the plan once and checks the state's device against its target
    // (plans record only "cuda"; the state says "cuda:N").
    holder = c10::make_intrusive<EngineHolder>(name, std::move(data), device);
  } catch (const CorruptInput& e) {
    KILN_THROW(CorruptInput, "kiln.Engine `", name, "`: ", e.message());
  } catch (const InvalidArgument& e) {
    KILN_THROW(CorruptInput, "kiln.Engine `", name, "`: state says device ", device, ": ",
               e.message());
  }
  KILN_CHECK(join(io_names(*holder->engine_, true)) == inputs &&
                 join(io_names(*holder->engine_, false)) == outputs,
             CorruptInput, "kiln.Engine `", name, "`: input/output names disagree with its plan");
  return holder;
}

std::unique_ptr<engine::ExecutionContext> EngineHolder::acquire(void* stream) {
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (!pool_.empty()) {
      // A context keeps the stream it last ran on; taking one of another stream is correct (the
      // new stream waits for the old one's work through an event) but serializes the two.
      auto it = std::find_if(pool_.begin(), pool_.end(),
                             [&](const auto& ctx) { return ctx->stream() == stream; });
      if (it == pool_.end()) it = pool_.end() - 1;
      auto ctx = std::move(*it);
      pool_.erase(it);
      return ctx;
    }
  }
  auto ctx = std::make_unique<engine::ExecutionContext>(engine_);
  if (engine_->on_cuda()) ctx->enable_cuda_graphs(cuda_graphs_);
  return ctx;
}

void EngineHolder::release(std::unique_ptr<engine::ExecutionContext> ctx) {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  pool_.push_back(std::move(ctx));
}

}  // namespace kiln::runtime
