// embed_engine_in_new_module: a standalone plan wrapped in a module whose forward runs it.
#include "kiln/kiln.h"
#include "runtime/engine_class.h"
#include "util/errors.h"

namespace kiln {

torch::jit::Module embed_engine_in_new_module(const std::vector<uint8_t>& plan,
                                              const Device& device) {
  using namespace torch::jit;
  // The holder checks the plan's target against `device` ("its plan targets X, so it cannot run
  // on Y").
  auto holder = c10::make_intrusive<runtime::EngineHolder>("engine", plan, device.str());
  Module m("__torch__.kiln.EmbeddedEngine");
  m.register_attribute("engine",
                       c10::getCustomClassType<c10::intrusive_ptr<runtime::EngineHolder>>(),
                       c10::IValue(holder));
  auto g = std::make_shared<Graph>();
  Value* self = g->addInput("self")->setType(m.type());
  std::vector<Value*> inputs;
  for (size_t i = 0; i < holder->engine().num_inputs(); ++i) {
    inputs.push_back(g->addInput("input_" + std::to_string(i))->setType(c10::TensorType::get()));
  }
  Value* engine = g->insertGetAttr(self, "engine");
  Value* list = g->insertNode(g->createList(c10::TensorType::get(), inputs))->output();
  Node* call = g->insertNode(
      g->create(c10::Symbol::fromQualString("kiln::execute_engine"), {list, engine}, 1));
  call->output()->setType(c10::ListType::ofTensors());
  const size_t n = holder->engine().num_outputs();
  Node* unpack = g->insertNode(g->createListUnpack(call->output(), n));
  if (n == 1) {
    g->registerOutput(unpack->output()->setType(c10::TensorType::get()));
  } else {
    for (Value* o : unpack->outputs()) o->setType(c10::TensorType::get());
    g->registerOutput(g->insertNode(g->createTuple(unpack->outputs()))->output());
  }
  auto fn = m._ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*m.type()->name(), "forward"), g);
  m.type()->addMethod(fn);
  return m;
}

}  // namespace kiln
