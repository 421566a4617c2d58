// CUDA kernels of scaled dot-product attention, with the CPU kernel's semantics. Two paths:
// - flash: q, k, v and out all f16, all bf16, or all f32 with the layer's tf32 (on TF32 tensor
//   cores: q, k, v and p rounded to TF32, as the f32 matmuls of the decomposed form would), E == Ev
//   a multiple of 16 up to 128, equal batch dims (fused_attention_applies, which the builder asks
//   too), 16-byte aligned data, and tiles the device's shared memory holds (flash_fits); causal or
//   not, with or without a mask of any broadcast over [batch..., L, S] (bool: keep where true;
//   f16, bf16 or f32: added to the scaled scores). It also reads packed heads
//   (AttentionParams::heads: q, k, v as column ranges of [B, rows, width] tensors, the output [B,
//   L, heads * E]) through row strides. 16 query rows a warp; q k^T and p v run on tensor cores
//   (mma.sync on ldmatrix fragments, float accumulation; f32's v by scalar loads) around an online
//   softmax in float held in registers, with p rounded to the input dtype (TF32 for f32) for p v,
//   one 64-key tile at a time (attend_tile).
//   Key fragments past S, and warps whose 16 rows are all past L, skip their math. Two kernels:
//   - resident (S <= 256, and at least two blocks an SM): a block copies all of a matrix's keys
//     and values into shared memory once (cp.async, one group per 64-key tile, the first round
//     starting on tile 0 while the rest land) and its 4 to 8 warps walk its query rows, 16 at a
//     time, without block barriers after the first round;
//   - streaming (longer S): a block of 4 warps takes 64 query rows and streams key/value tiles
//     through two shared-memory stages (latency-bound at S = 197, bench/NOTES.md G17).
// - otherwise the simple kernel: one block per query row computes its scores (in a workspace row),
//   a safe softmax and the weighted sum of values, in double like the CPU kernel.
// The flash kernels are in attention_flash.cuh, compiled one element type a file
// (attention_flash_f16.cu, _bf16.cu, _f32.cu). Rows whose every position is masked out produce
// zeros. Where the flash kernel takes an f16 or
// bf16 layer, cuDNN's fused attention may run it instead, chosen per shape (attention_cudnn.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/cuda/attention_cudnn.h"
#include "engine/cuda/attention_flash.cuh"
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {
namespace {

using flash::FlashArgs;
using flash::FlashOperand;
using flash::FlashSmem;
using flash::kWarp;
using flash::with_head_size;
constexpr int kAttentionThreads = 128;

template <bool kMax>
__device__ double block_reduce(double v) {
  __shared__ double partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const double other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmax(v, other) : v + other;
  }
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  v = lane < warps ? partial[lane] : (kMax ? -INFINITY : 0.0);
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const double other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmax(v, other) : v + other;
  }
  return v;
}

struct AttentionArgs {
  const void *q, *k, *v, *mask;
  DataType qt, kt, vt, mt, ot;
  void* out;
  Dims qb, kb, vb;  // output batch index -> operand batch index (in matrices)
  Dims md;          // flat [batch, L, S] index -> mask element
  int64_t L, S, E, Ev, rows;
  double scale;
  bool causal, bool_mask;
  double* scores;  // rows x S
};

__global__ void attention_kernel_t(AttentionArgs a) {
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const int64_t b = r / a.L, i = r % a.L;
    const int64_t qrow = (offset_of(a.qb, b) * a.L + i) * a.E;
    const int64_t kmat = offset_of(a.kb, b) * a.S * a.E;
    const int64_t vmat = offset_of(a.vb, b) * a.S * a.Ev;
    double* score = a.scores + r * a.S;
    double mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < a.S; j += blockDim.x) {
      double s = -INFINITY;
      bool kept = !(a.causal && j > i);
      if (kept && a.mask && a.bool_mask) {
        kept = load_as<int64_t>(a.mt, a.mask, offset_of(a.md, r * a.S + j)) != 0;
      }
      if (kept) {
        double dot = 0;
        for (int64_t e = 0; e < a.E; ++e) {
          dot += static_cast<double>(load_as<float>(a.qt, a.q, qrow + e)) *
                 load_as<float>(a.kt, a.k, kmat + j * a.E + e);
        }
        s = dot * a.scale;
        if (a.mask && !a.bool_mask) s += load_as<float>(a.mt, a.mask, offset_of(a.md, r * a.S + j));
      }
      score[j] = s;
      mx = fmax(mx, s);
    }
    mx = block_reduce<true>(mx);
    double sum = 0;
    if (mx != -INFINITY) {
      for (int64_t j = threadIdx.x; j < a.S; j += blockDim.x) {
        const double w = exp(score[j] - mx);
        score[j] = w;
        sum += w;
      }
    }
    sum = block_reduce<false>(sum);
    __syncthreads();  // every score row entry is final before any thread reads the row
    for (int64_t e = threadIdx.x; e < a.Ev; e += blockDim.x) {
      double acc = 0;
      if (mx != -INFINITY) {
        for (int64_t j = 0; j < a.S; ++j) {
          const double w = score[j] / sum;
          if (w != 0) acc += w * load_as<float>(a.vt, a.v, vmat + j * a.Ev + e);
        }
      }
      store_as<double>(a.ot, a.out, r * a.Ev + e, acc);
    }
    __syncthreads();
  }
}

