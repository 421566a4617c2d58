// The compiled-module cache (module_cache.h). An entry file: "KILNMODC", format version (u32), the
// key, the compile's time (f64), its report (JSON), the module's archive (torch.jit.save, its
// engines' plans left out), the plans' table (name, offset, size, the XXH3-128 digests of its
// 4 MiB chunks), a checksum (XXH3-64) of all of that; then each plan at its 64-byte aligned
// offset. A load checks the plans against their digests on several threads instead of each plan's
// own checksum on one. Strings and byte
// runs are a u64 length and the bytes, little-endian as the machine writes them.
#include "compiler/module_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/version.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "compiler/spec_json.h"
#include "engine/bytes.h"
#include "engine/cuda/backend.h"
#include "engine/plan.h"
#include "partitioning/atomic.h"
#include "runtime/engine_class.h"
#include "util/errors.h"
#include "util/hash.h"
#include "util/logging.h"

namespace kiln::compiler {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'M', 'O', 'D', 'C'};
constexpr uint32_t kEntryVersion = 1;
constexpr const char* kSuffix = ".kmod";
constexpr uint64_t kPlanAlignment = 64;
// Weights and plans are digested in chunks of this many bytes, on several threads (chunk_digests).
constexpr size_t kChunk = size_t{4} << 20;

// What the key cannot take by value; the module is compiled without this cache.
struct Unkeyable {
  std::string what;
};

// `text` without torch's mangling of class names ("___torch_mangle_12."), which differ between two
// traces of one model in a process: the classes themselves are hashed by their code.
std::string demangled(std::string text) {
  static constexpr std::string_view kMangle = "___torch_mangle_";
  for (size_t at = text.find(kMangle); at != std::string::npos; at = text.find(kMangle, at)) {
    size_t end = at + kMangle.size();
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end < text.size() && text[end] == '.') ++end;
    text.erase(at, end - at);
  }
  return text;
}

// Hashes a module's code and values. Types are hashed once (their methods); values per instance;
// a tensor's data once per storage region (tied weights).
class ModuleHasher {
 public:
  void module(const torch::jit::Module& m) {
    const c10::ClassTypePtr& type = m.type();
    h_.update(std::string_view("module"));
    klass(*type);
    const size_t n = type->numAttributes();
    h_.update(static_cast<uint64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      h_.update(std::string_view(type->getAttributeName(i)));
      value(m._ivalue()->getSlot(i));
    }
  }

  // The digest of everything hashed, tensors' data (digested on several threads) last.
  std::string digest() {
    std::vector<std::pair<const void*, size_t>> regions;
    for (const at::Tensor& t : data_) regions.emplace_back(t.data_ptr(), t.nbytes());
    for (const auto& region : chunk_digests(regions, kChunk)) {
      h_.update(static_cast<uint64_t>(region.size()));
      for (const Digest128& d : region) h_.update(d.high).update(d.low);
    }
    return h_.digest128_hex();
  }

 private:
  void klass(const c10::ClassType& type) {
    h_.update(std::string_view(demangled(type.name() ? type.name()->qualifiedName() : "")));
    if (!types_.insert(&type).second) return;
    for (const torch::jit::Function* fn : type.methods()) function(*fn);
    for (const torch::jit::Function* fn : type.getForwardHooks()) function(*fn);
    for (const torch::jit::Function* fn : type.getForwardPreHooks()) function(*fn);
    for (size_t i = 0; i < type.numConstants(); ++i) {
      h_.update(std::string_view(type.getConstantName(i)));
      value(type.getConstant(i));
    }
  }

  void function(const torch::jit::Function& fn) {
    h_.update(std::string_view(demangled(fn.qualname().qualifiedName())));
    const auto* graph_fn = dynamic_cast<const torch::jit::GraphFunction*>(&fn);
    if (!graph_fn) throw Unkeyable{"method `" + fn.qualname().qualifiedName() + "` has no graph"};
    // Values named by their position, not by the numbers a graph's history gave them (a clone's
    // differ); printing leaves tensor constants' values out: they are hashed by data.
    const std::shared_ptr<torch::jit::Graph> graph = graph_fn->graph()->copy();
    size_t next = 0;
    name_values(graph->block(), next);
    h_.update(std::string_view(demangled(graph->toString(/*print_source_locations=*/false))));
    constants(graph->block());
  }

