// The mask forms cuDNN's fused attention needs (attention_cudnn.h): a mask as an additive bias in
// the layer's dtype (cuDNN takes no bool mask), and zeros for the query rows a mask leaves without
// keys, which the flash and CPU kernels give them (whatever cuDNN's softmax makes of a row of
// -inf: its result there is not relied on).
#include <cmath>

#include "engine/cuda/attention_cudnn.h"
#include "engine/cuda/device_util.cuh"

namespace kiln::engine::cuda {
namespace {

struct BiasArgs {
  const void* mask;
  DataType mt;
  Dims md;             // over the weights [B, H, L, S] (flat)
  int64_t H, L, S;     // of the weights
  int64_t bh, bl, ld;  // the bias's heads (1 or H) and rows (1 or L) a matrix, its row length
  int64_t n;           // bias elements
  void* bias;
  DataType bt;
  float max;  // the bias dtype's largest finite value
};

__global__ void sdpa_bias_kernel(BiasArgs a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n;
       i += step) {
    const int64_t j = i % a.ld, row = i / a.ld;
    // (b, h, l) of the bias; where it has one head or row, those of head or row 0 of the weights.
    const int64_t l = row % a.bl, h = (row / a.bl) % a.bh, b = row / (a.bl * a.bh);
    float value = 0.0f;
    if (j < a.S) {
      const int64_t at = offset_of(a.md, ((b * a.H + h) * a.L + l) * a.S + j);
      if (a.mt == DataType::kBool) {
        value = load_as<int64_t>(a.mt, a.mask, at) != 0 ? 0.0f : -INFINITY;
      } else {
        value = load_as<float>(a.mt, a.mask, at);
        if (isfinite(value)) value = fminf(fmaxf(value, -a.max), a.max);
      }
    }
    store_as<float>(a.bt, a.bias, i, value);
  }
}

struct EmptyRowArgs {
  const void* mask;
  DataType mt;
  Dims md;
  int64_t H, L, S, rows;
  bool causal;
  void* o;
  DataType ot;
  int64_t E;
  SdpaStrides os;
};

// A warp a query row: whether any of its keys is kept, 32 keys a step (most rows keep key 0, and
// one step answers), and if none is, zeros for its output row.
__global__ void sdpa_empty_rows_kernel(EmptyRowArgs a) {
  constexpr int kWarp = 32;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
       row < a.rows; row += warps) {
    const int64_t i = row % a.L;
    const int64_t keys = a.causal ? min(i + 1, a.S) : a.S;
    bool kept = false;
    for (int64_t j0 = 0; j0 < keys && !kept; j0 += kWarp) {
      const int64_t j = j0 + lane;
      bool keeps = false;
      if (j < keys) {
        const int64_t at = offset_of(a.md, row * a.S + j);
        keeps = a.mt == DataType::kBool ? load_as<int64_t>(a.mt, a.mask, at) != 0
                                        : load_as<float>(a.mt, a.mask, at) != -INFINITY;
      }
      kept = __any_sync(0xffffffffu, keeps);
    }
    if (kept) continue;
    const int64_t h = (row / a.L) % a.H, b = row / (a.L * a.H);
    const int64_t base = b * a.os.batch + h * a.os.head + i * a.os.row;
    for (int64_t e = lane; e < a.E; e += kWarp) store_as<float>(a.ot, a.o, base + e, 0.0f);
  }
}

Dims mask_dims(const std::string& layer, const SdpaMask& m) {
  return broadcast_dims(layer, m.weights, {m.shape})[1];
}

}  // namespace

void launch_sdpa_bias(cudaStream_t stream, const std::string& layer, const SdpaMask& mask,
                      DataType dtype, int64_t bias_b, int64_t bias_h, int64_t bias_l, int64_t ld,
                      void* bias) {
  BiasArgs a{};
  a.mask = mask.data, a.mt = mask.dtype, a.md = mask_dims(layer, mask);
  a.H = mask.H, a.L = mask.weights[mask.weights.size() - 2], a.S = mask.weights.back();
  a.bh = bias_h, a.bl = bias_l, a.ld = ld;
  a.n = bias_b * bias_h * bias_l * ld;
  a.bias = bias, a.bt = dtype;
  a.max = dtype == DataType::kF16 ? 65504.0f : 3.38953139e38f;  // (bf16's largest finite)
  sdpa_bias_kernel<<<grid_for(a.n), kThreads, 0, stream>>>(a);
  KILN_CUDA_CHECK_LAUNCH(layer);
}

void launch_sdpa_empty_rows(cudaStream_t stream, const std::string& layer, const SdpaMask& mask,
                            bool causal, void* o, DataType dtype, int64_t E,
                            const SdpaStrides& os) {
  EmptyRowArgs a{};
  a.mask = mask.data, a.mt = mask.dtype, a.md = mask_dims(layer, mask);
  a.H = mask.H, a.L = mask.weights[mask.weights.size() - 2], a.S = mask.weights.back();
  a.rows = mask.B * mask.H * a.L;
  a.causal = causal;
  a.o = o, a.ot = dtype, a.E = E, a.os = os;
  constexpr int kWarpsPerBlock = kThreads / 32;
  sdpa_empty_rows_kernel<<<grid_for(a.rows, kWarpsPerBlock), kThreads, 0, stream>>>(a);
  KILN_CUDA_CHECK_LAUNCH(layer);
}

}  // namespace kiln::engine::cuda
