// CUDA kernel of the convolution family: cuDNN's convolution (NCHW, or NHWC for channels-last
// layers; f32 with FMA math so that fp32 stays fp32 unless the layer allows TF32, f16/bf16 on
// tensor cores with fp32 accumulation) for 1-3 spatial dims, groups and dilation; deconvolution as
// cuDNN's backward-data. Bias + ReLU (and residual + ReLU) fuse through
// cudnnConvolutionBiasActivationForward; other post-ops run in the post-op kernel. Forward
// algorithms come from cuDNN's heuristic, in its order; one that fails to run is replaced by the
// next (see bench/NOTES.md G4 for why not by timing). Channels-last convolutions whose kernel
// equals their stride (no padding: 1x1 convolutions of 32 or more input channels, ViT's 16x16/16
// stem) run as one cuBLASLt GEMM (the matmul kernel) instead, on x itself or on a gather of its
// patches; depthwise ones run depthwise.cu; grouped ones whose groups are 8-64 channels wide in
// f16/bf16 (8-48 in f32 on TF32) and not powers of two (24, 40, 48, 56) run grouped.cu
// (cuda_grouped=cudnn keeps them on cuDNN, =kernel sends every width it takes); 1x1 ones of 8-32
// input channels over many pixels with at most bias + ReLU/clamp/SiLU (mobilenet's and
// efficientnet's expansions) run pointwise.cu, checked before the GEMM.
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/cuda/convolution_algorithms.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels.h"
#include "util/logging.h"