  static void name_values(torch::jit::Block* block, size_t& next) {
    for (torch::jit::Value* v : block->inputs()) v->setDebugName("v" + std::to_string(next++));
    for (torch::jit::Node* n : block->nodes()) {
      for (torch::jit::Value* v : n->outputs()) v->setDebugName("v" + std::to_string(next++));
      for (torch::jit::Block* b : n->blocks()) name_values(b, next);
    }
  }

  void constants(const torch::jit::Block* block) {
    for (const torch::jit::Node* n : block->nodes()) {
      for (const torch::jit::Block* b : n->blocks()) constants(b);
      if (n->kind() != c10::prim::Constant || !n->output()->type()->cast<c10::TensorType>()) {
        continue;
      }
      if (auto v = torch::jit::toIValue(n->output())) value(*v);
    }
  }

  void tensor(const at::Tensor& t) {
    if (!t.defined()) {
      h_.update(std::string_view("undefined tensor"));
      return;
    }
    if (t.layout() != at::kStrided || t.is_quantized() || t.is_meta() ||
        !(t.device().is_cpu() || t.device().is_cuda())) {
      std::ostringstream os;
      os << "a " << t.toString() << " tensor on " << t.device();
      throw Unkeyable{os.str()};
    }
    h_.update(std::string_view("tensor"));
    h_.update(std::string_view(c10::toString(t.scalar_type())));
    h_.update(std::string_view(t.device().str()));
    h_.update(static_cast<uint64_t>(t.dim()));
    for (int64_t d : t.sizes()) h_.update(d);
    const auto region = std::make_tuple(t.data_ptr(), t.scalar_type(), t.sizes().vec(),
                                        t.strides().vec(), t.device().str());
    auto [it, fresh] = seen_.emplace(region, seen_.size());
    h_.update(static_cast<uint64_t>(it->second));
    if (!fresh) return;  // the same data as an earlier tensor
    h_.update(static_cast<uint64_t>(t.nbytes()));
    data_.push_back(t.device().is_cpu() ? t.contiguous() : t.to(at::kCPU).contiguous());
  }

  void value(const c10::IValue& v) {
    h_.update(std::string_view(v.tagKind()));
    if (v.isTensor()) {
      tensor(v.toTensor());
    } else if (v.isNone()) {
    } else if (v.isBool()) {
      h_.update(static_cast<uint8_t>(v.toBool()));
    } else if (v.isInt()) {
      h_.update(v.toInt());
    } else if (v.isDouble()) {
      h_.update(v.toDouble());
    } else if (v.isString()) {
      h_.update(std::string_view(v.toStringRef()));
    } else if (v.isDevice()) {
      h_.update(std::string_view(v.toDevice().str()));
    } else if (v.isTuple()) {
      const auto& elements = v.toTupleRef().elements();
      h_.update(static_cast<uint64_t>(elements.size()));
      for (const c10::IValue& e : elements) value(e);
    } else if (v.isList()) {
      const c10::List<c10::IValue> list = v.toList();
      h_.update(std::string_view(list.elementType()->annotation_str()));
      h_.update(static_cast<uint64_t>(list.size()));
      for (const c10::IValue& e : list) value(e);
    } else if (v.isGenericDict()) {
      const c10::Dict<c10::IValue, c10::IValue> dict = v.toGenericDict();
      h_.update(static_cast<uint64_t>(dict.size()));
      for (const auto& entry : dict) {
        value(entry.key());
        value(entry.value());
      }
    } else if (v.isCustomClass()) {
      throw Unkeyable{"a " + v.type()->annotation_str() + " object"};
    } else if (v.isObject()) {
      const auto object = v.toObject();
      if (object->type()->is_module()) {
        module(torch::jit::Module(object));
        return;
      }
      klass(*object->type());
      const size_t n = object->type()->numAttributes();
      h_.update(static_cast<uint64_t>(n));
      for (size_t i = 0; i < n; ++i) value(object->getSlot(i));
    } else {
      throw Unkeyable{std::string("a value of kind ") + v.tagKind()};
    }
  }

