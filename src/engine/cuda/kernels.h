// The CUDA backend's kernel interface, mirroring cpu/kernels.h: one kernel function per layer
// kind, registered per family (register_<family>) with the dtypes it supports, into a table
// indexed by the LayerParams variant index. Kernels only enqueue work on the context's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/cuda/backend.h"
#include "engine/kernel_table.h"
#include "engine/network.h"
#include "util/errors.h"

namespace kiln::engine::cuda {

using TensorView = DeviceTensor;

using KernelState = engine::KernelState;

// Where attention of f16/bf16 runs (attention_cudnn=auto|on|off): cuDNN's fused attention or the
// flash kernel, by timing both per shape for unmasked layers (kAuto: masked ones stay on flash,
// attention_choice.cpp says why), cuDNN wherever it takes the shape (kOn), or never (kOff).
enum class AttentionCudnn { kAuto, kOn, kOff };

// Whether GEMMs of few rows may run skinny_gemm.cu (gemm_skinny=off|on|only): timed against
// cuBLASLt's candidates where the GEMM is timed (kOn), wherever the kernel takes the GEMM
// (kOnly: tests and comparisons), or never (kOff, the default until measured on the GPU).
enum class SkinnyGemm { kOff, kOn, kOnly };

// Where grouped convolutions run: grouped.cu for the group widths cuDNN is slow at (kAuto), cuDNN
// for all (kCudnn), grouped.cu wherever it can (kKernel).
enum class GroupedPath { kAuto, kCudnn, kKernel };

// What the kernels read of the plan's measurement switches (EngineTarget::switches, set through
// the builder's apply_switch): each on the fast path unless switched for a comparison.
struct KernelOptions {
  bool pointwise_on_cudnn = false;  // cuda_pointwise=cudnn: 1x1 convolutions stay on cuDNN (G15)
  bool depthwise_tiled = true;      // cuda_depthwise=strip: strips for every filter (G25)
  GroupedPath grouped = GroupedPath::kAuto;  // cuda_grouped=auto|cudnn|kernel (G48)
  bool gemm_fold = true;                     // gemm_fold=off: batched matmuls stay batched (G33)
  bool gemm_timing = true;  // gemm_timing=off: the heuristic's first GEMM algorithm (G32)
  // gemm_split_k=off: GEMMs of few output tiles time no split-K forms (matmul.cpp, G60).
  bool gemm_split_k = true;
  SkinnyGemm gemm_skinny = SkinnyGemm::kOff;
  // programmatic_launch=on (sm_90 programmatic dependent launch, device_util.cuh): a skinny GEMM
  // of a constant weight starts before the kernel ahead of it finishes, streaming its weight
  // meanwhile; the layer norms of rows and the flash attention kernels are launched early too,
  // their launch and block start overlapping the end of the kernel ahead. Off: 1-6% slower on
  // BERT, GPT-2 and ViT at batch 1 on an H100 (bench/NOTES.md G73).
  bool programmatic_launch = false;
  // attention_key_split=on: at few matrices the flash kernel may split a row tile's keys among
  // warps (attention.cu resident_shape). Off until measured (G60).
  bool attention_key_split = false;
  AttentionCudnn attention_cudnn = AttentionCudnn::kAuto;  // attention_cudnn.h
  bool codegen = true;  // cuda_codegen=off: pointwise layers on the interpreter kernel
  // At a shape not worth tuning (Resources::tune), convolutions and GEMMs keep the algorithm
  // chosen at the layer's nearest shape that chose (a profile point's, at first) where it runs the
  // new shape, instead of asking the heuristics again (G56, G65); reuse_algorithms=off asks every
  // time.
  bool reuse_algorithms = true;
  // A shape of a dynamic engine that is no profile point chooses its algorithms when it repeats
  // (ContextBackend::Tuning::kBudgeted); repeat_tuning=off never does: a repeated shape settles on
  // the kept choices, which then count as complete (captured at the third call), for measuring
  // what choosing at repeats buys (G65).
  bool repeat_tuning = true;
  // A first call at a new shape runs 2-d convolutions as patches times the filter
  // (convolution.cpp), their GEMMs' algorithms chosen at the profile points, rather than on cuDNN
  // with kept algorithms (resnet50's first call at batch 4: 2.8 ms against 9.5, NOTES.md G59,
  // G60); first_call_gemm=off keeps cuDNN.
  bool first_call_gemm = true;
};
KernelOptions kernel_options(const std::vector<std::string>& switches);

// Kernels call it each time they ask cuDNN's or cuBLASLt's heuristics for algorithms or time
// candidates (algorithm_searches() counts them).
void count_algorithm_search();

// Per-context resources a kernel may use. Handles are created on first use.
class Resources {
 public:
  virtual ~Resources() = default;
  virtual const KernelOptions& options() const = 0;
  // Entry `entry` of the plan's generated kernel `key` (codegen.h) as a cudaKernel_t for
  // cudaLaunchKernel; nullptr when the plan has none of that key.
  virtual const void* generated_kernel(const std::string& key, const char* entry) = 0;
  virtual cudaStream_t stream() const = 0;
  virtual int device() const = 0;
  // Scratch device memory valid until the next layer runs (stream-ordered growth).
  virtual void* workspace(size_t bytes) = 0;
  // Whether a kernel may choose its algorithm for this run's shapes now (heuristic queries,
  // timed candidates: ContextBackend::set_tuning): always at a static engine's shapes and a
  // dynamic one's profile points, never at a shape the context has not run before, and at a
  // shape that repeats while the call's choosing time lasts (KILN_CUDA_TUNING_MS; the first layer
  // that asks always may). Ask only where a choice is still to be made for this shape: a refusal
  // leaves the shape's choosing to its next calls (and keeps it from being captured until then).
  virtual bool tune() = 0;
  // Whether this run's shapes are new to the context (ContextBackend::Tuning::kOff, and not a
  // capture, which chooses nothing either but keeps what it runs): where a kernel may take a
  // cheaper path that it would not keep (convolution.cpp's first-call GEMMs).
  virtual bool new_shape() const = 0;
  // The engine's choice for the running layer's operation `key` (made at the plan's build, or by
  // a context of the engine before), as the kernel that kept it wrote it; nullopt if none.
  // Kernels look here whenever they set up a shape, before any search, and keep what they chose
  // for a shape (keep_choice).
  virtual std::optional<std::vector<uint8_t>> kept_choice(const std::vector<int64_t>& key) = 0;
  virtual void keep_choice(const std::vector<int64_t>& key, std::vector<uint8_t> choice) = 0;
  virtual void* cublaslt() = 0;  // cublasLtHandle_t
  virtual void* cudnn() = 0;     // cudnnHandle_t, bound to the stream
  // A kernel freed (or moved) device memory that work it enqueued before may read: CUDA graphs
  // captured before then are dropped (graphs.h).
  virtual void device_memory_moved() = 0;
};

// Resources that are another's: every call goes to `base`; kernels run inside another, or on
// another stream, override what differs.
class ResourcesOf : public Resources {
 public:
  explicit ResourcesOf(Resources& base) : base_(base) {}
  const KernelOptions& options() const override { return base_.options(); }
  const void* generated_kernel(const std::string& key, const char* entry) override {
    return base_.generated_kernel(key, entry);
  }
  cudaStream_t stream() const override { return base_.stream(); }
  int device() const override { return base_.device(); }
  void* workspace(size_t bytes) override { return base_.workspace(bytes); }
  bool tune() override { return base_.tune(); }
  bool new_shape() const override { return base_.new_shape(); }
  std::optional<std::vector<uint8_t>> kept_choice(const std::vector<int64_t>& key) override {
    return base_.kept_choice(key);
  }
  void keep_choice(const std::vector<int64_t>& key, std::vector<uint8_t> choice) override {
    base_.keep_choice(key, std::move(choice));
  }
  void* cublaslt() override { return base_.cublaslt(); }
  void* cudnn() override { return base_.cudnn(); }
  void device_memory_moved() override { base_.device_memory_moved(); }

