// CUDA 1x1 convolution on channels-last data of few input channels (x [N, H, W, C] with C = 8,
// 16, 24 or 32, weights [Cout, 1, 1, C]) with bias and activation fused: the expansions of
// mobilenet_v2 and efficientnet_b0 (16 -> 96 at 112x112), which are memory-bound (Cout outputs
// written per C inputs read) and which cuBLASLt's tiles and cuDNN plus a post-op pass serve poorly
// (bench/NOTES.md G15). fp32 FMAs whatever the dtype (f32 layers allowed TF32 get plain fp32).
//
// Each thread owns V consecutive output channels (one 16-byte store per pixel; 8 bytes for f16/bf16
// with C >= 24) and keeps their V x C weights, as floats, in registers for the whole kernel (C is
// a template parameter so that every register array is indexed by constants); it then loops over
// pixels. A block is (pixel slot, channel group) with the group fastest, so that a warp's stores
// are contiguous and lanes of one pixel read the same input vector. Input pixels, contiguous in
// memory, are staged through shared memory in double-buffered tiles by cp.async, so that the next
// tile's loads are in flight while the current one is computed. G15's earlier kernel read the
// filter from shared memory per FMA group and was bound by shared-memory bandwidth.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

#include "engine/cuda/device_math.cuh"
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {
namespace {

// Output channels per thread: 16 bytes of output, except for 16-bit types with C >= 24, where 8
// channels would need 8 x C >= 192 weight registers (then 8 bytes: V x C stays <= 128).
__host__ __device__ constexpr int channels_per_thread(size_t elem_size, int64_t cin) {
  return elem_size == 4 ? 4 : (cin <= 16 ? 8 : 4);
}

constexpr int kMaxThreads = 256;
constexpr int kMaxTileGroups = 64;  // channel groups per block (more: several blocks along y)
constexpr int kMaxStepPixels = 64;  // pixels per block step
constexpr int kStageBytes = 8192;   // input bytes per shared-memory tile (two of them)
// Pixel indices, up to a tile (< kStageBytes pixels) past the last pixel, fit in an int.
constexpr int64_t kMaxPixels = (int64_t{1} << 31) - 1 - kStageBytes;

struct PointwiseArgs {
  const void *x, *w, *bias;
  void* y;
  int npix, cout, groups;  // groups: output channel groups of V channels in all
  int tile;                // channel groups per block
  int step_pixels;         // pixels per block step (blockDim.x = step_pixels * tile)
  int stage_steps;         // block steps per shared-memory tile
  float alpha, beta;
};

// The activation, A known at compile time. SiLU in f16/bf16 takes the fast exp and division
// (relative error ~1e-6, far below the output's rounding; the exact division costs as much as the
// convolution's FMAs there). NaN propagates in every form.
template <class T, int A>
__device__ __forceinline__ float pointwise_activate(float v, float alpha, float beta) {
  if constexpr (A == static_cast<int>(ActivationKind::kSilu) && !std::is_same_v<T, float>) {
    return __fdividef(v, 1.f + __expf(-v));
  } else {
    return activate(static_cast<ActivationKind>(A), v, alpha, beta);
  }
}

template <class T, int CIN, int A>
__global__ void __launch_bounds__(kMaxThreads) pointwise_nhwc(PointwiseArgs a) {
  constexpr int V = channels_per_thread(sizeof(T), CIN);
  constexpr int kPerVec = Vec16<T>::kN;  // elements per 16-byte vector
  constexpr int kVecs = CIN / kPerVec;   // 16-byte vectors per input pixel
  constexpr int kPixelBytes = CIN * sizeof(T);
  static_assert(kPixelBytes % 16 == 0, "input pixels of whole 16-byte vectors");
  __shared__ __align__(16) unsigned char stage[2][kStageBytes];

  const int g = threadIdx.x % a.tile, slot = threadIdx.x / a.tile;
  const int group = blockIdx.y * a.tile + g;
  const bool active = group < a.groups;  // the last channel tile may be partial
  const int c0 = (active ? group : 0) * V;

  // This thread's weights and biases, for the whole kernel.
  float wr[V][CIN], b[V];
  const T* w = static_cast<const T*>(a.w) + static_cast<int64_t>(c0) * CIN;
#pragma unroll
  for (int k = 0; k < V; ++k) {
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
      const Vec16<T> wv = *reinterpret_cast<const Vec16<T>*>(w + k * CIN + j * kPerVec);
#pragma unroll
      for (int e = 0; e < kPerVec; ++e) wr[k][j * kPerVec + e] = static_cast<float>(wv.v[e]);
    }
    b[k] = a.bias ? static_cast<float>(static_cast<const T*>(a.bias)[c0 + k]) : 0.f;
  }

  const int tile_pixels = a.step_pixels * a.stage_steps;
  const int tiles = (a.npix + tile_pixels - 1) / tile_pixels;
  const unsigned char* x = static_cast<const unsigned char*>(a.x);
  // Copies tile `t`'s pixels (contiguous in x) into stage[buf]; one commit group per call, empty
  // past the last tile so that the wait below always leaves exactly the newest group pending.
  const auto fetch = [&](int t, int buf) {
    if (t < tiles) {
      const int first = t * tile_pixels;
      const int vecs = min(tile_pixels, a.npix - first) * kVecs;
      const unsigned char* src = x + static_cast<int64_t>(first) * kPixelBytes;
      for (int i = threadIdx.x; i < vecs; i += blockDim.x) {
        copy16_async(&stage[buf][i * 16], src + static_cast<int64_t>(i) * 16);
      }
    }
    commit_async();
  };

  int buf = 0;
  fetch(blockIdx.x, 0);
  for (int t = blockIdx.x; t < tiles; t += gridDim.x, buf ^= 1) {
    fetch(t + gridDim.x, buf ^ 1);
    wait_async<1>();  // all but the newest group (the next tile)
    __syncthreads();
    if (active) {
      const T* xs = reinterpret_cast<const T*>(stage[buf]);
      const int first = t * tile_pixels;
      for (int s = 0; s < a.stage_steps; ++s) {
        const int local = s * a.step_pixels + slot;
        const int pix = first + local;
        if (pix >= a.npix) break;
        float acc[V];
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] = b[k];  // the bias first: one add less per output
#pragma unroll
        for (int j = 0; j < kVecs; ++j) {
          const Vec16<T> xv = *reinterpret_cast<const Vec16<T>*>(xs + local * CIN + j * kPerVec);
#pragma unroll
          for (int e = 0; e < kPerVec; ++e) {
            const float xe = static_cast<float>(xv.v[e]);
#pragma unroll
            for (int k = 0; k < V; ++k) acc[k] = fmaf(xe, wr[k][j * kPerVec + e], acc[k]);
          }
        }
        Pack<T, V> out;
#pragma unroll
        for (int k = 0; k < V; ++k) {
          out.v[k] = T(pointwise_activate<T, A>(acc[k], a.alpha, a.beta));
        }
        *reinterpret_cast<Pack<T, V>*>(static_cast<T*>(a.y) + static_cast<int64_t>(pix) * a.cout +
                                       c0) = out;
      }
    }
    __syncthreads();  // everyone is done with stage[buf] before the next fetch overwrites it
  }
}

