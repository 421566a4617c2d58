// CUDA kernel of the pooling family: max/average, windowed or adaptive, one thread per output
// element walking its window (same window rules as cpu/pooling.cpp: dilation, asymmetric padding,
// ceil_mode and torch's average divisor need no special paths); channels-last data in 16-byte
// words of channels per thread where the channel count allows, 2-D windows of such data whose
// indices fit 32 bits through a fast path (32-bit index math, K x K windows unrolled).
#include <cmath>
#include <type_traits>

#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {
namespace {

struct PoolDims {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, pb[3] = {}, pe[3] = {}, dil[3] = {1, 1, 1};
  int64_t ch = 1;  // channels-last: the channel count (innermost); channels-first: 1
  bool adaptive = false, is_max = true, count_include_pad = true;
};

struct Window {
  int64_t first, step, count, padded;
};

__device__ __forceinline__ int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

__device__ __forceinline__ Window window(const PoolDims& p, int d, int64_t o) {
  const int64_t in = p.in[d], out = p.out[d];
  if (p.adaptive) {  // torch: [floor(o * in / out), ceil((o + 1) * in / out))
    const int64_t first = (o * in) / out;
    const int64_t count = ((o + 1) * in + out - 1) / out - first;
    return {first, 1, count, count};
  }
  const int64_t k = p.k[d], dil = p.dil[d];
  const int64_t start = o * p.s[d] - p.pb[d];
  const int64_t j0 = start >= 0 ? 0 : (-start + dil - 1) / dil;
  int64_t j1 = floor_div(in - 1 - start, dil);
  if (j1 > k - 1) j1 = k - 1;
  const int64_t count = j1 - j0 + 1 > 0 ? j1 - j0 + 1 : 0;
  const int64_t end = start + k < in + p.pe[d] ? start + k : in + p.pe[d];
  return {start + j0 * dil, dil, count, end - start};
}

__global__ void pooling_kernel_t(const void* x, DataType xt, void* y, DataType yt, PoolDims p,
                                 int64_t total) {
  const int64_t in_plane = p.in[0] * p.in[1] * p.in[2];
  const int64_t out_plane = p.out[0] * p.out[1] * p.out[2];
  const int64_t ch = p.ch;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / (out_plane * ch), r = (i / ch) % out_plane, c = i % ch;
    const Window w0 = window(p, 0, r / (p.out[1] * p.out[2]));
    const Window w1 = window(p, 1, (r / p.out[2]) % p.out[1]);
    const Window w2 = window(p, 2, r % p.out[2]);
    const int64_t plane = b * in_plane * ch + c;
    float result;
    if (p.is_max) {
      float m = -INFINITY;
      for (int64_t a = 0; a < w0.count; ++a) {
        for (int64_t e1 = 0; e1 < w1.count; ++e1) {
          const int64_t row =
              ((w0.first + a * w0.step) * p.in[1] + w1.first + e1 * w1.step) * p.in[2];
          for (int64_t e = 0; e < w2.count; ++e) {
            const float v = load_as<float>(xt, x, plane + (row + w2.first + e * w2.step) * ch);
            if (v > m || isnan(v)) m = v;  // NaN wins, as in torch
          }
        }
      }
      result = m;
    } else {
      double sum = 0;
      for (int64_t a = 0; a < w0.count; ++a) {
        for (int64_t e1 = 0; e1 < w1.count; ++e1) {
          const int64_t row = ((w0.first + a) * p.in[1] + w1.first + e1) * p.in[2] + w2.first;
          for (int64_t e = 0; e < w2.count; ++e)
            sum += load_as<float>(xt, x, plane + (row + e) * ch);
        }
      }
      const int64_t divisor = p.count_include_pad && !p.adaptive ? w0.padded * w1.padded * w2.padded
                                                                 : w0.count * w1.count * w2.count;
      result = static_cast<float>(sum / static_cast<double>(divisor));
    }
    store_as<float>(yt, y, i, result);
  }
}

