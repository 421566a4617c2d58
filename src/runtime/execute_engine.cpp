// kiln::execute_engine: runs an engine on torch tensors, checking every input against what the
// engine was built for; and the registration of the op and the kiln.Engine class.
#include <torch/library.h>

#include "engine/runtime.h"
#include "runtime/engine_class.h"
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

std::vector<at::Tensor> EngineHolder::execute(const std::vector<at::Tensor>& inputs) {
  const engine::Engine& e = *engine_;
  KILN_CHECK(inputs.size() == e.num_inputs(), InvalidArgument, "execute_engine `", name_,
             "`: expected ", e.num_inputs(), " inputs, got ", inputs.size());
  ContextLease lease{[this](std::unique_ptr<engine::ExecutionContext> c) { release(std::move(c)); },
                     acquire()};
  engine::ExecutionContext& ctx = *lease.ctx;
  std::vector<at::Tensor> keep;
  keep.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const engine::TensorDesc& d = e.input(i);
    at::Tensor t = inputs[i];
    KILN_CHECK(t.defined(), InvalidArgument, "execute_engine `", name_, "`: input `", d.name,
               "` is an undefined tensor");
    const at::ScalarType expected = scalar_type_of(d.dtype);
    KILN_CHECK(t.scalar_type() == expected, ShapeMismatch, "execute_engine `", name_, "`: input `",
               d.name, "` expected dtype ", c10::toString(expected), ", got ",
               c10::toString(t.scalar_type()));
    if (!t.device().is_cpu()) {
      KILN_LOG(kWarning, "execute_engine `", name_, "`: input `", d.name, "` is on ",
               t.device().str(), "; copying it to the CPU engine");
      t = t.cpu();
    }
    t = t.contiguous();
    try {
      ctx.set_input_shape(i, t.sizes().vec());
    } catch (const ShapeMismatch& err) {
      KILN_THROW(ShapeMismatch, "execute_engine `", name_, "`: ", err.message(), " (got ",
                 engine::shape_to_string(t.sizes().vec()), ")");
    }
    ctx.bind_input(i, t.data_ptr());
    keep.push_back(std::move(t));
  }
  std::vector<at::Tensor> outputs;
  for (size_t i = 0; i < e.num_outputs(); ++i) {
    outputs.push_back(at::empty(ctx.output_shape(i),
                                at::TensorOptions().dtype(scalar_type_of(e.output(i).dtype))));
    ctx.bind_output(i, outputs.back().data_ptr());
  }
  ctx.execute();
  return outputs;
}

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