constexpr bool supported_activation(int a) {
  using K = ActivationKind;
  return a == static_cast<int>(K::kNone) || a == static_cast<int>(K::kRelu) ||
         a == static_cast<int>(K::kClamp) || a == static_cast<int>(K::kSilu);
}

// Pixels per block step (the block is step_pixels x tile threads) and the blocks resident at
// once on the device (SMs x blocks per SM): the shape that keeps the most threads busy per SM.
// Registers limit the blocks per SM, so a smaller block may fit more warps (168 registers: one
// block of 252 threads, or two of 192). Found once per kernel, tile and device with the occupancy
// calculator: a launch asks only for the current device.
struct BlockShape {
  int step_pixels = 1;
  int64_t wave = 1;
};

BlockShape block_shape(const void* kernel, int tile) {
  int device = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int>, BlockShape> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(kernel, tile, device);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int sms = 0, best_threads = 0, best_per_sm = 1;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  BlockShape best;
  for (int p = std::min(kMaxStepPixels, kMaxThreads / tile); p >= 1; --p) {
    int per_sm = 0;
    KILN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, p * tile, 0));
    if (per_sm * p * tile > best_threads) {
      best_threads = per_sm * p * tile;
      best.step_pixels = p;
      best_per_sm = std::max(1, per_sm);
    }
  }
  best.wave = int64_t{sms} * best_per_sm;
  cache[key] = best;
  return best;
}

template <class T, int CIN, int A>
void launch(cudaStream_t stream, PointwiseArgs a) {
  const auto kernel = pointwise_nhwc<T, CIN, A>;
  const BlockShape shape = block_shape(reinterpret_cast<const void*>(kernel), a.tile);
  // One wave of resident blocks looping over the tiles: each block waits only for its first
  // tile's loads. Steps per tile: at most kStageBytes of input, and of those from half of it up
  // the count whose busiest block runs the fewest steps (a block with one tile more than the
  // others is the kernel's tail).
  a.step_pixels = shape.step_pixels;
  const int64_t blocks = shape.wave;
  const int64_t steps = (a.npix + a.step_pixels - 1) / a.step_pixels;
  const int max_steps = std::max<int>(1, kStageBytes / (a.step_pixels * CIN * int{sizeof(T)}));
  int64_t best_cost = -1;
  for (int s = max_steps; s >= std::max(1, max_steps / 2); --s) {
    const int64_t tiles = (steps + s - 1) / s;
    const int64_t cost = (tiles + blocks - 1) / blocks * s;
    if (best_cost < 0 || cost < best_cost) best_cost = cost, a.stage_steps = s;
  }
  const int64_t tiles = (steps + a.stage_steps - 1) / a.stage_steps;
  const dim3 grid(static_cast<unsigned>(std::min(tiles, blocks)),
                  static_cast<unsigned>((a.groups + a.tile - 1) / a.tile));
  kernel<<<grid, a.step_pixels * a.tile, 0, stream>>>(a);
}

