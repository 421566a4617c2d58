// kiln's public C++ API: compile a TorchScript module into one whose engine segments run in
// kiln's engine, check which ops a module would leave in PyTorch, and work with standalone plans.
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

enum class DType { kF32, kF16, kBF16, kI64, kI32, kI8, kU8, kBool };

// Memory format of an input tensor; channels-last inputs are made contiguous by the runtime.
enum class TensorFormat { kContiguous, kChannelsLast };

// One forward argument: a static shape or a min/opt/max range for dynamic dims.
struct Input {
  std::vector<int64_t> min_shape, opt_shape, max_shape;
  DType dtype = DType::kF32;
  TensorFormat format = TensorFormat::kContiguous;
  // Per dim, empty or "" for none: a symbol naming the dim's size, as torch.export's range
  // constraints do (ExportedInput::spec() fills it). Dims of the inputs that share a symbol must
  // be equal at every call: the compiled module checks that and raises, naming both, when not.
  std::vector<std::string> dim_symbols;

  Input() = default;
  explicit Input(std::vector<int64_t> shape, DType dtype = DType::kF32)
      : min_shape(shape), opt_shape(shape), max_shape(shape), dtype(dtype) {}
  Input(std::vector<int64_t> min, std::vector<int64_t> opt, std::vector<int64_t> max,
        DType dtype = DType::kF32)
      : min_shape(std::move(min)),
        opt_shape(std::move(opt)),
        max_shape(std::move(max)),
        dtype(dtype) {}
  bool is_static() const { return min_shape == max_shape; }
};

struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;            // cuda only
  std::string str() const;  // "cpu" or "cuda:N"
};

// Phases of compilation, reported to CompileSpec::progress as they start.
enum class Phase { kLower, kPartition, kShapeAnalysis, kConvert, kBuild, kStitch };
const char* phase_name(Phase phase);

// What converting and building an engine takes in memory, as a multiple of the bytes of its
// weights: the converted network, the builder's rewritten copies (folded batch norms,
// channels-last and f16 copies), the serialized plan and the engine made from it, which the
// compiled module keeps. Measured by bench/build_memory.py as the peak RSS of the convert phase
// over the weights (CPU: resnet50 2.76, vgg16 2.08, transformers' BertModel 1.99; bench/NOTES.md).
inline constexpr double kBuildMemoryMultiplier = 2.8;

// Registers an atomic subgraph for every later compile of this process: a chain of ops (each
// "aten::relu", "aten::add.Tensor", or alternatives "aten::relu|aten::gelu"), each step's tensor
// output read only by the next, which partitioning never splits across two segments (resource
// partitioning, min_block_size); built in: conv -> batch norm -> activation, conv -> activation,
// mul -> add, mul -> mul. Registering a name again replaces it. InvalidArgument for a chain of
// fewer than two ops or a name that is not an op's.
void register_atomic_subgraph(const std::string& name, const std::vector<std::string>& ops);

