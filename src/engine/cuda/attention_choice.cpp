// The attention layer's choice between the flash kernel and cuDNN's fused attention, per shape, as
// the GEMMs choose their cuBLASLt algorithms (attention_cudnn.h): where the engine has no choice
// for the shape and the run may choose, both forms are timed as replays of CUDA graphs of their
// launches and the faster is kept for the engine; the cuDNN form runs its graph (built once per
// context and shape: cuDNN's plans are not shared across threads) with the mask as a bias, and
// zeros the rows the mask leaves without keys.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>

#include "engine/cuda/attention_cudnn.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/replay_timing.h"
#include "util/logging.h"

namespace kiln::engine::cuda {
namespace {

std::atomic<int64_t> runs{0};

// The flash form keeps the shape unless cuDNN's is at least this much faster (timing noise is
// ~2%, as for the GEMMs' candidates).
constexpr float kMargin = 0.95f;
// Rows of a converted bias, and its start after the workspace's, in multiples of 16 bytes.
constexpr int64_t kBiasRowElements = 8;
constexpr size_t kWorkspaceAlignment = 256;
// Timing: rounds of each form's graph of launches.
constexpr int kRounds = 5, kLaunches = 5;

// How a layer's mask reaches cuDNN: as it is (a float mask it can read in place), or converted
// into a bias in the workspace (attention_bias.cu).
enum class MaskForm { kNone, kDirect, kConverted };

// The layer's attention as cuDNN sees it, for one call: the shape, the operands' data and the
// mask's form.
struct SdpaLayout {
  SdpaShape shape;
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void* o = nullptr;
  MaskForm mask = MaskForm::kNone;
  SdpaMask m;
  int64_t bias_l = 1, ld = 0;  // a converted bias: [bias_batch, bias_heads, bias_l, ld]
  size_t bias_bytes = 0;       // (0 unless converted)
};

// Where the cuDNN form's own workspace starts: after a converted bias.
size_t bias_end(const SdpaLayout& y) {
  return (y.bias_bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The layout of the layer's call (its shape is one the flash kernel takes), its mask passed as
// it is where `direct` allows and cuDNN can read it; nullopt where the layer is not f16 or bf16.
std::optional<SdpaLayout> layout_of(const KernelArgs& args, const AttentionParams& p, bool direct) {
  const std::vector<TensorView>& in = args.inputs;
  const TensorView& out = args.outputs[0];
  const DataType t = out.dtype;
  if (t != DataType::kF16 && t != DataType::kBF16) return std::nullopt;
  const int64_t es = static_cast<int64_t>(dtype_size(t));
  SdpaLayout y;
  SdpaShape& s = y.shape;
  s.dtype = t;
  s.causal = p.causal;
  Shape weights;        // the attention weights' shape, over which the mask broadcasts
  size_t head_dim = 0;  // the weights' dimension that cuDNN's H is (B is those before it)
  if (p.heads > 0) {
    s.B = out.shape[0], s.H = p.heads, s.kv_heads = p.kv_heads > 0 ? p.kv_heads : p.heads;
    s.L = out.shape[1], s.S = in[1].shape[1], s.E = p.head_size;
    const auto operand = [&](const TensorView& x) {
      return SdpaStrides{x.shape[1] * x.shape[2], s.E, x.shape[2]};
    };
    s.q = operand(in[0]), s.k = operand(in[1]), s.v = operand(in[2]), s.o = operand(out);
    const auto at = [&](size_t i) {
      return static_cast<const char*>(in[i].data) + p.columns[i] * es;
    };
    y.q = at(0), y.k = at(1), y.v = at(2);
    weights = {s.B, s.H, s.L, s.S};
    head_dim = 1;
  } else {
    // [batch..., rows, E] as [B, H, rows, E]: H the last batch dimension, B the others.
    const size_t r = out.shape.size();
    const Shape batch(out.shape.begin(), out.shape.end() - 2);
    s.H = batch.empty() ? 1 : batch.back();
    s.B = volume(batch) / s.H, s.kv_heads = s.H;
    s.L = out.shape[r - 2], s.S = in[1].shape[r - 2], s.E = out.shape[r - 1];
    s.q = s.o = SdpaStrides{s.H * s.L * s.E, s.L * s.E, s.E};
    s.k = s.v = SdpaStrides{s.H * s.S * s.E, s.S * s.E, s.E};
    y.q = in[0].data, y.k = in[1].data, y.v = in[2].data;
    weights = batch;
    weights.push_back(s.L);
    weights.push_back(s.S);
    head_dim = batch.empty() ? r : r - 3;  // (none: no dimension is H)
  }
  y.o = out.data;
  s.scale = static_cast<float>(p.scale != 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(s.E)));
  if (!p.has_mask) return y;

  const TensorView& m = in[3];
  y.m = SdpaMask{m.data, m.dtype, m.shape, weights, s.B, s.H};
  // Which of cuDNN's [B, H, L, S] the mask varies along (its dimensions right-aligned with the
  // weights'), and, where each is one dimension of the mask or several it holds whole (row-major:
  // they merge), the mask's stride along it.
  enum { kB, kH, kL, kS };
  const size_t rw = weights.size(), rm = m.shape.size();
  std::vector<int64_t> mask_strides(rm, 1);
  for (size_t d = rm; d-- > 1;) mask_strides[d - 1] = mask_strides[d] * m.shape[d];
  bool varies[4] = {}, whole[4] = {true, true, true, true};
  int64_t stride[4] = {};
  for (size_t d = 0; d < rw; ++d) {
    const int g = d == rw - 1 ? kS : d == rw - 2 ? kL : d == head_dim ? kH : kB;
    if (weights[d] == 1) continue;
    const bool has = d + rm >= rw && m.shape[d + rm - rw] != 1;  // (broadcast_dims checks sizes)
    varies[g] = varies[g] || has;
    whole[g] = whole[g] && has;
    if (has) stride[g] = mask_strides[d + rm - rw];
  }
  const bool merges = (!varies[kB] || whole[kB]) && (!varies[kH] || whole[kH]);
  const int64_t mask_es = static_cast<int64_t>(dtype_size(m.dtype));
  if (direct && merges && (m.dtype == t || m.dtype == DataType::kF32) && varies[kS] &&
      (s.S * mask_es) % 16 == 0 && aligned16(m.data)) {
    y.mask = MaskForm::kDirect;
    s.bias_dtype = m.dtype;
    // (The strides of dimensions of size 1 are those of a dense tensor: never read.)
    const int64_t row = varies[kL] ? stride[kL] : 0;
    const int64_t head = varies[kH] ? stride[kH] : (varies[kL] ? s.L : 1) * s.S;
    s.bias_strides =
        SdpaStrides{varies[kB] ? stride[kB] : head * (varies[kH] ? s.H : 1), head, row};
  } else {
    y.mask = MaskForm::kConverted;
    s.bias_dtype = t;
    y.bias_l = varies[kL] ? s.L : 1;
    y.ld = (s.S + kBiasRowElements - 1) / kBiasRowElements * kBiasRowElements;
    const int64_t heads = varies[kH] ? s.H : 1;
    s.bias_strides = SdpaStrides{heads * y.bias_l * y.ld, y.bias_l * y.ld, y.bias_l > 1 ? y.ld : 0};
    y.bias_bytes = static_cast<size_t>((varies[kB] ? s.B : 1) * heads * y.bias_l * y.ld * es);
  }
  // cuDNN's bias broadcasts over batches and heads as dimensions of size 1, over query rows by a
  // stride of 0 (as PyTorch's expanded masks).
  s.bias_batch = varies[kB] ? s.B : 1;
  s.bias_heads = varies[kH] ? s.H : 1;
  s.bias = true;
  return y;
}

// What a layer keeps for a shape: its choice (made or taken from the engine) and the cuDNN graph
// built for it (tried once; null where cuDNN does not take the shape).
enum class Form : uint8_t { kFlash = 0, kCudnn = 1, kUnchosen = 2 };
struct SdpaState {
  std::vector<int64_t> key;
  Form form = Form::kUnchosen;
  bool tried = false;
  bool direct = true;  // the graph is layout_of(..., direct)'s
  std::shared_ptr<const SdpaGraph> graph;
};

// Builds the state's graph: with the mask as it is where cuDNN may read it, else (or where that
// graph fails) converted.
void build_graph(KernelArgs& args, const AttentionParams& p, SdpaState& st) {
  st.tried = true;
  std::string why;
  const SdpaLayout y = *layout_of(args, p, true);
  st.direct = true;
  st.graph = build_sdpa_graph(y.shape, args.res.cudnn(), &why);
  if (!st.graph && y.mask == MaskForm::kDirect) {
    st.direct = false;
    st.graph = build_sdpa_graph(layout_of(args, p, false)->shape, args.res.cudnn(), &why);
  }
  if (st.graph) return;
  const SdpaShape& s = y.shape;
  KILN_LOG(kDebug, "layer `", args.layer.name, "`: cuDNN's fused attention does not take B=", s.B,
           " H=", s.H, " kv_heads=", s.kv_heads, " L=", s.L, " S=", s.S, " E=", s.E,
           s.causal ? " causal" : "", s.bias ? " with a mask" : "", " (", why,
           "); the flash kernel runs it");
}

// Whether rows a mask leaves without keys are zeroed after cuDNN's attention (its own result
// there is not documented). KILN_CUDNN_EMPTY_ROWS=0 leaves them as cuDNN gives them: for
// measuring, with CudaAttention.CudnnMatchesTheCpu's rows without keys, whether the kernel that
// zeroes them (one launch a masked layer) is needed.
bool zero_empty_rows() {
  static const bool zero = [] {
    const char* env = std::getenv("KILN_CUDNN_EMPTY_ROWS");
    return env == nullptr || std::string_view(env) != "0";
  }();
  return zero;
}

// Enqueues the cuDNN form on `stream` with the workspace `ws` (reserved for the layout); false with
// the reason in `error` where cuDNN refused.
bool run_cudnn(KernelArgs& args, const SdpaState& st, const SdpaLayout& y, cudaStream_t stream,
               char* ws, std::string* error) {
  const std::string& name = args.layer.name;
  const SdpaShape& s = y.shape;
  const void* bias = y.mask == MaskForm::kDirect ? y.m.data : ws;
  if (y.mask == MaskForm::kConverted) {
    launch_sdpa_bias(stream, name, y.m, s.dtype, s.bias_batch, s.bias_heads, y.bias_l, y.ld, ws);
  }
  if (!run_sdpa_graph(*st.graph, args.res.cudnn(), stream, y.q, y.k, y.v, bias, y.o,
                      ws + bias_end(y), error)) {
    return false;
  }
  if (y.mask != MaskForm::kNone && zero_empty_rows()) {
    launch_sdpa_empty_rows(stream, name, y.m, s.causal, y.o, s.dtype, s.E, s.o);
  }
  return true;
}

// The context's resources on another stream (the timing's), choosing and keeping nothing.
class OnStream : public ResourcesOf {
 public:
  OnStream(Resources& base, cudaStream_t stream) : ResourcesOf(base), stream_(stream) {}
  cudaStream_t stream() const override { return stream_; }
  bool tune() override { return false; }
  bool new_shape() const override { return false; }
  void keep_choice(const std::vector<int64_t>&, std::vector<uint8_t>) override {}

 private:
  cudaStream_t stream_;
};

// Whether `stream` is being captured into a CUDA graph (then nothing may be built or timed).
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

// The faster form for the layer's shape: timed now, or as timed before in the process (by another
// layer or context: BERT's layers share a shape) for `key` on the device.
Form choose_form(KernelArgs& args, const AttentionParams& p, FlashForm flash, SdpaState& st,
                 const SdpaLayout& first, std::vector<int64_t> key) {
  static std::mutex mutex;
  static std::map<std::vector<int64_t>, Form> timed;
  key.push_back(args.res.device());
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = timed.find(key); it != timed.end()) return it->second;
  }
  if (!st.tried) build_graph(args, p, st);
  Form form = Form::kFlash;
  if (st.graph) {
    const SdpaLayout y = st.direct ? first : *layout_of(args, p, false);
    char* ws =
        static_cast<char*>(args.res.workspace(bias_end(y) + sdpa_workspace_bytes(*st.graph)));
    count_algorithm_search();
    std::string error;
    const std::vector<std::function<bool(cudaStream_t)>> forms = {
        [&](cudaStream_t s) {
          OnStream res(args.res, s);
          KernelArgs a{args.layer, args.inputs, args.outputs, args.state, res};
          flash(a, p);
          return true;
        },
        [&](cudaStream_t s) { return run_cudnn(args, st, y, s, ws, &error); }};
    ReplayTiming how;
    how.rounds = kRounds, how.launches = kLaunches;
    const std::vector<float> ms = time_replays(
        args.stream(), 2, [&](int i, cudaStream_t s) { return forms[static_cast<size_t>(i)](s); },
        how);
    form = ms[1] < kMargin * ms[0] ? Form::kCudnn : Form::kFlash;
    KILN_LOG(kDebug, "layer `", args.layer.name, "`: attention on ",
             form == Form::kCudnn ? "cuDNN" : "the flash kernel", " (flash ",
             1000 * ms[0] / kLaunches, " us, cuDNN ", 1000 * ms[1] / kLaunches, " us",
             error.empty() ? "" : ": ", error, ")");
  }
  std::lock_guard<std::mutex> lock(mutex);
  timed[key] = form;
  return form;
}

}  // namespace