template <class T>
void launch_typed(cudaStream_t stream, const PointwiseArgs& a, int64_t cin, ActivationKind act) {
  const auto with_cin = [&](auto cin_c) {
    constexpr int kCin = decltype(cin_c)::value;
    dispatch_activation(act, [&](auto act_c) {
      constexpr int kAct = decltype(act_c)::value;
      if constexpr (supported_activation(kAct)) launch<T, kCin, kAct>(stream, a);
    });
  };
  switch (cin) {
    case 8:
      return with_cin(std::integral_constant<int, 8>{});
    case 16:
      return with_cin(std::integral_constant<int, 16>{});
    case 24:
      return with_cin(std::integral_constant<int, 24>{});
    default:
      return with_cin(std::integral_constant<int, 32>{});
  }
}

bool all_equal(const std::vector<int64_t>& v, int64_t value) {
  return std::all_of(v.begin(), v.end(), [&](int64_t e) { return e == value; });
}

}  // namespace

bool pointwise_nhwc_applies(const ConvolutionParams& p, const TensorView& x, const TensorView& w,
                            const TensorView* bias, const TensorView* residual,
                            const TensorView& out) {
  using K = ActivationKind;
  const K act = p.post.activation;
  if (!(p.channels_last && !p.transposed && p.groups == 1 && x.shape.size() == 4 &&
        w.shape.size() == 4 && out.shape.size() == 4 && all_equal(p.strides, 1) &&
        all_equal(p.padding_begin, 0) && all_equal(p.padding_end, 0) && all_equal(p.dilations, 1) &&
        !residual && !p.post.has_residual && p.post.activation2 == K::kNone &&
        (act == K::kNone || act == K::kRelu || act == K::kClamp || act == K::kSilu))) {
    return false;
  }
  const int64_t c = x.shape[3], cout = w.shape[0];
  const DataType dt = out.dtype;
  const bool float_type = dt == DataType::kF32 || dt == DataType::kF16 || dt == DataType::kBF16;
  return float_type && x.dtype == dt && w.dtype == dt &&
         (c == 8 || c == 16 || c == 24 || c == 32) && w.shape == Shape{cout, 1, 1, c} &&
         out.shape == Shape{x.shape[0], x.shape[1], x.shape[2], cout} &&
         cout % channels_per_thread(dtype_size(dt), c) == 0 &&
         (!bias || (bias->dtype == dt && bias->numel() == cout)) &&
         x.shape[0] * x.shape[1] * x.shape[2] <= kMaxPixels && aligned16(x.data) &&
         aligned16(w.data) && aligned16(out.data);
}

void launch_pointwise_nhwc(cudaStream_t stream, const std::string& layer,
                           const ConvolutionParams& p, const TensorView& x, const TensorView& w,
                           const TensorView* bias, const TensorView& out) {
  const int64_t c = x.shape[3], cout = w.shape[0];
  const size_t es = dtype_size(out.dtype);
  PointwiseArgs a{};
  a.x = x.data, a.w = w.data, a.y = out.data;
  a.bias = bias ? bias->data : nullptr;
  a.npix = static_cast<int>(x.shape[0] * x.shape[1] * x.shape[2]);
  if (a.npix == 0) return;
  a.cout = static_cast<int>(cout);
  a.groups = static_cast<int>(cout / channels_per_thread(es, c));
  // Channel tiles as even as the group count allows (at most kMaxTileGroups each); the launch
  // picks the pixels per step and the steps per tile.
  const int ytiles = (a.groups + kMaxTileGroups - 1) / kMaxTileGroups;
  a.tile = (a.groups + ytiles - 1) / ytiles;
  a.alpha = static_cast<float>(p.post.alpha), a.beta = static_cast<float>(p.post.beta);
  switch (out.dtype) {
    case DataType::kF16:
      launch_typed<__half>(stream, a, c, p.post.activation);
      break;
    case DataType::kBF16:
      launch_typed<__nv_bfloat16>(stream, a, c, p.post.activation);
      break;
    default:
      launch_typed<float>(stream, a, c, p.post.activation);
      break;
  }
  KILN_CUDA_CHECK_LAUNCH(layer);
}

}  // namespace kiln::engine::cuda
