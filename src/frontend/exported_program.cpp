// Reads a .pt2 archive (torch.export.save): the zip's records `archive_format`, `models/model.json`
// (the serialized ExportedProgram: graph, signature, range constraints), the weights and constants
// configs and their raw storage bytes. Builds the compiler IR from them: a module whose forward
// graph has one node per export node, matched against this libtorch's schema of the same overload
// (defaults filled in as TorchScript's compiler fills them), weights as constants.
#include "frontend/exported_program.h"

#include "frontend/pt2_archive.h"
#include "ir/export_sizes.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/frontend/schema_matching.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "util/errors.h"

namespace kiln::frontend {
namespace {

using torch::jit::Graph;
using torch::jit::NamedValue;
using torch::jit::Node;
using torch::jit::Value;

using pt2::Archive;
using pt2::expr_str;
using pt2::field;
using pt2::json;
using pt2::memory_format;
using pt2::plain_symbol;
using pt2::read_payload;
using pt2::scalar_type;
using pt2::static_int;
using pt2::tensor_from_storage;
using pt2::union_member;

class GraphBuilder {
 public:
  GraphBuilder(const json& program, std::map<std::string, at::Tensor> weights,
               std::map<std::string, at::Tensor> constants, std::string where)
      : program_(program),
        weights_(std::move(weights)),
        constants_(std::move(constants)),
        where_(std::move(where)) {}

  ExportedProgram build() {
    const json& gm = field(program_, "graph_module", where_);
    const json& graph = field(gm, "graph", where_ + ".graph_module");
    const json& signature = field(gm, "signature", where_ + ".graph_module");
    ExportedProgram out;
    out.module = torch::jit::Module(c10::QualifiedName("__torch__.kiln.ExportedProgram"));
    out.module.register_attribute("training", c10::BoolType::get(), false);
    graph_ = std::make_shared<Graph>();
    graph_->addInput("self")->setType(out.module.type());
    refuse_mutation(signature);
    metas_ = &field(graph, "tensor_values", where_ + ".graph");
    sym_ints_ = graph.contains("sym_int_values") && graph.at("sym_int_values").is_object()
                    ? &graph.at("sym_int_values")
                    : nullptr;
    inputs(signature, graph, out);
    for (const json& n : field(graph, "nodes", where_ + ".graph")) node(n);
    outputs(signature);
    graph_->lint();
    auto fn = out.module._ivalue()->compilation_unit()->create_function(
        c10::QualifiedName(*out.module.type()->name(), "forward"), graph_);
    out.module.type()->addMethod(fn);
    return out;
  }

 private:
  // Graph inputs of the signature: parameters, buffers and constants become graph constants,
  // user inputs arguments of forward (in order), each with its dims' ranges.
  void inputs(const json& signature, const json& graph, ExportedProgram& out) {
    const json& ranges =
        program_.contains("range_constraints") ? program_.at("range_constraints") : json::object();
    const json& metas = field(graph, "tensor_values", where_ + ".graph");
    for (const json& spec : field(signature, "input_specs", where_ + ".signature")) {
      auto [kind, body] = union_member(spec, where_ + ".input_specs");
      const std::string where = where_ + ": input `" + kind + "`";
      if (kind == "user_input") {
        auto [tag, arg] = union_member(field(*body, "arg", where), where);
        KILN_CHECK(tag == "as_tensor", Unsupported, where_, ": a user input given as `", tag,
                   "`; kiln compiles programs whose inputs are tensors");
        const std::string name = field(*arg, "name", where).get<std::string>();
        Value* v = graph_->addInput(sanitized(name))->setType(c10::TensorType::get());
        values_[name] = v;
        state_[v] = "user input `" + name + "`";
        out.inputs.push_back(input_info(name, field(metas, name.c_str(), where), ranges));
        continue;
      }
      std::string source, name;
      const std::map<std::string, at::Tensor>* from = &weights_;
      if (kind == "parameter") {
        source = field(*body, "parameter_name", where).get<std::string>();
      } else if (kind == "buffer") {
        source = field(*body, "buffer_name", where).get<std::string>();
        if (!weights_.count(source)) from = &constants_;  // non-persistent buffers
      } else if (kind == "tensor_constant") {
        source = field(*body, "tensor_constant_name", where).get<std::string>();
        from = &constants_;
      } else if (kind == "constant_input") {
        values_[field(*body, "name", where).get<std::string>()] =
            graph_->insertConstant(constant_value(field(*body, "value", where), where));
        continue;
      } else {
        KILN_THROW(Unsupported, where_, ": an input of kind `", kind,
                   "` (custom objects and effect tokens are not supported)");
      }
      name = field(field(*body, "arg", where), "name", where).get<std::string>();
      auto it = from->find(source);
      KILN_CHECK(it != from->end(), CorruptInput, where_, ": ", kind, " `", source,
                 "` is not among the archive's weights and constants");
      Value* c = graph_->insertConstant(it->second);
      c->setType(c10::TensorType::create(it->second));
      c->setDebugName(sanitized(name));
      values_[name] = c;
      state_[c] = kind + " `" + source + "`";
    }
  }