namespace kiln::engine::cuda {
namespace {

std::vector<int> to_int(const Shape& s) {
  return std::vector<int>(s.begin(), s.end());
}

cudnnDataType_t cudnn_type(DataType t) {
  return t == DataType::kF16 ? CUDNN_DATA_HALF
                             : (t == DataType::kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT);
}

// `s` is channels-first; `channels_last` says the memory is [N, spatial..., C].
void set_tensor(cudnnTensorDescriptor_t d, const Shape& s, cudnnDataType_t type,
                bool channels_last = false) {
  if (channels_last) {
    KILN_CUDNN_CHECK(cudnnSetTensorNdDescriptorEx(d, CUDNN_TENSOR_NHWC, type,
                                                  static_cast<int>(s.size()), to_int(s).data()));
    return;
  }
  const auto strides = contiguous_strides(s);
  KILN_CUDNN_CHECK(cudnnSetTensorNdDescriptor(d, type, static_cast<int>(s.size()), to_int(s).data(),
                                              to_int(strides).data()));
}

// 1-d convolutions run as 2-d ones over a height of 1.
Shape lift(const Shape& s) {
  if (s.size() != 3) return s;
  return {s[0], s[1], 1, s[2]};
}

std::vector<int64_t> lift_param(const std::vector<int64_t>& v, size_t spatial, int64_t fill,
                                int64_t one) {
  std::vector<int64_t> r = v.empty() ? std::vector<int64_t>(spatial, fill) : v;
  if (spatial == 1) r.insert(r.begin(), one);
  return r;
}

// 1x1 convolutions run as GEMMs from this many input channels, or on few pixels at any count
// (squeeze-excitation's 20 -> 480 on 1x1 maps: 0.020 ms on cuDNN, 0.009 as a GEMM).
constexpr int64_t kPointwiseGemmMinChannels = 32, kPointwiseGemmMaxRows = 4096;

// The GEMM path: kernel == stride, no padding, dilation or groups, channels-last 2-d (1x1/1
// convolutions, ViT's 16x16/16 patch embedding). Each output pixel's receptive field is then its
// own [kh, kw, C] block of x, so the convolution is patches [N * OH * OW, kh * kw * C] times the
// filter [Cout, kh * kw * C]^T, where the patches are x itself for a 1x1 convolution and a
// strided copy of it otherwise. A residual must be of the output's shape (the GEMM sees it as
// [N * OH * OW, Cout]). Where cuDNN was faster (bench/NOTES.md G15) it keeps the convolution:
// 1x1 ones of fewer than 32 input channels over many pixels (efficientnet's 16 -> 96 expansion at
// 112x112, unless pointwise.cu takes it first) and strided 1x1 ones (gathering their pixels first
// cost more than it saved). The switch cuda_pointwise=cudnn keeps every 1x1 one on cuDNN.
bool patch_gemm_applies(const ConvolutionParams& p, const TensorView& x, const TensorView& w,
                        const TensorView* residual, const TensorView& out,
                        const KernelOptions& options) {
  const auto all = [](const std::vector<int64_t>& v, int64_t value) {
    return std::all_of(v.begin(), v.end(), [&](int64_t e) { return e == value; });
  };
  if (!(p.channels_last && !p.transposed && p.groups == 1 && x.shape.size() == 4 &&
        w.shape.size() == 4 && p.strides.size() == 2 && p.strides[0] == w.shape[1] &&
        p.strides[1] == w.shape[2] && all(p.padding_begin, 0) && all(p.padding_end, 0) &&
        all(p.dilations, 1) && (!residual || residual->shape == out.shape))) {
    return false;
  }
  if (w.shape[1] * w.shape[2] > 1) return true;  // a patch embedding
  const int64_t pixels = x.shape[0] * x.shape[1] * x.shape[2];
  return !options.pointwise_on_cudnn &&
         (x.shape[3] >= kPointwiseGemmMinChannels || pixels <= kPointwiseGemmMaxRows);
}

struct PatchGemmState : KernelState {
  std::unique_ptr<KernelState> gemm;  // the matmul kernel's
};

// The matmul kernel's workspace need (cuBLASLt's 32 MiB, nothing expanded) with room to spare.
constexpr size_t kGemmWorkspace = size_t{64} << 20;

// The first call at a shape that is no profile point keeps the algorithms chosen before
// (Resources::tune), and cuDNN's own set-up for new descriptors still costs it 0.2-0.5 ms a
// convolution (resnet50's first call at batch 4: 6.0 of 6.1 ms of host time, NOTES.md G59). So
// such a call runs a 2-d channels-last convolution of one group as patches times the filter
// instead (padded, gathered, one GEMM that keeps its algorithm from shape to shape), up to this
// many bytes of patches: KernelOptions::first_call_gemm, on by default (the first call at batch 4
// 2.8 ms, G60). The shape's next call is tuned on cuDNN and then captured.
constexpr size_t kFirstCallPatchBytes = size_t{128} << 20;

bool first_call_gemm_applies(const ConvolutionParams& p, const TensorView& x, const TensorView& w,
                             const TensorView* residual, const TensorView& out) {
  if (!(p.channels_last && !p.transposed && p.groups == 1 && x.shape.size() == 4 &&
        w.shape.size() == 4 && out.shape.size() == 4 && p.strides.size() == 2 &&
        (p.dilations.empty() || p.dilations.size() == 2) &&
        (p.padding_begin.empty() || p.padding_begin.size() == 2) &&
        (p.padding_end.empty() || p.padding_end.size() == 2) &&
        (!residual || residual->shape == out.shape))) {
    return false;
  }
  const int64_t rows = out.shape[0] * out.shape[1] * out.shape[2];
  const int64_t depth = w.shape[1] * w.shape[2] * w.shape[3];
  return static_cast<size_t>(rows * depth) * dtype_size(x.dtype) <= kFirstCallPatchBytes;
}

// A 2-d channels-last convolution of one group as patches [N * OH * OW, kh * kw * C] times the
// filter [Cout, kh * kw * C]^T: the input padded first where the convolution pads, then each
// output pixel's receptive field gathered (strides and dilations as a strided copy), unless it is
// x itself (a 1x1 convolution of stride 1 without padding).
void patch_gemm(KernelArgs& args, const ConvolutionParams& p, const TensorView& x,
                const TensorView& w, const TensorView* bias, const TensorView* residual,
                const TensorView& out, std::unique_ptr<KernelState>& gemm_state) {
  const int64_t n = x.shape[0], c = x.shape[3], h = x.shape[1], wi = x.shape[2];
  const int64_t kh = w.shape[1], kw = w.shape[2], cout = w.shape[0];
  const int64_t oh = out.shape[1], ow = out.shape[2];
  const int64_t rows = n * oh * ow, depth = kh * kw * c;
  const int64_t sh = p.strides[0], sw = p.strides[1];
  const int64_t dh = p.dilations.empty() ? 1 : p.dilations[0];
  const int64_t dw = p.dilations.empty() ? 1 : p.dilations[1];
  const int64_t top = p.padding_begin.empty() ? 0 : p.padding_begin[0];
  const int64_t left = p.padding_begin.empty() ? 0 : p.padding_begin[1];
  const int64_t bottom = p.padding_end.empty() ? 0 : p.padding_end[0];
  const int64_t right = p.padding_end.empty() ? 0 : p.padding_end[1];
  const bool padded = top || left || bottom || right;
  const int64_t hp = h + top + bottom, wp = wi + left + right;
  const size_t es = dtype_size(x.dtype);
  const auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const bool gather = kh * kw > 1 || sh != 1 || sw != 1 || padded;
  const size_t pad_slot = padded ? aligned(static_cast<size_t>(n * hp * wp * c) * es) : 0;
  const size_t slot = gather ? aligned(static_cast<size_t>(rows * depth) * es) : 0;
  auto* ws = static_cast<uint8_t*>(args.res.workspace(pad_slot + slot + kGemmWorkspace));
  const void* source = x.data;
  if (padded) {
    launch_pad(args.stream(), args.layer.name, x, TensorView{x.dtype, {n, hp, wp, c}, ws},
               {0, top, left, 0}, PadMode::kConstant, 0.0);
    source = ws;
  }
  // patches[n, oy, ox, r, s, c] = xp[n, oy * sh + r * dh, ox * sw + s * dw, c]
  if (gather) {
    launch_strided_copy(args.stream(), args.layer.name, es, source, 0,
                        {hp * wp * c, sh * wp * c, sw * c, dh * wp * c, dw * c, 1},
                        {n, oh, ow, kh, kw, c}, ws + pad_slot);
  }
  const void* patches = gather ? static_cast<const void*>(ws + pad_slot) : x.data;
  MatMulParams mp;
  mp.transpose_b = true;
  mp.post = p.post;
  mp.tf32 = p.tf32;
  Layer gemm{args.layer.name, mp, {}, {}};
  std::vector<TensorView> inputs = {{x.dtype, {rows, depth}, const_cast<void*>(patches)},
                                    {w.dtype, {cout, depth}, w.data}};
  if (bias) inputs.push_back(*bias);
  if (residual) inputs.push_back({residual->dtype, {rows, cout}, residual->data});
  const std::vector<TensorView> outputs = {{out.dtype, {rows, cout}, out.data}};
  WorkspaceAfter res(args.res, pad_slot + slot, ws);
  KernelArgs gemm_args{gemm, inputs, outputs, gemm_state, res};
  run_matmul(gemm_args);
}

void convolution_kernel(KernelArgs& args) {
  const auto& p = std::get<ConvolutionParams>(args.layer.params);
  const std::string& name = args.layer.name;
  const TensorView &x = args.inputs[0], &w = args.inputs[1], &out = args.outputs[0];
  size_t in_idx = 2;
  const TensorView* bias = p.post.has_bias ? &args.inputs[in_idx++] : nullptr;
  const TensorView* residual = p.post.has_residual ? &args.inputs[in_idx++] : nullptr;
  if (depthwise_nhwc_applies(p, x, w, residual, out)) {
    launch_depthwise_nhwc(args.stream(), name, p, x, w, bias, residual, out,
                          args.res.options().depthwise_tiled);
    return;
  }
  if (grouped_nhwc_applies(p, x, w, bias, residual, out, args.res.options().grouped)) {
    launch_grouped_nhwc(args.stream(), name, p, x, w, bias, residual, out);
    return;
  }
  // Few input channels over many pixels: our kernel (cuBLASLt's tiles are poor at K <= 32);
  // few pixels stay on the GEMM.
  if (!args.res.options().pointwise_on_cudnn && x.shape.size() == 4 &&
      x.shape[0] * x.shape[1] * x.shape[2] > kPointwiseGemmMaxRows &&
      pointwise_nhwc_applies(p, x, w, bias, residual, out)) {
    launch_pointwise_nhwc(args.stream(), name, p, x, w, bias, out);
    return;
  }
  if (patch_gemm_applies(p, x, w, residual, out, args.res.options())) {
    patch_gemm(args, p, x, w, bias, residual, out, state_of<PatchGemmState>(args.state).gemm);
    return;
  }
  const size_t spatial = x.shape.size() - 2;
  const auto strides = lift_param(p.strides, spatial, 1, 1);
  const auto dil = lift_param(p.dilations, spatial, 1, 1);
  const auto pb = lift_param(p.padding_begin, spatial, 0, 0);
  const auto pe = lift_param(p.padding_end, spatial, 0, 0);
  const bool asymmetric = pb != pe;
  // cuDNN's dims are channels-first whatever the layout; a channels-last layer says so in the
  // descriptors (NHWC tensors and filters).
  const bool cl = p.channels_last;
  const auto first = [&](const Shape& s) { return cl ? to_channels_first(s) : s; };
  Shape xs = lift(first(x.shape)), ws = lift(first(w.shape)), ys = lift(first(out.shape));
  cudaStream_t stream = args.stream();
  auto handle = static_cast<cudnnHandle_t>(args.res.cudnn());

  const ActivationKind act = p.post.activation, act2 = p.post.activation2;
  // f32 without TF32: FMA math, and no algorithm that would round to TF32 anyway. With TF32,
  // cuDNN's default math lets f32 run on tensor cores (as PyTorch's allow_tf32 does).
  const bool f32 = out.dtype == DataType::kF32 && !p.tf32;
  const cudnnDataType_t type = cudnn_type(out.dtype);
  const int64_t channels = ys[1];
  const bool full_bias = bias && bias->dtype == out.dtype && bias->numel() == channels;
  // cuDNN fuses y = relu(conv + z + bias): our act(conv + bias) [+ res, act2] fits two ways.
  const bool fuse_relu = !p.transposed && full_bias && act == ActivationKind::kRelu && !residual;
  const bool fuse_residual = !p.transposed && full_bias && act == ActivationKind::kNone &&
                             residual && residual->dtype == out.dtype &&
                             residual->shape == out.shape && act2 == ActivationKind::kRelu;
  std::vector<int64_t> key = {static_cast<int64_t>(out.dtype), cl ? 1 : 0, p.tf32 ? 1 : 0};
  key.insert(key.end(), xs.begin(), xs.end());
  key.insert(key.end(), ws.begin(), ws.end());
  auto& states = state_of<ConvStates>(args.state);
  ConvState* state = states.find(key);
  // Tuning is asked for only where this shape's choice is still to be made (Resources::tune).
  const bool tune = (!state || !state->tuned) && args.res.tune();
  if (!state && !tune && args.res.new_shape() && args.res.options().first_call_gemm &&
      first_call_gemm_applies(p, x, w, residual, out)) {
    patch_gemm(args, p, x, w, bias, residual, out, states.first_call_gemm);
    return;
  }
  if (!state || (tune && !state->tuned)) {
    auto fresh = std::make_unique<ConvState>();
    fresh->key = key;
    std::vector<int64_t> pad = pb;
    Shape conv_in = xs;
    if (asymmetric && !p.transposed) {
      for (size_t d = 0; d < pad.size(); ++d) conv_in[d + 2] += pb[d] + pe[d];
      std::fill(pad.begin(), pad.end(), 0);
      fresh->padded_input = conv_in;
    }
    set_tensor(fresh->x, p.transposed ? ys : conv_in, type, cl);
    set_tensor(fresh->y, p.transposed ? conv_in : ys, type, cl);
    KILN_CUDNN_CHECK(cudnnSetFilterNdDescriptor(fresh->w, type,
                                                cl ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                                static_cast<int>(ws.size()), to_int(ws).data()));
    KILN_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(
        fresh->conv, static_cast<int>(pad.size()), to_int(pad).data(), to_int(strides).data(),
        to_int(dil).data(), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    KILN_CUDNN_CHECK(cudnnSetConvolutionGroupCount(fresh->conv, static_cast<int>(p.groups)));
    const cudnnMathType_t math =
        f32 ? CUDNN_FMA_MATH
            : (out.dtype == DataType::kF32 ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH);
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(fresh->conv, math));
    Shape bias_shape(ys.size(), 1);
    bias_shape[1] = ys[1];
    set_tensor(fresh->bias, bias_shape, bias ? cudnn_type(bias->dtype) : CUDNN_DATA_FLOAT);
    KILN_CUDNN_CHECK(
        cudnnSetActivationDescriptor(fresh->relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0));
    int found = 0;
    // The engine's choice for this shape where it has one (made at the plan's build or by another
    // context): no heuristic query, whether or not this call may choose.
    const bool adopted = adopt_choice(args.res, handle, *fresh, p.transposed);
    bool chosen = adopted;
    // Where this shape is not to be tuned now, the algorithm chosen at the nearest shape that was,
    // where it takes this one (cuDNN's heuristic query costs milliseconds a layer at each new
    // shape).
    ConvState* kept = !chosen && !p.transposed && !tune && args.res.options().reuse_algorithms
                          ? nearest_tuned(states, key, xs.size())
                          : nullptr;
    if (kept) {
      size_t bytes = 0;
      if (cudnnGetConvolutionForwardWorkspaceSize(handle, fresh->x, fresh->w, fresh->conv, fresh->y,
                                                  kept->fwd_algo, &bytes) == CUDNN_STATUS_SUCCESS &&
          bytes <= kMaxAlgoWorkspace) {
        fresh->fwd_algo = kept->fwd_algo;
        fresh->algo_workspace = bytes;
        fresh->fallbacks = kept->fallbacks;
        fresh->fusion_failed = kept->fusion_failed;
        chosen = true;
      }
    }
    fresh->tuned = adopted || !chosen;
    fresh->kept_in_engine = adopted;
    const std::vector<int64_t> query =
        chosen ? std::vector<int64_t>{}
               : heuristic_query(args.res.device(), p.transposed, f32, math, type, cl,
                                 {&conv_in, &ys, &ws, &pad, &strides, &dil}, p.groups);
    if (!chosen) {
      if (const std::optional<HeuristicAnswer> a = find_heuristic_answer(query)) {
        fresh->fwd_algo = a->fwd_algo;
        fresh->bwd_algo = a->bwd_algo;
        fresh->algo_workspace = a->workspace;
        fresh->fallbacks = a->fallbacks;
        chosen = true;
      }
    }
    if (!p.transposed && !chosen) {
      count_algorithm_search();
      chosen = heuristic_forward(handle, *fresh, f32);
      if (chosen) {
        keep_heuristic_answer(query,
                              {fresh->fwd_algo, {}, fresh->algo_workspace, fresh->fallbacks});
      }
    } else if (p.transposed && !chosen) {
      count_algorithm_search();
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          handle, fresh->w, fresh->y, fresh->conv, fresh->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
          &found, perf));
      for (int i = 0; i < found && !chosen; ++i) {
        if (!usable(perf[i], f32)) continue;
        fresh->bwd_algo = perf[i].algo;
        fresh->algo_workspace = perf[i].memory;
        chosen = true;
      }
      if (chosen) keep_heuristic_answer(query, {{}, fresh->bwd_algo, fresh->algo_workspace, {}});
    }
    KILN_CHECK(chosen, Unsupported, "layer `", name, "` (convolution): cuDNN has no usable ",
               dtype_name(out.dtype), " algorithm for input ", shape_to_string(x.shape),
               " and weights ", shape_to_string(w.shape));
    // first_call_gemm: the GEMM a first call would run chooses its algorithm here, at a tuned
    // shape (a profile point's), so that a process's first new shape keeps it rather than asking
    // the heuristics. Its output is cuDNN's to overwrite below (not where it is also the residual).
    if (!states.first_call_gemm && tune && args.res.options().first_call_gemm &&
        first_call_gemm_applies(p, x, w, residual, out) &&
        (!residual || residual->data != out.data)) {
      patch_gemm(args, p, x, w, bias, residual, out, states.first_call_gemm);
    }
    state = states.add(std::move(fresh));
  }