Shape batch_of(const Shape& s) {
  return Shape(s.begin(), s.end() - 2);
}

// ---- flash path (the kernels: attention_flash.cuh) ----
// Whether L and S fit the flash kernels' 32-bit row indices.
bool rows_fit(int64_t L, int64_t S) {
  return L < (int64_t{1} << 30) && S < (int64_t{1} << 30);
}

// The streaming kernel's shared memory for `dtype` and head size E (0: no flash kernel).
size_t streaming_bytes(DataType dtype, int64_t E) {
  size_t bytes = 0;
  with_head_size(E, [&](auto e) {
    constexpr int kE = decltype(e)::value;
    bytes = dtype == DataType::kF32 ? FlashSmem<float, kE>::kBytes : FlashSmem<__half, kE>::kBytes;
  });
  return bytes;
}

// Whether the flash kernels of `dtype` run head size E on the device: f32 only on TF32 (the
// layer's tf32: not under --disable-tf32), and the streaming kernel's two stages within the
// device's shared memory (f32 at E = 128 asks 165 KiB, past sm_80's and sm_86's limits; the
// builder keeps such layers from the fused kernel, fused_attention_fits, and a plan built for
// another device would run them on the simple kernel).
bool flash_fits(DataType dtype, int64_t E, bool tf32, int device) {
  if (dtype == DataType::kF32 && !tf32) return false;
  const size_t bytes = streaming_bytes(dtype, E);
  return bytes > 0 && bytes <= optin_shared_bytes(device);
}

// Whether the flash kernel runs this layer: what the builder asks too (fused_attention_applies),
// one dtype throughout, out shaped as q (no broadcast batch), data aligned for 16-byte access, a
// mask (if any) of bool or a float type, and flash_fits.
bool flash_applies(const AttentionParams& p, const std::vector<TensorView>& in,
                   const TensorView& out, int device) {
  const TensorView &q = in[0], &k = in[1], &v = in[2];
  if (p.has_mask && !fused_attention_mask_applies(in[3].dtype)) return false;
  return fused_attention_applies(q.shape, k.shape, v.shape, q.dtype) &&
         flash_fits(q.dtype, q.shape.back(), p.tf32, device) &&
         rows_fit(q.shape[q.shape.size() - 2], k.shape[k.shape.size() - 2]) && k.dtype == q.dtype &&
         v.dtype == q.dtype && out.dtype == q.dtype && out.shape == q.shape && aligned16(q.data) &&
         aligned16(k.data) && aligned16(v.data) && aligned16(out.data);
}

// The same for packed heads (AttentionParams::heads > 0), where rows and column offsets must
// keep 16-byte alignment too.
bool flash_applies_packed(const AttentionParams& p, const std::vector<TensorView>& in,
                          const TensorView& out, int device) {
  const int64_t B = out.shape[0], L = out.shape[1], S = in[1].shape[1];
  if ((p.has_mask && !fused_attention_mask_applies(in[3].dtype)) || !rows_fit(L, S) ||
      !flash_fits(out.dtype, p.head_size, p.tf32, device) ||
      !fused_attention_applies({B, p.heads, L, p.head_size}, {B, p.heads, S, p.head_size},
                               {B, p.heads, S, p.head_size}, out.dtype)) {
    return false;
  }
  for (size_t i = 0; i < 3; ++i) {
    const TensorView& t = in[i];
    if (t.dtype != out.dtype || t.shape[0] != B || t.shape[2] % 8 != 0 || p.columns[i] % 8 != 0 ||
        !aligned16(t.data)) {
      return false;
    }
  }
  return aligned16(out.data);
}