  InputInfo input_info(const std::string& name, const json& meta, const json& ranges) {
    InputInfo info;
    info.name = name;
    const std::string where = where_ + ": input `" + name + "`";
    info.dtype = scalar_type(field(meta, "dtype", where).get<int64_t>(), where);
    for (const json& s : field(meta, "sizes", where)) {
      auto [tag, v] = union_member(s, where);
      DimRange d;
      if (tag == "as_int") {
        d.min = d.opt = d.max = v->get<int64_t>();
      } else {
        KILN_CHECK(tag == "as_expr", CorruptInput, where, ": a size given as `", tag, "`");
        const std::string expr = field(*v, "expr_str", where).get<std::string>();
        d.symbol = plain_symbol(expr);
        KILN_CHECK(!d.symbol.empty(), Unsupported, where, ": a size given by the expression `",
                   expr, "`; kiln takes input sizes that are plain symbols");
        const json& hint = v->contains("hint") ? v->at("hint") : json();
        d.opt = hint.is_object() && hint.contains("as_int") ? hint.at("as_int").get<int64_t>() : -1;
        d.min = 0;
        d.max = -1;  // unbounded unless the constraints say
        if (ranges.contains(d.symbol)) {
          const json& r = ranges.at(d.symbol);
          if (r.contains("min_val") && r.at("min_val").is_number_integer()) {
            d.min = r.at("min_val").get<int64_t>();
          }
          if (r.contains("max_val") && r.at("max_val").is_number_integer()) {
            d.max = r.at("max_val").get<int64_t>();
          }
        }
      }
      info.dims.push_back(d);
    }
    return info;
  }

  // Outputs other than the user's (buffer, input or parameter mutations, effect tokens): state
  // the program changes, which an inference engine does not keep.
  void refuse_mutation(const json& signature) {
    for (const json& spec : field(signature, "output_specs", where_ + ".signature")) {
      auto [kind, body] = union_member(spec, where_ + ".output_specs");
      if (kind != "user_output") {
        std::string target;
        if (body->contains("buffer_name"))
          target = " `" + body->at("buffer_name").get<std::string>() + "`";
        if (body->contains("user_input_name"))
          target = " `" + body->at("user_input_name").get<std::string>() + "`";
        if (body->contains("parameter_name"))
          target = " `" + body->at("parameter_name").get<std::string>() + "`";
        KILN_THROW(
            Unsupported, where_, ": the program has a `", kind, "` output", target,
            ": it mutates state, and kiln compiles inference programs without mutation "
            "(export the model in eval mode, without in-place updates of inputs or buffers)");
      }
    }
  }

  void outputs(const json& signature) {
    std::vector<Value*> outs;
    for (const json& spec : field(signature, "output_specs", where_ + ".signature")) {
      auto [kind, body] = union_member(spec, where_ + ".output_specs");
      outs.push_back(argument(field(*body, "arg", where_ + ".output_specs"), "output"));
    }
    if (outs.size() == 1) {
      graph_->registerOutput(outs[0]);
    } else {
      graph_->registerOutput(graph_->insertNode(graph_->createTuple(outs))->output());
    }
  }

  static std::string sanitized(const std::string& name) {
    std::string s = name;
    for (char& c : s) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
    }
    // TorchScript reserves names that end in digits after a '.', and names that are digits.
    if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "v_" + s;
    return s;
  }

  Value* named(const std::string& name, const std::string& where) {
    auto it = values_.find(name);
    KILN_CHECK(it != values_.end(), CorruptInput, where, ": `", name,
               "` is used before it is defined");
    return it->second;
  }

  c10::IValue constant_value(const json& j, const std::string& where) {
    auto [tag, v] = union_member(j, where);
    if (tag == "as_none") return c10::IValue();
    if (tag == "as_int") return v->get<int64_t>();
    if (tag == "as_float") return v->get<double>();
    if (tag == "as_string") return v->get<std::string>();
    if (tag == "as_bool") return v->get<bool>();
    KILN_THROW(Unsupported, where, ": a constant input of kind `", tag, "`");
  }

