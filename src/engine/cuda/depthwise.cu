// CUDA depthwise 2-d convolution on channels-last data (x [N, H, W, C], weights [C, kh, kw, 1],
// one filter per channel), fp32 accumulation, bias, activation, residual and the second
// activation in the same pass. Where channels come in 16-byte groups, each thread computes one
// group of a strip of output pixels (3x3, 5x5 and 7x7 filters, stride 1 or 2) or of one pixel
// (other filters) with the block's filter taps in shared memory; square filters over channels
// that come only in 4 or 2 (shufflenet's 58 and 116) take the strips with words of 4 or 2
// channels; otherwise one thread per output element with the channel innermost. cuDNN's NHWC grouped convolutions are slow for this
// shape (bench/NOTES.md G4).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/cuda/device_math.cuh"
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {
namespace {

struct DepthwiseArgs {
  const void *x, *w, *bias, *residual;
  void* y;
  int64_t h, w_in, c, oh, ow, total;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  ActivationKind act, act2;
  float alpha, beta, alpha2, beta2;
  bool tiled;  // whether the tiled kernels may run (host side only)
};

template <class T>
__global__ void depthwise_nhwc_t(DepthwiseArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i % a.c;
    int64_t t = i / a.c;
    const int64_t ox = t % a.ow;
    t /= a.ow;
    const int64_t oy = t % a.oh, n = t / a.oh;
    float acc = 0.f;
    for (int r = 0; r < a.kh; ++r) {
      const int64_t iy = oy * a.sh - a.ph + int64_t(r) * a.dh;
      if (iy < 0 || iy >= a.h) continue;
      const T* row = x + ((n * a.h + iy) * a.w_in) * a.c + c;
      const T* taps = w + (c * a.kh + r) * a.kw;
      for (int s = 0; s < a.kw; ++s) {
        const int64_t ix = ox * a.sw - a.pw + int64_t(s) * a.dw;
        if (ix < 0 || ix >= a.w_in) continue;
        acc += static_cast<float>(row[ix * a.c]) * static_cast<float>(taps[s]);
      }
    }
    if (a.bias) acc += static_cast<float>(static_cast<const T*>(a.bias)[c]);
    acc = activate(a.act, acc, a.alpha, a.beta);
    if (a.residual) {
      acc += static_cast<float>(static_cast<const T*>(a.residual)[i]);
      acc = activate(a.act2, acc, a.alpha2, a.beta2);
    }
    static_cast<T*>(a.y)[i] = T(acc);
  }
}

// The vectorized kernel: each thread computes V consecutive channels (16 bytes) of one output
// pixel. Block (x: pixel chunk, y: channel tile of `tile` V-groups); its tile's filter taps are
// staged in shared memory as [tap][channel] so that a thread reads its V weights of a tap as one
// 16-byte word. 32-bit index math (the launcher checks the sizes).
constexpr int kVecThreads = 256;
constexpr int kVecSmemBytes = 48 * 1024;

template <class T>
using Vec = Vec16<T>;

template <class T>
__global__ void depthwise_nhwc_vec(DepthwiseArgs a, int tile, int npix) {
  constexpr int V = Vec<T>::kN;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* ws = reinterpret_cast<T*>(smem_raw);
  const int c_total = static_cast<int>(a.c), groups = c_total / V, taps = a.kh * a.kw;
  const int g0 = blockIdx.y * tile;  // first V-group of this block's channel tile
  const int tile_c = tile * V;
  const T* w = static_cast<const T*>(a.w);
  for (int idx = threadIdx.x; idx < tile_c * taps; idx += blockDim.x) {
    const int cl = idx / taps, tap = idx % taps, c = g0 * V + cl;
    ws[tap * tile_c + cl] = c < c_total ? w[c * taps + tap] : T(0.f);
  }
  __syncthreads();
  const int per_block = kVecThreads / tile;  // pixels in flight per block
  const int g = threadIdx.x % tile, lane_pix = threadIdx.x / tile;
  if (lane_pix >= per_block || g0 + g >= groups) return;
  const int c = (g0 + g) * V;
  const int h = static_cast<int>(a.h), wi = static_cast<int>(a.w_in);
  const int oh = static_cast<int>(a.oh), ow = static_cast<int>(a.ow);
  const T* x = static_cast<const T*>(a.x);
  for (int pix = blockIdx.x * per_block + lane_pix; pix < npix; pix += gridDim.x * per_block) {
    const int ox = pix % ow, t = pix / ow;
    const int oy = t % oh, n = t / oh;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = 0.f;
    for (int r = 0; r < a.kh; ++r) {
      const int iy = oy * a.sh - a.ph + r * a.dh;
      if (iy < 0 || iy >= h) continue;
      const T* row = x + static_cast<int64_t>((n * h + iy) * wi) * c_total + c;
      for (int s = 0; s < a.kw; ++s) {
        const int ix = ox * a.sw - a.pw + s * a.dw;
        if (ix < 0 || ix >= wi) continue;
        const Vec<T> xv =
            *reinterpret_cast<const Vec<T>*>(row + static_cast<int64_t>(ix) * c_total);
        const Vec<T> wv = *reinterpret_cast<const Vec<T>*>(ws + (r * a.kw + s) * tile_c + g * V);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          acc[k] += static_cast<float>(xv.v[k]) * static_cast<float>(wv.v[k]);
        }
      }
    }
    const int64_t at = static_cast<int64_t>(pix) * c_total + c;
    Vec<T> res{};
    if (a.residual) res = *reinterpret_cast<const Vec<T>*>(static_cast<const T*>(a.residual) + at);
    Vec<T> out;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float v = acc[k];
      if (a.bias) v += static_cast<float>(static_cast<const T*>(a.bias)[c + k]);
      v = activate(a.act, v, a.alpha, a.beta);
      if (a.residual) {
        v += static_cast<float>(res.v[k]);
        v = activate(a.act2, v, a.alpha2, a.beta2);
      }
      out.v[k] = T(v);
    }
    *reinterpret_cast<Vec<T>*>(static_cast<T*>(a.y) + at) = out;
  }
}

