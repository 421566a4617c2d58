// The network verifier and the text dump (verify.h).
#include "engine/verify.h"

#include <cstring>
#include <sstream>

#include "engine/layers/elementwise_rules.h"
#include "engine/serialize_fields.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

[[noreturn]] void fail(VerifyFailure failure, const std::string& message) {
  if (failure == VerifyFailure::kCorrupt) throw CorruptInput(message);
  throw InternalError(message);
}

// A gathered input's indices (FusedElementwiseParams::gathers) are a constant's, in range, in the
// aligned runs the layer says: kernels read `run` elements at a time from where they say. (A
// weightless plan's have no values yet; the CUDA kernels read zeros outside the axis.)
template <class Check>
void check_gather_indices(const Check& check, const Layer& l, const FusedGather& g,
                          const TensorDesc& source, const Weights* w) {
  check(w != nullptr, "layer `", l.name, "` gathers input ", g.reg,
        " by indices that are not a constant");
  if (!w || !w->data) return;
  const int64_t d = source.shape[static_cast<size_t>(g.axis)], n = volume(w->shape);
  std::vector<int32_t> ix(static_cast<size_t>(n));
  std::memcpy(ix.data(), w->data->data(), ix.size() * sizeof(int32_t));
  for (int64_t k = 0; k < n; ++k) {
    const int32_t v = ix[static_cast<size_t>(k)], first = ix[static_cast<size_t>(k - k % g.run)];
    check(v >= 0 && v < d, "layer `", l.name, "`: index ", v, " of input ", g.reg,
          " is outside its axis of size ", d);
    check(first % g.run == 0 && v == first + k % g.run, "layer `", l.name,
          "`: the indices of input ", g.reg, " are not in aligned runs of ", g.run);
  }
}

}  // namespace

void verify_network(const Network& net, const std::string& where, VerifyFailure failure) {
  const auto check = [&](bool ok, const auto&... parts) {
    if (ok) return;
    std::ostringstream os;
    os << where << ": ";
    (os << ... << parts);
    fail(failure, os.str());
  };
  const size_t n = net.num_tensors();
  std::vector<bool> defined(n, false);
  const auto known = [&](TensorId id) { return id >= 0 && static_cast<size_t>(id) < n; };
  for (TensorId id : net.inputs()) {
    check(known(id), "input tensor id ", id, " does not exist");
    defined[static_cast<size_t>(id)] = true;
  }
  std::vector<const Weights*> constant(n, nullptr);  // the weight a constant layer wrote
  for (const Layer& l : net.layers()) {
    for (TensorId id : l.inputs) {
      check(known(id), "layer `", l.name, "` reads tensor id ", id, ", which does not exist");
      check(defined[static_cast<size_t>(id)], "layer `", l.name, "` reads tensor `",
            net.tensor(id).name, "` before it is written");
    }
    for (TensorId id : l.outputs) {
      check(known(id), "layer `", l.name, "` writes tensor id ", id, ", which does not exist");
    }
    if (const auto* c = std::get_if<ConstantParams>(&l.params)) {
      check(l.inputs.empty() && l.outputs.size() == 1, "constant `", l.name,
            "` has inputs or several outputs");
      check(net.weights().count(c->weight) > 0, "constant `", l.name,
            "` refers to missing weight `", c->weight, "`");
      const Weights& wt = net.weight(c->weight);
      const TensorDesc& out = net.tensor(l.outputs[0]);
      check(out.dtype == wt.dtype && out.shape == wt.shape, "constant `", l.name,
            "` does not match its weight `", c->weight, "`");
      if (known(l.outputs[0])) constant[static_cast<size_t>(l.outputs[0])] = &wt;
    } else {
      std::vector<const TensorDesc*> in;
      for (TensorId id : l.inputs) in.push_back(&net.tensor(id));
      std::vector<TensorDesc> outs;
      try {
        outs = infer_layer_outputs(l, in);
      } catch (const Error& e) {
        fail(failure, where + ": invalid layer: " + e.message());
      }
      check(outs.size() == l.outputs.size(), "layer `", l.name, "` has ", l.outputs.size(),
            " outputs, its kind gives ", outs.size());
      for (size_t k = 0; k < outs.size(); ++k) {
        const TensorDesc& stored = net.tensor(l.outputs[k]);
        check(stored.dtype == outs[k].dtype && stored.shape == outs[k].shape, "layer `", l.name,
              "` output ", k, " is stored as ", dtype_name(stored.dtype),
              shape_to_string(stored.shape), " but computes ", dtype_name(outs[k].dtype),
              shape_to_string(outs[k].shape));
      }
      if (const auto* f = std::get_if<FusedElementwiseParams>(&l.params)) {
        std::vector<size_t> ranks;
        for (const TensorDesc* t : in) ranks.push_back(t->shape.size());
        for (const FusedGather& g : decode_gathers(l.name, *f, ranks)) {
          check_gather_indices(check, l, g, net.tensor(l.inputs[static_cast<size_t>(g.reg)]),
                               constant[static_cast<size_t>(l.inputs[g.index_input])]);
        }
      }
    }
    for (TensorId id : l.outputs) {
      check(!defined[static_cast<size_t>(id)], "tensor `", net.tensor(id).name,
            "` is written twice (again by layer `", l.name, "`)");
      defined[static_cast<size_t>(id)] = true;
    }
  }
  check(!net.outputs().empty(), "the network has no outputs");
  for (TensorId id : net.outputs()) {
    check(known(id), "output tensor id ", id, " does not exist");
    check(defined[static_cast<size_t>(id)], "output `", net.tensor(id).name, "` is never written");
  }
}

std::string network_to_text(const Network& net) {
  std::ostringstream os;
  const auto tensor = [&](TensorId id) {
    const TensorDesc& t = net.tensor(id);
    return "%" + t.name + ":" + dtype_name(t.dtype) + shape_to_string(t.shape);
  };
  os << "inputs:";
  for (TensorId id : net.inputs()) os << " " << tensor(id);
  os << "\n";
  for (const Layer& l : net.layers()) {
    os << "  " << l.name << " = " << layer_kind_name(l.params) << "(";
    for (size_t i = 0; i < l.inputs.size(); ++i) os << (i ? ", " : "") << tensor(l.inputs[i]);
    os << ") ->";
    for (TensorId id : l.outputs) os << " " << tensor(id);
    if (!std::holds_alternative<ConstantParams>(l.params)) os << " " << params_to_json(l.params);
    os << "\n";
  }
  os << "outputs:";
  for (TensorId id : net.outputs()) os << " " << tensor(id);
  os << "\n";
  return os.str();
}

}  // namespace kiln::engine