  // A float: JSON numbers, and the strings export writes for what JSON cannot hold.
  static double number(const json& j, const std::string& where) {
    if (j.is_number()) return j.get<double>();
    if (j.is_string()) {
      const std::string s = j.get<std::string>();
      if (s == "Infinity" || s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-Infinity" || s == "-inf") return -std::numeric_limits<double>::infinity();
      if (s == "NaN" || s == "nan") return std::numeric_limits<double>::quiet_NaN();
    }
    KILN_THROW(CorruptInput, where, ": expected a float, got ", j.dump().substr(0, 60));
  }

  // A SymInt / SymBool / SymFloat argument: a constant or a value the graph computed.
  Value* symbolic(const json& j, const std::string& where) {
    auto [tag, v] = union_member(j, where);
    if (tag == "as_name") return named(v->get<std::string>(), where);
    if (tag == "as_int") return graph_->insertConstant(v->get<int64_t>());
    if (tag == "as_bool") return graph_->insertConstant(v->get<bool>());
    if (tag == "as_float") return graph_->insertConstant(number(*v, where));
    KILN_THROW(CorruptInput, where, ": a symbolic value given as `", tag, "`");
  }

  Value* list(const std::vector<Value*>& items, const c10::TypePtr& elem) {
    return graph_->insertNode(graph_->createList(elem, items))->output();
  }

  // One argument of a node, as a graph value; `expected` (the schema's type, when known) decides
  // what export's Python-level spellings become: a number where a Tensor is expected is a 0-d
  // tensor (as torch wraps it), a list of tensors where Tensor?[] is expected a list of optionals.
  Value* argument(const json& j, const std::string& where, const c10::TypePtr& expected = nullptr) {
    auto [tag, v] = union_member(j, where);
    if (expected && expected->kind() == c10::TypeKind::TensorType &&
        (tag == "as_int" || tag == "as_float" || tag == "as_bool")) {
      const at::Tensor t = tag == "as_int"    ? at::scalar_tensor(v->get<int64_t>(), at::kLong)
                           : tag == "as_bool" ? at::scalar_tensor(v->get<bool>(), at::kBool)
                                              : at::scalar_tensor(number(*v, where), at::kDouble);
      Value* c = graph_->insertConstant(t);
      c->setType(c10::TensorType::create(t));
      return c;
    }
    if (expected && tag == "as_tensors") {
      const auto list_type = expected->cast<c10::ListType>();
      if (list_type && list_type->getElementType()->kind() == c10::TypeKind::OptionalType) {
        std::vector<Value*> items;
        for (const json& t : *v) {
          items.push_back(named(field(t, "name", where).get<std::string>(), where));
        }
        return list(items, c10::OptionalType::ofTensor());
      }
    }
    if (tag == "as_none") return graph_->insertConstant(c10::IValue());
    if (tag == "as_tensor") return named(field(*v, "name", where).get<std::string>(), where);
    if (tag == "as_tensors") {
      std::vector<Value*> items;
      for (const json& t : *v)
        items.push_back(named(field(t, "name", where).get<std::string>(), where));
      return list(items, c10::TensorType::get());
    }
    if (tag == "as_optional_tensors") {
      std::vector<Value*> items;
      for (const json& t : *v) {
        auto [ttag, tv] = union_member(t, where);
        items.push_back(ttag == "as_none"
                            ? graph_->insertConstant(c10::IValue())
                            : named(field(*tv, "name", where).get<std::string>(), where));
      }
      return list(items, c10::OptionalType::ofTensor());
    }
    if (tag == "as_optional_tensor") {
      auto [ttag, tv] = union_member(*v, where);
      return ttag == "as_none" ? graph_->insertConstant(c10::IValue())
                               : named(field(*tv, "name", where).get<std::string>(), where);
    }
    if (tag == "as_int") return graph_->insertConstant(v->get<int64_t>());
    if (tag == "as_ints") return graph_->insertConstant(v->get<std::vector<int64_t>>());
    if (tag == "as_float") return graph_->insertConstant(number(*v, where));
    if (tag == "as_floats") {
      std::vector<double> floats;
      for (const json& f : *v) floats.push_back(number(f, where));
      return graph_->insertConstant(floats);
    }
    if (tag == "as_bool") return graph_->insertConstant(v->get<bool>());
    if (tag == "as_bools") {
      c10::List<bool> bools;
      for (const json& b : *v) bools.push_back(b.get<bool>());
      return graph_->insertConstant(bools);
    }
    if (tag == "as_string") return graph_->insertConstant(v->get<std::string>());
    if (tag == "as_strings") {
      return graph_->insertConstant(c10::List<std::string>(v->get<std::vector<std::string>>()));
    }
    if (tag == "as_sym_int" || tag == "as_sym_bool" || tag == "as_sym_float") {
      return symbolic(*v, where);
    }
    if (tag == "as_sym_ints" || tag == "as_sym_bools" || tag == "as_sym_floats") {
      // Sizes all static (a static reshape of a dynamic program) are one constant list.
      std::vector<int64_t> ints;
      for (const json& s : *v) {
        if (!s.is_object() || !s.contains("as_int") || !s.at("as_int").is_number_integer()) break;
        ints.push_back(s.at("as_int").get<int64_t>());
      }
      if (tag == "as_sym_ints" && ints.size() == v->size()) return graph_->insertConstant(ints);
      std::vector<Value*> items;
      for (const json& s : *v) items.push_back(symbolic(s, where));
      const c10::TypePtr elem = tag == "as_sym_ints"    ? c10::TypePtr(c10::IntType::get())
                                : tag == "as_sym_bools" ? c10::TypePtr(c10::BoolType::get())
                                                        : c10::TypePtr(c10::FloatType::get());
      return list(items, elem);
    }
    if (tag == "as_scalar_type") {
      return graph_->insertConstant(static_cast<int64_t>(scalar_type(v->get<int64_t>(), where)));
    }
    if (tag == "as_memory_format") {
      return graph_->insertConstant(static_cast<int64_t>(memory_format(v->get<int64_t>(), where)));
    }
    if (tag == "as_layout") {
      KILN_CHECK(v->get<int64_t>() == 7, Unsupported, where, ": a layout other than strided");
      return graph_->insertConstant(static_cast<int64_t>(c10::kStrided));
    }
    if (tag == "as_device") {
      std::string device = field(*v, "type", where).get<std::string>();
      if (v->contains("index") && v->at("index").is_number_integer()) {
        device += ":" + std::to_string(v->at("index").get<int64_t>());
      }
      return graph_->insertConstant(c10::Device(device));
    }
    KILN_THROW(Unsupported, where, ": an argument given as `", tag,
               "` (graphs, custom objects and operators as arguments are not supported)");
  }

  // The schema of `qualified` ("aten::add") whose overload is `overload` ("Tensor", "" for
  // "default").
  std::shared_ptr<torch::jit::Operator> operator_for(const std::string& qualified,
                                                     const std::string& overload,
                                                     const std::string& where) {
    const auto ops = torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(qualified));
    for (const auto& op : ops) {
      if (op->schema().overload_name() == overload) return op;
    }
    KILN_THROW(Unsupported, where, ": `", qualified, overload.empty() ? "" : ".", overload,
               "` is not an operator of this libtorch (", ops.size(),
               " other overloads); the program was saved by torch ",
               program_.value("torch_version", std::string("?")));
  }