void run_flash(KernelArgs& args, FlashArgs& a, const AttentionParams& p, DataType t, int64_t E) {
  const double scale = p.scale != 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(E));
  a.scale_log2 = static_cast<float>(scale * 1.4426950408889634);  // log2(e)
  a.causal = p.causal;
  if (t == DataType::kF16) {
    flash::launch<__half>(args, a, E);
  } else if (t == DataType::kBF16) {
    flash::launch<__nv_bfloat16>(args, a, E);
  } else {
    flash::launch<float>(args, a, E);
  }
}

// The mask (input 3), broadcast to the attention weights `weights` ([batch..., L, S]).
void set_mask(KernelArgs& args, FlashArgs& a, const Shape& weights) {
  const TensorView& m = args.inputs[3];
  a.md = broadcast_dims(args.layer.name, weights, {m.shape})[1];
  // The mask's strides along L and S: its last two dims (absent or 1: broadcast).
  const size_t r = m.shape.size();
  const int64_t mask_l = r >= 2 ? m.shape[r - 2] : 1, mask_s = r >= 1 ? m.shape[r - 1] : 1;
  a.mask_col = mask_s == 1 ? 0 : 1;
  a.mask_row = mask_l == 1 ? 0 : mask_s;
  a.mask = m.data, a.mt = m.dtype, a.bool_mask = m.dtype == DataType::kBool;
}

void flash_attention(KernelArgs& args, const AttentionParams& p) {
  const TensorView &q = args.inputs[0], &k = args.inputs[1], &v = args.inputs[2];
  const TensorView& out = args.outputs[0];
  FlashArgs a{};
  a.q = q.data, a.k = k.data, a.v = v.data, a.out = out.data;
  a.L = static_cast<int>(q.shape[q.shape.size() - 2]);
  a.S = static_cast<int>(k.shape[k.shape.size() - 2]);
  a.batch = volume(batch_of(out.shape)), a.heads = 1, a.kv_group = 1;
  const int64_t E = q.shape.back();
  a.qo = a.oo = FlashOperand{a.L * E, 0, E};
  a.ko = a.vo = FlashOperand{a.S * E, 0, E};
  if (p.has_mask) {
    Shape weights = batch_of(out.shape);
    weights.push_back(a.L);
    weights.push_back(a.S);
    set_mask(args, a, weights);
  }
  run_flash(args, a, p, q.dtype, E);
}

// Packed heads: matrix (b, h) of operand i starts at column columns[i] + h * E of batch b (k and
// v: head h / (heads / kv_heads)).
void flash_attention_packed(KernelArgs& args, const AttentionParams& p) {
  const std::vector<TensorView>& in = args.inputs;
  const TensorView& out = args.outputs[0];
  const int64_t E = p.head_size;
  FlashArgs a{};
  const auto at = [&](size_t i) {
    return static_cast<const char*>(in[i].data) +
           p.columns[i] * static_cast<int64_t>(dtype_size(out.dtype));
  };
  a.q = at(0), a.k = at(1), a.v = at(2), a.out = out.data;
  a.L = static_cast<int>(out.shape[1]), a.S = static_cast<int>(in[1].shape[1]);
  a.batch = out.shape[0] * p.heads, a.heads = p.heads;
  a.kv_group = p.kv_heads > 0 ? p.heads / p.kv_heads : 1;
  const auto operand = [&](const TensorView& t) {
    return FlashOperand{t.shape[1] * t.shape[2], E, t.shape[2]};
  };
  a.qo = operand(in[0]), a.ko = operand(in[1]), a.vo = operand(in[2]), a.oo = operand(out);
  if (p.has_mask) set_mask(args, a, {out.shape[0], p.heads, a.L, a.S});
  run_flash(args, a, p, out.dtype, E);
}