// The epilogue of a strip: bias, activation, residual and second activation over the first
// `count` of R outputs of one row (V channels from c each, output o at element first + o * C),
// then one V-element store per output.
template <class T, int V, int R>
__device__ __forceinline__ void store_strip(const DepthwiseArgs& a, const float (&acc)[R][V], int c,
                                            int64_t first, int count) {
  using W = Pack<T, V>;
  float bias[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    bias[k] = a.bias ? static_cast<float>(static_cast<const T*>(a.bias)[c + k]) : 0.f;
  }
#pragma unroll
  for (int o = 0; o < R; ++o) {
    if (o >= count) break;
    const int64_t at = first + o * a.c;
    W res{};
    if (a.residual) res = *reinterpret_cast<const W*>(static_cast<const T*>(a.residual) + at);
    float v[V];
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = acc[o][k] + bias[k];
    activate_all(a.act, v, a.alpha, a.beta);
    if (a.residual) {
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] += static_cast<float>(res.v[k]);
      activate_all(a.act2, v, a.alpha2, a.beta2);
    }
    W out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = T(v[k]);
    *reinterpret_cast<W*>(static_cast<T*>(a.y) + at) = out;
  }
}

// The register-tiled kernel for the common filters (K x K, K = 3, 5 or 7, stride S = 1 or 2, no
// dilation): each thread computes V channels of kStrip consecutive output pixels of one row, so
// an input vector loaded once serves every output of the strip it falls under ((kStrip - 1) * S + K
// loads per filter row instead of kStrip * K), and a filter row's K weight vectors come from shared
// memory once per strip. Activations go over a pixel's V channels at a time (activate_all).
// Blocks are (strip chunk, channel tile) as in depthwise_nhwc_vec. V is 4 channels (8-byte words
// in f16): with 8, the accumulators and the filter row took 100 registers, 2 blocks of 256
// threads per multiprocessor; now at most 64 (4 blocks) in f16 and 85 (3 blocks) in f32, which
// spilled at 64 (bench/NOTES.md G25). Channel counts that are no multiple of 4 but of 2 take
// words of V = 2 channels (at least 4 bytes: the loads go as 32-bit words).
constexpr int kStrip = 4, kStripV = 4;