  void node(const json& n) {
    const std::string target = field(n, "target", where_ + ".nodes").get<std::string>();
    const std::string where = where_ + ": node `" + n.value("name", target) + "` (" + target + ")";
    const std::string aten = "torch.ops.aten.";
    if (target.compare(0, aten.size(), aten) == 0) {
      aten_node(n, target.substr(aten.size()), where);
    } else if (target.compare(0, 10, "_operator.") == 0) {
      operator_node(n, target.substr(10), where);
    } else if (target.compare(0, 23, "torch.ops.higher_order.") == 0) {
      wrapper_node(n, target.substr(23), where);
    } else {
      KILN_THROW(Unsupported, where, ": an op outside aten:: and Python's operator module");
    }
  }

  // Higher-order ops that only wrap a subgraph in a mode: grad mode (wrap_with_set_grad_enabled:
  // a `torch.no_grad()` block, as transformers' rotary embeddings have) changes nothing in a
  // forward run without autograd, nor does autocast turned off (wrap_with_autocast with enabled
  // false), so their subgraph is inlined. An enabled autocast region would change the dtypes its
  // ops compute in, and control flow (cond, while_loop, map) is not taken: both are refused.
  void wrapper_node(const json& n, const std::string& op, const std::string& where) {
    const json& ins = field(n, "inputs", where);
    size_t graph_at = 0;
    if (op == "wrap_with_set_grad_enabled") {
      graph_at = 1;
    } else if (op == "wrap_with_autocast") {
      graph_at = 4;
      KILN_CHECK(ins.is_array() && ins.size() > graph_at, CorruptInput, where,
                 ": expected device type, dtype, enabled, cache_enabled and a subgraph");
      auto [tag, enabled] = union_member(field(ins[2], "arg", where), where);
      KILN_CHECK(tag == "as_bool" && enabled->is_boolean(), CorruptInput, where,
                 ": autocast's `enabled` given as `", tag, "`");
      KILN_CHECK(!enabled->get<bool>(), Unsupported, where,
                 ": an autocast region (its ops would compute in another dtype); export the "
                 "model without autocast and give kiln the precisions to use instead");
    } else {
      KILN_THROW(Unsupported, where,
                 ": higher-order ops other than grad-mode and disabled-autocast wrappers "
                 "(control flow, wrapped subgraphs) are not supported by the ATen frontend");
    }
    KILN_CHECK(ins.is_array() && ins.size() > graph_at, CorruptInput, where,
               ": no subgraph among the inputs");
    auto [tag, wrapped] = union_member(field(ins[graph_at], "arg", where), where);
    KILN_CHECK(tag == "as_graph", CorruptInput, where, ": expected the subgraph as input ",
               graph_at, ", got `", tag, "`");
    const json& body = field(*wrapped, "graph", where);
    std::vector<Value*> operands;
    for (size_t i = graph_at + 1; i < ins.size(); ++i) {
      operands.push_back(argument(field(ins[i], "arg", where), where));
    }
    KILN_CHECK(depth_ < kMaxWrapperDepth, Unsupported, where, ": wrappers nested more than ",
               kMaxWrapperDepth, " deep");
    const std::string inner = where + ", subgraph `" + wrapped->value("name", "?") + "`";
    const json& params = field(body, "inputs", inner);
    KILN_CHECK(params.is_array() && params.size() == operands.size(), CorruptInput, inner, ": ",
               params.is_array() ? params.size() : 0, " inputs for ", operands.size(), " operands");

    // The subgraph names its values on its own (its input `getitem` is not the caller's): its
    // names live in a scope of their own, with the subgraph's own tensor and SymInt descriptions.
    auto outer_values = values_;
    const json* outer_metas = metas_;
    const json* outer_sym_ints = sym_ints_;
    const std::string outer_where = where_;
    std::vector<Value*> results;
    if (body.contains("tensor_values") && body.at("tensor_values").is_object()) {
      metas_ = &body.at("tensor_values");
    }
    if (body.contains("sym_int_values") && body.at("sym_int_values").is_object()) {
      sym_ints_ = &body.at("sym_int_values");
    }
    where_ = inner;
    for (size_t i = 0; i < params.size(); ++i) {
      auto [ptag, param] = union_member(params[i], inner);
      std::string name;
      if (ptag == "as_tensor") {
        name = field(*param, "name", inner).get<std::string>();
      } else if (ptag == "as_sym_int" || ptag == "as_sym_bool" || ptag == "as_sym_float") {
        auto [stag, sv] = union_member(*param, inner);
        KILN_CHECK(stag == "as_name", CorruptInput, inner, ": input ", i, " given as `", stag, "`");
        name = sv->get<std::string>();
      } else {
        KILN_THROW(Unsupported, inner, ": an input given as `", ptag, "`");
      }
      values_[name] = operands[i];
    }
    ++depth_;
    for (const json& m : field(body, "nodes", inner)) node(m);
    --depth_;
    for (const json& o : field(body, "outputs", inner)) results.push_back(argument(o, inner));
    values_ = std::move(outer_values);
    metas_ = outer_metas;
    sym_ints_ = outer_sym_ints;
    where_ = outer_where;

    const json& outs = field(n, "outputs", where);
    KILN_CHECK(outs.is_array() && outs.size() == results.size(), CorruptInput, where, ": ",
               outs.is_array() ? outs.size() : 0, " outputs named for the subgraph's ",
               results.size());
    for (size_t i = 0; i < outs.size(); ++i) bind_output(outs[i], results[i], where);
  }