// Channels-last data of one float dtype T whose channels come in 16-byte words: a thread takes
// one word (V channels) of one output pixel, with the windows as above; max in float, average
// summed in A (double for f32, as above; float for f16/bf16).
template <class T, class A>
__global__ void pooling_nhwc_vec_kernel(const T* x, T* y, PoolDims p, int64_t total) {
  constexpr int V = Vec16<T>::kN;
  const int64_t in_plane = p.in[0] * p.in[1] * p.in[2];
  const int64_t out_plane = p.out[0] * p.out[1] * p.out[2];
  const int64_t ch = p.ch, words = ch / V;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / (out_plane * words), r = (i / words) % out_plane, c = (i % words) * V;
    const Window w0 = window(p, 0, r / (p.out[1] * p.out[2]));
    const Window w1 = window(p, 1, (r / p.out[2]) % p.out[1]);
    const Window w2 = window(p, 2, r % p.out[2]);
    const T* const plane = x + b * in_plane * ch + c;
    A acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = p.is_max ? -INFINITY : 0;
    for (int64_t a = 0; a < w0.count; ++a) {
      for (int64_t e1 = 0; e1 < w1.count; ++e1) {
        const int64_t row =
            ((w0.first + a * w0.step) * p.in[1] + w1.first + e1 * w1.step) * p.in[2];
        for (int64_t e = 0; e < w2.count; ++e) {
          const Vec16<T> v =
              *reinterpret_cast<const Vec16<T>*>(plane + (row + w2.first + e * w2.step) * ch);
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float f = static_cast<float>(v.v[k]);
            if (!p.is_max) {
              acc[k] += f;
            } else if (f > acc[k] || isnan(f)) {
              acc[k] = f;  // NaN wins, as in torch
            }
          }
        }
      }
    }
    Vec16<T> out;
    const int64_t divisor = p.count_include_pad && !p.adaptive ? w0.padded * w1.padded * w2.padded
                                                               : w0.count * w1.count * w2.count;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      out.v[k] = T(static_cast<float>(p.is_max ? acc[k] : acc[k] / static_cast<A>(divisor)));
    }
    reinterpret_cast<Vec16<T>*>(y)[i] = out;
  }
}

// n / d for 0 <= n < 2^31 and 1 <= d < 2^31 by a multiply-high and a shift (Granlund and
// Montgomery's round-up multiplier: mul = ceil(2^(31 + l) / d) with l = ceil(log2 d)).
struct FastDiv {
  int d = 1;
  unsigned mul = 0, shift = 0;
  FastDiv() = default;
  explicit FastDiv(int divisor) : d(divisor) {
    int l = 0;
    while ((int64_t{1} << l) < divisor) ++l;
    if (d > 1) {
      mul = static_cast<unsigned>(((uint64_t{1} << (31 + l)) + d - 1) / d);
      shift = static_cast<unsigned>(l - 1);
    }
  }
  __device__ __forceinline__ int div(int n) const {
    return d == 1 ? n : static_cast<int>(__umulhi(static_cast<unsigned>(n), mul) >> shift);
  }
};

// Windows over H and W of channels-last [N, H, W, C] in 32-bit ints (dim 0 is H, 1 is W).
struct Pool2d {
  FastDiv ow, oh;  // output width and height
  int in[2], k[2], s[2], pb[2], dil[2];
  int pad_end[2];     // in + padding end: where a window stops counting padding (see window())
  int words, pixels;  // 16-byte words of channels per pixel; N * OH * OW
  bool count_include_pad;
};

// Lane i (0-3) of a 16-byte word, and element k of it as T widened to float (exactly).
__device__ __forceinline__ unsigned lane(const uint4& u, int i) {
  return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}
__device__ __forceinline__ void set_lane(uint4& u, int i, unsigned v) {
  (i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w) = v;
}
template <class T>
__device__ __forceinline__ float element(const uint4& u, int k) {
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(lane(u, k));
  } else {
    const unsigned h = k % 2 ? lane(u, k / 2) >> 16 : lane(u, k / 2) & 0xffffu;
    if constexpr (std::is_same_v<T, __half>) {
      return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
    } else {
      return __uint_as_float(h << 16);  // bfloat16: the high half of a float
    }
  }
}

// The running max of 16-byte words of T, NaN winning as in torch: pairs of halves or bfloat16s
// at once by max.NaN on sm_80+, elements compared in float otherwise (keeping the first of equal
// values, as pooling_nhwc_vec_kernel; max.NaN may give +0 where that keeps an earlier -0).
// kNeutral: the lane of a tap outside the input (-inf, which changes no max).
template <class T>
struct MaxAcc {
  static constexpr unsigned kNeutral = sizeof(T) == 4              ? 0xff800000u
                                       : std::is_same_v<T, __half> ? 0xfc00fc00u
                                                                   : 0xff80ff80u;
  uint4 m = make_uint4(kNeutral, kNeutral, kNeutral, kNeutral);
  __device__ __forceinline__ void add(const uint4& v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<T, __half>) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        unsigned r;
        asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(lane(m, i)), "r"(lane(v, i)));
        set_lane(m, i, r);
      }
      return;
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        unsigned r;
        asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(lane(m, i)), "r"(lane(v, i)));
        set_lane(m, i, r);
      }
      return;
    }
