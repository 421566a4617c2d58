// kiln.Engine: construction from plan bytes, pickling, and a pool of execution contexts so one
// module can run from many threads.
#include "runtime/engine_class.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/runtime/symbolic_script.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>

#include "engine/cuda/backend.h"
#include "engine/plan.h"
#include "runtime/torch_cuda.h"
#include "util/errors.h"
#include "util/logging.h"

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

// KILN_WARM_AT_LOAD=0: a loaded cuda engine's first context is not run at the profile points, nor
// TorchScript's executor prepared for the first call (prepare_torchscript_executor).
bool warm_at_load() {
  const char* env = std::getenv("KILN_WARM_AT_LOAD");
  return env == nullptr || std::string(env) != "0";
}

thread_local DetachedPlans* detached_plans = nullptr;

// TorchScript's executor, on the first call of a compiled module's forward in a process, asks
// whether kiln::execute_engine has a gradient formula (ProfilingRecord -> isDifferentiable), and
// the first such question about an operator it does not know compiles every formula it has from
// source: ~20 ms of the first call (a resnet18 module's first call on the CPU: 38 ms against 20
// with the question asked before, bench/NOTES.md G69). Asked here once per process, when the first
// engine is made, so that the first call finds them compiled. Best effort.
void prepare_torchscript_executor() {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      const auto op = c10::Dispatcher::singleton().findSchema({"kiln::execute_engine", ""});
      if (op) torch::jit::hasGradientInfoForSchema(op->schema());
    } catch (const std::exception& e) {
      KILN_LOG(kDebug, "kiln.Engine: preparing TorchScript's executor failed (", e.what(), ")");
    }
  });
}

}  // namespace

DetachedPlans::DetachedPlans() {
  KILN_CHECK(detached_plans == nullptr, InternalError,
             "DetachedPlans: another is alive on this thread");
  detached_plans = this;
}

DetachedPlans::~DetachedPlans() {
  detached_plans = nullptr;
}

DetachedPlans* DetachedPlans::current() {
  return detached_plans;
}

EngineHolder::EngineHolder(std::string name, std::vector<uint8_t> plan_bytes,
                           const std::string& device)
    : EngineHolder(std::move(name), std::make_shared<const engine::Bytes>(std::move(plan_bytes)),
                   device) {}

EngineHolder::EngineHolder(std::string name, std::shared_ptr<const engine::Bytes> plan_bytes,
                           const std::string& device, bool checked)
    : name_(std::move(name)), plan_(std::move(plan_bytes)) {
  KILN_CHECK(plan_ != nullptr, InvalidArgument, "kiln.Engine `", name_, "`: no plan");
  engine::Plan plan = engine::deserialize_plan(plan_, /*verify_checksum=*/!checked);
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
  // A cuda engine's first call at a shape loads the modules of the kernels it runs (CUDA loads
  // them lazily, 1-3 ms each for cuBLASLt's and cuDNN's) and sets up their descriptors: resnet50's
  // first call at a profile point cost 139 ms against 3 ms at its next (NOTES.md G68). So the
  // first context runs once at each profile point here, as TensorRT's engines load their kernels
  // when deserialized, and waits in the pool. Best effort: a failure leaves it to the first calls.
  if (warm_at_load()) prepare_torchscript_executor();
  if (engine_->on_cuda() && warm_at_load()) {
    std::unique_ptr<engine::ExecutionContext> ctx = acquire();
    try {
      ctx->run_profile_points();
      release(std::move(ctx));
    } catch (const Error& e) {  // (the context is dropped)
      KILN_LOG(kInfo, "kiln.Engine `", name_, "`: running it at its profile points failed (",
               e.what(), "); its first calls there set up its kernels instead");
    }
  }
}

std::string EngineHolder::device() const {
  const engine::EngineTarget& t = engine_->target();
  return t.device == "cuda" ? "cuda:" + std::to_string(t.device_index) : t.device;
}

EngineHolder::State EngineHolder::state() const {
  at::Tensor plan;
  if (DetachedPlans* detached = DetachedPlans::current()) {
    detached->plans[name_] = plan_;
    plan = at::empty({0}, at::kByte);
  } else {
    // A view of the plan's bytes (the archive writer only reads it), keeping them alive.
    plan = at::from_blob(
        const_cast<uint8_t*>(plan_->data()), {static_cast<int64_t>(plan_->size())},
        [keep = plan_](void*) {}, at::TensorOptions().dtype(at::kByte));
  }
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
  std::shared_ptr<const engine::Bytes> data;
  bool checked = false;
  if (DetachedPlans* detached = DetachedPlans::current(); detached && plan.numel() == 0) {
    auto it = detached->plans.find(name);
    KILN_CHECK(it != detached->plans.end(), CorruptInput, "kiln.Engine `", name,
               "`: its plan is kept outside the module's archive, and the plans beside it have "
               "none of that name");
    data = it->second;
    checked = detached->checked;
  } else {
    // The engine's weights are views of the loaded tensor, which the plan keeps alive (a load
    // that mapped the module's tensors to a device brings it back first).
    auto bytes = std::make_shared<const at::Tensor>(plan.to(at::kCPU).contiguous());
    data = std::make_shared<const engine::Bytes>(bytes->data_ptr<uint8_t>(),
                                                 static_cast<size_t>(bytes->numel()), bytes);
  }
  c10::intrusive_ptr<EngineHolder> holder;
  try {
    // The constructor parses the plan once and checks the state's device against its target
    // (plans record only "cuda"; the state says "cuda:N").
    holder = c10::make_intrusive<EngineHolder>(name, std::move(data), device, checked);
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
