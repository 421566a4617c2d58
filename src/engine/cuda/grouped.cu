// CUDA grouped 2-d convolution on channels-last data (x [N, H, W, C], weights [Cout, kh, kw,
// C / groups]) in f16 or bf16, for groups of 8 to 64 channels a side (regnet's 24 and 48,
// resnext's 8 to 32), and in f32 on TF32 (where the layer allows it) for groups of 8 to 48: an
// implicit GEMM on tensor cores (WMMA, fp32 accumulation). A block takes 64 output pixels (128
// in f32 where the map has enough for that) of a tile of whole groups, as many as fit 64 channels a
// side (8 groups of 8, one of 48; 48 channels in f32, whose staged rows take twice the bytes): for
// each filter tap it stages the pixels' input channels of the tile and the tap's weights as a
// block-diagonal matrix in shared memory (cp.async, two stages, so that the next tap loads while
// this one multiplies); each warp multiplies 16 pixels (or 32: each weight fragment then read once
// for two of the half-as-deep TF32 MMAs) by the tile's filters, skipping the blocks of the MMA that
// lie outside every group, and the epilogue adds bias, activation, residual and the second
// activation. cuDNN's grouped convolutions run 10-100x over the memory floor on regnet's shapes,
// NHWC worst (bench/NOTES.md G48).
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <string>
#include <type_traits>

#include "engine/cuda/device_math.cuh"
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {
namespace {

using namespace nvcuda;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxGroupChannels = 64;
constexpr int kMinRows = kWarps * 16;  // the fewest output pixels a block computes

// Per element type: the channels of a tile a side, the elements of a 16-byte word, and the MMA's
// operand type and depth (f16/bf16 16x16x16; f32 as TF32, 16x16x8).
template <class T>
struct Elem {
  static constexpr int kMaxTile = sizeof(T) == 4 ? 48 : kMaxGroupChannels;
  static constexpr int kWord = 16 / sizeof(T);
  static constexpr int kK = sizeof(T) == 4 ? 8 : 16;
  using Mma = std::conditional_t<std::is_same_v<T, float>, wmma::precision::tf32, T>;
};

struct GroupedArgs {
  const void *x, *w, *bias, *residual;
  void* y;
  int h, w_in, c, oh, ow, cout, cg_in, cg_out;
  int groups, tile_groups;  // groups, and groups a block takes (Elem::kMaxTile channels a side)
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t pixels;  // N * oh * ow
  ActivationKind act, act2;
  float alpha, beta, alpha2, beta2;
};

// Channels of a group rounded up to the MMA's 16, and the shared-memory row pitch (in elements)
// that staggers rows across banks by a 16-byte word.
__host__ __device__ constexpr int padded(int channels) {
  return (channels + 15) / 16 * 16;
}
template <class T>
__host__ __device__ constexpr int pitch(int channels) {
  return padded(channels) + Elem<T>::kWord;
}

// TF32 operands are f32 values rounded to TF32 first; f16/bf16 ones are taken as they are.
template <class T, class Fragment>
__device__ inline void round_operand(Fragment& f) {
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int t = 0; t < f.num_elements; ++t) f.x[t] = wmma::__float_to_tf32(f.x[t]);
  }
}

// Shared memory of a launch: two stages of KS taps' (pixels x the tile's input channels, its
// filters x its input channels), reused by the epilogue for each warp's (MF * 16) x (NF * 16)
// fp32 results.
template <class T, int NF, int MF, int KS>
constexpr size_t shared_bytes(int tile_in) {
  constexpr int kRows = kMinRows * MF;
  const size_t stages = size_t{2} * KS * (kRows + NF * 16) * pitch<T>(tile_in) * sizeof(T);
  const size_t results = size_t{KS} * kRows * (NF * 16 + 4) * sizeof(float);
  return stages > results ? stages : results;
}

