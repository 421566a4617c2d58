// CUDA kernel of the pooling family: max/average, windowed or adaptive, one thread per output
// element walking its window (same window rules as cpu/pooling.cpp: dilation, asymmetric padding,
// ceil_mode and torch's average divisor need no special paths); channels-last data in 16-byte
// words of channels per thread where the channel count allows.
#include <cmath>

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

template <class T, class A>
bool launch_nhwc_vec(cudaStream_t stream, const TensorView& x, const TensorView& out,
                     const PoolDims& d) {
  constexpr int V = Vec16<T>::kN;
  if (d.ch % V != 0 || !aligned16(x.data) || !aligned16(out.data)) return false;
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