 protected:
  Resources& base_;
};

// Resources whose workspace starts `offset` bytes into the base's, which the caller reserved
// beforehand so that it cannot move (its first `offset` bytes hold the caller's own data: a
// convolution's patches, squeeze-excitation's scaled weights) for a kernel run inside another.
class WorkspaceAfter : public ResourcesOf {
 public:
  WorkspaceAfter(Resources& base, size_t offset, void* base_ws)
      : ResourcesOf(base), offset_(offset), base_ws_(base_ws) {}
  void* workspace(size_t bytes) override {
    void* ws = base_.workspace(offset_ + bytes);
    KILN_CHECK(ws == base_ws_, InternalError, "the first ", offset_,
               " workspace bytes were moved by a larger request (", offset_ + bytes, " bytes)");
    return static_cast<uint8_t*>(ws) + offset_;
  }

 private:
  size_t offset_;
  void* base_ws_;
};

// The states a kernel keeps for the shapes a layer has run (a convolution's descriptors and
// algorithm, a GEMM's), so that a shape that comes back finds the choices made for it: up to
// kShapes of them, the least recently used dropped first. State has a `key` (what it was made
// for).
template <typename State>
class StatesByShape : public KernelState {
 public:
  static constexpr size_t kShapes = 32;
  // The state made for `key` (now the most recently used), or nullptr.
  State* find(const std::vector<int64_t>& key) {
    for (auto it = states_.begin(); it != states_.end(); ++it) {
      if ((*it)->key != key) continue;
      states_.splice(states_.begin(), states_, it);
      return states_.front().get();
    }
    return nullptr;
  }
  // Keeps `state` (replacing one of its key), the most recently used.
  State* add(std::unique_ptr<State> state) {
    for (auto it = states_.begin(); it != states_.end(); ++it) {
      if ((*it)->key == state->key) {
        states_.erase(it);
        break;
      }
    }
    if (states_.size() >= kShapes) states_.pop_back();
    states_.push_front(std::move(state));
    return states_.front().get();
  }
  // Of the states `usable` takes, the one of least `distance`; nullptr when none. Most recently
  // used first among equals.
  template <typename Usable, typename Distance>
  State* nearest(Usable&& usable, Distance&& distance) {
    State* best = nullptr;
    double best_distance = 0;
    for (auto& s : states_) {
      if (!usable(*s)) continue;
      const double d = distance(*s);
      if (!best || d < best_distance) {
        best = s.get();
        best_distance = d;
      }
    }
    return best;
  }
  size_t size() const { return states_.size(); }