// NF: 16-wide fragments of the tile's output channels; MF: 16-pixel fragments a warp multiplies;
// KS: taps multiplied at once, each by its own kWarps warps (and staged by their threads), whose
// sums the epilogue adds: at batch 1 a block of one tap at a time is a chain of dependent
// instructions too long for the few blocks there are (bench/NOTES.md G80).
template <class T, int NF, int MF, int KS>
__global__ void __launch_bounds__(kThreads* KS) grouped_nhwc(GroupedArgs a) {
  using E = Elem<T>;
  constexpr int kRows = kMinRows * MF;
  constexpr int kBlockThreads = kThreads * KS;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int64_t row_base[kRows];  // n * h of each pixel, -1 past the last one
  __shared__ int row_y[kRows], row_x[kRows];
  __shared__ int filter_word[NF * 16];        // the first staged word of each filter's group
  const int g0 = blockIdx.y * a.tile_groups;  // the tile's first group
  const int tile_groups = min(a.tile_groups, a.groups - g0);
  const int tile_in = tile_groups * a.cg_in, tile_out = tile_groups * a.cg_out;
  const int kpad = padded(tile_in), ld = pitch<T>(tile_in);
  const int words = kpad / E::kWord, in_words = tile_in / E::kWord;  // 16-byte words of a row
  const int group_words = a.cg_in / E::kWord;
  const int slice_elems = (kRows + NF * 16) * ld;  // one tap's operands
  const int stage_elems = KS * slice_elems;
  T* const stages = reinterpret_cast<T*>(smem);
  // A thread stages and multiplies tap `part` of each KS; `tid` and `warp` count within the part.
  const int part = threadIdx.x / kThreads, tid = threadIdx.x % kThreads, warp = tid / 32;
  const int64_t m0 = int64_t(blockIdx.x) * kRows;
  for (int r = threadIdx.x; r < kRows; r += kBlockThreads) {
    const int64_t m = m0 + r;
    row_base[r] = -1, row_y[r] = 0, row_x[r] = 0;
    if (m < a.pixels) {
      const int64_t t = m / a.ow;
      row_x[r] = static_cast<int>(m % a.ow) * a.sw - a.pw;
      row_y[r] = static_cast<int>(t % a.oh) * a.sh - a.ph;
      row_base[r] = t / a.oh * a.h;
    }
  }
  // Filters past the tile's outputs read no word.
  for (int o = threadIdx.x; o < NF * 16; o += kBlockThreads)
    filter_word[o] = o < tile_out ? o / a.cg_out * group_words : words;
  __syncthreads();
  // A thread copies the words row0/word0, then every kThreads-th after (the same in both
  // operands and at every tap), stepping through rows and words without dividing.
  const int row0 = tid / words, word0 = tid % words;
  const int row_step = kThreads / words, word_step = kThreads % words;
  const auto next = [&](int& row, int& word) {
    row += row_step, word += word_step;
    if (word >= words) word -= words, ++row;
  };
  const T* const x = static_cast<const T*>(a.x) + int64_t(g0) * a.cg_in;
  const int taps = a.kh * a.kw;
  const T* const w = static_cast<const T*>(a.w) + int64_t(g0) * a.cg_out * taps * a.cg_in;

  // Stages this part's tap of step `step` (its inputs and weights; padding, channels past the
  // tile's, filters past its outputs and weights between a filter and another group's channels
  // are zeros); a part past the last tap stages nothing.
  const auto load = [&](int step, int stage) {
    const int tap = step * KS + part;
    if (KS > 1 && tap >= taps) {
      commit_async();
      return;
    }
    T* as = stages + stage * stage_elems + part * slice_elems;
    T* bs = as + kRows * ld;
    const int r = tap / a.kw, s = tap % a.kw;
    for (int row = row0, word = word0; row < kRows; next(row, word)) {
      const T* src = x;
      int bytes = 0;
      if (word < in_words && row_base[row] >= 0) {
        const int iy = row_y[row] + r * a.dh, ix = row_x[row] + s * a.dw;
        if (iy >= 0 && iy < a.h && ix >= 0 && ix < a.w_in) {
          src = x + ((row_base[row] + iy) * a.w_in + ix) * a.c + word * E::kWord;
          bytes = 16;
        }
      }
      copy16_async(as + row * ld + word * E::kWord, src, bytes);
    }
    for (int o = row0, word = word0; o < NF * 16; next(o, word)) {
      const T* src = w;
      int bytes = 0;
      const int wi = word - filter_word[o];  // the word in o's group
      if (wi >= 0 && wi < group_words) {
        src = w + (int64_t(o) * taps + tap) * a.cg_in + wi * E::kWord;
        bytes = 16;
      }
      copy16_async(bs + o * ld + word * E::kWord, src, bytes);
    }
    commit_async();
  };

  // The MMA-deep input chunks fragment f's groups read: [chunk_lo[f], chunk_hi[f]).
  int chunk_lo[NF], chunk_hi[NF];
#pragma unroll
  for (int f = 0; f < NF; ++f) {
    const int first = min(16 * f, tile_out - 1) / a.cg_out;
    const int last = min(16 * f + 15, tile_out - 1) / a.cg_out;
    chunk_lo[f] = first * a.cg_in / E::kK;
    chunk_hi[f] = ((last + 1) * a.cg_in + E::kK - 1) / E::kK;
  }
  wmma::fragment<wmma::accumulator, 16, 16, E::kK, float> acc[MF][NF];
#pragma unroll
  for (int m = 0; m < MF; ++m)
#pragma unroll
    for (int f = 0; f < NF; ++f) wmma::fill_fragment(acc[m][f], 0.f);
  const int steps = (taps + KS - 1) / KS;
  load(0, 0);
  for (int step = 0; step < steps; ++step) {
    if (step + 1 < steps) {
      load(step + 1, (step + 1) & 1);  // that stage's last readers passed the barrier below
      wait_async<1>();
    } else {
      wait_async<0>();
    }
    __syncthreads();
    const T* slice = stages + (step & 1) * stage_elems + part * slice_elems;
    const T* as = slice + warp * 16 * MF * ld;
    const T* bs = slice + kRows * ld;
    const int chunks = KS > 1 && step * KS + part >= taps ? 0 : kpad / E::kK;
    for (int kc = 0; kc < chunks; ++kc) {
      wmma::fragment<wmma::matrix_a, 16, 16, E::kK, typename E::Mma, wmma::row_major> fa[MF];
#pragma unroll
      for (int m = 0; m < MF; ++m) {
        wmma::load_matrix_sync(fa[m], as + m * 16 * ld + kc * E::kK, ld);
        round_operand<T>(fa[m]);
      }
#pragma unroll
      for (int f = 0; f < NF; ++f) {
        if (kc < chunk_lo[f] || kc >= chunk_hi[f]) continue;  // zeros of the block diagonal
        wmma::fragment<wmma::matrix_b, 16, 16, E::kK, typename E::Mma, wmma::col_major> fb;
        wmma::load_matrix_sync(fb, bs + f * 16 * ld + kc * E::kK, ld);
        round_operand<T>(fb);
#pragma unroll
        for (int m = 0; m < MF; ++m) wmma::mma_sync(acc[m][f], fa[m], fb, acc[m][f]);
      }
    }
    __syncthreads();
  }

  // Epilogue: the parts' results through shared memory, then 16 bytes of channels a thread, the
  // parts' sums added.
  constexpr int ldc = NF * 16 + 4;
  constexpr int part_floats = kRows * ldc;
  float* const results = reinterpret_cast<float*>(smem);
  float* cs = results + part * part_floats + warp * 16 * MF * ldc;
#pragma unroll
  for (int m = 0; m < MF; ++m)
#pragma unroll
    for (int f = 0; f < NF; ++f)
      wmma::store_matrix_sync(cs + m * 16 * ldc + f * 16, acc[m][f], ldc, wmma::mem_row_major);
  __syncthreads();
  constexpr int kW = E::kWord;
  const int out_words = tile_out / kW;
  for (int i = threadIdx.x; i < kRows * out_words; i += kBlockThreads) {
    const int row = i / out_words, word = i % out_words;
    const int64_t m = m0 + row;
    if (m >= a.pixels) continue;
    const int ch = g0 * a.cg_out + word * kW;
    float v[kW];
#pragma unroll
    for (int j = 0; j < kW; ++j) v[j] = results[row * ldc + word * kW + j];
#pragma unroll
    for (int k = 1; k < KS; ++k)
#pragma unroll
      for (int j = 0; j < kW; ++j) v[j] += results[k * part_floats + row * ldc + word * kW + j];
    if (a.bias) {
      const auto b = *reinterpret_cast<const Vec16<T>*>(static_cast<const T*>(a.bias) + ch);
#pragma unroll
      for (int j = 0; j < kW; ++j) v[j] += static_cast<float>(b.v[j]);
    }
    activate_all(a.act, v, a.alpha, a.beta);
    const int64_t off = m * a.cout + ch;
    if (a.residual) {
      const auto r = *reinterpret_cast<const Vec16<T>*>(static_cast<const T*>(a.residual) + off);
#pragma unroll
      for (int j = 0; j < kW; ++j) v[j] += static_cast<float>(r.v[j]);
      activate_all(a.act2, v, a.alpha2, a.beta2);
    }
    Vec16<T> o;
#pragma unroll
    for (int j = 0; j < kW; ++j) o.v[j] = T(v[j]);
    *reinterpret_cast<Vec16<T>*>(static_cast<T*>(a.y) + off) = o;
  }
}