  Hasher h_;
  std::vector<at::Tensor> data_;  // each storage region's data, in the order met
  std::set<const c10::ClassType*> types_;
  std::map<std::tuple<const void*, at::ScalarType, std::vector<int64_t>, std::vector<int64_t>,
                      std::string>,
           size_t>
      seen_;
};

// What decides a compile besides the module: the spec (less where the cache lives), the device,
// the atomic patterns partitioning keeps whole, and the versions of what compiles.
std::string context_of(const CompileSpec& spec) {
  CompileSpec keyed = spec;
  keyed.engine_cache_dir.clear();
  keyed.engine_cache_size = 0;
  std::string k = std::string("kiln ") + kiln_version() + "; torch " +
                  std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
                  "." + std::to_string(TORCH_VERSION_PATCH) + "; module cache " +
                  std::to_string(kEntryVersion) + "; plan format " +
                  std::to_string(engine::kPlanFormatVersion) + "; spec " + spec_to_json(keyed);
  std::set<int> cuda_devices;
  if (spec.device.kind == Device::Kind::kCuda) cuda_devices.insert(spec.device.index);
  for (const std::string& b : spec.backend_priority) {
    if (b == "cuda")
      cuda_devices.insert(spec.device.kind == Device::Kind::kCuda ? spec.device.index : 0);
  }
  for (int d : cuda_devices) {
    k += "; cuda:" + std::to_string(d) + " sm " +
         std::to_string(engine::cuda::built() && d < engine::cuda::device_count()
                            ? engine::cuda::compute_capability(d)
                            : 0);
  }
  k += "; atomic patterns";
  for (const partitioning::AtomicPattern& p : partitioning::atomic_patterns()) {
    k += " " + p.name + "(";
    for (const auto& step : p.steps) {
      for (const std::string& op : step) k += op + "|";
      k += ";";
    }
    k += ")";
  }
  return k;
}

template <typename T>
void append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

void append_string(std::string& out, const std::string& s) {
  append(out, static_cast<uint64_t>(s.size()));
  out += s;
}

// The archive of a compiled module, read in place from the mapped entry.
class MemoryReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  MemoryReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t size() const override { return size_; }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= size_) return 0;
    const size_t count = std::min<uint64_t>(n, size_ - pos);
    std::memcpy(buf, data_ + pos, count);
    return count;
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

// A read-only mapping of a whole file, unmapped when the last view of it goes. Entries are
// replaced by renaming and evicted by unlinking, never rewritten in place, so a mapping stays
// valid while engines read their weights from it.
std::shared_ptr<const void> map_file(const std::string& path, size_t& size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    ::close(fd);
    KILN_THROW(CorruptInput, "empty or unreadable");
  }
  size = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  ::close(fd);
  KILN_CHECK(p != MAP_FAILED, CorruptInput, "cannot be mapped (", std::strerror(errno), ")");
  const size_t mapped = size;
  return std::shared_ptr<const void>(
      p, [mapped](const void* q) { ::munmap(const_cast<void*>(q), mapped); });
}

}  // namespace

std::optional<std::string> module_cache_key(const torch::jit::Module& module,
                                            const CompileSpec& spec) {
  ModuleHasher hasher;
  try {
    hasher.module(module);
  } catch (const Unkeyable& u) {
    KILN_LOG(kInfo, "compiled-module cache: the module holds ", u.what,
             ", which it cannot key; compiling without it (the engine cache still applies)");
    return std::nullopt;
  }
  return context_of(spec) + "; module " + hasher.digest();
}