#endif
    constexpr int kN = 16 / sizeof(T), kBits = 8 * sizeof(T);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float f = element<T>(v, k);
      if (f > element<T>(m, k) || isnan(f)) {
        const int i = k * sizeof(T) / 4;
        const unsigned mask = kBits == 32 ? ~0u : 0xffffu << (kBits * (k % 2));
        set_lane(m, i, (lane(m, i) & ~mask) | (lane(v, i) & mask));
      }
    }
  }
  __device__ __forceinline__ void store(uint4* y, int64_t) const {
    *y = m;
  }
};

// The running sum of 16-byte words of T in A, divided at the end as pooling_nhwc_vec_kernel
// does. kNeutral: +0, which changes no sum (a sum from +0 is never -0).
template <class T, class A>
struct AvgAcc {
  static constexpr unsigned kNeutral = 0;
  static constexpr int kN = 16 / sizeof(T);
  A sum[kN] = {};
  __device__ __forceinline__ void add(const uint4& v) {
#pragma unroll
    for (int k = 0; k < kN; ++k) sum[k] += element<T>(v, k);
  }
  __device__ __forceinline__ void store(uint4* y, int64_t divisor) const {
    Vec16<T> out;
#pragma unroll
    for (int k = 0; k < kN; ++k) out.v[k] = T(static_cast<float>(sum[k] / static_cast<A>(divisor)));
    *reinterpret_cast<Vec16<T>*>(y) = out;
  }
};

// Fast path of pooling_nhwc_vec_kernel for 2-D windows where every index fits 32 bits: threadIdx.y
// picks the output pixel (its n, oy, ox found once, by multiply-high division), threadIdx.x the
// 16-byte word of channels (looping where a pixel has more words than blockDim.x). K > 0: K x K
// windows, unrolled, all K * K loads issued before any is combined (taps outside the input read
// as Acc::kNeutral); K = 0: any window, looped over its clipped rows and columns.
template <class T, class Acc, int K>
__global__ void __launch_bounds__(kThreads)
    pooling_nhwc_2d_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, Pool2d p) {
  const int pix = blockIdx.x * blockDim.y + threadIdx.y;
  if (pix >= p.pixels) return;
  const int t = p.ow.div(pix), ox = pix - t * p.ow.d;
  const int n = p.oh.div(t), oy = t - n * p.oh.d;
  const int y_start = oy * p.s[0] - p.pb[0], x_start = ox * p.s[1] - p.pb[1];
  const int row0 = n * p.in[0];
  // torch's padded window size (as window(): k, not the dilated extent, up to in + padding end).
  const int padded_y = min(y_start + p.k[0], p.pad_end[0]) - y_start;
  const int padded_x = min(x_start + p.k[1], p.pad_end[1]) - x_start;
  for (int w = threadIdx.x; w < p.words; w += blockDim.x) {
    Acc acc;
    int taps = 0;
    if constexpr (K > 0) {
      // Offsets in unsigned ints: exact modulo 2^32 for the taps inside the input (the only ones
      // read) even where the window's corner lies in the padding.
      const unsigned corner =
          ((static_cast<unsigned>(row0) + y_start) * p.in[1] + x_start) * p.words + w;
      const unsigned row_step = static_cast<unsigned>(p.dil[0]) * p.in[1] * p.words;
      const unsigned col_step = static_cast<unsigned>(p.dil[1]) * p.words;
      uint4 v[K * K];
#pragma unroll
      for (int j = 0; j < K; ++j) {
        const int iy = y_start + j * p.dil[0];
        const bool row_in = static_cast<unsigned>(iy) < static_cast<unsigned>(p.in[0]);
#pragma unroll
        for (int i = 0; i < K; ++i) {
          const int ix = x_start + i * p.dil[1];
          v[j * K + i] = make_uint4(Acc::kNeutral, Acc::kNeutral, Acc::kNeutral, Acc::kNeutral);
          if (row_in && static_cast<unsigned>(ix) < static_cast<unsigned>(p.in[1])) {
            v[j * K + i] = __ldg(x + (corner + j * row_step + i * col_step));
            ++taps;
          }
        }
      }
#pragma unroll
      for (int k = 0; k < K * K; ++k) acc.add(v[k]);
    } else {
      // First taps at or past 0 (a division only where the window starts in the padding), last
      // before the input's end.
      int y0 = y_start, x0 = x_start;
      if (y0 < 0) y0 += (-y0 + p.dil[0] - 1) / p.dil[0] * p.dil[0];
      if (x0 < 0) x0 += (-x0 + p.dil[1] - 1) / p.dil[1] * p.dil[1];
      const int y1 = min(y_start + (p.k[0] - 1) * p.dil[0] + 1, p.in[0]);
      const int x1 = min(x_start + (p.k[1] - 1) * p.dil[1] + 1, p.in[1]);
      for (int iy = y0; iy < y1; iy += p.dil[0]) {
        const uint4* row = x + (row0 + iy) * p.in[1] * p.words + w;
        for (int ix = x0; ix < x1; ix += p.dil[1]) {
          acc.add(__ldg(row + ix * p.words));
          ++taps;
        }
      }
    }
    acc.store(y + pix * p.words + w, p.count_include_pad ? int64_t{padded_y} * padded_x : taps);
  }
}

