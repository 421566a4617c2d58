// kiln::execute_engine: runs an engine on torch tensors, checking every input against what the
// engine was built for (on the CPU, or enqueued on PyTorch's current stream of the engine's CUDA
// device); and the registration of the op and the kiln.Engine class.
#include <torch/library.h>

#include <map>

#include "engine/cuda/backend.h"
#include "engine/runtime.h"
#include "runtime/engine_class.h"
#include "runtime/torch_cuda.h"
#include "util/errors.h"
#include "util/logging.h"

namespace kiln::runtime {
namespace {

at::ScalarType scalar_type_of(engine::DataType t) {
  switch (t) {
    case engine::DataType::kF32:
      return at::kFloat;
    case engine::DataType::kF16:
      return at::kHalf;
    case engine::DataType::kBF16:
      return at::kBFloat16;
    case engine::DataType::kI64:
      return at::kLong;
    case engine::DataType::kI32:
      return at::kInt;
    case engine::DataType::kI8:
      return at::kChar;
    case engine::DataType::kU8:
      return at::kByte;
    case engine::DataType::kBool:
      return at::kBool;
  }
  return at::kFloat;
}

// Returns the context to the pool even when execution throws.
struct ContextLease {
  std::function<void(std::unique_ptr<engine::ExecutionContext>)> give_back;
  std::unique_ptr<engine::ExecutionContext> ctx;
  ~ContextLease() {
    if (ctx) give_back(std::move(ctx));
  }
};

}  // namespace

bool cuda_supported() {
  return KILN_RUNTIME_CUDA && engine::cuda::built();
}

std::vector<at::Tensor> EngineHolder::execute(const std::vector<at::Tensor>& inputs) {
  KILN_CHECK(inputs.size() == engine_->num_inputs(), InvalidArgument, "execute_engine `", name_,
             "`: expected ", engine_->num_inputs(), " inputs, got ", inputs.size());
  return engine_->on_cuda() ? execute_on_cuda(inputs) : execute_on_cpu(inputs);
}

at::Tensor EngineHolder::prepare_input(size_t i, const at::Tensor& input,
                                       engine::ExecutionContext& ctx) {
  const engine::TensorDesc& d = engine_->input(i);
  at::Tensor t = input;
  KILN_CHECK(t.defined(), InvalidArgument, "execute_engine `", name_, "`: input `", d.name,
             "` is an undefined tensor");
  const at::ScalarType expected = scalar_type_of(d.dtype);
  KILN_CHECK(t.scalar_type() == expected, ShapeMismatch, "execute_engine `", name_, "`: input `",
             d.name, "` expected dtype ", c10::toString(expected), ", got ",
             c10::toString(t.scalar_type()));
  if (!engine_->on_cuda()) {
    if (!t.device().is_cpu()) {
      KILN_LOG(kWarning, "execute_engine `", name_, "`: input `", d.name, "` is on ",
               t.device().str(), "; copying it to the CPU engine");
      t = t.cpu();
    }
  } else {
    const auto index = static_cast<c10::DeviceIndex>(engine_->target().device_index);
    const c10::Device engine_device(c10::DeviceType::CUDA, index);
    if (t.device().is_cpu()) {
      if (!warned_host_inputs_.exchange(true)) {
        KILN_LOG(kWarning, "execute_engine `", name_, "`: input `", d.name,
                 "` is on the CPU; copying it, and any later CPU input of this engine, to ",
                 engine_device.str());
      }
      t = t.to(engine_device);
    }
    KILN_CHECK(t.device() == engine_device, DeviceError, "execute_engine `", name_, "`: input `",
               d.name, "` is on ", t.device().str(), " but the engine runs on ",
               engine_device.str(), "; move it there first");
  }
  t = t.contiguous();
  try {
    ctx.set_input_shape(i, t.sizes().vec());
  } catch (const ShapeMismatch& err) {
    KILN_THROW(ShapeMismatch, "execute_engine `", name_, "`: ", err.message(), " (got ",
               engine::shape_to_string(t.sizes().vec()), ")");
  }
  ctx.bind_input(i, t.data_ptr());
  return t;
}

std::vector<at::Tensor> EngineHolder::allocate_outputs(engine::ExecutionContext& ctx,
                                                       const c10::Device& device) const {
  std::vector<at::Tensor> outputs;
  for (size_t i = 0; i < engine_->num_outputs(); ++i) {
    outputs.push_back(at::empty(
        ctx.output_shape(i),
        at::TensorOptions().dtype(scalar_type_of(engine_->output(i).dtype)).device(device)));
    ctx.bind_output(i, outputs.back().data_ptr());
  }
  return outputs;
}

std::vector<at::Tensor> EngineHolder::written(const engine::ExecutionContext& ctx,
                                              std::vector<at::Tensor> outputs) const {
  // Outputs with data-dependent dims (a nonzero's rows) were allocated at their bound: what was
  // written is a dense prefix of that.
  for (size_t i = 0; i < outputs.size(); ++i) {
    const engine::Shape& shape = ctx.executed_output_shape(i);
    if (outputs[i].sizes().vec() == shape) continue;
    outputs[i] = outputs[i].view({-1}).narrow(0, 0, engine::volume(shape)).view(shape);
  }
  return outputs;
}

std::vector<at::Tensor> EngineHolder::execute_on_cpu(const std::vector<at::Tensor>& inputs) {
  ContextLease lease{[this](std::unique_ptr<engine::ExecutionContext> c) { release(std::move(c)); },
                     acquire()};
  engine::ExecutionContext& ctx = *lease.ctx;
  std::vector<at::Tensor> keep;
  keep.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) keep.push_back(prepare_input(i, inputs[i], ctx));
  std::vector<at::Tensor> outputs = allocate_outputs(ctx, c10::Device(c10::DeviceType::CPU));
  ctx.execute();
  return written(ctx, std::move(outputs));
}

