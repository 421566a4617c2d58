#include "compiler/stitch.h"

#include <torch/csrc/jit/ir/constants.h>

#include <functional>
#include <unordered_map>
#include <utility>

#include "util/errors.h"

namespace kiln::compiler {
namespace {

using partitioning::Segment;
using partitioning::Target;
using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

class Stitcher {
 public:
  Stitcher(const SegmentEngines& engines, torch::jit::Module& module, Graph& out, Value* self,
           std::string device)
      : engines_(engines), module_(module), out_(out), self_(self), device_(std::move(device)) {}

  void map(const Value* from, Value* to) { map_[from] = to; }

  // The stitched value for an original one; constants are recreated at the top of the graph
  // on first use, so every segment and branch can see them.
  Value* value_of(Value* v) {
    auto it = map_.find(v);
    if (it != map_.end()) return it->second;
    KILN_CHECK(v->node()->kind() == torch::jit::prim::Constant, InternalError, "stitch: %",
               v->debugName(), " is used before any segment produced it");
    Node* c = out_.createClone(v->node(), [this](Value* x) { return value_of(x); });
    // The device a PyTorch op is given (lowering made the module's the CPU): the compile's.
    if (c->output()->type()->kind() == c10::TypeKind::DeviceObjType && device_ != "cpu") {
      const auto device = torch::jit::toIValue(c->output());
      if (device && device->isDevice() && device->toDevice().is_cpu()) {
        c->s_(c10::attr::value, device_);
      }
    }
    c->insertAfter(out_.block()->param_node());
    return map_[v] = c->output();
  }

  void segments(const std::vector<Segment>& segments) {
    for (const Segment& s : segments) {
      if (s.target == Target::kEngine) {
        engine_call(s);
      } else if (!s.blocks.empty()) {
        branches(s);
      } else {
        for (Node* n : s.nodes) clone(n);
      }
    }
  }

 private:
  void clone(Node* n) {
    Node* c = out_.insertNode(out_.createClone(n, [this](Value* x) { return value_of(x); }));
    for (size_t k = 0; k < n->outputs().size(); ++k) map_[n->outputs()[k]] = c->outputs()[k];
  }

  // A prim::If whose blocks were partitioned on their own: the node is recreated with empty
  // blocks and each block is stitched from its segments.
  void branches(const Segment& s) {
    Node* n = s.nodes.front();
    Node* c = out_.insertNode(out_.create(n->kind(), {value_of(n->input(0))}, 0));
    c->copyAttributes(*n);
    for (Value* o : n->outputs()) map_[o] = c->addOutput()->copyMetadata(o);
    for (size_t b = 0; b < s.blocks.size(); ++b) {
      Block* original = s.blocks[b].block;
      Block* block = c->addBlock();
      torch::jit::WithInsertPoint guard(block);
      segments(s.blocks[b].segments);
      for (Value* o : original->outputs()) block->registerOutput(value_of(o));
    }
  }

  void engine_call(const Segment& s) {
    auto it = engines_.find(&s);
    KILN_CHECK(it != engines_.end(), InternalError, "stitch: an engine segment has no engine");
    const std::string& attr = it->second->name();
    if (!module_.hasattr(attr)) {
      module_.register_attribute(
          attr, c10::getCustomClassType<c10::intrusive_ptr<runtime::EngineHolder>>(),
          c10::IValue(it->second));
    }
    Value* engine = out_.insertGetAttr(self_, attr);
    // An engine of another backend (backend_priority) than the device the rest runs on gets
    // its inputs moved to it, and its outputs moved back.
    const std::string engine_device = it->second->device();
    std::vector<Value*> inputs;
    for (Value* v : s.inputs) {
      Value* in = value_of(v);
      if (engine_device != device_) {
        in = out_.insert(c10::aten::to, {in, c10::Device(engine_device)});
      }
      inputs.push_back(in);
    }
    Value* list = out_.insertNode(out_.createList(c10::TensorType::get(), inputs))->output();
    Node* call = out_.insertNode(
        out_.create(c10::Symbol::fromQualString("kiln::execute_engine"), {list, engine}, 1));
    call->output()->setType(c10::ListType::ofTensors());
    Node* unpack = out_.insertNode(out_.createListUnpack(call->output(), s.outputs.size()));
    for (size_t k = 0; k < s.outputs.size(); ++k) {
      Value* out = unpack->outputs()[k]->setType(c10::TensorType::get());
      // The engine has no f64: it computes what torch does in double in f32. Its result gets
      // torch's dtype back, so that what follows (and the caller) sees the dtype torch gives.
      if (s.has_shapes && s.shapes[partitioning::kOpt].outputs.size() == s.outputs.size() &&
          s.shapes[partitioning::kOpt].outputs[k].dtype == c10::ScalarType::Double) {
        out = out_.insert(c10::aten::to, {out, static_cast<int64_t>(c10::ScalarType::Double)});
      }
      if (engine_device != device_) {
        out = out_.insert(c10::aten::to, {out, c10::Device(device_)});
      }
      map_[s.outputs[k]] = out;
    }
  }