 private:
  std::list<std::unique_ptr<State>> states_;  // most recently used first
};

// The state slot as a T, made empty if it holds none (or another kind).
template <typename T>
T& state_of(std::unique_ptr<KernelState>& slot) {
  if (auto* state = dynamic_cast<T*>(slot.get())) return *state;
  slot = std::make_unique<T>();
  return static_cast<T&>(*slot);
}

struct KernelArgs {
  const Layer& layer;
  const std::vector<TensorView>& inputs;
  const std::vector<TensorView>& outputs;  // allocated with their inferred shapes
  std::unique_ptr<KernelState>& state;
  Resources& res;
  cudaStream_t stream() const { return res.stream(); }
};

using KernelFn = void (*)(KernelArgs& args);
// Returns an empty string when the kernel can run `layer` with these dtypes, else why not.
using SupportFn = std::string (*)(const Layer& layer, const std::vector<DataType>& inputs,
                                  const std::vector<DataType>& outputs);

// Dtype sets as bit masks over DataType.
constexpr uint32_t dtype_bit(DataType t) {
  return 1u << static_cast<unsigned>(t);
}
constexpr uint32_t kFloatTypes =
    dtype_bit(DataType::kF32) | dtype_bit(DataType::kF16) | dtype_bit(DataType::kBF16);
constexpr uint32_t kAllTypes = (1u << kNumDataTypes) - 1;

struct KernelEntry {
  KernelFn fn = nullptr;
  uint32_t output_dtypes = 0;   // dtypes of output 0 the kernel handles
  SupportFn support = nullptr;  // further checks (optional)
};

class KernelTable : public engine::KernelTable<KernelEntry> {
 public:
  template <class Params>
  void set(KernelFn fn, uint32_t output_dtypes, SupportFn support = nullptr) {
    engine::KernelTable<KernelEntry>::set<Params>(KernelEntry{fn, output_dtypes, support});
  }
};

// Every CUDA kernel, registered once.
const KernelTable& kernel_table();

// The families; each is defined in cuda/<family>.cu or .cpp.
void register_elementwise(KernelTable& t);  // elementwise, unary, activation, select, cast, fused
void register_matmul(KernelTable& t);
void register_convolution(KernelTable& t);
void register_pooling(KernelTable& t);
void register_reduce(KernelTable& t);         // reduce, argmax, scan, topk, nonzero
void register_normalization(KernelTable& t);  // normalization, softmax
void register_shuffle(KernelTable& t);        // shuffle, concat, slice, pad
void register_gather(KernelTable& t);         // gather, scatter
void register_fill(KernelTable& t);           // shape, fill
void register_resize(KernelTable& t);
void register_attention(KernelTable& t);
// The device's streaming multiprocessors (device_util.cu).
int multiprocessors(int device);
// The most shared memory a block of the device may ask for (cudaFuncSetAttribute's limit).
size_t optin_shared_bytes(int device);
// How the flash kernel runs attention over `pairs` (batch x head) matrices of L queries and S keys
// of head size E in f16/bf16 on `device` (attention.cu; tests read it): `warps` 0 for the
// streaming kernel (64 query rows a block of 4 warps), else the resident kernel's warps and
// query rows per block, and into how many parts each row tile's keys are split among warps.
struct FlashLaunch {
  int warps = 0, block_rows = 0, splits = 1;
};
FlashLaunch flash_launch(DataType dtype, int64_t E, int64_t L, int64_t S, int64_t pairs, int device,
                         bool key_split);
void register_squeeze_excitation(KernelTable& t);

// Launchers shared between families (defined in the .cu files named).
// What the post-op kernel applies to a conv/matmul result in place: out = act2(act(out +
// bias[c]) + residual) with c = (i / inner) % channels; any float dtypes.
struct PostOpArgs {
  const TensorView* bias = nullptr;
  int64_t channels = 1, inner = 1;
  ActivationKind act = ActivationKind::kNone;
  double alpha = 0, beta = 0;
  const TensorView* residual = nullptr;
  ActivationKind act2 = ActivationKind::kNone;
  double alpha2 = 0, beta2 = 0;
};
// elementwise.cu: the post-op kernel.
void launch_post_ops(cudaStream_t stream, const std::string& layer, const TensorView& out,
                     const PostOpArgs& post);
// matmul.cpp: the matmul layer's kernel (MatMulParams), for kernels that run a GEMM inside.
void run_matmul(KernelArgs& args);
// skinny_gemm.cu: y[rows, n] = post(a[rows, k] w[n, k]^T) (or a w[k, n]) for a few rows (a linear
// layer at batch 1), f16 or bf16, K split across the blocks of a cluster and every post-op in the
// epilogue (bias of n elements, then act, the residual of y's shape, act2; in fp32 from the
// accumulator). The matmul layer times it against cuBLASLt's candidates (gemm_skinny).
struct SkinnyPostOps {
  const void* bias = nullptr;  // n elements of y's dtype, or nullptr
  ActivationKind act = ActivationKind::kNone;
  float alpha = 0, beta = 0;
  const void* residual = nullptr;  // rows x n of y's dtype, or nullptr
  ActivationKind act2 = ActivationKind::kNone;
  float alpha2 = 0, beta2 = 0;
};
constexpr int64_t kSkinnyMaxRows = 256;
// Whether the kernel takes the GEMM: f16/bf16, 1..256 rows, n a multiple of 64, k of 32,
// operands and y 16-byte aligned (the residual 8).
bool skinny_gemm_takes(DataType t, int64_t rows, int64_t n, int64_t k, const void* a, const void* w,
                       const void* y, const SkinnyPostOps& post);
// A form of the kernel: the blocks of a cluster that K is split across (1-8), the rows a block
// takes (64 or 128; 0: 64 up to 64 rows, else 128) and its products (mma.sync, or wgmma: sm_90a,
// [n, k] weights only), kept in a plan as one int32.
constexpr int skinny_form(int splits, int block_rows = 0, bool wgmma = false) {
  return splits | block_rows << 8 | static_cast<int>(wgmma) << 16;
}
constexpr int skinny_form_splits(int form) {
  return form & 0xff;
}
constexpr int skinny_form_rows(int form) {
  return (form >> 8) & 0xff;
}
constexpr bool skinny_form_wgmma(int form) {
  return (form >> 16) & 1;
}
// Whether `form` is one for a K and a weight layout (w_kn: [k, n]): its splits (1-8) divide K in
// tiles of 32, its rows 0, 64 or 128, wgmma only for a [n, k] weight, no other bits.
bool skinny_gemm_form_valid(int64_t k, bool w_kn, int form);
// Whether `device` runs the wgmma forms (compute capability 9.0).
bool skinny_wgmma_available(int device);
// The forms worth timing for a GEMM the kernel takes on `sms` SMs (one to four): the split that
// fills the SMs best in one wave first, then the next fewer and more; above 64 rows also blocks
// of 64 rows at the split that fills two waves. With `wgmma` (a [n, k] weight on a device that
// runs it) the wgmma form of each of these first, then the same in mma.sync.
std::vector<int> skinny_gemm_forms(int64_t rows, int64_t n, int64_t k, int sms, bool wgmma);
// Launches so far in the process (tests).
int64_t skinny_gemm_launches();
// w_kn: w is [k, n] (n contiguous) rather than [n, k]. early: launched programmatically dependent
// on the kernel ahead (programmatic_launch, device_util.cuh), streaming the first stages of w
// before that one has finished: only for a w no kernel writes (an engine constant).
void launch_skinny_gemm(cudaStream_t stream, const std::string& layer, DataType t, int64_t rows,
                        int64_t n, int64_t k, int form, const void* a, const void* w, bool w_kn,
                        void* y, const SkinnyPostOps& post, bool early = false);
// matmul_integer.cu: an i64 or i32 matmul layer (bias and residual post-ops, no activations),
// wrapping around as torch's integer products do.
void launch_integer_matmul(cudaStream_t stream, const std::string& layer, const MatMulParams& p,
                           const std::vector<TensorView>& inputs, const TensorView& out);

// depthwise.cu: channels-last depthwise 2-d convolution (one filter per channel) with every
// post-op fused; `applies` says whether a convolution layer is one it runs.
bool depthwise_nhwc_applies(const ConvolutionParams& p, const TensorView& x, const TensorView& w,
                            const TensorView* residual, const TensorView& out);
// `tiled` false keeps the strip kernel for every filter (cuda_depthwise=strip).
void launch_depthwise_nhwc(cudaStream_t stream, const std::string& layer,
                           const ConvolutionParams& p, const TensorView& x, const TensorView& w,
                           const TensorView* bias, const TensorView* residual,
                           const TensorView& out, bool tiled);
// Sets a channels-last 2-d convolution kernel's window and post-op fields (kh, kw, sh, sw, ph, pw,
// dh, dw; act, alpha, beta, act2, alpha2, beta2) from the layer's params and its [Cout, kh, kw,
// Cin / groups] weights (depthwise.cu's and grouped.cu's arguments).
template <class Args>
void set_conv2d_window(Args& a, const ConvolutionParams& p, const Shape& w) {
  const auto at = [](const std::vector<int64_t>& v, size_t i, int64_t fallback) {
    return static_cast<int>(v.empty() ? fallback : v[i]);
  };
  a.kh = static_cast<int>(w[1]), a.kw = static_cast<int>(w[2]);
  a.sh = at(p.strides, 0, 1), a.sw = at(p.strides, 1, 1);
  a.ph = at(p.padding_begin, 0, 0), a.pw = at(p.padding_begin, 1, 0);
  a.dh = at(p.dilations, 0, 1), a.dw = at(p.dilations, 1, 1);
  a.act = p.post.activation, a.act2 = p.post.activation2;
  a.alpha = static_cast<float>(p.post.alpha), a.beta = static_cast<float>(p.post.beta);
  a.alpha2 = static_cast<float>(p.post.alpha2), a.beta2 = static_cast<float>(p.post.beta2);
}

// grouped.cu: channels-last grouped 2-d convolution (8 to 64 channels a group on each side, f16
// or bf16, 16-byte aligned) on tensor cores with every post-op fused; `applies` says whether a
// convolution layer is one it runs: under kAuto only groups whose width is not a power of two
// (cuDNN is faster at 8, 16 and 32, slower at 24 and 48), under kKernel every width it can.
bool grouped_nhwc_applies(const ConvolutionParams& p, const TensorView& x, const TensorView& w,
                          const TensorView* bias, const TensorView* residual, const TensorView& out,
                          GroupedPath path);
void launch_grouped_nhwc(cudaStream_t stream, const std::string& layer, const ConvolutionParams& p,
                         const TensorView& x, const TensorView& w, const TensorView* bias,
                         const TensorView* residual, const TensorView& out);
// pointwise.cu: channels-last 1x1 convolution (stride 1, no padding, groups 1) of 8, 16, 24 or
// 32 input channels with bias and activation (none, ReLU, clamp, SiLU) fused, in fp32 FMAs; x,
// weights, bias and output of one float dtype, 16-byte aligned. `applies` says whether a
// convolution layer is one it runs (no residual, no second activation).
bool pointwise_nhwc_applies(const ConvolutionParams& p, const TensorView& x, const TensorView& w,
                            const TensorView* bias, const TensorView* residual,
                            const TensorView& out);
void launch_pointwise_nhwc(cudaStream_t stream, const std::string& layer,
                           const ConvolutionParams& p, const TensorView& x, const TensorView& w,
                           const TensorView* bias, const TensorView& out);
// elementwise.cu: converts `n` elements between dtypes (float<->f16/bf16, ...).
void launch_convert(cudaStream_t stream, const std::string& layer, const void* src, DataType from,
                    void* dst, DataType to, int64_t n);
// fill.cu: writes host-known integer values (shape tensors) by a kernel launch, which a CUDA graph
// can capture; false (nothing done) when there are too many for one launch.
bool launch_write_values(cudaStream_t stream, const TensorView& dst,
                         const std::vector<int64_t>& values);
// reduce.cu: y[o, i] = op over j of x[o, j, i] for x viewed as [outer, m, inner] (sum, mean, max,
// min; x and y of one float dtype); false (nothing launched) for other ops or dtypes. Long
// reductions over few outputs split m over blocks and combine partials from res's workspace.
bool launch_reduce_middle(cudaStream_t stream, Resources& res, const std::string& layer,
                          const TensorView& x, const TensorView& y, int64_t outer, int64_t m,
                          int64_t inner, ReduceOp op);
// device_util.cu: a one-thread kernel that holds the stream until the host writes a nonzero
// value to flag[0] (host-mapped memory) or `timeout_ns` passes; then it writes 1 to flag[1] if
// it timed out. Profiling enqueues the layers behind it so that host time is not device time.
void launch_gate(cudaStream_t stream, volatile int* flag, long long timeout_ns);
// shuffle.cu: dst (dense, `shape`) = src at `src_offset` + sum(index_d * src_strides[d]) elements.
void launch_strided_copy(cudaStream_t stream, const std::string& layer, size_t elem_size,
                         const void* src, int64_t src_offset,
                         const std::vector<int64_t>& src_strides, const Shape& shape, void* dst);
// shuffle.cu: constant pad of a dense tensor (begin/end per dim).
void launch_pad(cudaStream_t stream, const std::string& layer, const TensorView& in,
                const TensorView& out, const std::vector<int64_t>& begin, PadMode mode,
                double value);

}  // namespace kiln::engine::cuda