// Dynamic shared memory: 36 KiB at most in f16 and bf16 (64 channels a side), 72 in f32 (48
// channels, 128 pixels), which opts in above 48 KiB; taps three at a time take three times the
// stages (108 KiB in f16, 137 in f32).
static_assert(shared_bytes<__half, 4, 1, 1>(kMaxGroupChannels) + 1024 <= 48 * 1024,
              "shared memory of the widest f16 groups");
static_assert(shared_bytes<float, 3, 1, 1>(48) + 1024 <= 48 * 1024,
              "shared memory of the widest f32 groups, 64 pixels a block");
static_assert(shared_bytes<float, 3, 2, 1>(48) <= 80 * 1024, "and 128 pixels a block");
static_assert(shared_bytes<__half, 4, 1, 3>(kMaxGroupChannels) + 1024 <= 200 * 1024 &&
                  shared_bytes<float, 3, 1, 3>(48) + 1024 <= 200 * 1024,
              "and three taps at a time");

template <class T, int NF, int MF, int KS>
void launch(cudaStream_t stream, const GroupedArgs& a, int device) {
  const size_t smem = shared_bytes<T, NF, MF, KS>(a.tile_groups * a.cg_in);
  const auto kernel = grouped_nhwc<T, NF, MF, KS>;
  static std::atomic<uint64_t> configured{0};
  allow_shared_bytes(reinterpret_cast<const void*>(kernel),
                     shared_bytes<T, NF, MF, KS>(Elem<T>::kMaxTile), device, configured);
  constexpr int kRows = kMinRows * MF;
  const dim3 grid(static_cast<unsigned>((a.pixels + kRows - 1) / kRows),
                  static_cast<unsigned>((a.groups + a.tile_groups - 1) / a.tile_groups));
  kernel<<<grid, kThreads * KS, smem, stream>>>(a);
}