std::optional<CachedCompile> load_compiled(EngineCache& cache, const std::string& key) {
  const std::string path = cache.path_of(key, kSuffix);
  try {
    size_t size = 0;
    std::shared_ptr<const void> mapping = map_file(path, size);
    if (!mapping) return std::nullopt;
    const auto* data = static_cast<const uint8_t*>(mapping.get());
    KILN_CHECK(size >= sizeof(kMagic) && std::memcmp(data, kMagic, sizeof(kMagic)) == 0,
               CorruptInput, "not a compiled-module entry");
    engine::ByteReader r(data + sizeof(kMagic), size - sizeof(kMagic), "compiled-module entry");
    const uint32_t version = r.get<uint32_t>("format version");
    KILN_CHECK(version == kEntryVersion, CorruptInput, "entry format ", version);
    const std::string stored_key = r.get_string("key");
    KILN_CHECK(stored_key == key, CorruptInput, "another key under the same hash");
    CachedCompile out;
    out.compile_ms = r.get<double>("compile time");
    const std::string report = r.get_string("report");
    const uint64_t archive_size = r.get<uint64_t>("archive size");
    const size_t archive_at = sizeof(kMagic) + r.pos();
    KILN_CHECK(archive_size <= size - archive_at, CorruptInput, "truncated in its archive");
    engine::ByteReader rest(data + archive_at + archive_size, size - archive_at - archive_size,
                            "compiled-module entry");
    const uint64_t plans = rest.get<uint64_t>("plan count");
    runtime::DetachedPlans detached;
    std::vector<std::string> names;
    std::vector<std::pair<const void*, size_t>> regions;
    std::vector<std::vector<Digest128>> digests;
    for (uint64_t i = 0; i < plans; ++i) {
      const std::string name = rest.get_string("plan name");
      const uint64_t offset = rest.get<uint64_t>("plan offset");
      const uint64_t bytes = rest.get<uint64_t>("plan size");
      KILN_CHECK(offset % kPlanAlignment == 0 && offset <= size && bytes <= size - offset,
                 CorruptInput, "plan `", name, "` lies outside the file");
      const uint64_t chunks = rest.get<uint64_t>("plan digest count");
      KILN_CHECK(chunks == (bytes + kChunk - 1) / kChunk, CorruptInput, "plan `", name, "` has ",
                 chunks, " digests for ", bytes, " bytes");
      digests.emplace_back();
      for (uint64_t k = 0; k < chunks; ++k) {
        Digest128 d;
        d.high = rest.get<uint64_t>("plan digest");
        d.low = rest.get<uint64_t>("plan digest");
        digests.back().push_back(d);
      }
      names.push_back(name);
      regions.emplace_back(data + offset, bytes);
      detached.plans[name] = std::make_shared<const engine::Bytes>(data + offset, bytes, mapping);
    }
    const size_t header = archive_at + archive_size + rest.pos();
    const uint64_t checksum = rest.get<uint64_t>("checksum");
    KILN_CHECK(hash_bytes(data, header) == checksum, CorruptInput, "checksum mismatch");
    const auto actual = chunk_digests(regions, kChunk);
    for (size_t i = 0; i < names.size(); ++i) {
      KILN_CHECK(actual[i] == digests[i], CorruptInput, "plan `", names[i],
                 "` does not match its digests");
    }
    detached.checked = true;
    out.report = report_from_json(report, "its report");
    try {
      out.module =
          torch::jit::load(std::make_shared<MemoryReader>(data + archive_at, archive_size));
    } catch (const Error&) {
      throw;  // an engine's own check, naming it
    } catch (const c10::Error& e) {
      KILN_THROW(CorruptInput, "its archive does not load: ", e.what_without_backtrace());
    } catch (const std::exception& e) {
      KILN_THROW(CorruptInput, "its archive does not load: ", e.what());
    }
    EngineCache::touch(path);
    return out;
  } catch (const Error& e) {
    KILN_LOG(kWarning, "compiled-module cache: ", path, " is unusable (", e.message(),
             "); compiling again");
    std::error_code ec;
    std::filesystem::remove(path, ec);
    return std::nullopt;
  }
}

ModuleLookup look_up_module(EngineCache& cache, const torch::jit::Module& module,
                            const CompileSpec& spec, CompileReport& report) {
  using Clock = std::chrono::steady_clock;
  const auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  const auto start = Clock::now();
  ModuleLookup out;
  out.key = module_cache_key(module, spec);
  const double key_ms = ms_since(start);
  const auto load = Clock::now();
  auto cached = out.key ? load_compiled(cache, *out.key) : std::nullopt;
  if (!cached) {
    report.phase_ms.emplace_back("module key", key_ms);
    return out;
  }
  report = std::move(cached->report);
  for (SegmentReport& s : report.segments) {
    if (s.target != "engine") continue;
    s.build_saved_ms = s.plan == "cache hit" ? s.build_saved_ms : s.build_ms;
    s.build_ms = 0;
    s.plan = "cache hit";
  }
  report.phase_ms = {{"module key", key_ms}, {"cached load", ms_since(load)}};
  KILN_LOG(kInfo, "compile: loaded from the cache in ", ms_since(start),
           " ms (the compile stored there took ", cached->compile_ms, " ms)");
  out.hit = std::move(cached->module);
  return out;
}

