// The precision pass: replays a network layer by layer into a new one, choosing per floating
// layer between f32 and the low precision, and casting tensors where producer and consumer differ.
#include "engine/passes/precision.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>

#include "engine/cuda/backend.h"
#include "engine/layer_kinds.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

// Layers whose results commonly leave f16's range (65504) although their inputs fit: sums and
// products over many elements. bf16 has f32's range, so this only matters for f16.
std::string range_reason(const LayerParams& params, DataType low) {
  if (low != DataType::kF16) return "";
  if (const auto* r = std::get_if<ReduceParams>(&params)) {
    if (r->op == ReduceOp::kSum || r->op == ReduceOp::kProd) return "its result may overflow f16";
  }
  if (const auto* s = std::get_if<ScanParams>(&params)) {
    if (s->op == ScanOp::kSum || s->op == ScanOp::kProd) return "its result may overflow f16";
  }
  return "";
}

// The parameters with results that are f32 by construction (casts to f32, f32 fills) retargeted
// to `low`, so that no cast back to low is needed after them.
LayerParams retarget(LayerParams params, DataType low) {
  if (auto* c = std::get_if<CastParams>(&params); c && c->to == DataType::kF32) c->to = low;
  if (auto* f = std::get_if<FillParams>(&params); f && f->dtype == DataType::kF32) f->dtype = low;
  if (auto* f = std::get_if<FusedElementwiseParams>(&params)) {
    for (size_t k = 0; k + 3 < f->program.size(); k += 4) {
      if (f->program[k] == 3 && f->program[k + 1] == static_cast<int64_t>(DataType::kF32)) {
        f->program[k + 1] = static_cast<int64_t>(low);
      }
    }
  }
  return params;
}

// "layer `x` (softmax): why" -> "why": the report names the layer already.
std::string strip_layer_prefix(const std::string& message) {
  if (message.rfind("layer `", 0) != 0) return message;
  const size_t end = message.find("): ");
  return end == std::string::npos ? message : message.substr(end + 3);
}

class PrecisionRewriter {
 public:
  PrecisionRewriter(const Network& old, DataType low, const PrecisionSupportFn& supports,
                    PrecisionReport& report)
      : old_(old), low_(low), supports_(supports), report_(report), map_(old.num_tensors(), -1) {}

  Network run() {
    for (TensorId in : old_.inputs()) {
      const TensorDesc& t = old_.tensor(in);
      map_[static_cast<size_t>(in)] = net_.add_input(t.name, t.dtype, t.shape, old_.profile(in));
    }
    for (const Layer& l : old_.layers()) {
      if (const auto* c = std::get_if<ConstantParams>(&l.params)) {
        add_constant(l, *c);
      } else {
        add_layer(l);
      }
    }
    for (TensorId out : old_.outputs()) {
      const TensorDesc& t = old_.tensor(out);
      TensorId id = get(out, t.dtype);
      if (id != mapped(out)) {  // computed low: the cast back to f32 takes the output's name
        net_.mutable_tensor(mapped(out)).name = t.name + ":" + dtype_name(low_);
      }
      net_.mark_output(id, t.name);
    }
    return std::move(net_);
  }

 private:
  TensorId mapped(TensorId old_id) const {
    const TensorId id = map_.at(static_cast<size_t>(old_id));
    KILN_CHECK(id >= 0, InternalError, "precision: tensor `", old_.tensor(old_id).name,
               "` is used before the layer producing it");
    return id;
  }

  // The new network's tensor holding old tensor `old_id` as `dtype`: cast once, then reused.
  TensorId get(TensorId old_id, DataType dtype) {
    const TensorId id = mapped(old_id);
    if (net_.tensor(id).dtype == dtype) return id;
    auto it = casts_.find({id, dtype});
    if (it != casts_.end()) return it->second;
    const std::string name = old_.tensor(old_id).name + ":to_" + dtype_name(dtype);
    const TensorId cast = net_.add(name, CastParams{dtype}, {id});
    ++report_.casts_inserted;
    return casts_[{id, dtype}] = cast;
  }