struct CompileSpec {
  std::vector<Input> inputs;  // one per forward argument (self excluded)
  Device device;
  std::vector<DType> enabled_precisions = {DType::kF32};
  size_t min_block_size = 3;
  std::vector<std::string> torch_executed_ops;      // "aten::add" or "aten::add.Tensor"
  std::vector<std::string> torch_executed_modules;  // qualified module type names
  bool require_full_compilation = false;
  // Several engine backends (seed 002's hierarchical partitioning): "cuda" (kiln's CUDA engine,
  // on `device` when that is a GPU, else cuda:0) and "cpu" (kiln's CPU engine), in priority
  // order; each op goes to the first backend whose entry in backend_support_map lists it ("aten::
  // add" or "aten::add.Tensor"; a backend without an entry takes every op kiln converts) and the
  // rest to PyTorch. PyTorch segments run on `device`; engine outputs come back to it. Empty:
  // one backend, `device`'s engine. A backend in the map must be in the priority list.
  std::vector<std::string> backend_priority;
  std::map<std::string, std::vector<std::string>> backend_support_map;
  // Resource partitioning (seed 002): engine segments whose estimated build memory (their
  // weights times kBuildMemoryMultiplier) exceeds the budget are split, between atomic patterns
  // (register_atomic_subgraph), until each piece fits; the pieces are built one after another.
  // cpu_memory_budget 0 takes the machine's available memory (MemAvailable).
  bool enable_resource_partitioning = false;
  uint64_t cpu_memory_budget = 0;
  bool truncate_long_and_double = false;  // accepted for compatibility: int64 is native
  // Seed 002's assume_dynamic_shape_support: every converter is taken as right for dynamic dims.
  // Unset, a node with a dynamic input dim whose converter does not declare support for dynamic
  // shapes runs in PyTorch, with that reason in the report.
  bool assume_dynamic_shape_support = false;
  // The most bytes an engine's activations (its memory arena at the opt shapes) may take; a build
  // over it fails with InvalidArgument. 0, the default, sets no limit (as Torch-TensorRT's 0).
  size_t workspace_size = 0;
  // cuda engines: f32 convolutions, matmuls and attention run TF32 tensor-core math (10-bit
  // mantissa, f32 accumulation) unless this is set, as in Torch-TensorRT (disable_tf32) and
  // TensorRT (kTF32 on by default). PyTorch's own fp32 cuDNN convolutions use TF32 by default too.
  bool disable_tf32 = false;
  // cuda engines: an erf GELU fused into an f16/bf16 matmul is computed in its tanh form by the
  // GEMM's epilogue (the two differ by at most 4.7e-4: under half an f16 ulp for values above 0.5)
  // unless this is set; exact keeps erf in a separate pass over the matmul's output.
  bool exact_gelu = false;
  // Measurement switches of the engine builder, "name=value" (engine::apply_switch: conv_layout,
  // squeeze_excitation, excitation_projection, cast_into_shuffle): for A/B timings; recorded in
  // each engine's plan. An unknown switch or value is InvalidArgument before anything compiles.
  std::vector<std::string> switches;
  // Engines whose weights refit() can replace without a rebuild: a refit runs lowering and the
  // builder's rewrites again over the new weights (what they fold, conv + batch norm, f16 casts,
  // channels-last copies, is folded again) and keeps the kernels chosen. The engines run as fast
  // as others, but for attention masks that are weights, which stay masks (a refit may change
  // them) instead of becoming the causal flag or nothing.
  bool refittable = false;
  // The engine cache: each built plan is stored in a directory and a later compile of an engine
  // with an entry loads it instead of building it. The key is the converted network's structure,
  // the settings that shape a build, the device and kiln's version; refittable plans are stored
  // without their weights and hit with any weights (refit on load), others hit only with the
  // same weights. Above the engines, the whole compiled module is stored too, keyed by the
  // module's code and values (weights and buffers by their data), the spec and the device: the
  // same module compiled the same way again is loaded (its plans mapped from the file, no weight
  // copied) without lowering or converting anything. Off unless set.
  bool engine_cache = false;
  // Empty: $KILN_ENGINE_CACHE_DIR, else $XDG_CACHE_HOME/kiln/engines, else ~/.cache/kiln/engines.
  std::string engine_cache_dir;
  // The most bytes the directory may hold; least recently used entries go first.
  uint64_t engine_cache_size = uint64_t{5} << 30;
  bool print_after_all = false;  // print each engine's network after every builder pass (stderr)
  bool debug = false;            // log each phase's graph at debug level
  // Called as each phase starts; for engines, once per segment ("building engine 2 of 5").
  std::function<void(Phase phase, const std::string& detail)> progress;
};

// What compile() did, for kilnc's summary and --report.
struct SegmentReport {
  std::string target;  // "engine" or "torch"
  // Where it runs, "cpu" or "cuda:N": the engine's backend (backend_priority) or the compile's.
  std::string device;
  std::string engine_name;
  std::vector<std::string> ops;  // node kinds, in order (constants excluded)
  std::vector<std::string> input_shapes_opt, output_shapes_opt;
  std::string fallback_reason;  // torch segments: the reasons of their nodes
  double build_ms = 0;
  // Engines: the built plan's layers, the shuffles among them that move data (transposes and
  // layout changes; reshapes are views), and the generated kernels it carries (cuda).
  int layers = 0, shuffles = 0, generated_kernels = 0;
  // Engines: "built"; "refit" (refit(): the compiled engine's plan with the new weights); with
  // the engine cache, "cache hit" (loaded, refit with the current weights where refittable),
  // "cache miss" (built and stored) or "cache skip" (built, not stored: a plan with weights whose
  // build took less time than reading it back would).
  std::string plan = "built";
  double build_saved_ms = 0;  // cache hits: what building the plan took when it was stored
};

