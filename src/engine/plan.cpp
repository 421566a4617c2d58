// Plan serialization and validating deserialization.
#include "engine/plan.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "engine/bytes.h"
#include "engine/serialize_fields.h"
#include "engine/verify.h"
#include "util/errors.h"
#include "util/hash.h"

namespace kiln::engine {
namespace {

constexpr size_t kWeightAlignment = 64;
constexpr uint64_t kMaxRank = 16;
// What a kernel choice may hold (the kernels' own keys and bytes are far smaller).
constexpr uint64_t kMaxChoiceKey = 256;
constexpr uint64_t kMaxChoiceBytes = 4096;
// As volume() allows: no tensor of more than 2^48 elements, so byte sizes cannot overflow.
constexpr int64_t kMaxVolume = int64_t{1} << 48;

void put_shape(ByteWriter& w, const Shape& s) {
  w.put<uint64_t>(s.size());
  for (int64_t d : s) w.put(d);
}

Shape get_shape(ByteReader& r, const char* what) {
  const uint64_t rank = r.get<uint64_t>(what);
  KILN_CHECK(rank <= kMaxRank, CorruptInput, "plan: ", what, " has rank ", rank, " (max ", kMaxRank,
             ")");
  Shape s(static_cast<size_t>(rank));
  int64_t elements = 1;  // of the static dims
  for (auto& d : s) {
    d = r.get<int64_t>(what);
    KILN_CHECK(d >= kDynamic, CorruptInput, "plan: ", what, " has dim ", d);
    if (d == kDynamic) continue;
    KILN_CHECK(!__builtin_mul_overflow(elements, d, &elements) && elements <= kMaxVolume,
               CorruptInput, "plan: ", what, " ", shape_to_string(s),
               " has dims whose product is past 2^48 (the most elements a tensor may have)");
  }
  return s;
}

DataType get_dtype(ByteReader& r, const char* what) {
  const uint8_t code = r.get<uint8_t>(what);
  KILN_CHECK(code < kNumDataTypes, CorruptInput, "plan: ", what, " has unknown data type code ",
             int(code));
  return static_cast<DataType>(code);
}

TensorId get_tensor_id(ByteReader& r, size_t num_tensors, const char* what) {
  const int32_t id = r.get<int32_t>(what);
  KILN_CHECK(id >= 0 && static_cast<size_t>(id) < num_tensors, CorruptInput, "plan: ", what,
             " refers to tensor ", id, " of ", num_tensors);
  return id;
}

// The tensors, inputs, outputs and layers of `net`, as the plan stores them; with `slot_of`,
// without names (network_key): a constant layer's weight is written as its slot.
void put_structure(ByteWriter& w, const Network& net,
                   const std::map<std::string, size_t>* slot_of) {
  w.put<uint64_t>(net.num_tensors());
  for (size_t i = 0; i < net.num_tensors(); ++i) {
    const TensorDesc& t = net.tensor(static_cast<TensorId>(i));
    if (!slot_of) w.put_string(t.name);
    w.put<uint8_t>(static_cast<uint8_t>(t.dtype));
    put_shape(w, t.shape);
    w.put<uint8_t>(t.values ? 1 : 0);
    if (t.values) {
      w.put<uint64_t>(t.values->size());
      for (int64_t v : *t.values) w.put(v);
    }
  }
  w.put<uint64_t>(net.inputs().size());
  for (TensorId id : net.inputs()) {
    w.put<int32_t>(id);
    const Profile& p = net.profile(id);
    put_shape(w, p.min);
    put_shape(w, p.opt);
    put_shape(w, p.max);
  }
  w.put<uint64_t>(net.outputs().size());
  for (TensorId id : net.outputs()) w.put<int32_t>(id);

  w.put<uint64_t>(net.layers().size());
  for (const Layer& l : net.layers()) {
    if (!slot_of) w.put_string(l.name);
    w.put<uint64_t>(l.params.index());
    const auto* c = std::get_if<ConstantParams>(&l.params);
    const auto* fused = std::get_if<FusedElementwiseParams>(&l.params);
    if (slot_of && c) {
      w.put<uint64_t>(slot_of->at(c->weight));
    } else if (slot_of && fused) {
      // The names of the layers it replaced are for inspection, not structure.
      FusedElementwiseParams unnamed = *fused;
      unnamed.fused_layers.clear();
      write_params(w, LayerParams{unnamed});
    } else {
      write_params(w, l.params);
    }
    w.put<uint64_t>(l.inputs.size());
    for (TensorId id : l.inputs) w.put<int32_t>(id);
    w.put<uint64_t>(l.outputs.size());
    for (TensorId id : l.outputs) w.put<int32_t>(id);
  }
}

}  // namespace

std::vector<uint8_t> serialize_plan(const Plan& plan, bool include_weights) {
  const Network& net = plan.network;
  ByteWriter w;
  // The weights are most of a plan: one allocation for them, not a doubling per growth.
  size_t weight_bytes = 0;
  for (const auto& [name, weights] : net.weights()) {
    if (include_weights && weights.data) weight_bytes += weights.data->size() + kWeightAlignment;
  }
  w.reserve(weight_bytes + (size_t{1} << 20));
  w.put_bytes(kPlanMagic, sizeof(kPlanMagic));
  w.put<uint32_t>(kPlanFormatVersion);
  w.put_string(plan.target.device);
  w.put<int32_t>(plan.target.compute_capability);
  w.put<uint64_t>(plan.target.switches.size());
  for (const std::string& sw : plan.target.switches) w.put_string(sw);
  w.put<uint64_t>(plan.target.kernels.size());
  for (const GeneratedKernel& k : plan.target.kernels) {
    w.put_string(k.key);
    w.put_string(k.source);
    w.put<uint64_t>(k.image.size());
    w.put_bytes(k.image.data(), k.image.size());
  }
  w.put_string(plan.target.choice_environment);
  w.put<uint64_t>(plan.target.choices.size());
  for (const KernelChoice& c : plan.target.choices) {
    w.put<uint64_t>(c.layer);
    w.put<uint64_t>(c.key.size());
    for (int64_t v : c.key) w.put(v);
    w.put<uint64_t>(c.data.size());
    w.put_bytes(c.data.data(), c.data.size());
  }
  w.put_string(plan.source.key);
  w.put<uint8_t>(plan.source.refittable ? 1 : 0);
  w.put<uint64_t>(plan.source.weights.size());
  for (const SourceWeight& sw : plan.source.weights) {
    w.put_string(sw.name);
    w.put<uint8_t>(static_cast<uint8_t>(sw.dtype));
    put_shape(w, sw.shape);
  }
  w.put_string(plan.source.built_key);
  w.put<uint64_t>(plan.source.slots.size());
  for (const std::string& slot : plan.source.slots) w.put_string(slot);

  put_structure(w, net, nullptr);

  w.put<uint64_t>(net.weights().size());
  for (const auto& [name, weights] : net.weights()) {
    w.put_string(name);
    w.put<uint8_t>(static_cast<uint8_t>(weights.dtype));
    put_shape(w, weights.shape);
    const bool with_data = include_weights && weights.data != nullptr;
    w.put<uint8_t>(with_data ? 1 : 0);
    if (with_data) {
      w.put<uint64_t>(weights.data->size());
      w.align(kWeightAlignment);
      w.put_bytes(weights.data->data(), weights.data->size());
    }
  }
  w.put<uint64_t>(hash_bytes(w.bytes().data(), w.size()));
  return std::move(w.bytes());
}

Plan deserialize_plan(const uint8_t* data, size_t size, std::shared_ptr<const void> keepalive,
                      bool verify_checksum) {
  KILN_CHECK(size >= sizeof(kPlanMagic) + 4 + 8, CorruptInput, "plan: ", size,
             " bytes is too short to be a plan");
  KILN_CHECK(std::equal(kPlanMagic, kPlanMagic + sizeof(kPlanMagic), data), CorruptInput,
             "plan: bad magic (not a kiln plan)");
  ByteReader r(data, size - 8);
  r.get_bytes(sizeof(kPlanMagic), "magic");
  const uint32_t version = r.get<uint32_t>("format version");
  KILN_CHECK(version <= kPlanFormatVersion, CorruptInput, "plan: format version ", version,
             " is newer than this kiln reads (", kPlanFormatVersion, "); rebuild the plan");
  KILN_CHECK(version >= 1, CorruptInput, "plan: format version ", version, " is invalid");
  KILN_CHECK(version == kPlanFormatVersion, CorruptInput, "plan: format version ", version,
             " is older than this kiln reads (", kPlanFormatVersion, "); rebuild the plan");
  uint64_t stored_checksum;
  std::memcpy(&stored_checksum, data + size - 8, 8);
  KILN_CHECK(!verify_checksum || hash_bytes(data, size - 8) == stored_checksum, CorruptInput,
             "plan: checksum mismatch (the file is corrupt or truncated)");

  Plan plan;
  plan.target.device = r.get_string("target device");
  plan.target.compute_capability = r.get<int32_t>("target compute capability");
  KILN_CHECK(plan.target.device == "cpu" || plan.target.device == "cuda", CorruptInput,
             "plan: unknown target device `", plan.target.device, "`");
  const uint64_t num_switches = r.get_count("switch", 8);
  for (uint64_t i = 0; i < num_switches; ++i) {
    plan.target.switches.push_back(r.get_string("target switch"));
  }
  const uint64_t num_kernels = r.get_count("generated kernel", 8 + 8 + 8);
  KILN_CHECK(num_kernels == 0 || plan.target.device == "cuda", CorruptInput, "plan: ", num_kernels,
             " generated kernels in a plan for ", plan.target.device);
  std::set<std::string> kernel_keys;
  for (uint64_t i = 0; i < num_kernels; ++i) {
    GeneratedKernel k;
    k.key = r.get_string("generated kernel key");
    k.source = r.get_string("generated kernel source");
    const uint64_t bytes = r.get_count("generated kernel image", 1);
    KILN_CHECK(bytes > 0, CorruptInput, "plan: generated kernel `", k.key, "` has no image");
    const uint8_t* p = r.get_bytes(static_cast<size_t>(bytes), "generated kernel image");
    k.image.assign(p, p + bytes);
    KILN_CHECK(kernel_keys.insert(k.key).second, CorruptInput, "plan: generated kernel `", k.key,
               "` appears twice");
    plan.target.kernels.push_back(std::move(k));
  }
  plan.target.choice_environment = r.get_string("choice environment");
  const uint64_t num_choices = r.get_count("kernel choice", 8 + 8 + 8);
  KILN_CHECK(num_choices == 0 || plan.target.device == "cuda", CorruptInput, "plan: ", num_choices,
             " kernel choices in a plan for ", plan.target.device);
  std::set<std::pair<uint64_t, std::vector<int64_t>>> choice_keys;
  for (uint64_t i = 0; i < num_choices; ++i) {
    KernelChoice c;
    c.layer = r.get<uint64_t>("kernel choice layer");
    const uint64_t key_size = r.get_count("kernel choice key", 8);
    KILN_CHECK(key_size <= kMaxChoiceKey, CorruptInput, "plan: a kernel choice key of ", key_size,
               " values (max ", kMaxChoiceKey, ")");
    for (uint64_t k = 0; k < key_size; ++k) c.key.push_back(r.get<int64_t>("kernel choice key"));
    const uint64_t bytes = r.get_count("kernel choice data", 1);
    KILN_CHECK(bytes <= kMaxChoiceBytes, CorruptInput, "plan: a kernel choice of ", bytes,
               " bytes (max ", kMaxChoiceBytes, ")");
    const uint8_t* p = r.get_bytes(static_cast<size_t>(bytes), "kernel choice data");
    c.data.assign(p, p + bytes);
    KILN_CHECK(choice_keys.emplace(c.layer, c.key).second, CorruptInput,
               "plan: two kernel choices for one operation of layer ", c.layer);
    plan.target.choices.push_back(std::move(c));
  }
  plan.source.key = r.get_string("source key");
  const uint8_t refittable = r.get<uint8_t>("refittable flag");
  KILN_CHECK(refittable <= 1, CorruptInput, "plan: refittable flag ", int(refittable));
  plan.source.refittable = refittable == 1;
  const uint64_t num_source_weights = r.get_count("source weight", 8 + 1 + 8);
  for (uint64_t i = 0; i < num_source_weights; ++i) {
    SourceWeight sw;
    sw.name = r.get_string("source weight name");
    sw.dtype = get_dtype(r, "source weight dtype");
    sw.shape = get_shape(r, "source weight shape");
    plan.source.weights.push_back(std::move(sw));
  }
  plan.source.built_key = r.get_string("built key");
  const uint64_t num_slots = r.get_count("refit slot", 8);
  for (uint64_t i = 0; i < num_slots; ++i) plan.source.slots.push_back(r.get_string("refit slot"));

  Network& net = plan.network;
  const uint64_t num_tensors = r.get_count("tensor", 8 + 1 + 8 + 1);
  for (uint64_t i = 0; i < num_tensors; ++i) {
    TensorDesc t;
    t.name = r.get_string("tensor name");
    t.dtype = get_dtype(r, "tensor dtype");
    t.shape = get_shape(r, "tensor shape");
    const uint8_t has_values = r.get<uint8_t>("tensor values flag");
    KILN_CHECK(has_values <= 1, CorruptInput, "plan: tensor `", t.name, "` values flag ",
               int(has_values));
    if (has_values) {
      const uint64_t n = r.get_count("tensor values", 8);
      std::vector<int64_t> values(static_cast<size_t>(n));
      for (auto& v : values) v = r.get<int64_t>("tensor value");
      t.values = std::move(values);
    }
    net.add_tensor(std::move(t));
  }
  const uint64_t num_inputs = r.get_count("input", 4);
  for (uint64_t i = 0; i < num_inputs; ++i) {
    const TensorId id = get_tensor_id(r, num_tensors, "input");
    Profile p{get_shape(r, "profile min"), get_shape(r, "profile opt"),
              get_shape(r, "profile max")};
    const Shape& shape = net.tensor(id).shape;
    for (const Shape* s : {&p.min, &p.opt, &p.max}) {
      KILN_CHECK(s->size() == shape.size() && is_static(*s), CorruptInput, "plan: input `",
                 net.tensor(id).name, "` has a profile that does not fit its shape");
    }
    net.add_input_raw(id, std::move(p));
  }
  const uint64_t num_outputs = r.get_count("output", 4);
  KILN_CHECK(num_outputs > 0, CorruptInput, "plan: no outputs");
  for (uint64_t i = 0; i < num_outputs; ++i) {
    net.mutable_outputs().push_back(get_tensor_id(r, num_tensors, "output"));
  }
  const uint64_t num_layers = r.get_count("layer", 8 + 8 + 8 + 8);
  for (uint64_t i = 0; i < num_layers; ++i) {
    Layer l;
    l.name = r.get_string("layer name");
    l.params = read_params(r, r.get<uint64_t>("layer kind"));
    const uint64_t n_in = r.get_count("layer inputs", 4);
    for (uint64_t k = 0; k < n_in; ++k)
      l.inputs.push_back(get_tensor_id(r, num_tensors, "layer input"));
    const uint64_t n_out = r.get_count("layer outputs", 4);
    for (uint64_t k = 0; k < n_out; ++k)
      l.outputs.push_back(get_tensor_id(r, num_tensors, "layer output"));
    net.append_layer_raw(std::move(l));
  }
  const uint64_t num_weights = r.get_count("weights", 8 + 1 + 8 + 1);
  for (uint64_t i = 0; i < num_weights; ++i) {
    const std::string name = r.get_string("weight name");
    Weights wt;
    wt.dtype = get_dtype(r, "weight dtype");
    wt.shape = get_shape(r, "weight shape");
    KILN_CHECK(is_static(wt.shape), CorruptInput, "plan: weight `", name, "` has a dynamic shape");
    const uint8_t has_data = r.get<uint8_t>("weight data flag");
    KILN_CHECK(has_data <= 1, CorruptInput, "plan: weight `", name, "` data flag ", int(has_data));
    if (has_data) {
      const uint64_t bytes = r.get<uint64_t>("weight size");
      KILN_CHECK(bytes == static_cast<uint64_t>(volume(wt.shape)) * dtype_size(wt.dtype),
                 CorruptInput, "plan: weight `", name, "` holds ", bytes,
                 " bytes, its shape needs ",
                 volume(wt.shape) * static_cast<int64_t>(dtype_size(wt.dtype)));
      r.align(kWeightAlignment);
      const uint8_t* p = r.get_bytes(static_cast<size_t>(bytes), "weight data");
      wt.data = keepalive ? std::make_shared<const Bytes>(p, bytes, keepalive)
                          : std::make_shared<const Bytes>(std::vector<uint8_t>(p, p + bytes));
    }
    net.add_weight(name, std::move(wt));
  }
  KILN_CHECK(r.remaining() == 0, CorruptInput, "plan: ", r.remaining(),
             " unexpected bytes after the weights");
  for (const KernelChoice& c : plan.target.choices) {
    KILN_CHECK(c.layer < net.layers().size(), CorruptInput, "plan: a kernel choice for layer ",
               c.layer, " of ", net.layers().size());
  }

  // Semantic validation: every layer is well-formed and agrees with the stored tensors, in order.
  verify_network(net, "plan", VerifyFailure::kCorrupt);
  return plan;
}

Plan deserialize_plan(const std::shared_ptr<const Bytes>& bytes, bool verify_checksum) {
  return deserialize_plan(bytes->data(), bytes->size(), bytes, verify_checksum);
}

std::vector<std::string> constant_slots(const Network& net) {
  std::vector<std::string> slots;
  std::set<std::string> seen;
  for (const Layer& l : net.layers()) {
    if (const auto* c = std::get_if<ConstantParams>(&l.params)) {
      if (seen.insert(c->weight).second) slots.push_back(c->weight);
    }
  }
  return slots;
}

std::string network_key(const Network& net) {
  const std::vector<std::string> slots = constant_slots(net);
  std::map<std::string, size_t> slot_of;
  for (size_t k = 0; k < slots.size(); ++k) slot_of[slots[k]] = k;
  ByteWriter w;
  put_structure(w, net, &slot_of);
  for (const std::string& name : slots) {
    const Weights& wt = net.weight(name);
    w.put<uint8_t>(static_cast<uint8_t>(wt.dtype));
    put_shape(w, wt.shape);
  }
  return hash_hex(hash_bytes(w.bytes().data(), w.size()));
}

namespace {

std::string weight_text(const Weights& w) {
  return std::string(dtype_name(w.dtype)) + shape_to_string(w.shape);
}

}  // namespace

void check_refit_source(const Plan& plan, const Network& source, const std::string& what) {
  KILN_CHECK(plan.source.refittable, InvalidArgument, what,
             ": was built without refittable, so its weights may be folded into others; compile "
             "with refittable to refit it");
  const std::vector<std::string> names = constant_slots(source);
  const std::vector<SourceWeight>& built = plan.source.weights;
  // Weight by weight first, for an error that names the weight that does not fit.
  for (size_t k = 0; k < std::min(names.size(), built.size()); ++k) {
    const Weights& give = source.weight(names[k]);
    KILN_CHECK(give.dtype == built[k].dtype && give.shape == built[k].shape, InvalidArgument, what,
               ": weight `", names[k], "` is ", weight_text(give), " but the engine's (`",
               built[k].name, "`) is ", dtype_name(built[k].dtype),
               shape_to_string(built[k].shape));
  }
  KILN_CHECK(names.size() == built.size(), InvalidArgument, what, ": the network has ",
             names.size(), " weights, the engine was built from ", built.size());
  const std::string key = network_key(source);
  KILN_CHECK(key == plan.source.key, InvalidArgument, what,
             ": the network differs from the one the engine was built from (layers, shapes or "
             "constant values; key ",
             key, ", the engine's ", plan.source.key, ")");
}

void save_plan(const Plan& plan, const std::string& path, bool include_weights) {
  const auto bytes = serialize_plan(plan, include_weights);
  std::ofstream out(path, std::ios::binary);
  KILN_CHECK(out.good(), InvalidArgument, path, ": cannot open for writing");
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  KILN_CHECK(out.good(), InvalidArgument, path, ": write failed");
}

Plan load_plan(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), InvalidArgument, path, ": cannot open plan");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  try {
    return deserialize_plan(bytes.data(), bytes.size());
  } catch (const CorruptInput& e) {
    KILN_THROW(CorruptInput, path, ": ", e.message());
  }
}

}  // namespace kiln::engine