  void add_constant(const Layer& l, const ConstantParams& c) {
    const TensorDesc& t = old_.tensor(l.outputs.at(0));
    TensorId id;
    if (net_.weights().count(c.weight) == 0) {
      id = net_.add_constant(c.weight, old_.weight(c.weight));
      net_.mutable_layers().back().name = l.name;
    } else {  // a second constant layer of one weight
      id = net_.add_tensor(t);
      net_.append_layer_raw(Layer{l.name, c, {}, {id}});
    }
    net_.mutable_tensor(id).name = t.name;
    map_[static_cast<size_t>(l.outputs[0])] = id;
  }

  // Replays `l` with `params`, its inputs cast to `dtypes`.
  void replay(const Layer& l, LayerParams params, const std::vector<DataType>& dtypes) {
    std::vector<TensorId> inputs;
    for (size_t i = 0; i < l.inputs.size(); ++i) inputs.push_back(get(l.inputs[i], dtypes[i]));
    const std::vector<TensorId> outs = net_.add_layer(l.name, std::move(params), inputs);
    KILN_CHECK(outs.size() == l.outputs.size(), InternalError, "precision: layer `", l.name,
               "` has ", outs.size(), " outputs after replay, ", l.outputs.size(), " before");
    for (size_t i = 0; i < outs.size(); ++i) {
      net_.mutable_tensor(outs[i]).name = old_.tensor(l.outputs[i]).name;
      map_[static_cast<size_t>(l.outputs[i])] = outs[i];
    }
  }

  // Why `l` cannot run low (empty when it can); fills the dtypes it would run with.
  std::string why_not_low(const Layer& l, const LayerParams& params, std::vector<DataType>& in) {
    std::vector<TensorDesc> descs;
    for (TensorId id : l.inputs) {
      TensorDesc d = old_.tensor(id);
      if (d.dtype == DataType::kF32) d.dtype = low_;
      in.push_back(d.dtype);
      descs.push_back(std::move(d));
    }
    if (std::string why = range_reason(params, low_); !why.empty()) return why;
    std::vector<const TensorDesc*> ptrs;
    for (const TensorDesc& d : descs) ptrs.push_back(&d);
    std::vector<DataType> out;
    try {
      for (const TensorDesc& d : infer_layer_outputs(Layer{l.name, params, {}, {}}, ptrs)) {
        out.push_back(d.dtype);
      }
    } catch (const Error& e) {
      return strip_layer_prefix(e.message());
    }
    for (size_t i = 0; i < out.size() && i < l.outputs.size(); ++i) {
      const DataType before = old_.tensor(l.outputs[i]).dtype;
      const DataType expected = before == DataType::kF32 ? low_ : before;
      if (out[i] != expected) {
        return std::string("output ") + std::to_string(i) + " would be " + dtype_name(out[i]);
      }
    }
    return strip_layer_prefix(supports_(Layer{l.name, params, {}, {}}, in, out));
  }

  // Whether the source network computes `l` in f32 on purpose: a cast up from f16/bf16 (the
  // model's own, as in RMS norms written with `.float()`), and what reads its results up to a
  // cast back down. Marks l's f32 outputs so.
  bool computed_in_f32_on_purpose(const Layer& l) {
    bool pinned = false;
    if (const auto* c = std::get_if<CastParams>(&l.params)) {
      const DataType from = old_.tensor(l.inputs.at(0)).dtype;
      if (c->to != DataType::kF32) return false;
      pinned = from == DataType::kF16 || from == DataType::kBF16;
    }
    for (TensorId id : l.inputs) pinned = pinned || pinned_[static_cast<size_t>(id)];
    if (!pinned) return false;
    for (TensorId id : l.outputs) {
      if (old_.tensor(id).dtype == DataType::kF32) pinned_[static_cast<size_t>(id)] = true;
    }
    return true;
  }