// Parameters of pooling_nhwc_2d_kernel for d, or false where the pooling is not over 2 dims (dim
// 0 empty) or some index might not fit 32 bits.
bool pool2d_params(const PoolDims& d, const TensorView& x, const TensorView& out, int vec,
                   Pool2d& p) {
  constexpr int64_t kMax = INT32_MAX;
  if (d.adaptive || d.in[0] != 1 || d.out[0] != 1 || d.k[0] != 1 || d.pb[0] != 0 || d.pe[0] != 0 ||
      x.numel() > kMax || out.numel() > kMax) {
    return false;
  }
  for (int s = 1; s < 3; ++s) {
    for (int64_t v : {d.in[s], d.out[s], d.k[s], d.s[s], d.pb[s], d.pe[s], d.dil[s]}) {
      if (v < 0 || v > kMax) return false;
    }
    if (d.out[s] < 1 || d.k[s] < 1 || d.s[s] < 1 || d.dil[s] < 1) return false;
    if ((d.out[s] - 1) * d.s[s] > kMax || (d.k[s] - 1) * d.dil[s] > kMax) return false;
    // Bounds every window start, tap, end and in + padding end that the kernel computes.
    if ((d.out[s] - 1) * d.s[s] + d.pb[s] + d.pe[s] + d.in[s] + (d.k[s] - 1) * d.dil[s] + d.k[s] +
            d.dil[s] >
        kMax) {
      return false;
    }
  }
  for (int a = 0; a < 2; ++a) {
    p.in[a] = static_cast<int>(d.in[a + 1]);
    p.k[a] = static_cast<int>(d.k[a + 1]);
    p.s[a] = static_cast<int>(d.s[a + 1]);
    p.pb[a] = static_cast<int>(d.pb[a + 1]);
    p.dil[a] = static_cast<int>(d.dil[a + 1]);
    p.pad_end[a] = static_cast<int>(d.in[a + 1] + d.pe[a + 1]);
  }
  p.oh = FastDiv(static_cast<int>(d.out[1]));
  p.ow = FastDiv(static_cast<int>(d.out[2]));
  p.words = static_cast<int>(d.ch / vec);
  p.pixels = static_cast<int>(out.numel() / d.ch);
  p.count_include_pad = d.count_include_pad;
  return true;
}

template <class T, class Acc>
void launch_nhwc_2d(cudaStream_t stream, const TensorView& x, const TensorView& out,
                    const Pool2d& p) {
  // Words of a pixel split evenly over at most 32 threads; the rest of the block over pixels.
  const int rounds = (p.words + 31) / 32;
  const int tx = (p.words + rounds - 1) / rounds, ty = kThreads / tx;
  const dim3 block(tx, ty);
  const unsigned grid = static_cast<unsigned>((p.pixels + ty - 1) / ty);
  const auto* xv = static_cast<const uint4*>(x.data);
  auto* yv = static_cast<uint4*>(out.data);
  const bool dense = p.k[0] == p.k[1];
  if (dense && p.k[0] == 3) {
    pooling_nhwc_2d_kernel<T, Acc, 3><<<grid, block, 0, stream>>>(xv, yv, p);
  } else if (dense && p.k[0] == 2) {
    pooling_nhwc_2d_kernel<T, Acc, 2><<<grid, block, 0, stream>>>(xv, yv, p);
  } else {
    pooling_nhwc_2d_kernel<T, Acc, 0><<<grid, block, 0, stream>>>(xv, yv, p);
  }
}