void store_compiled(EngineCache& cache, const std::string& key, const torch::jit::Module& compiled,
                    const CompileReport& report, double compile_ms) {
  std::ostringstream archive;
  std::map<std::string, std::shared_ptr<const engine::Bytes>> plans;
  {
    runtime::DetachedPlans detached;
    compiled.save(archive);
    plans = std::move(detached.plans);
  }
  const std::string archive_bytes = archive.str();
  std::string header(kMagic, sizeof(kMagic));
  append(header, kEntryVersion);
  append_string(header, key);
  append(header, compile_ms);
  append_string(header, report.to_json());
  append_string(header, archive_bytes);
  append(header, static_cast<uint64_t>(plans.size()));
  std::vector<std::pair<const void*, size_t>> regions;
  for (const auto& [name, bytes] : plans) regions.emplace_back(bytes->data(), bytes->size());
  const auto digests = chunk_digests(regions, kChunk);
  // The table's size is known before its offsets are: each plan's name, offset, size and digests,
  // then the checksum.
  size_t table = 0;
  size_t p = 0;
  for (const auto& [name, bytes] : plans)
    table += 8 + name.size() + 8 + 8 + 8 + 16 * digests[p++].size();
  auto aligned = [](uint64_t at) {
    return (at + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment;
  };
  uint64_t at = aligned(header.size() + table + 8);
  std::vector<std::pair<uint64_t, const engine::Bytes*>> placed;
  p = 0;
  for (const auto& [name, bytes] : plans) {
    append_string(header, name);
    append(header, at);
    append(header, static_cast<uint64_t>(bytes->size()));
    append(header, static_cast<uint64_t>(digests[p].size()));
    for (const Digest128& d : digests[p]) {
      append(header, d.high);
      append(header, d.low);
    }
    ++p;
    placed.emplace_back(at, bytes.get());
    at = aligned(at + bytes->size());
  }
  append(header, hash_bytes(header.data(), header.size()));
  static const char zeros[kPlanAlignment] = {};
  std::vector<std::pair<const void*, size_t>> parts{{header.data(), header.size()}};
  uint64_t written = header.size();
  for (const auto& [offset, bytes] : placed) {
    parts.emplace_back(zeros, offset - written);
    parts.emplace_back(bytes->data(), bytes->size());
    written = offset + bytes->size();
  }
  cache.write(cache.path_of(key, kSuffix), parts);
}

CompileReport report_from_json(const std::string& text, const std::string& where) {
  CompileReport report;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    report.engine_ops = j.at("engine_ops").get<size_t>();
    report.torch_ops = j.at("torch_ops").get<size_t>();
    for (const auto& p : j.at("phases")) {
      report.phase_ms.emplace_back(p.at("phase").get<std::string>(), p.at("ms").get<double>());
    }
    for (const auto& js : j.at("segments")) {
      SegmentReport s;
      s.target = js.at("target").get<std::string>();
      s.device = js.at("device").get<std::string>();
      s.ops = js.at("ops").get<std::vector<std::string>>();
      s.input_shapes_opt = js.at("input_shapes").get<std::vector<std::string>>();
      s.output_shapes_opt = js.at("output_shapes").get<std::vector<std::string>>();
      if (js.contains("engine")) {
        s.engine_name = js.at("engine").get<std::string>();
        s.build_ms = js.at("build_ms").get<double>();
        s.plan = js.at("plan").get<std::string>();
        s.build_saved_ms = js.value("build_saved_ms", 0.0);
        s.layers = js.at("layers").get<int>();
        s.shuffles = js.at("shuffles").get<int>();
        s.generated_kernels = js.at("generated_kernels").get<int>();
      }
      s.fallback_reason = js.value("fallback_reason", std::string());
      report.segments.push_back(std::move(s));
    }
    report.fallback = j.at("fallback").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    KILN_THROW(CorruptInput, where, ": not a compile report (", e.what(), ")");
  }
  return report;
}

}  // namespace kiln::compiler