  const size_t pad_bytes =
      state->padded_input.empty()
          ? 0
          : static_cast<size_t>(volume(state->padded_input)) * dtype_size(out.dtype);
  const size_t pad_slot = (pad_bytes + 255) / 256 * 256;
  void* algo_ws = nullptr;
  const void* x_ptr = x.data;
  // The workspace holds the padded input (if any) and then the algorithm's workspace; staged
  // again when a fallback algorithm needs a larger one.
  const auto stage = [&] {
    auto* scratch =
        static_cast<uint8_t*>(args.res.workspace(pad_slot + state->algo_workspace + 256));
    algo_ws = scratch + pad_slot;
    if (state->padded_input.empty()) return;
    // The pad kernel works on the layout in memory: channels-last shapes for channels-last data.
    const auto layout = [&](const Shape& s) { return cl ? to_channels_last(s) : s; };
    Shape full_begin(xs.size(), 0);
    for (size_t d = 0; d < pb.size(); ++d) full_begin[d + 2] = pb[d];
    launch_pad(stream, name, TensorView{x.dtype, layout(xs), x.data},
               TensorView{x.dtype, layout(state->padded_input), scratch}, layout(full_begin),
               PadMode::kConstant, 0.0);
    x_ptr = scratch;
  };
  stage();
  const float one = 1.f, zero = 0.f;
  bool fused = false;
  if ((fuse_relu || fuse_residual) && !state->fusion_failed) {
    const void* z = fuse_residual ? residual->data : out.data;
    const float alpha2 = fuse_residual ? 1.f : 0.f;
    const cudnnStatus_t status = cudnnConvolutionBiasActivationForward(
        handle, &one, state->x, x_ptr, state->w, w.data, state->conv, state->fwd_algo, algo_ws,
        state->algo_workspace, &alpha2, state->y, z, state->bias, bias->data, state->relu, state->y,
        out.data);
    fused = status == CUDNN_STATUS_SUCCESS;  // else: the unfused path below, from now on
    if (!fused) state->fusion_failed = true;
  }
  if (!fused && !p.transposed) {
    cudnnStatus_t status;
    for (;;) {
      status = cudnnConvolutionForward(handle, &one, state->x, x_ptr, state->w, w.data, state->conv,
                                       state->fwd_algo, algo_ws, state->algo_workspace, &zero,
                                       state->y, out.data);
      // cuDNN's heuristic may offer an algorithm that then refuses these descriptors: the next
      // one, with its own workspace (refusals come on the first, uncaptured run).
      if (status == CUDNN_STATUS_SUCCESS) break;
      if (state->fallbacks.empty()) {
        // An algorithm kept from another shape that this one refuses after all: the heuristic's
        // choices for this shape, once.
        if (state->tuned) break;
        count_algorithm_search();
        if (!heuristic_forward(handle, *state, f32)) break;
        state->tuned = true;
        stage();
        continue;
      }
      const cudnnConvolutionFwdAlgoPerf_t next = state->fallbacks.front();
      state->fallbacks.erase(state->fallbacks.begin());
      // (the workspace asked again: a reused list's sizes are another shape's)
      size_t bytes = 0;
      if (cudnnGetConvolutionForwardWorkspaceSize(handle, state->x, state->w, state->conv, state->y,
                                                  next.algo, &bytes) != CUDNN_STATUS_SUCCESS ||
          bytes > kMaxAlgoWorkspace) {
        continue;
      }
      KILN_LOG(kDebug, "layer `", name, "`: cuDNN algorithm ", static_cast<int>(state->fwd_algo),
               " refused; trying ", static_cast<int>(next.algo));
      state->fwd_algo = next.algo;
      state->algo_workspace = bytes;
      stage();
    }
    KILN_CHECK(status == CUDNN_STATUS_SUCCESS, DeviceError, "layer `", name,
               "`: cudnnConvolutionForward failed: ", cudnnGetErrorString(status));
  } else if (!fused) {
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardData(
        handle, &one, state->w, w.data, state->y, x_ptr, state->conv, state->bwd_algo, algo_ws,
        state->algo_workspace, &zero, state->x, out.data));
  }
  // A choice made for this shape, as it ran (after any refusals), is the engine's for every
  // context, and for the plan when building.
  if (state->tuned && !state->kept_in_engine) {
    args.res.keep_choice(state->key, encode_choice(*state));
    state->kept_in_engine = true;
  }
  if (fused) return;
  if (bias || residual || act != ActivationKind::kNone || act2 != ActivationKind::kNone) {
    PostOpArgs post;
    post.bias = bias;
    post.channels = bias ? bias->numel() : 1;
    // Bias runs along the channel: innermost for channels-last data.
    post.inner = bias && bias->numel() > 1 && !cl
                     ? out.numel() / std::max<int64_t>(1, out.shape[0] * out.shape[1])
                     : 1;
    post.act = act, post.alpha = p.post.alpha, post.beta = p.post.beta;
    post.residual = residual;
    post.act2 = act2, post.alpha2 = p.post.alpha2, post.beta2 = p.post.beta2;
    launch_post_ops(stream, name, out, post);
  }
}

std::string convolution_support(const Layer& layer, const std::vector<DataType>& in,
                                const std::vector<DataType>&) {
  const auto& p = std::get<ConvolutionParams>(layer.params);
  if (in.at(0) != in.at(1) || !is_floating(in[0])) {
    return std::string("data and weights must share a floating dtype, got ") + dtype_name(in[0]) +
           " and " + dtype_name(in[1]);
  }
  for (DataType t : in) {
    if (!is_floating(t)) return std::string("non-floating input ") + dtype_name(t);
  }
  if (p.transposed && p.padding_begin != p.padding_end) {
    return "transposed convolution with asymmetric padding";
  }
  const size_t spatial = p.strides.size();
  if (spatial > 3) return "more than 3 spatial dims";
  return "";
}

}  // namespace

void register_convolution(KernelTable& t) {
  t.set<ConvolutionParams>(convolution_kernel, kFloatTypes, convolution_support);
}

}  // namespace kiln::engine::cuda