template <class T, int K, int S, int V>
__global__ void __launch_bounds__(kVecThreads, sizeof(T) == 2 ? 4 : 3)
    depthwise_nhwc_strip(DepthwiseArgs a, int tile, int nstrips) {
  constexpr int IW = (kStrip - 1) * S + K;
  static_assert(sizeof(T) * V >= 4, "strip words are loaded as 32-bit words");
  using W = Pack<T, V>;
  using Raw = Pack<unsigned, sizeof(W) / 4>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* ws = reinterpret_cast<T*>(smem_raw);
  const int c_total = static_cast<int>(a.c), groups = c_total / V;
  const int g0 = blockIdx.y * tile, tile_c = tile * V;
  const T* w = static_cast<const T*>(a.w);
  for (int idx = threadIdx.x; idx < tile_c * K * K; idx += blockDim.x) {
    const int cl = idx / (K * K), tap = idx % (K * K), c = g0 * V + cl;
    ws[tap * tile_c + cl] = c < c_total ? w[c * K * K + tap] : T(0.f);
  }
  __syncthreads();
  const int per_block = kVecThreads / tile;
  const int g = threadIdx.x % tile, lane = threadIdx.x / tile;
  if (lane >= per_block || g0 + g >= groups) return;
  const int c = (g0 + g) * V;
  const int h = static_cast<int>(a.h), wi = static_cast<int>(a.w_in);
  const int oh = static_cast<int>(a.oh), ow = static_cast<int>(a.ow);
  const int strips_per_row = (ow + kStrip - 1) / kStrip;
  const T* x = static_cast<const T*>(a.x);
  for (int s = blockIdx.x * per_block + lane; s < nstrips; s += gridDim.x * per_block) {
    const int ox0 = (s % strips_per_row) * kStrip, t = s / strips_per_row;
    const int oy = t % oh, n = t / oh;
    float acc[kStrip][V];
#pragma unroll
    for (int o = 0; o < kStrip; ++o) {
#pragma unroll
      for (int k = 0; k < V; ++k) acc[o][k] = 0.f;
    }
    const int ix0 = ox0 * S - a.pw;
#pragma unroll
    for (int r = 0; r < K; ++r) {
      const int iy = oy * S - a.ph + r;
      if (iy < 0 || iy >= h) continue;
      const int row = (n * h + iy) * wi * c_total + c;  // < 2^31: launch_vec checks
      float wr[K][V];
#pragma unroll
      for (int q = 0; q < K; ++q) {
        const W wv = *reinterpret_cast<const W*>(ws + (r * K + q) * tile_c + g * V);
#pragma unroll
        for (int k = 0; k < V; ++k) wr[q][k] = static_cast<float>(wv.v[k]);
      }
#pragma unroll
      for (int j = 0; j < IW; ++j) {
        const int ix = ix0 + j;
        // Loaded and zeroed as 32-bit words: zeroing a Pack of halves cost a byte permute per
        // half, as many instructions as the products (bench/NOTES.md G25).
        Raw raw;
#pragma unroll
        for (int k = 0; k < static_cast<int>(sizeof(W) / 4); ++k) raw.v[k] = 0u;
        if (ix >= 0 && ix < wi) raw = *reinterpret_cast<const Raw*>(x + row + ix * c_total);
        const W& xv = reinterpret_cast<const W&>(raw);
#pragma unroll
        for (int o = 0; o < kStrip; ++o) {
          const int q = j - o * S;  // the tap of output o that input column j meets
          if (q < 0 || q >= K) continue;
#pragma unroll
          for (int k = 0; k < V; ++k) acc[o][k] += static_cast<float>(xv.v[k]) * wr[q][k];
        }
      }
    }
    store_strip<T, V, kStrip>(
        a, acc, c, (static_cast<int64_t>(n * oh + oy) * ow + ox0) * c_total + c, ow - ox0);
  }
}

// The shared-memory tiled kernel for the same filters: block (spatial tile, channel group,
// sample) stages the input its kTileH x kTileW outputs need, (kTileH - 1) * S + K rows by
// (kTileW - 1) * S + K columns of G 16-byte words (zeros past the edges: the padding), with
// cp.async in one round trip, and the group's filter taps; each thread then computes one word
// of a strip of R outputs of one row from shared memory. The strip kernel above reads its
// inputs from global memory one filter row at a time (K dependent round trips per strip, the
// loads in registers): 5x5 filters ran 3-10x slower than their memory traffic there
// (bench/NOTES.md G22).
constexpr int kTileH = 8, kTileW = 16;