  void add_layer(const Layer& l) {
    std::vector<DataType> before;
    bool floating = false;
    for (TensorId id : l.inputs) {
      before.push_back(old_.tensor(id).dtype);
      floating = floating || before.back() == DataType::kF32;
    }
    for (TensorId id : l.outputs) floating = floating || old_.tensor(id).dtype == DataType::kF32;
    if (!layer_kind_traits(l.params).reads_values) {
      // Reads only the shapes: any precision will do, so no cast is made for it.
      std::vector<DataType> current;
      for (TensorId id : l.inputs) current.push_back(net_.tensor(mapped(id)).dtype);
      replay(l, l.params, current);
      return;
    }
    if (!floating) {
      replay(l, l.params, before);
      return;
    }
    if (computed_in_f32_on_purpose(l)) {
      replay(l, l.params, before);
      report_.layers.push_back({l.name, DataType::kF32,
                                "the model computes it in f32 (after its own cast up from a "
                                "16-bit float)"});
      return;
    }
    LayerParams low_params = retarget(l.params, low_);
    std::vector<DataType> low_inputs;
    const std::string why = why_not_low(l, low_params, low_inputs);
    if (why.empty()) {
      replay(l, std::move(low_params), low_inputs);
      report_.layers.push_back({l.name, low_, ""});
    } else {
      replay(l, l.params, before);
      report_.layers.push_back({l.name, DataType::kF32, why});
    }
  }

  const Network& old_;
  const DataType low_;
  const PrecisionSupportFn& supports_;
  PrecisionReport& report_;
  Network net_;
  std::vector<TensorId> map_;  // old tensor -> new tensor
  std::vector<bool> pinned_ = std::vector<bool>(old_.num_tensors(), false);  // f32 on purpose
  std::map<std::pair<TensorId, DataType>, TensorId> casts_;  // (new tensor, dtype) -> its cast
};

}  // namespace

PrecisionSupportFn cuda_precision_support() {
  return [](const Layer& layer, const std::vector<DataType>& inputs,
            const std::vector<DataType>& outputs) -> std::string {
    // The backend checks whole networks; a network of this one layer asks about it alone.
    Network one;
    Layer l{layer.name, layer.params, {}, {}};
    for (DataType t : inputs) l.inputs.push_back(one.add_tensor({"", t, {}, std::nullopt}));
    for (DataType t : outputs) l.outputs.push_back(one.add_tensor({"", t, {}, std::nullopt}));
    one.append_layer_raw(std::move(l));
    try {
      cuda::check_supported(one);
    } catch (const Unsupported& e) {
      return e.message();
    }
    return "";
  };
}

int PrecisionReport::count(DataType precision) const {
  return static_cast<int>(std::count_if(layers.begin(), layers.end(), [&](const LayerPrecision& l) {
    return l.precision == precision;
  }));
}

std::string PrecisionReport::summary() const {
  std::ostringstream os;
  os << "precision: " << count(low) << " layers " << dtype_name(low) << ", "
     << count(DataType::kF32) << " f32";
  // The first few layers kept f32, with why; the rest are in `layers`.
  constexpr int kListed = 6;
  int listed = 0;
  for (const LayerPrecision& l : layers) {
    if (l.precision != DataType::kF32) continue;
    os << (listed == 0 ? " (" : ", ");
    if (listed++ == kListed) {
      os << "...";
      break;
    }
    os << l.layer << ": " << l.reason;
  }
  if (listed) os << ")";
  os << ", " << casts_inserted << " casts inserted";
  return os.str();
}

DataType low_precision(const std::vector<DataType>& enabled) {
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    if (std::find(enabled.begin(), enabled.end(), t) != enabled.end()) return t;
  }
  return DataType::kF32;
}

bool choose_precisions(Network& net, const std::vector<DataType>& enabled,
                       const PrecisionSupportFn& supports, PrecisionReport* report) {
  PrecisionReport r;
  r.low = low_precision(enabled);
  if (r.low == DataType::kF32) {
    if (report) *report = r;
    return false;
  }
  Network rewritten = PrecisionRewriter(net, r.low, supports, r).run();
  const bool changed = r.count(r.low) > 0;
  if (changed) net = std::move(rewritten);
  if (!changed) r.casts_inserted = 0;
  if (report) *report = r;
  return changed;
}

}  // namespace kiln::engine