  void aten_node(const json& n, const std::string& op, const std::string& where) {
    const size_t dot = op.rfind('.');
    KILN_CHECK(dot != std::string::npos, CorruptInput, where, ": target without an overload");
    std::string name = op.substr(0, dot), overload = op.substr(dot + 1);
    if (overload == "default") overload.clear();
    if (name == "as_strided" && overload.empty()) return as_strided_node(n, where);
    // SymInt queries are int queries in TorchScript.
    if (name == "sym_size" || name == "sym_stride" || name == "sym_numel" ||
        name == "sym_storage_offset") {
      name = name.substr(4);
      if (name == "size" || name == "stride") overload = "int";
    }
    const auto op_ptr = operator_for("aten::" + name, overload, where);
    const c10::FunctionSchema& schema = op_ptr->schema();
    std::vector<NamedValue> kwargs;
    torch::jit::SourceRange loc;
    const bool reshape =
        (name == "view" || name == "reshape" || name == "_unsafe_view") && overload.empty();
    for (const json& a : field(n, "inputs", where)) {
      const std::string arg_name = field(a, "name", where).get<std::string>();
      const auto index = schema.argumentIndexWithName(arg_name);
      KILN_CHECK(index.has_value(), Unsupported, where, ": `", c10::toString(schema),
                 "` has no argument `", arg_name, "`");
      const std::string arg_where = where + " argument `" + arg_name + "`";
      Value* sizes = reshape && (arg_name == "size" || arg_name == "shape")
                         ? sizes_of_own_dims(n, field(a, "arg", where), arg_where)
                         : nullptr;
      kwargs.emplace_back(
          loc, arg_name,
          sizes ? sizes
                : argument(field(a, "arg", where), arg_where, schema.arguments()[*index].type()));
    }
    torch::jit::MatchedSchema matched;
    try {
      matched = torch::jit::matchSchema(schema, loc, *graph_, {}, kwargs);
    } catch (const std::exception& e) {
      KILN_THROW(Unsupported, where, ": its arguments do not fit `", c10::toString(schema), "` (",
                 Archive::first_line(e.what()), ")");
    }
    // In-place writes to the program's state (training-IR exports keep `buffer.add_(1)` as a
    // node, with no mutation in the signature): an engine keeps no state between calls.
    for (size_t i = 0; i < schema.arguments().size() && i < matched.inputs.size(); ++i) {
      const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
      auto written = state_.find(matched.inputs[i]);
      KILN_CHECK(!alias || !alias->isWrite() || written == state_.end(), Unsupported, where,
                 ": writes ", written == state_.end() ? "" : written->second,
                 " in place; kiln compiles inference programs that do not change their inputs, "
                 "parameters or buffers");
    }
    Node* node = graph_->insertNode(graph_->create(c10::Symbol::fromQualString("aten::" + name),
                                                   matched.inputs, matched.return_types.size()));
    for (size_t i = 0; i < matched.return_types.size(); ++i) {
      node->output(i)->setType(matched.return_types[i]);
    }
    KILN_CHECK(node->maybeSchema() != nullptr, Unsupported, where,
               ": no schema of this libtorch takes the node's argument types");
    bind_outputs(n, node, where);
  }

  // The expression a SymInt named `name` stands for ("" when the program does not say).
  std::string sym_expr(const std::string& name) const {
    return sym_ints_ && sym_ints_->contains(name) ? expr_str(sym_ints_->at(name)) : "";
  }