#if KILN_RUNTIME_CUDA
namespace {

// A pool stream of one device and two events, per thread: CUDA graphs cannot be captured on the
// legacy default stream (PyTorch's current stream unless the caller set another), so such calls
// fork onto this stream and join back, ordered by the events (no host waits).
struct SideStream {
  c10::cuda::CUDAStream stream;
  cudaEvent_t fork = nullptr, join = nullptr;
  explicit SideStream(c10::DeviceIndex device)
      : stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {
    KILN_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess &&
                   cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess,
               DeviceError, "execute_engine: cudaEventCreate failed on cuda:", int(device));
  }
  ~SideStream() {
    if (fork) cudaEventDestroy(fork);
    if (join) cudaEventDestroy(join);
  }
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
};

SideStream& side_stream(c10::DeviceIndex device) {
  thread_local std::map<int, std::unique_ptr<SideStream>> per_device;
  auto& s = per_device[device];
  if (!s) s = std::make_unique<SideStream>(device);
  return *s;
}

// True when `stream` is being captured into someone else's CUDA graph (torch.cuda.graph): the
// engine then runs eagerly into that capture instead of capturing a graph of its own.
bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();  // e.g. the legacy stream while another stream captures globally
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

void check_cuda(cudaError_t status, const std::string& what) {
  KILN_CHECK(status == cudaSuccess, DeviceError, what, " failed: ", cudaGetErrorString(status));
}

}  // namespace

std::vector<at::Tensor> EngineHolder::execute_on_cuda(const std::vector<at::Tensor>& inputs) {
  const auto index = static_cast<c10::DeviceIndex>(engine_->target().device_index);
  c10::cuda::CUDAGuard device_guard(index);
  const cudaStream_t current = c10::cuda::getCurrentCUDAStream(index).stream();
  const bool graphs = cuda_graphs_ && !is_capturing(current);
  const bool fork = graphs && (current == nullptr || current == cudaStreamLegacy);
  SideStream* side = fork ? &side_stream(index) : nullptr;
  const cudaStream_t stream = fork ? side->stream.stream() : current;

  ContextLease lease{[this](std::unique_ptr<engine::ExecutionContext> c) { release(std::move(c)); },
                     acquire(stream)};
  engine::ExecutionContext& ctx = *lease.ctx;
  ctx.set_stream(stream);
  ctx.enable_cuda_graphs(graphs);
  // Copies and contiguous() of inputs run on the current stream, before the fork.
  std::vector<at::Tensor> keep;
  keep.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) keep.push_back(prepare_input(i, inputs[i], ctx));
  // Outputs come from PyTorch's allocator on the current stream; with a fork they are written on
  // the side stream, and the current stream waits for it before anything else can touch them.
  std::vector<at::Tensor> outputs =
      allocate_outputs(ctx, c10::Device(c10::DeviceType::CUDA, index));
  if (fork) {
    check_cuda(cudaEventRecord(side->fork, current), "execute_engine: cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream, side->fork, 0), "execute_engine: cudaStreamWaitEvent");
  }
  ctx.execute();
  if (fork) {
    check_cuda(cudaEventRecord(side->join, stream), "execute_engine: cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(current, side->join, 0), "execute_engine: cudaStreamWaitEvent");
  }
  return written(ctx, std::move(outputs));
}
#else
std::vector<at::Tensor> EngineHolder::execute_on_cuda(const std::vector<at::Tensor>&) {
  KILN_THROW(Unsupported, "execute_engine `", name_,
             "`: a cuda engine, but this libkiln_runtime was built without CUDA support");
}
#endif

namespace {

std::vector<at::Tensor> execute_engine(std::vector<at::Tensor> inputs,
                                       c10::intrusive_ptr<EngineHolder> engine) {
  return engine->execute(inputs);
}

}  // namespace

TORCH_LIBRARY(kiln, m) {
  m.class_<EngineHolder>("Engine")
      .def("name", [](const c10::intrusive_ptr<EngineHolder>& self) { return self->name(); })
      .def("inspect", [](const c10::intrusive_ptr<EngineHolder>& self) { return self->inspect(); })
      .def("device", [](const c10::intrusive_ptr<EngineHolder>& self) { return self->device(); })
      .def_pickle(
          [](const c10::intrusive_ptr<EngineHolder>& self) -> EngineHolder::State {
            return self->state();
          },
          [](EngineHolder::State state) -> c10::intrusive_ptr<EngineHolder> {
            return EngineHolder::from_state(state);
          });
  m.def("execute_engine(Tensor[] inputs, __torch__.torch.classes.kiln.Engine engine) -> Tensor[]",
        execute_engine);
}

}  // namespace kiln::runtime