template <class T, class A>
bool launch_nhwc_vec(cudaStream_t stream, const TensorView& x, const TensorView& out,
                     const PoolDims& d) {
  constexpr int V = Vec16<T>::kN;
  if (d.ch % V != 0 || !aligned16(x.data) || !aligned16(out.data)) return false;
  Pool2d p;
  if (pool2d_params(d, x, out, V, p)) {
    if (d.is_max) {
      launch_nhwc_2d<T, MaxAcc<T>>(stream, x, out, p);
    } else {
      launch_nhwc_2d<T, AvgAcc<T, A>>(stream, x, out, p);
    }
    return true;
  }
  const int64_t total = out.numel() / V;
  pooling_nhwc_vec_kernel<T, A><<<grid_for(total), kThreads, 0, stream>>>(
      static_cast<const T*>(x.data), static_cast<T*>(out.data), d, total);
  return true;
}

void pooling_kernel(KernelArgs& args) {
  const auto& p = std::get<PoolingParams>(args.layer.params);
  const TensorView &x = args.inputs[0], &out = args.outputs[0];
  const size_t nd = p.adaptive ? p.output_size.size() : p.kernel.size();
  KILN_CHECK(nd >= 1 && nd <= 3, Unsupported, "layer `", args.layer.name, "`: pooling over ", nd,
             " dims (the CUDA kernel takes 1 to 3)");
  // Channels-last ([N, spatial..., C]): one plane per n, elements C apart (see PoolDims::ch).
  const size_t lead = p.channels_last ? 1 : x.shape.size() - nd;
  PoolDims d;
  if (p.channels_last) d.ch = x.shape.back();
  d.adaptive = p.adaptive;
  d.is_max = p.kind == PoolingKind::kMax;
  d.count_include_pad = p.count_include_pad;
  for (size_t k = 0; k < nd; ++k) {
    const size_t slot = 3 - nd + k;
    d.in[slot] = x.shape[lead + k];
    d.out[slot] = out.shape[lead + k];
    if (!p.adaptive) {
      d.k[slot] = p.kernel[k];
      d.s[slot] = p.strides.empty() ? p.kernel[k] : p.strides[k];
      d.pb[slot] = p.padding_begin.empty() ? 0 : p.padding_begin[k];
      d.pe[slot] = p.padding_end.empty() ? 0 : p.padding_end[k];
      d.dil[slot] = p.dilations.empty() ? 1 : p.dilations[k];
    }
  }
  // Global pooling (one window covering each whole plane): a reduction over the spatial dims.
  bool global = true;
  int64_t plane = 1;
  for (size_t k = 0; k < nd; ++k) {
    const size_t slot = 3 - nd + k;
    plane *= d.in[slot];
    global = global && d.out[slot] == 1 &&
             (p.adaptive ||
              (d.k[slot] == d.in[slot] && d.pb[slot] == 0 && d.pe[slot] == 0 && d.dil[slot] == 1));
  }
  if (global && plane > 0) {
    const int64_t outer = p.channels_last ? x.shape[0] : x.numel() / plane;
    const int64_t inner = p.channels_last ? d.ch : 1;
    if (launch_reduce_middle(args.stream(), args.res, args.layer.name, x, out, outer, plane, inner,
                             d.is_max ? ReduceOp::kMax : ReduceOp::kMean)) {
      return;
    }
  }
  if (p.channels_last && x.dtype == out.dtype && out.numel() > 0) {
    bool vec = false;
    if (x.dtype == DataType::kF16) vec = launch_nhwc_vec<__half, float>(args.stream(), x, out, d);
    if (x.dtype == DataType::kBF16) {
      vec = launch_nhwc_vec<__nv_bfloat16, float>(args.stream(), x, out, d);
    }
    if (x.dtype == DataType::kF32) vec = launch_nhwc_vec<float, double>(args.stream(), x, out, d);
    if (vec) {
      KILN_CUDA_CHECK_LAUNCH(args.layer.name);
      return;
    }
  }
  const int64_t total = out.numel();
  pooling_kernel_t<<<grid_for(total), kThreads, 0, args.stream()>>>(x.data, x.dtype, out.data,
                                                                    out.dtype, d, total);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

}  // namespace

void register_pooling(KernelTable& t) {
  t.set<PoolingParams>(pooling_kernel, kFloatTypes);
}

}  // namespace kiln::engine::cuda