  // A reshape's size list whose run-time entries are dims of the reshaped tensor itself:
  // `view(x, [1, s0, -1, 64])` of an x of sizes [1, s0, 768] (s0 read off another tensor by
  // sym_size) reads `x.size(1)` there, so that the converter sees a dim kept in place and infers
  // the -1 while building (12) instead of leaving two dims to run time. nullptr where nothing is
  // matched (the argument is read as usual).
  Value* sizes_of_own_dims(const json& n, const json& arg, const std::string& where) {
    if (!arg.is_object() || !arg.contains("as_sym_ints") || !arg.at("as_sym_ints").is_array()) {
      return nullptr;
    }
    const json* self_meta = nullptr;
    std::string self_name;
    for (const json& a : field(n, "inputs", where)) {
      if (!a.is_object() || a.value("name", "") != "self" || !a.contains("arg")) continue;
      const json& s = a.at("arg");
      if (!s.is_object() || !s.contains("as_tensor") || !s.at("as_tensor").is_object()) continue;
      self_name = s.at("as_tensor").value("name", "");
      if (metas_->contains(self_name)) self_meta = &metas_->at(self_name);
    }
    if (!self_meta || !self_meta->contains("sizes") || !self_meta->at("sizes").is_array()) {
      return nullptr;
    }
    const json& dims = self_meta->at("sizes");
    const json& items = arg.at("as_sym_ints");
    std::vector<Value*> values;
    bool matched = false;
    for (size_t i = 0; i < items.size(); ++i) {
      const json& item = items[i];
      const std::string expr =
          item.is_object() && item.contains("as_name") && item.at("as_name").is_string()
              ? sym_expr(item.at("as_name").get<std::string>())
              : "";
      std::optional<size_t> own;
      for (size_t j = 0; j < dims.size() && !expr.empty(); ++j) {
        if (expr_str(dims[j]) != expr) continue;
        if (!own || j == i) own = j;  // the same position first
      }
      if (own) {
        Value* self = named(self_name, where);
        values.push_back(graph_->insert(c10::aten::size, {self, static_cast<int64_t>(*own)}));
        matched = true;
      } else {
        values.push_back(symbolic(item, where));
      }
    }
    return matched ? list(values, c10::IntType::get()) : nullptr;
  }

  // as_strided reads its input's storage, which an engine does not have: it is taken when both
  // the input and the result lie contiguously from offset 0 (dims of size 1 have any stride), so
  // that it reads the input's elements in order: then it is the input itself (same sizes) or a
  // reshape. Core ATen's adaptive_avg_pool2d to 1x1 restrides its [B, C, 1, 1] mean this way.
  void as_strided_node(const json& n, const std::string& where) {
    const json& outs = field(n, "outputs", where);
    KILN_CHECK(outs.size() == 1, CorruptInput, where, ": ", outs.size(), " outputs named for 1");
    auto [otag, ov] = union_member(outs[0], where);
    KILN_CHECK(otag == "as_tensor", CorruptInput, where, ": an output given as `", otag, "`");
    const std::string out_name = field(*ov, "name", where).get<std::string>();
    const json* self = nullptr;
    const json* size = nullptr;
    for (const json& a : field(n, "inputs", where)) {
      const std::string arg = field(a, "name", where).get<std::string>();
      if (arg == "self") self = &field(a, "arg", where);
      if (arg == "size") size = &field(a, "arg", where);
    }
    KILN_CHECK(self && size, CorruptInput, where, ": as_strided without `self` or `size`");
    auto [stag, sv] = union_member(*self, where);
    KILN_CHECK(stag == "as_tensor", CorruptInput, where, ": `self` given as `", stag, "`");
    const std::string in_name = field(*sv, "name", where).get<std::string>();
    const json& in = field(*metas_, in_name.c_str(), where + ": tensor_values");
    const json& out = field(*metas_, out_name.c_str(), where + ": tensor_values");
    const std::string why = contiguous_from_zero(in, where + ": input");
    KILN_CHECK(why.empty(), Unsupported, where, ": as_strided of a tensor that ", why,
               "; kiln takes as_strided only as a view of contiguous elements in order");
    const std::string out_why = contiguous_from_zero(out, where + ": result");
    KILN_CHECK(out_why.empty(), Unsupported, where, ": as_strided to a result that ", out_why,
               "; kiln takes as_strided only as a view of contiguous elements in order");
    const json& in_sizes = field(in, "sizes", where);
    const json& out_sizes = field(out, "sizes", where);
    auto non_unit = [](const json& sizes) {
      std::vector<json> kept;
      for (const json& s : sizes) {
        if (!(s.contains("as_int") && s.at("as_int") == 1)) kept.push_back(s);
      }
      return kept;
    };
    // Same elements: the same sizes but for dims of 1, or static sizes of one product.
    bool same = non_unit(in_sizes) == non_unit(out_sizes);
    if (!same) {
      int64_t in_count = 1, out_count = 1;
      bool known = true;
      for (const json& s : in_sizes) known &= s.contains("as_int");
      for (const json& s : out_sizes) known &= s.contains("as_int");
      KILN_CHECK(known, Unsupported, where,
                 ": as_strided to sizes that may not hold every element of its input (sizes "
                 "only known at run time); kiln takes as_strided only as a reshape");
      for (const json& s : in_sizes) {
        KILN_CHECK(!__builtin_mul_overflow(in_count, static_int(s, where), &in_count), CorruptInput,
                   where, ": the input's sizes overflow");
      }
      for (const json& s : out_sizes) {
        KILN_CHECK(!__builtin_mul_overflow(out_count, static_int(s, where), &out_count),
                   CorruptInput, where, ": the result's sizes overflow");
      }
      KILN_CHECK(in_count == out_count, Unsupported, where, ": as_strided to ", out_count,
                 " of its input's ", in_count,
                 " elements; kiln takes as_strided only as a reshape");
    }
    Value* x = named(in_name, where);
    if (in_sizes == out_sizes) return bind(out_name, x);
    Value* sizes = argument(*size, where + " argument `size`", c10::ListType::ofInts());
    Node* reshape = graph_->insertNode(
        graph_->create(c10::Symbol::fromQualString("aten::reshape"), {x, sizes}, 1));
    reshape->output()->setType(c10::TensorType::get());
    bind(out_name, reshape->output());
  }

