// CUDA kernel of scaled dot-product attention: one block per query row computes its scores (in a
// workspace row), a safe softmax and the weighted sum of values, in double like the CPU kernel.
// Rows whose every position is masked out produce zeros. A simple kernel, not a flash kernel.
#include <cmath>

#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {
namespace {

constexpr int kWarp = 32;
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

void attention_kernel(KernelArgs& args) {
  const auto& p = std::get<AttentionParams>(args.layer.params);
  const TensorView &q = args.inputs[0], &k = args.inputs[1], &v = args.inputs[2];
  const TensorView& out = args.outputs[0];
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

void register_attention(KernelTable& t) {
  t.set<AttentionParams>(attention_kernel, kFloatTypes);
}

}  // namespace kiln::engine::cuda