bool attention_on_cudnn(KernelArgs& args, const AttentionParams& p, FlashForm flash) {
  const AttentionCudnn mode = args.res.options().attention_cudnn;
  if (mode == AttentionCudnn::kOff || !cudnn_attention_built()) return false;
  // auto leaves masked layers to the flash kernel: a mask costs cuDNN's form two more kernels a
  // call (the mask as a bias, the rows it leaves without keys zeroed: 3.3 and 3.6 us at BERT's
  // batch 1 beside cuDNN's 6.5 against the flash kernel's 16.5), and in a model's graph their
  // launches cost more than the timing of the layer alone saw (hf_bert b1: 0.557 ms against
  // 0.498-0.531 with the flash kernel, NOTES.md G68). Next: the bias made once a run for every
  // layer reading the mask.
  if (mode == AttentionCudnn::kAuto && p.has_mask) return false;
  const std::optional<SdpaLayout> first = layout_of(args, p, true);
  if (!first) return false;
  // The choice's key: the shape as cuDNN sees it with the mask's dtype (how the mask is read).
  std::vector<int64_t> key = first->shape.key();
  key.insert(key.begin(), kAttentionFormTag);
  key.push_back(p.has_mask ? static_cast<int64_t>(args.inputs[3].dtype) : -1);
  const cudaStream_t stream = args.stream();
  const bool captured = capturing(stream);
  auto& states = state_of<StatesByShape<SdpaState>>(args.state);
  SdpaState* st = states.find(key);
  if (!st) {
    // A state added past the bound drops the least recently used, whose cuDNN plan (and the code
    // cuDNN compiled for it) goes with it: not while the context's work may still run it. (CUDA
    // graphs captured with it hold their own reference.)
    if (states.size() >= StatesByShape<SdpaState>::kShapes) {
      if (captured) return false;
      KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    auto fresh = std::make_unique<SdpaState>();
    fresh->key = key;
    st = states.add(std::move(fresh));
  }
  if (mode == AttentionCudnn::kOn) {
    st->form = Form::kCudnn;
  } else if (st->form == Form::kUnchosen) {
    // The engine's choice where it has one (bytes it did not write are as good as none); else
    // chosen now where this run may choose (asked only then), else flash for now.
    const std::optional<std::vector<uint8_t>> kept = args.res.kept_choice(key);
    if (kept && kept->size() == 1 && (*kept)[0] <= 1) {
      st->form = static_cast<Form>((*kept)[0]);
    } else if (args.res.tune() && !captured) {  // (a capture may not choose: tune() says no)
      st->form = choose_form(args, p, flash, *st, *first, key);
      args.res.keep_choice(key, {static_cast<uint8_t>(st->form)});
    } else {
      return false;
    }
  }
  if (st->form != Form::kCudnn) return false;
  if (!st->tried) {
    if (captured) return false;  // (a shape that ran eagerly before has tried)
    build_graph(args, p, *st);
  }
  if (!st->graph) return false;
  const SdpaLayout y = st->direct ? *first : *layout_of(args, p, false);
  char* ws = static_cast<char*>(args.res.workspace(bias_end(y) + sdpa_workspace_bytes(*st->graph)));
  std::string error;
  KILN_CHECK(run_cudnn(args, *st, y, stream, ws, &error), DeviceError, "layer `", args.layer.name,
             "` (attention on cuDNN): ", error);
  runs.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t cudnn_attention_runs() {
  return runs.load(std::memory_order_relaxed);
}

}  // namespace kiln::engine::cuda