  // "" when a tensor's meta says its elements lie in order from storage offset 0, else why not.
  static std::string contiguous_from_zero(const json& meta, const std::string& where) {
    const json& sizes = field(meta, "sizes", where);
    const json& strides = field(meta, "strides", where);
    KILN_CHECK(sizes.size() == strides.size(), CorruptInput, where, ": ", sizes.size(),
               " sizes but ", strides.size(), " strides");
    if (meta.contains("storage_offset") && meta.at("storage_offset") != json{{"as_int", 0}}) {
      return "starts at a storage offset other than 0";
    }
    int64_t expected = 1;
    bool symbolic = false;  // a dynamic size is in `expected`: strides outside it are unknown
    for (size_t i = sizes.size(); i-- > 0;) {
      const json& s = sizes[i];
      if (s.contains("as_int") && s.at("as_int") == 1) continue;
      if (symbolic) return "is laid out by sizes only known at run time";
      const json& st = strides[i];
      if (!st.contains("as_int") || st.at("as_int") != expected) {
        return "is not contiguous (dim " + std::to_string(i) + ")";
      }
      if (s.contains("as_int")) {
        KILN_CHECK(!__builtin_mul_overflow(expected, static_int(s, where), &expected), CorruptInput,
                   where, ": sizes overflow");
      } else {
        symbolic = true;
      }
    }
    return "";
  }

  // The export names each output; a Tensor[] return is one list, unpacked for its named items.
  void bind_outputs(const json& n, Node* node, const std::string& where) {
    const json& outs = field(n, "outputs", where);
    if (node->outputs().size() == 1 && outs.size() == 1) {
      auto [tag, v] = union_member(outs[0], where);
      if (tag == "as_tensors") {
        auto list = node->output()->type()->cast<c10::ListType>();
        KILN_CHECK(list && list->getElementType()->kind() == c10::TypeKind::TensorType,
                   CorruptInput, where, ": a list of tensors named for a result of type ",
                   node->output()->type()->repr_str());
        Node* unpack = graph_->insertNode(graph_->createListUnpack(node->output(), v->size()));
        for (size_t i = 0; i < v->size(); ++i) {
          bind(field((*v)[i], "name", where).get<std::string>(), unpack->output(i));
        }
        return;
      }
    }
    KILN_CHECK(outs.size() == node->outputs().size(), CorruptInput, where, ": ", outs.size(),
               " outputs named for ", node->outputs().size(), " results");
    for (size_t i = 0; i < outs.size(); ++i) bind_output(outs[i], node->output(i), where);
  }

  // Binds the name a node's output `out` gives to `v` (a tensor's with what the program says of
  // its sizes, a SymInt's); an unused output (as_none) names nothing.
  void bind_output(const json& out, Value* v, const std::string& where) {
    auto [tag, o] = union_member(out, where);
    if (tag == "as_tensor") {
      const std::string name = field(*o, "name", where).get<std::string>();
      bind(name, v);
      record_sizes(name, v->node(), v->offset(), where);
    } else if (tag == "as_sym_int" || tag == "as_sym_bool" || tag == "as_sym_float") {
      auto [stag, sv] = union_member(*o, where);
      if (stag == "as_name") bind(sv->get<std::string>(), v);
    } else if (tag != "as_none") {
      KILN_THROW(Unsupported, where, ": an output given as `", tag, "`");
    }
  }

  // What the program says of tensor `name`, made by output `i` of `node`: its sizes and dtype,
  // which shape analysis can take instead of running the graph (ir/export_sizes.h). Optional: a
  // description this reader cannot take (a dtype it does not know, a size of another form) is
  // left out, and shape analysis runs for what reads that value.
  void record_sizes(const std::string& name, Node* node, size_t i, const std::string& where) {
    if (!metas_->contains(name)) return;
    const json& meta = metas_->at(name);
    if (!meta.contains("sizes") || !meta.at("sizes").is_array() || !meta.contains("dtype") ||
        !meta.at("dtype").is_number_integer()) {
      return;
    }
    ir::ExportSizes sizes;
    try {
      sizes.dtype = scalar_type(meta.at("dtype").get<int64_t>(), where);
      for (const json& d : meta.at("sizes")) {
        auto [tag, v] = union_member(d, where);
        if (tag == "as_int" && v->is_number_integer()) {
          sizes.sizes.push_back(std::to_string(v->get<int64_t>()));
        } else if (const std::string expr = expr_str(d); !expr.empty()) {
          sizes.sizes.push_back(expr);
        } else {
          return;
        }
      }
    } catch (const Error&) {
      return;
    }
    ir::set_export_sizes(node, i, sizes);
  }

  void bind(const std::string& name, Value* v) {
    v->setDebugName(sanitized(name));
    values_[name] = v;
  }