// f32 blocks take 128 pixels (two fragments a warp) where 64-pixel blocks would give every
// multiprocessor four or more: regnet_x_3_2gf fp32 batch 32 4.88 ms against 5.83 with 64, while
// at batch 1 the larger blocks leave multiprocessors idle (1.75 ms against 1.66).
// Where 64-pixel blocks would not give every multiprocessor one, each block multiplies three taps
// at a time (twelve warps, the epilogue adding their sums): regnet_x_3_2gf batch 1 on H100, the
// whole graph 1490 -> 948 us in f32 and 712 -> 505 us in f16 (bench/NOTES.md G81).
template <class T, int NF>
void launch_rows(cudaStream_t stream, const GroupedArgs& a) {
  int device = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&device));
  const int64_t blocks =
      (a.pixels + kMinRows - 1) / kMinRows * ((a.groups + a.tile_groups - 1) / a.tile_groups);
  const int64_t sms = multiprocessors(device);
  if constexpr (std::is_same_v<T, float>) {
    if (blocks >= 4 * sms) return launch<T, NF, 2, 1>(stream, a, device);
  }
  if (a.kh * a.kw >= 3 && blocks <= sms) return launch<T, NF, 1, 3>(stream, a, device);
  launch<T, NF, 1, 1>(stream, a, device);
}

template <class T>
void launch_for(cudaStream_t stream, const GroupedArgs& a) {
  switch ((a.tile_groups * a.cg_out + 15) / 16) {
    case 1:
      return launch_rows<T, 1>(stream, a);
    case 2:
      return launch_rows<T, 2>(stream, a);
    case 3:
      return launch_rows<T, 3>(stream, a);
    default:  // f32 tiles have at most 48 output channels, 3 fragments
      if constexpr (Elem<T>::kMaxTile > 48) {
        return launch_rows<T, 4>(stream, a);
      } else {
        return launch_rows<T, 3>(stream, a);
      }
  }
}

}  // namespace