template <int S>
struct TileShape {
  static constexpr int R = S == 1 ? 4 : 2;  // outputs per thread along a row
  static constexpr int G = S == 1 ? 8 : 4;  // 16-byte channel words per block
};

template <int K, int S>
constexpr int tile_smem_words() {
  return ((kTileH - 1) * S + K) * ((kTileW - 1) * S + K) * TileShape<S>::G;
}

template <class T, int K, int S>
__global__ void __launch_bounds__(kVecThreads, 2) depthwise_nhwc_tiled(DepthwiseArgs a) {
  constexpr int V = Vec<T>::kN, R = TileShape<S>::R, GM = TileShape<S>::G;
  constexpr int IH = (kTileH - 1) * S + K, IW = (kTileW - 1) * S + K, SW = (R - 1) * S + K;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Vec<T>* tile = reinterpret_cast<Vec<T>*>(smem_raw);  // [IH][IW][G]
  Vec<T>* ws = tile + IH * IW * GM;                    // [K * K][G]
  const int c_total = static_cast<int>(a.c), words = c_total / V;
  const int h = static_cast<int>(a.h), wi = static_cast<int>(a.w_in);
  const int oh = static_cast<int>(a.oh), ow = static_cast<int>(a.ow);
  const int tiles_w = (ow + kTileW - 1) / kTileW;
  const int oy0 = (blockIdx.x / tiles_w) * kTileH, ox0 = (blockIdx.x % tiles_w) * kTileW;
  const int g0 = blockIdx.y * GM, n = blockIdx.z;
  const int G = min(GM, words - g0);  // words of this block
  const T* x = static_cast<const T*>(a.x);
  const int iy0 = oy0 * S - a.ph, ix0 = ox0 * S - a.pw;
  for (int idx = threadIdx.x; idx < IH * IW * G; idx += kVecThreads) {
    const int g = idx % G, rc = idx / G, c = rc % IW, r = rc / IW;
    const int iy = iy0 + r, ix = ix0 + c;
    const bool inside = iy >= 0 && iy < h && ix >= 0 && ix < wi;
    const T* src =
        inside ? x + (static_cast<int64_t>(n * h + iy) * wi + ix) * c_total + (g0 + g) * V : x;
    copy16_async(tile + rc * GM + g, src, inside ? 16 : 0);
  }
  commit_async();
  const T* w = static_cast<const T*>(a.w);
  for (int idx = threadIdx.x; idx < K * K * G * V; idx += kVecThreads) {
    const int k = idx % V, g = (idx / V) % G, tap = idx / (V * G);
    ws[tap * GM + g].v[k] = w[((g0 + g) * V + k) * K * K + tap];
  }
  wait_async<0>();
  __syncthreads();
  constexpr int strips = kTileW / R;
  for (int task = threadIdx.x; task < kTileH * strips * G; task += kVecThreads) {
    const int g = task % G, st = (task / G) % strips, ty = task / (G * strips);
    const int oy = oy0 + ty, oxs = ox0 + st * R;
    if (oy >= oh || oxs >= ow) continue;
    float acc[R][V];
#pragma unroll
    for (int o = 0; o < R; ++o) {
#pragma unroll
      for (int k = 0; k < V; ++k) acc[o][k] = 0.f;
    }
#pragma unroll
    for (int r = 0; r < K; ++r) {
      const Vec<T>* row = tile + ((ty * S + r) * IW + st * R * S) * GM + g;
      float wr[K][V];
#pragma unroll
      for (int q = 0; q < K; ++q) {
        const Vec<T> wv = ws[(r * K + q) * GM + g];
#pragma unroll
        for (int k = 0; k < V; ++k) wr[q][k] = static_cast<float>(wv.v[k]);
      }
#pragma unroll
      for (int j = 0; j < SW; ++j) {
        const Vec<T> xv = row[j * GM];
#pragma unroll
        for (int o = 0; o < R; ++o) {
          const int q = j - o * S;
          if (q < 0 || q >= K) continue;
#pragma unroll
          for (int k = 0; k < V; ++k) acc[o][k] += static_cast<float>(xv.v[k]) * wr[q][k];
        }
      }
    }
    const int c = (g0 + g) * V;
    store_strip<T, V, R>(a, acc, c, (static_cast<int64_t>(n * oh + oy) * ow + oxs) * c_total + c,
                         ow - oxs);
  }
}