  // Python's operator module on SymInts (shape arithmetic): the aten:: int ops TorchScript uses.
  void operator_node(const json& n, const std::string& op, const std::string& where) {
    static const std::map<std::string, std::string> ops = {{"add", "aten::add"},
                                                           {"sub", "aten::sub"},
                                                           {"mul", "aten::mul"},
                                                           {"floordiv", "aten::floordiv"},
                                                           {"truediv", "aten::div"},
                                                           {"mod", "aten::remainder"},
                                                           {"neg", "aten::neg"},
                                                           {"eq", "aten::eq"},
                                                           {"ne", "aten::ne"},
                                                           {"lt", "aten::lt"},
                                                           {"le", "aten::le"},
                                                           {"gt", "aten::gt"},
                                                           {"ge", "aten::ge"},
                                                           {"pow", "aten::pow"},
                                                           {"getitem", "aten::__getitem__"}};
    auto it = ops.find(op);
    KILN_CHECK(it != ops.end(), Unsupported, where, ": Python's operator.", op,
               " is not supported by the ATen frontend");
    std::vector<NamedValue> args;
    for (const json& a : field(n, "inputs", where)) {
      args.emplace_back(argument(field(a, "arg", where), where));
    }
    Value* out = nullptr;
    try {
      out = graph_->insert(c10::Symbol::fromQualString(it->second), args);
    } catch (const std::exception& e) {
      KILN_THROW(Unsupported, where, ": no `", it->second, "` takes its arguments (",
                 Archive::first_line(e.what()), ")");
    }
    bind_outputs(n, out->node(), where);
  }

  const json& program_;
  const json* metas_ = nullptr;     // graph.tensor_values: each tensor's sizes, strides and offset
  const json* sym_ints_ = nullptr;  // graph.sym_int_values: each SymInt's expression
  std::map<std::string, at::Tensor> weights_, constants_;
  std::string where_;
  std::shared_ptr<Graph> graph_;
  std::unordered_map<std::string, Value*> values_;
  std::unordered_map<const Value*, std::string> state_;  // inputs and weights, for messages
  static constexpr int kMaxWrapperDepth = 64;            // subgraphs inlined within subgraphs
  int depth_ = 0;
};

}  // namespace

namespace {

ExportedProgram load(const Archive& ar) {
  const std::string& name = ar.name();
  KILN_CHECK(ar.has("archive_format"), CorruptInput, name,
             ": a zip archive without `archive_format`: not a .pt2 file from torch.export.save");
  const std::string format = ar.text("archive_format");
  KILN_CHECK(format == "pt2", Unsupported, name, ": archive format `", format,
             "`; kiln reads `pt2` archives of torch.export.save");
  if (ar.has("archive_version")) {
    const std::string version = ar.text("archive_version");
    KILN_CHECK(version == "0", Unsupported, name, ": pt2 archive version ", version,
               "; kiln reads version 0 (torch 2.11)");
  }
  std::string model = "models/model.json";
  if (!ar.has(model)) {
    std::vector<std::string> models;
    for (const std::string& r : ar.records()) {
      if (r.compare(0, 7, "models/") == 0 && r.size() > 12 &&
          r.compare(r.size() - 5, 5, ".json") == 0) {
        models.push_back(r);
      }
    }
    KILN_CHECK(models.size() == 1, Unsupported, name, ": the archive holds ", models.size(),
               " programs (`models/*.json`); kiln compiles an archive of one");
    model = models[0];
  }
  const json program = ar.parse(model);
  const std::string where = name + ":" + model;
  const json& sv = field(program, "schema_version", where);
  const int64_t major = field(sv, "major", where + ".schema_version").get<int64_t>();
  const int64_t minor = sv.value("minor", int64_t{0});
  KILN_CHECK(major == kSchemaMajor, Unsupported, name, ": export schema version ", major, ".",
             minor, " (torch ", program.value("torch_version", std::string("?")),
             "); kiln reads schema ", kSchemaMajor, ".x, which torch 2.11 writes");
  ExportedProgram out;
  try {
    auto weights = read_payload(ar, "data/weights/model_weights_config.json", "data/weights/");
    auto constants =
        read_payload(ar, "data/constants/model_constants_config.json", "data/constants/");
    out = GraphBuilder(program, std::move(weights), std::move(constants), where).build();
  } catch (const json::exception& e) {
    KILN_THROW(CorruptInput, where, ": unexpected JSON (", e.what(), ")");
  }
  out.torch_version = program.value("torch_version", std::string());
  out.schema_version = std::to_string(major) + "." + std::to_string(minor);
  return out;
}

}  // namespace

ExportedProgram load_exported_program_bytes(const std::string& bytes, const std::string& name) {
  return load(Archive(name, &bytes));
}

ExportedProgram load_exported_program(const std::string& path) {
  KILN_CHECK(std::ifstream(path, std::ios::binary).good(), InvalidArgument, path,
             ": cannot be opened");
  return load(Archive(path, nullptr));
}

bool is_exported_program(const std::string& path) {
  if (!std::ifstream(path, std::ios::binary).good()) return false;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    return reader.hasRecord("archive_format");
  } catch (const c10::Error&) {
    return false;
  }
}

}  // namespace kiln::frontend
