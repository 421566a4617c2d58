// The kernel generator and its NVRTC compiler (codegen.h).
#include "engine/cuda/codegen.h"

#include "engine/cuda/backend.h"

#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "util/errors.h"
#include "util/logging.h"

namespace kiln::engine::cuda {
namespace embedded {
extern const char kOpKinds[];                // engine/op_kinds.h (generated/kernel_headers.cpp)
extern const char kScalarOps[];              // engine/scalar_ops.h
extern const char kSpecialMath[];            // engine/special_math.h
extern const char kOrthogonalPolynomials[];  // engine/orthogonal_polynomials.h
}  // namespace embedded

namespace {

bool is_generated_float(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16;
}

// The C type a dtype is stored as in generated code; its conversions to and from float are the
// prelude's ld_<dtype_name> and st_<dtype_name>.
const char* storage_type(DataType t) {
  return t == DataType::kF32 ? "float" : "unsigned short";
}

// A float as an exact C++ literal (hexadecimal; NaN and infinities by expression).
std::string float_literal(double v) {
  const float f = static_cast<float>(v);
  if (std::isnan(f)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(f)) return f > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%af", static_cast<double>(f));
  return buf;
}

// Helpers every pointwise kernel shares: 16-bit float conversions written with PTX (NVRTC has no
// cuda_fp16.h), vector packs, and the argument struct.
constexpr const char* kPrelude = R"(#include "engine/scalar_ops.h"
using namespace kiln::engine;
typedef unsigned short u16;
__device__ __forceinline__ float ld_f32(float x) { return x; }
__device__ __forceinline__ float ld_f16(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float ld_bf16(u16 h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ float st_f32(float x) { return x; }
__device__ __forceinline__ u16 st_f16(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
// Round to nearest even; NaN stays NaN (quiet).
__device__ __forceinline__ u16 st_bf16(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
  return (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
template <class T, int V>
struct __align__(sizeof(T) * V) Pack {
  T v[V];
};
struct Args {
  long long n;
  int rank, nvec;
  long long size[KILN_MAX_RANK];
  long long stride[KILN_MAX_INPUTS][KILN_MAX_RANK];
  const void* in[KILN_MAX_INPUTS];
  void* out;
  int contiguous[KILN_MAX_INPUTS];
  const int* gidx[KILN_MAX_INPUTS];
  long long gsize[KILN_MAX_INPUTS];
  int gaxis[KILN_MAX_INPUTS];
};
static_assert(sizeof(Args) == KILN_ARGS_BYTES, "PointwiseArgs and Args differ");
)";

std::string program_body(const PointwiseSpec& spec) {
  std::ostringstream s;
  const size_t n_in = spec.inputs.size();
  s << "__device__ __forceinline__ float compute(";
  for (size_t j = 0; j < n_in; ++j) s << (j ? ", " : "") << "float r" << j;
  s << ") {\n";
  for (size_t k = 0; k < spec.ops.size(); ++k) {
    const FusedOp& op = spec.ops[k];
    const std::string a = "r" + std::to_string(op.a), b = "r" + std::to_string(op.b);
    s << "  const float r" << n_in + k << " = ";
    switch (op.kind) {
      case 0:
        s << "binary_float(static_cast<BinaryOp>(" << op.op << "), " << a << ", " << b << ")";
        break;
      case 1:
        s << "unary_float(static_cast<UnaryOp>(" << op.op << "), " << a << ")";
        break;
      case 2:
        s << "activate(static_cast<ActivationKind>(" << op.op << "), " << a << ", "
          << float_literal(op.alpha) << ", " << float_literal(op.beta) << ")";
        break;
      default: {
        const auto to = static_cast<DataType>(op.op);
        s << (to == DataType::kF32
                  ? a
                  : std::string("ld_") + dtype_name(to) + "(st_" + dtype_name(to) + "(" + a + "))");
      }
    }
    s << ";\n";
  }
  s << "  return r" << n_in + spec.ops.size() - 1 << ";\n}\n";
  return s.str();
}

// Whether input j of `spec` is gathered (specs written without `gathered` have none).
bool gathered(const PointwiseSpec& spec, size_t j) {
  return j < spec.gathered.size() && spec.gathered[j];
}

// The loop that turns the flat output index `index` into each input's offset o<j>, over the
// merged dims in index type `I`. `vectors`: the index counts vectors of V along the innermost dim.
// A gathered input reads its index list along its dim, and ok<j> says whether what it reads
// there (V elements along the innermost dim, else one) lies inside the dim.
void emit_offsets(std::ostringstream& s, const PointwiseSpec& spec, const char* I,
                  const char* index, bool vectors) {
  const size_t n_in = spec.inputs.size();
  const std::string t = I;
  s << "    " << t << " rem = " << index << ";\n"
    << "#pragma unroll\n"
    << "    for (int k = KILN_MAX_RANK - 1; k >= 0; --k) {\n"
    << "      if (k >= p.rank) continue;\n";
  if (vectors) {
    s << "      const bool inner = k == p.rank - 1;\n"
      << "      const " << t << " size = inner ? (" << t << ")p.size[k] / V : (" << t
      << ")p.size[k];\n";
  } else {
    s << "      const " << t << " size = (" << t << ")p.size[k];\n";
  }
  s << "      const " << t << " idx = rem % size;\n"
    << "      rem /= size;\n";
  const std::string at = vectors ? "at" : "idx";
  if (vectors) s << "      const " << t << " at = inner ? idx * V : idx;\n";
  for (size_t j = 0; j < n_in; ++j) {
    if (!gathered(spec, j)) {
      s << "      o" << j << " += " << at << " * (" << t << ")p.stride[" << j << "][k];\n";
      continue;
    }
    const std::string width = vectors ? "(inner ? V : 1)" : "1";
    s << "      if (k == p.gaxis[" << j << "]) {\n"
      << "        const int g = p.gidx[" << j << "][" << at << "];\n"
      << "        ok" << j << " = ok" << j << " && g >= 0 && g + " << width << " <= p.gsize[" << j
      << "];\n"
      << "        o" << j << " += (" << t << ")g * (" << t << ")p.stride[" << j << "][k];\n"
      << "      } else {\n"
      << "        o" << j << " += " << at << " * (" << t << ")p.stride[" << j << "][k];\n"
      << "      }\n";
  }
  s << "    }\n";
}

// Declares o<j> (and ok<j> of gathered inputs) in index type I.
void emit_offset_decls(std::ostringstream& s, const PointwiseSpec& spec, const char* I) {
  for (size_t j = 0; j < spec.inputs.size(); ++j) {
    s << "    " << I << " o" << j << " = 0;\n";
    if (gathered(spec, j)) s << "    bool ok" << j << " = true;\n";
  }
}

std::string vec_entry(const PointwiseSpec& spec, int V) {
  std::ostringstream s;
  const size_t n_in = spec.inputs.size();
  s << "extern \"C\" __global__ void __launch_bounds__(256) kiln_pw_vec(const Args p) {\n"
    << "  constexpr int V = " << V << ";\n"
    << "  for (int iv = blockIdx.x * blockDim.x + threadIdx.x; iv < p.nvec;"
    << " iv += gridDim.x * blockDim.x) {\n";
  emit_offset_decls(s, spec, "int");
  emit_offsets(s, spec, "int", "iv", true);
  for (size_t j = 0; j < n_in; ++j) {
    const DataType t = spec.inputs[j];
    s << "    float x" << j << "[V];\n";
    if (gathered(spec, j)) {
      s << "    if (!ok" << j << ") {\n"
        << "#pragma unroll\n"
        << "      for (int e = 0; e < V; ++e) x" << j << "[e] = 0.f;\n"
        << "    } else\n";
    }
    s << "    if (p.contiguous[" << j << "]) {\n"
      << "      const Pack<" << storage_type(t) << ", V> v = *reinterpret_cast<const Pack<"
      << storage_type(t) << ", V>*>(static_cast<const " << storage_type(t) << "*>(p.in[" << j
      << "]) + o" << j << ");\n"
      << "#pragma unroll\n"
      << "      for (int e = 0; e < V; ++e) x" << j << "[e] = ld_" << dtype_name(t) << "(v.v[e]);\n"
      << "    } else {\n"
      << "      const float one = ld_" << dtype_name(t) << "(static_cast<const " << storage_type(t)
      << "*>(p.in[" << j << "])[o" << j << "]);\n"
      << "#pragma unroll\n"
      << "      for (int e = 0; e < V; ++e) x" << j << "[e] = one;\n"
      << "    }\n";
  }
  s << "    Pack<" << storage_type(spec.output) << ", V> y;\n"
    << "#pragma unroll\n"
    << "    for (int e = 0; e < V; ++e) y.v[e] = st_" << dtype_name(spec.output) << "(compute(";
  for (size_t j = 0; j < n_in; ++j) s << (j ? ", " : "") << "x" << j << "[e]";
  s << "));\n"
    << "    reinterpret_cast<Pack<" << storage_type(spec.output) << ", V>*>(p.out)[iv] = y;\n"
    << "  }\n}\n";
  return s.str();
}

std::string nd_entries(const PointwiseSpec& spec) {
  std::ostringstream s;
  const size_t n_in = spec.inputs.size();
  s << "template <class I>\n"
    << "__device__ __forceinline__ void pointwise_nd(const Args& p) {\n"
    << "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;"
    << " i += (long long)gridDim.x * blockDim.x) {\n";
  emit_offset_decls(s, spec, "I");
  emit_offsets(s, spec, "I", "(I)i", false);
  s << "    const float y = compute(";
  for (size_t j = 0; j < n_in; ++j) {
    const DataType t = spec.inputs[j];
    s << (j ? ", " : "");
    if (gathered(spec, j)) s << "!ok" << j << " ? 0.f : ";
    s << "ld_" << dtype_name(t) << "(static_cast<const " << storage_type(t) << "*>(p.in[" << j
      << "])[o" << j << "])";
  }
  s << ");\n"
    << "    static_cast<" << storage_type(spec.output) << "*>(p.out)[i] = st_"
    << dtype_name(spec.output) << "(y);\n"
    << "  }\n}\n"
    << "extern \"C\" __global__ void __launch_bounds__(256) kiln_pw_nd32(const Args p) {\n"
    << "  pointwise_nd<int>(p);\n}\n"
    << "extern \"C\" __global__ void __launch_bounds__(256) kiln_pw_nd64(const Args p) {\n"
    << "  pointwise_nd<long long>(p);\n}\n";
  return s.str();
}

std::mutex& compile_mutex() {
  static std::mutex m;
  return m;
}
std::atomic<int> g_compiled{0};

std::string nvrtc_log(nvrtcProgram prog) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size == 0) return "";
  std::string log(size, '\0');
  nvrtcGetProgramLog(prog, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

std::optional<PointwiseSpec> pointwise_spec(const Network& net, const Layer& layer) {
  if (layer.outputs.size() != 1) return std::nullopt;
  std::vector<DataType> inputs;
  for (TensorId id : layer.inputs) inputs.push_back(net.tensor(id).dtype);
  return pointwise_spec(layer, inputs, net.tensor(layer.outputs[0]).dtype);
}

std::optional<PointwiseSpec> pointwise_spec(const Layer& layer, const std::vector<DataType>& inputs,
                                            DataType output) {
  PointwiseSpec spec;
  std::vector<DataType> regs = inputs;
  const auto* fused = std::get_if<FusedElementwiseParams>(&layer.params);
  if (fused) regs.resize(fused_registers(layer.name, *fused, inputs.size()));
  spec.gathered.assign(regs.size(), false);
  for (size_t k = 0; fused && k < fused->gathers.size(); k += 3) {
    const int64_t r = fused->gathers[k];
    KILN_CHECK(r >= 0 && static_cast<size_t>(r) < regs.size(), InvalidArgument, "layer `",
               layer.name, "`: gather of register ", r, " of ", regs.size());
    spec.gathered[static_cast<size_t>(r)] = true;
  }
  if (regs.empty() || regs.size() > static_cast<size_t>(kPointwiseMaxInputs) ||
      !is_generated_float(output)) {
    return std::nullopt;
  }
  for (DataType t : regs) {
    if (!is_generated_float(t)) return std::nullopt;
  }
  spec.inputs = regs;
  spec.output = output;
  if (const auto* e = std::get_if<ElementwiseParams>(&layer.params)) {
    if (inputs.size() != 2) return std::nullopt;
    spec.ops = {{0, static_cast<int64_t>(e->op), 0, 1, 0, 0}};
  } else if (const auto* u = std::get_if<UnaryParams>(&layer.params)) {
    spec.ops = {{1, static_cast<int64_t>(u->op), 0, 0, 0, 0}};
  } else if (const auto* a = std::get_if<ActivationParams>(&layer.params)) {
    spec.ops = {{2, static_cast<int64_t>(a->kind), 0, 0, a->alpha, a->beta}};
  } else if (const auto* f = std::get_if<FusedElementwiseParams>(&layer.params)) {
    spec.ops = decode_program(layer.name, *f, regs.size());
  } else {
    return std::nullopt;
  }
  for (const FusedOp& op : spec.ops) {
    if (op.kind == 3 && !is_generated_float(static_cast<DataType>(op.op))) return std::nullopt;
  }
  return spec;
}

std::string pointwise_key(const PointwiseSpec& spec) {
  std::ostringstream s;
  s << "pointwise ";
  for (size_t j = 0; j < spec.inputs.size(); ++j) {
    s << (j ? "," : "") << dtype_name(spec.inputs[j]) << (gathered(spec, j) ? "[g]" : "");
  }
  s << "->" << dtype_name(spec.output) << ":";
  for (const FusedOp& op : spec.ops) {
    s << " " << op.kind << "." << op.op << "(" << op.a;
    if (op.kind == 0) s << "," << op.b;
    if (op.kind == 2) s << ";" << float_literal(op.alpha) << "," << float_literal(op.beta);
    s << ")";
  }
  return s.str();
}

int pointwise_vector_width(const PointwiseSpec& spec) {
  return spec.output == DataType::kF32 ? 4 : 8;
}

std::string pointwise_source(const PointwiseSpec& spec) {
  KILN_CHECK(!spec.inputs.empty() && !spec.ops.empty() &&
                 spec.inputs.size() <= static_cast<size_t>(kPointwiseMaxInputs),
             InternalError, "pointwise_source: ", spec.inputs.size(), " inputs, ", spec.ops.size(),
             " ops");
  std::ostringstream s;
  s << "// " << pointwise_key(spec) << "\n"
    << "#define KILN_MAX_RANK " << kPointwiseMaxRank << "\n"
    << "#define KILN_MAX_INPUTS " << kPointwiseMaxInputs << "\n"
    << "#define KILN_ARGS_BYTES " << sizeof(PointwiseArgs) << "\n"
    << kPrelude << program_body(spec) << vec_entry(spec, pointwise_vector_width(spec))
    << nd_entries(spec);
  return s.str();
}

std::vector<uint8_t> compile_kernel(const std::string& name, const std::string& source, int cc) {
  static std::map<std::pair<std::string, int>, std::vector<uint8_t>> cache;
  {
    std::lock_guard<std::mutex> lock(compile_mutex());
    if (auto it = cache.find({source, cc}); it != cache.end()) return it->second;
  }
  KILN_CHECK(cc >= 50, InvalidArgument, "generated kernel `", name, "`: compute capability ", cc,
             " is not one NVRTC compiles for");
  const char* header_sources[] = {embedded::kOpKinds, embedded::kScalarOps, embedded::kSpecialMath,
                                  embedded::kOrthogonalPolynomials};
  const char* header_names[] = {"engine/op_kinds.h", "engine/scalar_ops.h", "engine/special_math.h",
                                "engine/orthogonal_polynomials.h"};
  nvrtcProgram prog = nullptr;
  nvrtcResult rc = nvrtcCreateProgram(&prog, source.c_str(), "kiln_generated.cu", 4, header_sources,
                                      header_names);
  KILN_CHECK(rc == NVRTC_SUCCESS, DeviceError, "generated kernel `", name,
             "`: nvrtcCreateProgram failed: ", nvrtcGetErrorString(rc));
  const std::string arch = "--gpu-architecture=sm_" + std::to_string(cc);
  const char* options[] = {arch.c_str(), "--std=c++17", "-default-device"};
  rc = nvrtcCompileProgram(prog, 3, options);
  const std::string log = nvrtc_log(prog);
  std::vector<uint8_t> image;
  if (rc == NVRTC_SUCCESS) {
    size_t size = 0;
    rc = nvrtcGetCUBINSize(prog, &size);
    if (rc == NVRTC_SUCCESS) {
      image.resize(size);
      rc = nvrtcGetCUBIN(prog, reinterpret_cast<char*>(image.data()));
    }
  }
  nvrtcDestroyProgram(&prog);
  KILN_CHECK(rc == NVRTC_SUCCESS && !image.empty(), InternalError, "generated kernel `", name,
             "` does not compile for sm_", cc, ": ", nvrtcGetErrorString(rc), "\n", log);
  ++g_compiled;
  std::lock_guard<std::mutex> lock(compile_mutex());
  return cache.emplace(std::make_pair(source, cc), std::move(image)).first->second;
}

int kernels_compiled() {
  return g_compiled.load();
}

int generate_kernels(const Network& net, EngineTarget& target) {
  std::map<std::string, std::string> sources;  // key -> source, for keys not yet in the plan
  std::map<std::string, int> users;            // key -> layers running it
  std::set<std::string> have;
  for (const GeneratedKernel& k : target.kernels) have.insert(k.key);
  int layers = 0;
  for (const Layer& l : net.layers()) {
    const auto spec = pointwise_spec(net, l);
    if (!spec) continue;
    ++layers;
    std::string key = pointwise_key(*spec);
    ++users[key];
    if (!have.count(key) && !sources.count(key)) sources.emplace(key, pointwise_source(*spec));
  }
  std::vector<std::pair<std::string, std::string>> work(sources.begin(), sources.end());
  std::vector<std::vector<uint8_t>> images(work.size());
  std::vector<std::string> errors(work.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < work.size(); i = next++) {
      try {
        images[i] = compile_kernel(work[i].first, work[i].second, target.compute_capability);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    }
  };
  const size_t threads = std::min<size_t>(
      work.size(), std::max(1u, std::min(8u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  // A kernel NVRTC cannot compile here (no builtins library next to libnvrtc, an architecture
  // this NVRTC does not know) leaves its layers on the interpreter kernel, which computes the
  // same: the build goes on, saying so.
  int compiled_layers = layers;
  for (size_t i = 0; i < work.size(); ++i) {
    if (!errors[i].empty()) {
      compiled_layers -= users[work[i].first];
      KILN_LOG(kWarning, "generated kernel not compiled (", users[work[i].first],
               " layers run on the interpreter kernel instead): ", errors[i]);
      continue;
    }
    target.kernels.push_back({work[i].first, work[i].second, std::move(images[i])});
  }
  KILN_LOG(kDebug, "generated ", work.size(), " kernels for ", layers, " layers");
  return compiled_layers;
}

}  // namespace kiln::engine::cuda