template <class T, int K, int S>
void launch_tiled(cudaStream_t stream, const DepthwiseArgs& a, int n) {
  constexpr int V = Vec<T>::kN;
  const int words = static_cast<int>(a.c / V);
  const int tiles =
      static_cast<int>(((a.oh + kTileH - 1) / kTileH) * ((a.ow + kTileW - 1) / kTileW));
  const dim3 grid(static_cast<unsigned>(tiles),
                  static_cast<unsigned>((words + TileShape<S>::G - 1) / TileShape<S>::G),
                  static_cast<unsigned>(n));
  const size_t smem = (tile_smem_words<K, S>() + K * K * TileShape<S>::G) * sizeof(Vec<T>);
  depthwise_nhwc_tiled<T, K, S><<<grid, kVecThreads, smem, stream>>>(a);
}

// Channel tiles of at most 32 V-groups, as even as the group count allows (84 -> 3 x 28).
int channel_tile(int groups) {
  const int tiles = (groups + 31) / 32;
  return (groups + tiles - 1) / tiles;
}

// The strip kernel over words of V channels; false where its channel tiles exceed the grid.
template <class T, int V>
bool launch_strip(cudaStream_t stream, const DepthwiseArgs& a) {
  const int k = a.kh, s = a.sh;
  const int strip_groups = static_cast<int>(a.c / V);
  const int strip_tile = channel_tile(strip_groups);
  const int strip_tiles = (strip_groups + strip_tile - 1) / strip_tile;
  if (strip_tiles > 65535) return false;
  const int strip_per_block = kVecThreads / strip_tile;
  const int64_t nstrips = a.total / a.c / a.ow * ((a.ow + kStrip - 1) / kStrip);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(
                      (nstrips + strip_per_block - 1) / strip_per_block, 65535)),
                  static_cast<unsigned>(strip_tiles));
  const size_t strip_smem = static_cast<size_t>(strip_tile) * V * k * k * sizeof(T);
  const auto kernel =
      k == 3   ? (s == 1 ? depthwise_nhwc_strip<T, 3, 1, V> : depthwise_nhwc_strip<T, 3, 2, V>)
      : k == 5 ? (s == 1 ? depthwise_nhwc_strip<T, 5, 1, V> : depthwise_nhwc_strip<T, 5, 2, V>)
               : (s == 1 ? depthwise_nhwc_strip<T, 7, 1, V> : depthwise_nhwc_strip<T, 7, 2, V>);
  kernel<<<grid, kVecThreads, strip_smem, stream>>>(a, strip_tile, static_cast<int>(nstrips));
  return true;
}

// Whether x, y and the residual are aligned to `bytes`.
bool aligned_to(const DepthwiseArgs& a, size_t bytes) {
  const auto ok = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  return ok(a.x) && ok(a.y) && (!a.residual || ok(a.residual));
}