void attention_kernel(KernelArgs& args) {
  const auto& p = std::get<AttentionParams>(args.layer.params);
  const TensorView &q = args.inputs[0], &k = args.inputs[1], &v = args.inputs[2];
  const TensorView& out = args.outputs[0];
  if (out.numel() == 0) return;  // (a grid of no blocks is a launch error)
  if (p.heads > 0) {
    KILN_CHECK(flash_applies_packed(p, args.inputs, out, args.res.device()), Unsupported, "layer `",
               args.layer.name,
               "`: packed attention heads run on the flash kernel only (f16, bf16, or f32 on ",
               "TF32 where the device's shared memory holds its tiles; head size a multiple of 16 ",
               "up to 128, rows and column offsets in multiples of 8 elements, fewer than 2^30 ",
               "query and key rows, a bool or float mask); got ", dtype_name(out.dtype),
               p.tf32 ? " (tf32)" : "", ", head size ", p.head_size, ", ", out.shape[1],
               " query and ", args.inputs[1].shape[1], " key rows");
    if (!attention_on_cudnn(args, p, flash_attention_packed)) flash_attention_packed(args, p);
    return;
  }
  if (flash_applies(p, args.inputs, out, args.res.device())) {
    if (!attention_on_cudnn(args, p, flash_attention)) flash_attention(args, p);
    return;
  }
  const Shape batch = batch_of(out.shape);
  AttentionArgs a{};
  a.q = q.data, a.k = k.data, a.v = v.data, a.out = out.data;
  a.qt = q.dtype, a.kt = k.dtype, a.vt = v.dtype, a.ot = out.dtype;
  a.L = q.shape[q.shape.size() - 2], a.E = q.shape.back();
  a.S = k.shape[k.shape.size() - 2], a.Ev = v.shape.back();
  a.rows = volume(batch) * a.L;
  a.scale = p.scale != 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(a.E));
  a.causal = p.causal;
  const auto bd = broadcast_dims(args.layer.name, batch,
                                 {batch_of(q.shape), batch_of(k.shape), batch_of(v.shape)});
  a.qb = bd[1], a.kb = bd[2], a.vb = bd[3];
  if (p.has_mask) {
    const TensorView& m = args.inputs[3];
    Shape weights = batch;
    weights.push_back(a.L);
    weights.push_back(a.S);
    a.md = broadcast_dims(args.layer.name, weights, {m.shape})[1];
    a.mask = m.data, a.mt = m.dtype, a.bool_mask = m.dtype == DataType::kBool;
  }
  const size_t score_bytes = static_cast<size_t>(a.rows * a.S) * sizeof(double);
  KILN_CHECK(score_bytes <= (size_t{1} << 30), Unsupported, "layer `", args.layer.name,
             "`: attention scores of ", score_bytes, " bytes (the simple CUDA kernel keeps them)");
  a.scores = static_cast<double*>(args.res.workspace(score_bytes));
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(a.rows, 65535 * 16));
  attention_kernel_t<<<grid, kAttentionThreads, 0, args.stream()>>>(a);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

}  // namespace

bool fused_attention_fits(DataType dtype, int64_t E, int compute_capability) {
  // The shared memory a block may ask for (cudaDevAttrMaxSharedMemoryPerBlockOptin) by
  // architecture; 99 KiB where it is not known to be more.
  const int cc = compute_capability;
  const size_t limit = cc == 80 || cc == 87                              ? 163 * 1024
                       : cc == 90 || cc == 100 || cc == 103 || cc == 110 ? 227 * 1024
                                                                         : 99 * 1024;
  const size_t bytes = streaming_bytes(dtype, E);
  return bytes > 0 && bytes <= limit;
}

FlashLaunch flash_launch(DataType dtype, int64_t E, int64_t L, int64_t S, int64_t pairs, int device,
                         bool key_split) {
  FlashLaunch launch;
  pairs = std::min<int64_t>(pairs, 65535);  // (the grid's y)
  const bool known = dtype == DataType::kF16
                         ? flash::launch_shape<__half>(E, L, S, pairs, device, key_split, &launch)
                     : dtype == DataType::kBF16 ? flash::launch_shape<__nv_bfloat16>(
                                                      E, L, S, pairs, device, key_split, &launch)
                     : dtype == DataType::kF32
                         ? flash::launch_shape<float>(E, L, S, pairs, device, key_split, &launch)
                         : false;
  KILN_CHECK(known, InvalidArgument, "no flash attention kernel for ", dtype_name(dtype), " E=", E);
  return launch;
}

void register_attention(KernelTable& t) {
  t.set<AttentionParams>(attention_kernel, kFloatTypes);
}

}  // namespace kiln::engine::cuda