  const SegmentEngines& engines_;
  torch::jit::Module& module_;
  Graph& out_;
  Value* self_;
  std::string device_;
  std::unordered_map<const Value*, Value*> map_;
};

}  // namespace

torch::jit::Module stitch(const partitioning::PartitionedGraph& partitioned,
                          const SegmentEngines& engines, const std::string& name,
                          const std::string& device) {
  Graph& graph = *partitioned.graph;
  KILN_CHECK(
      !graph.inputs().empty() && graph.inputs()[0]->type()->kind() == c10::TypeKind::ClassType,
      InternalError, "stitch: the graph's first input must be `self`");
  torch::jit::Module module(name);
  // Registered before the engines, so that loading without the runtime library fails with an
  // error whose quoted context (the attribute lines just above the unknown Engine type) names
  // the library to load.
  module.register_attribute(kRuntimeHintAttribute, c10::StringType::get(),
                            c10::IValue(std::string(kRuntimeHint)));
  auto out = std::make_shared<Graph>();
  Value* self = out->addInput("self")->setType(module.type());
  Stitcher stitcher(engines, module, *out, self, device);
  for (size_t i = 1; i < graph.inputs().size(); ++i) {
    stitcher.map(graph.inputs()[i], out->addInput()->copyMetadata(graph.inputs()[i]));
  }
  stitcher.segments(partitioned.segments);
  for (Value* o : graph.outputs()) out->registerOutput(stitcher.value_of(o));
  out->lint();
  auto fn = module._ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*module.type()->name(), "forward"), out);
  module.type()->addMethod(fn);
  return module;
}

void insert_tied_dim_guards(torch::jit::Graph& graph, const std::vector<Input>& inputs) {
  using torch::jit::Value;
  if (graph.inputs().size() != inputs.size() + 1) return;  // not one tensor per input spec
  // Per symbol, every (input, dim) it names, in input order.
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> uses;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<std::string>& symbols = inputs[i].dim_symbols;
    for (size_t d = 0; d < symbols.size(); ++d) {
      if (!symbols[d].empty()) uses[symbols[d]].emplace_back(i, d);
    }
  }
  torch::jit::WithInsertPoint top(graph.block()->nodes().front());
  for (const auto& [symbol, dims] : uses) {
    if (dims.size() < 2) continue;
    Value* first = graph.inputs()[dims[0].first + 1];
    if (first->type()->kind() != c10::TypeKind::TensorType) continue;
    Value* want =
        graph.insert(torch::jit::aten::size, {first, static_cast<int64_t>(dims[0].second)});
    for (size_t k = 1; k < dims.size(); ++k) {
      Value* other = graph.inputs()[dims[k].first + 1];
      if (other->type()->kind() != c10::TypeKind::TensorType) continue;
      Value* got =
          graph.insert(torch::jit::aten::size, {other, static_cast<int64_t>(dims[k].second)});
      Value* equal = graph.insert(torch::jit::aten::eq, {got, want});
      torch::jit::Node* check = graph.insertNode(graph.create(torch::jit::prim::If, {equal}, 0));
      check->addBlock();  // equal: nothing to do
      torch::jit::Block* raise = check->addBlock();
      const std::string message =
          "kiln: dim " + std::to_string(dims[k].second) + " of input `" + other->debugNameBase() +
          "` must equal dim " + std::to_string(dims[0].second) + " of input `" +
          first->debugNameBase() + "` (both are the export's size `" + symbol + "`)";
      torch::jit::WithInsertPoint in_raise(raise);
      graph.insert(torch::jit::prim::RaiseException,
                   {graph.insertConstant(message), graph.insertConstant(c10::IValue())});
    }
  }
}

}  // namespace kiln::compiler