// Launches the vectorized kernels when channels, pointers and sizes allow; false otherwise.
template <class T>
bool launch_vec(cudaStream_t stream, const DepthwiseArgs& a) {
  constexpr int V = Vec<T>::kN;
  const int64_t npix = a.total / a.c;
  const int64_t in_elems = a.total / a.oh / a.ow * a.h * a.w_in;
  if (a.total >= (int64_t{1} << 31) || in_elems >= (int64_t{1} << 31)) return false;
  // Channels in 16-byte words.
  const bool words16 = a.c % V == 0 && aligned_to(a, 16);
  const bool square = a.kh == a.kw && a.sh == a.sw && a.dh == 1 && a.dw == 1;
  const int k = a.kh, s = a.sh;
  const int64_t n = npix / (a.oh * a.ow);
  // Tiled for 5x5 and strided filters with outputs at least 14 wide; 3x3 stride-1 ones stay on
  // strips, which were as fast or faster there (efficientnet_b0 b32: 112x112x32 0.048 vs 0.066
  // ms, 56x56x144 0.057 vs 0.069), and so do narrower outputs, most of whose 16-wide tile would
  // be idle (7x7x1152 5x5: 0.022 vs 0.029 ms; bench/NOTES.md G25).
  // 7x7 stride 1 (convnext's) too: its tile (14 x 22 words of 16 bytes per channel word, 46 KB
  // with the taps) fits the default shared memory; strided 7x7 would not.
  if (words16 && square && (k == 5 || (k == 3 && s == 2) || (k == 7 && s == 1)) &&
      (s == 1 || s == 2) && a.ow >= 14 && a.tiled && n <= 65535 &&
      a.c / V / TileShape<1>::G < 65535) {
    const auto kernel = k == 7   ? launch_tiled<T, 7, 1>
                        : k == 3 ? (s == 1 ? launch_tiled<T, 3, 1> : launch_tiled<T, 3, 2>)
                                 : (s == 1 ? launch_tiled<T, 5, 1> : launch_tiled<T, 5, 2>);
    kernel(stream, a, static_cast<int>(n));
    return true;
  }
  static_assert(kStripV <= V && V % kStripV == 0, "strip words divide 16-byte words");
  // Strips of kStripV-channel words, or of 2-channel ones where the channels (shufflenet's 58)
  // or the pointers allow only those.
  if (square && (k == 3 || k == 5 || k == 7) && (s == 1 || s == 2)) {
    if (a.c % kStripV == 0 && aligned_to(a, kStripV * sizeof(T))) {
      if (launch_strip<T, kStripV>(stream, a)) return true;
    } else if (a.c % 2 == 0 && aligned_to(a, 2 * sizeof(T))) {
      if (launch_strip<T, 2>(stream, a)) return true;
    }
  }
  if (!words16) return false;
  const int groups = static_cast<int>(a.c / V);
  const int tile = channel_tile(groups);
  const size_t smem = static_cast<size_t>(tile) * V * a.kh * a.kw * sizeof(T);
  if (smem > kVecSmemBytes) return false;
  const int per_block = kVecThreads / tile;
  const unsigned tiles = static_cast<unsigned>((groups + tile - 1) / tile);
  if (tiles > 65535) return false;
  const int64_t chunks = (npix + per_block - 1) / per_block;
  dim3 grid(static_cast<unsigned>(std::min<int64_t>(chunks, 2048)), tiles);
  depthwise_nhwc_vec<T><<<grid, kVecThreads, smem, stream>>>(a, tile, static_cast<int>(npix));
  return true;
}

}  // namespace

bool depthwise_nhwc_applies(const ConvolutionParams& p, const TensorView& x, const TensorView& w,
                            const TensorView* residual, const TensorView& out) {
  return p.channels_last && !p.transposed && x.shape.size() == 4 && w.shape.size() == 4 &&
         p.groups == x.shape[3] && w.shape[0] == x.shape[3] && w.shape[3] == 1 &&
         (!residual || residual->shape == out.shape);
}

void launch_depthwise_nhwc(cudaStream_t stream, const std::string& layer,
                           const ConvolutionParams& p, const TensorView& x, const TensorView& w,
                           const TensorView* bias, const TensorView* residual,
                           const TensorView& out, bool tiled) {
  DepthwiseArgs a{};
  a.tiled = tiled;
  a.x = x.data, a.w = w.data, a.y = out.data;
  a.bias = bias ? bias->data : nullptr;
  a.residual = residual ? residual->data : nullptr;
  a.h = x.shape[1], a.w_in = x.shape[2], a.c = x.shape[3];
  a.oh = out.shape[1], a.ow = out.shape[2];
  a.total = out.numel();
  set_conv2d_window(a, p, w.shape);
  if (a.total == 0) return;
  const unsigned grid = grid_for(a.total);
  switch (out.dtype) {
    case DataType::kF16:
      if (!launch_vec<__half>(stream, a))
        depthwise_nhwc_t<__half><<<grid, kThreads, 0, stream>>>(a);
      break;
    case DataType::kBF16:
      if (!launch_vec<__nv_bfloat16>(stream, a)) {
        depthwise_nhwc_t<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(a);
      }
      break;
    default:
      if (!launch_vec<float>(stream, a)) depthwise_nhwc_t<float><<<grid, kThreads, 0, stream>>>(a);
      break;
  }
  KILN_CUDA_CHECK_LAUNCH(layer);
}

}  // namespace kiln::engine::cuda