struct CompileReport {
  std::vector<SegmentReport> segments;
  size_t engine_ops = 0, torch_ops = 0;
  std::vector<std::pair<std::string, double>> phase_ms;  // in order
  std::vector<std::string> fallback;  // "aten::lgamma: no converter for aten::lgamma" per node
  std::string to_json() const;
  std::string summary() const;  // one screen
};

// Lowers, partitions, converts, builds and stitches `module`'s forward. Throws kiln errors
// (InvalidArgument, Unsupported, ...) naming what is wrong.
torch::jit::Module compile(const torch::jit::Module& module, const CompileSpec& spec,
                           CompileReport* report = nullptr);

// `compiled` (made by compile() with CompileSpec::refittable, or loaded from its save) with the
// weights of `module`, the same architecture with new weights: `module` is lowered, partitioned
// and converted as compile() did with the spec `compiled` carries, and each engine's plan takes
// the new weights without a rebuild; PyTorch segments take theirs from `module` as compile()
// does. Throws InvalidArgument naming the engine and the weight when the new weights do not fit
// (another shape or dtype, another graph), Unsupported when `compiled` is not refittable, and
// never changes `compiled`.
torch::jit::Module refit(const torch::jit::Module& compiled, const torch::jit::Module& module,
                         CompileReport* report = nullptr);

// True when every op of the method can run in the engine; otherwise `report` (when given) lists
// each op that cannot and why.
bool check_method_op_support(const torch::jit::Module& module,
                             const std::string& method = "forward", std::string* report = nullptr);

// The coverage report, as JSON ({"supported": n, "total": n, "ops": {"aten::x": {"supported",
// "total", "reasons"}}, "backends": {...}}), of forward lowered and partitioned with `spec`'s
// settings (forced ops and modules, backend_priority and backend_support_map) and a block size
// of 1; nothing is converted or built. The Python package splits graphs between kiln and
// Inductor by it.
std::string op_coverage_json(const torch::jit::Module& module, const CompileSpec& spec);

// Compiles the whole method into one engine and returns its serialized plan (every op must be
// supported, as with require_full_compilation).
std::vector<uint8_t> convert_method_to_engine(const torch::jit::Module& module,
                                              const std::string& method, const CompileSpec& spec);

// A module whose forward runs the given plan: forward(*inputs) -> output, or a tuple of outputs.
torch::jit::Module embed_engine_in_new_module(const std::vector<uint8_t>& plan,
                                              const Device& device = {});

// The ATen frontend (the seeds' primary path): a .pt2 archive of `torch.export.save` read in C++
// into a module compile() takes: forward(self, *user inputs), with the program's parameters,
// buffers and constants folded in as constants. `inputs` are the input specs the export's example
// shapes and range constraints give: static dims as they are, a symbolic dim from its range's
// min to max with the example's size as opt. Dims tied by one symbol share that range.
struct ExportedInput {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> min, opt, max;  // max -1: the export left the symbol unbounded
  std::vector<std::string> symbols;    // per dim: the symbol, or "" for a static dim
  // As a compile() input; InvalidArgument naming the dim when a symbol has no upper bound.
  Input spec() const;
};
struct ExportedModule {
  torch::jit::Module module;
  std::vector<ExportedInput> inputs;
  std::string torch_version;         // of the torch that saved the program
  std::string schema_version;        // of its serialized graph, "8.17"
  std::vector<Input> specs() const;  // every input's spec()
};
// Throws CorruptInput (not a readable archive, bad JSON, weights missing or short), Unsupported
// (another format or schema version, an op or argument this libtorch lacks, state mutation left
// in the program) or InvalidArgument (no such file), each naming what is wrong.
ExportedModule load_exported_program(const std::string& path);
// The same from an archive's bytes (`torch.export.save` into a buffer); `name` is for messages.
ExportedModule load_exported_program_bytes(const std::string& bytes,
                                           const std::string& name = "<.pt2 bytes>");
// Whether `path` is a .pt2 archive (a zip with an `archive_format` record).
bool is_exported_program(const std::string& path);

// Parsing of the spellings kilnc and the report use: "f32", "(1,3,224,224)@f16",
// "[(1,3,224,224);(4,3,224,224);(8,3,224,224)]", "cuda:0". Throw InvalidArgument naming the text.
DType parse_dtype(const std::string& text);
const char* dtype_name(DType dtype);
Input parse_input_spec(const std::string& text);
Device parse_device(const std::string& text);

}  // namespace kiln
