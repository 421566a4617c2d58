// CUDA depthwise 2-d convolution on channels-last data (x [N, H, W, C], weights [C, kh, kw, 1],
// one filter per channel): one thread per output element with the channel innermost, so that a
// warp reads consecutive channels of one pixel; fp32 accumulation; bias, activation, residual and
// the second activation in the same pass. cuDNN's NHWC grouped convolutions are slow for this
// shape (bench/NOTES.md G4).
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
                           const TensorView& out) {
  DepthwiseArgs a{};
  a.x = x.data, a.w = w.data, a.y = out.data;
  a.bias = bias ? bias->data : nullptr;
  a.residual = residual ? residual->data : nullptr;
  a.h = x.shape[1], a.w_in = x.shape[2], a.c = x.shape[3];
  a.oh = out.shape[1], a.ow = out.shape[2];
  a.total = out.numel();
  a.kh = static_cast<int>(w.shape[1]), a.kw = static_cast<int>(w.shape[2]);
  const auto at = [](const std::vector<int64_t>& v, size_t i, int64_t fallback) {
    return static_cast<int>(v.empty() ? fallback : v[i]);
  };
  a.sh = at(p.strides, 0, 1), a.sw = at(p.strides, 1, 1);
  a.ph = at(p.padding_begin, 0, 0), a.pw = at(p.padding_begin, 1, 0);
  a.dh = at(p.dilations, 0, 1), a.dw = at(p.dilations, 1, 1);
  a.act = p.post.activation, a.act2 = p.post.activation2;
  a.alpha = static_cast<float>(p.post.alpha), a.beta = static_cast<float>(p.post.beta);
  a.alpha2 = static_cast<float>(p.post.alpha2), a.beta2 = static_cast<float>(p.post.beta2);
  if (a.total == 0) return;
  const unsigned grid = grid_for(a.total);
  switch (out.dtype) {
    case DataType::kF16:
      depthwise_nhwc_t<__half><<<grid, kThreads, 0, stream>>>(a);
      break;
    case DataType::kBF16:
      depthwise_nhwc_t<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(a);
      break;
    default:
      depthwise_nhwc_t<float><<<grid, kThreads, 0, stream>>>(a);
      break;
  }
  KILN_CUDA_CHECK_LAUNCH(layer);
}

}  // namespace kiln::engine::cuda