bool grouped_nhwc_applies(const ConvolutionParams& p, const TensorView& x, const TensorView& w,
                          const TensorView* bias, const TensorView* residual, const TensorView& out,
                          GroupedPath path) {
  if (path == GroupedPath::kCudnn || !p.channels_last || p.transposed || p.groups <= 1 ||
      x.shape.size() != 4 || w.shape.size() != 4 || out.shape.size() != 4)
    return false;
  // f32 only on TF32 (the layer's tf32: not under --disable-tf32).
  const bool f32 = out.dtype == DataType::kF32;
  if ((out.dtype != DataType::kF16 && out.dtype != DataType::kBF16 && !(f32 && p.tf32)) ||
      x.dtype != out.dtype || w.dtype != out.dtype)
    return false;
  const int64_t c = x.shape[3], cout = out.shape[3], groups = p.groups;
  if (c % groups != 0 || cout % groups != 0 || groups > 65535) return false;
  const int64_t cg_in = c / groups, cg_out = cout / groups;
  const int64_t widest = f32 ? Elem<float>::kMaxTile : Elem<__half>::kMaxTile;
  if (cg_in % 8 != 0 || cg_out % 8 != 0 || cg_in > widest || cg_out > widest) return false;
  // cuDNN has fast kernels for power-of-two group widths (resnext50_32x4d's 8, 16 and 32: 1.31
  // ms at batch 32 against 1.82 here) and slow ones for the others (regnet's 24 and 48: 5.07 and
  // 7.10 ms against 2.40 and 2.32 here; bench/NOTES.md G48).
  const auto power_of_two = [](int64_t v) { return (v & (v - 1)) == 0; };
  if (path == GroupedPath::kAuto && power_of_two(cg_in) && power_of_two(cg_out)) return false;
  if (w.shape[0] != cout || w.shape[3] != cg_in) return false;
  if (bias && (bias->dtype != out.dtype || bias->numel() != cout || !aligned16(bias->data)))
    return false;
  if (residual &&
      (residual->dtype != out.dtype || residual->shape != out.shape || !aligned16(residual->data)))
    return false;
  const int64_t pixels = out.shape[0] * out.shape[1] * out.shape[2];
  const int64_t biggest = std::max(x.numel(), out.numel());
  return aligned16(x.data) && aligned16(w.data) && aligned16(out.data) &&
         (pixels + kMinRows - 1) / kMinRows <= INT_MAX && biggest < (int64_t{1} << 40);
}

void launch_grouped_nhwc(cudaStream_t stream, const std::string& layer, const ConvolutionParams& p,
                         const TensorView& x, const TensorView& w, const TensorView* bias,
                         const TensorView* residual, const TensorView& out) {
  GroupedArgs a{};
  a.x = x.data, a.w = w.data, a.y = out.data;
  a.bias = bias ? bias->data : nullptr;
  a.residual = residual ? residual->data : nullptr;
  a.h = static_cast<int>(x.shape[1]), a.w_in = static_cast<int>(x.shape[2]);
  a.c = static_cast<int>(x.shape[3]);
  a.oh = static_cast<int>(out.shape[1]), a.ow = static_cast<int>(out.shape[2]);
  a.cout = static_cast<int>(out.shape[3]);
  a.groups = static_cast<int>(p.groups);
  a.cg_in = a.c / a.groups, a.cg_out = a.cout / a.groups;
  const int widest = out.dtype == DataType::kF32 ? Elem<float>::kMaxTile : kMaxGroupChannels;
  a.tile_groups = std::min(a.groups, widest / std::max(a.cg_in, a.cg_out));
  set_conv2d_window(a, p, w.shape);
  a.pixels = out.shape[0] * out.shape[1] * out.shape[2];
  if (a.pixels == 0) return;
  if (out.dtype == DataType::kF16) {
    launch_for<__half>(stream, a);
  } else if (out.dtype == DataType::kBF16) {
    launch_for<__nv_bfloat16>(stream, a);
  } else {
    launch_for<float>(stream, a);
  }
  KILN_CUDA_CHECK_LAUNCH(layer);
}

}  // namespace kiln::engine::cuda
