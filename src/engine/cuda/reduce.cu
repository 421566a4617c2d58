// CUDA kernels of the reduce family: reduce (sum/mean/max/min of a float tensor over one run of
// dims: the [outer, m, inner] kernel, accumulating in float; otherwise one warp per output,
// floating data in double and integers in int64 with wrap-around, as on the CPU), argmax/argmin
// and scans (one thread per row: scalar_math.h's scan_row, as on the CPU) and topk (one thread per
// element, placed by its rank in the row); nonzero (an ordered compaction in three passes: counts
// per chunk, their prefix sums, then each chunk writes its indices at its offset).
#include <algorithm>
#include <cmath>

#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"
#include "engine/layers/setup.h"

namespace kiln::engine::cuda {
namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMax:
      return (isnan(a) || isnan(b)) ? NAN : fmax(a, b);
    case ReduceOp::kMin:
      return (isnan(a) || isnan(b)) ? NAN : fmin(a, b);
    case ReduceOp::kAny:
      return (a != 0 || b != 0) ? 1.0 : 0.0;
    case ReduceOp::kAll:
      return (a != 0 && b != 0) ? 1.0 : 0.0;
    default:
      return a + b;
  }
}

__device__ __forceinline__ int64_t combine(ReduceOp op, int64_t a, int64_t b) {
  const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (op) {
    case ReduceOp::kProd:
      return static_cast<int64_t>(ua * ub);
    case ReduceOp::kMax:
      return a > b ? a : b;
    case ReduceOp::kMin:
      return a < b ? a : b;
    case ReduceOp::kAny:
      return (a != 0 || b != 0) ? 1 : 0;
    case ReduceOp::kAll:
      return (a != 0 && b != 0) ? 1 : 0;
    default:
      return static_cast<int64_t>(ua + ub);
  }
}

template <class C>
__device__ __forceinline__ C identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProd:
    case ReduceOp::kAll:
      return C(1);
    default:
      return C(0);  // max/min start from the first element instead
  }
}

// Any/all reduce truthiness: each element enters as 0 or 1.
template <class C>
__global__ void reduce_kernel_t(const void* x, DataType xt, Dims kept, Dims red, int64_t m,
                                ReduceOp op, void* y, DataType yt, int64_t num_out) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  const bool truth = op == ReduceOp::kAny || op == ReduceOp::kAll;
  const bool extremum = op == ReduceOp::kMax || op == ReduceOp::kMin;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp; o < num_out;
       o += warps) {
    const int64_t base = offset_of(kept, o);
    C acc = extremum ? load_as<C>(xt, x, base) : identity<C>(op);
    for (int64_t j = lane; j < m; j += kWarp) {
      C v = load_as<C>(xt, x, base + offset_of(red, j));
      if (truth) v = v != C(0) ? C(1) : C(0);
      acc = combine(op, acc, v);
    }
    for (int s = kWarp / 2; s > 0; s /= 2)
      acc = combine(op, acc, __shfl_xor_sync(0xffffffffu, acc, s));
    if (lane == 0) {
      if (op == ReduceOp::kMean) {
        if constexpr (std::is_same_v<C, double>) {
          acc = acc / static_cast<double>(m);  // 0/0 is NaN, as on the CPU
        } else {
          acc = m > 0 ? acc / m : 0;
        }
      }
      if (truth) {
        store_as<int64_t>(yt, y, o, acc != C(0) ? 1 : 0);
      } else {
        store_as<C>(yt, y, o, acc);
      }
    }
  }
}

// Reduction of x viewed as [outer, m, inner] over m, same float dtype in and out: a block of
// (tx, ty) threads covers tx consecutive inner positions (coalesced) and splits m over ty, then
// combines the ty partials in shared memory. f32 accumulates in double (as the CPU), f16/bf16 in
// float. Global pooling (channels-last: inner = C; channels-first: inner = 1) and reductions over
// a run of middle dims take it. Where inner comes in 16-byte words (V elements of T), a thread
// loads and reduces one word; V = 1 otherwise.
constexpr int kMiddleThreads = 256;

template <class A>
__device__ __forceinline__ A combine(ReduceOp op, A acc, A v) {
  if (op == ReduceOp::kMax) return (v > acc || isnan(v)) && !isnan(acc) ? v : acc;
  if (op == ReduceOp::kMin) return (v < acc || isnan(v)) && !isnan(acc) ? v : acc;
  return acc + v;
}

// Chunk z of gridDim.z covers [z * m_chunk, min(m, (z + 1) * m_chunk)); with one chunk the block
// writes y, with several it writes its partial (in A) to partials[z, o, i] for the combine
// kernel. `inner` counts elements of T; thread x covers elements [V * i, V * i + V).
template <class T, class A, int V>
__global__ void reduce_middle_kernel(const T* x, T* y, A* partials, int64_t outer, int64_t m,
                                     int64_t m_chunk, int64_t inner, ReduceOp op) {
  __shared__ A partial[kMiddleThreads * V];
  const A init = op == ReduceOp::kMax ? -INFINITY : (op == ReduceOp::kMin ? INFINITY : 0);
  const int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * V;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    A acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = init;
    if (i < inner) {
      const T* base = x + o * m * inner + i;
      const int64_t chunk_end = (blockIdx.z + 1) * m_chunk;
      const int64_t j_end = chunk_end < m ? chunk_end : m;
      for (int64_t j = blockIdx.z * m_chunk + threadIdx.y; j < j_end; j += blockDim.y) {
        if constexpr (V == 1) {
          acc[0] = combine<A>(op, acc[0], static_cast<float>(base[j * inner]));
        } else {
          const Vec16<T> v = *reinterpret_cast<const Vec16<T>*>(base + j * inner);
#pragma unroll
          for (int k = 0; k < V; ++k) acc[k] = combine<A>(op, acc[k], static_cast<float>(v.v[k]));
        }
      }
    }
#pragma unroll
    for (int k = 0; k < V; ++k) partial[t * V + k] = acc[k];
    __syncthreads();
    for (int half = blockDim.y / 2; half > 0; half /= 2) {
      if (threadIdx.y < half) {
#pragma unroll
        for (int k = 0; k < V; ++k) {
          partial[t * V + k] =
              combine<A>(op, partial[t * V + k], partial[(t + half * blockDim.x) * V + k]);
        }
      }
      __syncthreads();
    }
    if (threadIdx.y == 0 && i < inner) {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        A r = partial[threadIdx.x * V + k];
        if (partials) {
          partials[(blockIdx.z * outer + o) * inner + i + k] = r;
        } else {
          if (op == ReduceOp::kMean) r /= static_cast<A>(m);
          y[o * inner + i + k] = T(static_cast<float>(r));
        }
      }
    }
    __syncthreads();  // partial[] is rewritten for the next o
  }
}

template <class T, class A>
__global__ void reduce_chunks_kernel(const A* partials, T* y, int64_t n, int64_t chunks, int64_t m,
                                     ReduceOp op) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    A acc = partials[k];
    for (int64_t z = 1; z < chunks; ++z) acc = combine<A>(op, acc, partials[z * n + k]);
    if (op == ReduceOp::kMean) acc /= static_cast<A>(m);
    y[k] = T(static_cast<float>(acc));
  }
}

template <class T, class A, int V>
void launch_middle_v(cudaStream_t stream, Resources& res, const void* x, void* y, int64_t outer,
                     int64_t m, int64_t inner, ReduceOp op) {
  const int64_t words = inner / V;  // threads along inner
  unsigned tx = 1;
  while (tx < 32 && tx < words) tx *= 2;
  const dim3 block(tx, kMiddleThreads / tx);
  const int64_t tiles = (words + tx - 1) / tx, outer_blocks = std::min<int64_t>(outer, 65535);
  // Chunks of m when the (tile, outer) blocks alone would leave the GPU mostly idle: at least
  // ~1024 blocks, each thread still looping over at least 8 rows.
  int64_t chunks = 1;
  const int64_t blocks = tiles * outer_blocks;
  if (blocks < 1024) {
    chunks = std::min<int64_t>((1024 + blocks - 1) / blocks,
                               std::max<int64_t>(1, m / (int64_t{block.y} * 8)));
    chunks = std::min<int64_t>(chunks, 65535);
  }
  const int64_t m_chunk = (m + chunks - 1) / chunks;
  chunks = (m + m_chunk - 1) / m_chunk;
  A* partials = nullptr;
  if (chunks > 1) {
    partials =
        static_cast<A*>(res.workspace(static_cast<size_t>(chunks * outer * inner) * sizeof(A)));
  }
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(outer_blocks),
                  static_cast<unsigned>(chunks));
  reduce_middle_kernel<T, A, V><<<grid, block, 0, stream>>>(
      static_cast<const T*>(x), static_cast<T*>(y), partials, outer, m, m_chunk, inner, op);
  if (chunks > 1) {
    const int64_t n = outer * inner;
    reduce_chunks_kernel<T, A>
        <<<grid_for(n), kThreads, 0, stream>>>(partials, static_cast<T*>(y), n, chunks, m, op);
  }
}

template <class T, class A>
void launch_middle_t(cudaStream_t stream, Resources& res, const void* x, void* y, int64_t outer,
                     int64_t m, int64_t inner, ReduceOp op) {
  constexpr int V = Vec16<T>::kN;
  if (inner % V == 0 && aligned16(x)) {
    launch_middle_v<T, A, V>(stream, res, x, y, outer, m, inner, op);
  } else {
    launch_middle_v<T, A, 1>(stream, res, x, y, outer, m, inner, op);
  }
}

}  // namespace

bool launch_reduce_middle(cudaStream_t stream, Resources& res, const std::string& layer,
                          const TensorView& x, const TensorView& y, int64_t outer, int64_t m,
                          int64_t inner, ReduceOp op) {
  if (x.dtype != y.dtype || !is_floating(x.dtype) || outer <= 0 || inner <= 0 || m <= 0 ||
      (op != ReduceOp::kSum && op != ReduceOp::kMean && op != ReduceOp::kMax &&
       op != ReduceOp::kMin)) {
    return false;
  }
  switch (x.dtype) {
    case DataType::kF16:
      launch_middle_t<__half, float>(stream, res, x.data, y.data, outer, m, inner, op);
      break;
    case DataType::kBF16:
      launch_middle_t<__nv_bfloat16, float>(stream, res, x.data, y.data, outer, m, inner, op);
      break;
    default:
      launch_middle_t<float, double>(stream, res, x.data, y.data, outer, m, inner, op);
      break;
  }
  KILN_CUDA_CHECK_LAUNCH(layer);
  return true;
}

namespace {

void reduce_kernel(KernelArgs& args) {
  const auto& p = std::get<ReduceParams>(args.layer.params);
  const TensorView &in = args.inputs[0], &out = args.outputs[0];
  const Shape& x = in.shape;
  std::vector<bool> reduced(x.size(), p.axes.empty());
  for (int64_t a : p.axes)
    reduced[static_cast<size_t>(normalize_axis(a, x.size(), "reduce"))] = true;
  const auto strides = contiguous_strides(x);
  Shape kept, red;
  std::vector<int64_t> kept_strides, red_strides;
  for (size_t d = 0; d < x.size(); ++d) {
    (reduced[d] ? red : kept).push_back(x[d]);
    (reduced[d] ? red_strides : kept_strides).push_back(strides[d]);
  }
  const int64_t m = volume(red);
  KILN_CHECK(m > 0 || (p.op != ReduceOp::kMax && p.op != ReduceOp::kMin), InvalidArgument,
             "layer `", args.layer.name, "`: max/min over a zero-size dim");
  // Reduced dims that form one run [first, last]: the [outer, m, inner] kernel.
  size_t first = x.size(), last = 0;
  for (size_t d = 0; d < x.size(); ++d) {
    if (reduced[d] && x[d] != 1) first = std::min(first, d), last = d;
  }
  bool run = first < x.size();
  for (size_t d = first; run && d <= last; ++d) run = reduced[d] || x[d] == 1;
  if (run) {
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < first; ++d) outer *= x[d];
    for (size_t d = last + 1; d < x.size(); ++d) inner *= x[d];
    if (launch_reduce_middle(args.stream(), args.res, args.layer.name, in, out, outer, m, inner,
                             p.op)) {
      return;
    }
  }
  const Dims kd = strided_dims(args.layer.name, kept, kept_strides);
  const Dims rd = strided_dims(args.layer.name, red, red_strides);
  const int64_t num_out = out.numel();
  const unsigned grid = grid_for(num_out, kThreads / kWarp);
  if (is_floating(in.dtype)) {
    reduce_kernel_t<double><<<grid, kThreads, 0, args.stream()>>>(
        in.data, in.dtype, kd, rd, m, p.op, out.data, out.dtype, num_out);
  } else {
    reduce_kernel_t<int64_t><<<grid, kThreads, 0, args.stream()>>>(
        in.data, in.dtype, kd, rd, m, p.op, out.data, out.dtype, num_out);
  }
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

template <class C>
__global__ void argmax_kernel_t(const void* x, DataType xt, int64_t* y, AxisSplit s, bool is_min) {
  const int64_t rows = s.outer * s.inner;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (r / s.inner) * s.n * s.inner + r % s.inner;
    y[r] = arg_best<C>(xt, x, base, s.n, s.inner, is_min);
  }
}

void argmax_kernel(KernelArgs& args) {
  const auto& p = std::get<ArgMaxParams>(args.layer.params);
  const TensorView& in = args.inputs[0];
  const AxisSplit s = split_at(in.shape, normalize_axis(p.axis, in.shape.size(), "argmax"));
  KILN_CHECK(s.n > 0, InvalidArgument, "layer `", args.layer.name,
             "`: argmax over a zero-size dim");
  auto* y = static_cast<int64_t*>(args.outputs[0].data);
  const unsigned grid = grid_for(s.outer * s.inner);
  if (is_floating(in.dtype)) {
    argmax_kernel_t<float><<<grid, kThreads, 0, args.stream()>>>(in.data, in.dtype, y, s, p.min);
  } else {
    argmax_kernel_t<int64_t><<<grid, kThreads, 0, args.stream()>>>(in.data, in.dtype, y, s, p.min);
  }
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

// Whether (a, i) comes before (b, j) in topk order: NaN above everything, ties by lower index.
template <class C>
__device__ __forceinline__ bool before(C a, int64_t i, C b, int64_t j, bool largest) {
  if constexpr (std::is_same_v<C, float>) {
    const bool na = isnan(a), nb = isnan(b);
    if (na || nb) return (na && nb) ? i < j : (largest ? na : nb);
  }
  if (a != b) return largest ? a > b : a < b;
  return i < j;
}

template <class C>
__global__ void topk_kernel_t(const void* x, DataType xt, void* values, DataType vt,
                              int64_t* indices, AxisSplit s, int64_t k, bool largest) {
  const int64_t total = s.outer * s.n * s.inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t outer = t / (s.n * s.inner), i = (t / s.inner) % s.n, inner = t % s.inner;
    const int64_t base = outer * s.n * s.inner + inner;
    const C v = load_as<C>(xt, x, t);
    int64_t rank = 0;
    for (int64_t j = 0; j < s.n && rank < k; ++j) {
      if (j != i && before<C>(load_as<C>(xt, x, base + j * s.inner), j, v, i, largest)) ++rank;
    }
    if (rank < k) {
      const int64_t o = outer * k * s.inner + rank * s.inner + inner;
      store_as<C>(vt, values, o, v);
      indices[o] = i;
    }
  }
}

void topk_kernel(KernelArgs& args) {
  const auto& p = std::get<TopKParams>(args.layer.params);
  const TensorView& in = args.inputs[0];
  const AxisSplit s = topk_split(args.layer.name, p, in.shape);
  const TensorView &values = args.outputs[0], &indices = args.outputs[1];
  auto* idx = static_cast<int64_t*>(indices.data);
  const unsigned grid = grid_for(in.numel());
  if (is_floating(in.dtype)) {
    topk_kernel_t<float><<<grid, kThreads, 0, args.stream()>>>(
        in.data, in.dtype, values.data, values.dtype, idx, s, p.k, p.largest);
  } else {
    topk_kernel_t<int64_t><<<grid, kThreads, 0, args.stream()>>>(
        in.data, in.dtype, values.data, values.dtype, idx, s, p.k, p.largest);
  }
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

template <class C>
__global__ void scan_kernel_t(ScanParams p, const void* x, DataType xt, void* y, DataType yt,
                              int64_t* index, AxisSplit s) {
  const int64_t rows = s.outer * s.inner;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (r / s.inner) * s.n * s.inner + r % s.inner;
    scan_row<C>(p.op, p.exclusive, p.reverse, xt, x, yt, y, index, base, s.n, s.inner);
  }
}

void scan_kernel(KernelArgs& args) {
  const auto& p = std::get<ScanParams>(args.layer.params);
  const TensorView &in = args.inputs[0], &out = args.outputs[0];
  const AxisSplit s = split_at(in.shape, normalize_axis(p.axis, in.shape.size(), "scan"));
  int64_t* index = args.outputs.size() > 1 ? static_cast<int64_t*>(args.outputs[1].data) : nullptr;
  const unsigned grid = grid_for(s.outer * s.inner);
  if (is_floating(in.dtype)) {
    scan_kernel_t<double>
        <<<grid, kThreads, 0, args.stream()>>>(p, in.data, in.dtype, out.data, out.dtype, index, s);
  } else {
    scan_kernel_t<int64_t>
        <<<grid, kThreads, 0, args.stream()>>>(p, in.data, in.dtype, out.data, out.dtype, index, s);
  }
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

// nonzero: chunk b of the flattened input is [b * chunk, (b + 1) * chunk); pass 1 counts each
// chunk's nonzero elements, pass 2 (one block) turns the counts into offsets and the total,
// pass 3 writes each chunk's indices in order from its offset. The chunks are at most
// kNonZeroChunks, so that pass 2 is one block's scan.
constexpr int kNonZeroChunks = 1024;

__device__ __forceinline__ bool is_nonzero(DataType t, const void* x, int64_t i) {
  return load_as<double>(t, x, i) != 0;  // NaN != 0: nonzero, as torch
}

// Block-wide sum of one int per thread (blockDim.x == kThreads), returned to every thread.
__device__ int64_t block_sum(int64_t v) {
  __shared__ int64_t warp_sums[kThreads / kWarp];
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  int64_t total = 0;
  for (int w = 0; w < kThreads / kWarp; ++w) total += warp_sums[w];
  return total;
}

__global__ void nonzero_count(const void* x, DataType t, int64_t n, int64_t chunk,
                              int64_t* counts) {
  const int64_t begin = blockIdx.x * chunk, end = min(n, begin + chunk);
  int64_t c = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) c += is_nonzero(t, x, i);
  c = block_sum(c);
  if (threadIdx.x == 0) counts[blockIdx.x] = c;
}

// One block of kNonZeroChunks threads: offsets[b] = counts[0] + ... + counts[b - 1]; *total the
// sum.
__global__ void nonzero_offsets(const int64_t* counts, int chunks, int64_t* offsets,
                                int64_t* total) {
  __shared__ int64_t s[kNonZeroChunks];
  const int b = threadIdx.x;
  s[b] = b < chunks ? counts[b] : 0;
  __syncthreads();
  for (int step = 1; step < kNonZeroChunks; step *= 2) {  // inclusive scan (Hillis-Steele)
    const int64_t add = b >= step ? s[b - step] : 0;
    __syncthreads();
    s[b] += add;
    __syncthreads();
  }
  if (b < chunks) offsets[b] = b == 0 ? 0 : s[b - 1];
  if (b == kNonZeroChunks - 1) *total = s[b];
}

__global__ void nonzero_write(const void* x, DataType t, int64_t n, int64_t chunk, Dims shape,
                              const int64_t* offsets, int64_t* out) {
  __shared__ int warp_counts[kThreads / kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t begin = blockIdx.x * chunk, end = min(n, begin + chunk);
  int64_t next = offsets[blockIdx.x];  // where this tile's first index goes
  for (int64_t tile = begin; tile < end; tile += blockDim.x) {
    const int64_t i = tile + threadIdx.x;
    const bool keep = i < end && is_nonzero(t, x, i);
    const unsigned ballot = __ballot_sync(0xffffffffu, keep);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, in_tile = 0;
    for (int w = 0; w < kThreads / kWarp; ++w) {
      before += w < warp ? warp_counts[w] : 0;
      in_tile += warp_counts[w];
    }
    if (keep) {
      const int64_t row = next + before + __popc(ballot & ((1u << lane) - 1u));
      int64_t rest = i;
      for (int d = shape.rank - 1; d >= 0; --d) {
        out[row * shape.rank + d] = rest % shape.size[d];
        rest /= shape.size[d];
      }
    }
    next += in_tile;
    __syncthreads();  // warp_counts is rewritten by the next tile
  }
}

void nonzero_kernel(KernelArgs& args) {
  const TensorView& in = args.inputs[0];
  const int64_t n = in.numel();
  auto* count = static_cast<int64_t*>(args.outputs[1].data);
  if (n == 0) {
    KILN_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(int64_t), args.stream()));
    return;
  }
  KILN_CHECK(in.shape.size() <= static_cast<size_t>(kMaxRank), Unsupported, "layer `",
             args.layer.name, "`: nonzero of a rank-", in.shape.size(),
             " tensor; the CUDA kernel takes rank ", kMaxRank, " at most");
  Dims shape;
  shape.rank = static_cast<int>(in.shape.size());
  for (int d = 0; d < shape.rank; ++d) shape.size[d] = in.shape[static_cast<size_t>(d)];
  // Chunks of whole tiles, as many as keep every SM busy up to kNonZeroChunks.
  const int64_t tiles = (n + kThreads - 1) / kThreads;
  const int64_t tiles_per_chunk = (tiles + kNonZeroChunks - 1) / kNonZeroChunks;
  const int64_t chunk = tiles_per_chunk * kThreads;
  const int chunks = static_cast<int>((n + chunk - 1) / chunk);
  auto* counts = static_cast<int64_t*>(args.res.workspace(2 * kNonZeroChunks * sizeof(int64_t)));
  int64_t* offsets = counts + kNonZeroChunks;
  nonzero_count<<<chunks, kThreads, 0, args.stream()>>>(in.data, in.dtype, n, chunk, counts);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
  nonzero_offsets<<<1, kNonZeroChunks, 0, args.stream()>>>(counts, chunks, offsets, count);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
  nonzero_write<<<chunks, kThreads, 0, args.stream()>>>(
      in.data, in.dtype, n, chunk, shape, offsets, static_cast<int64_t*>(args.outputs[0].data));
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

}  // namespace

void register_reduce(KernelTable& t) {
  t.set<ReduceParams>(reduce_kernel, kAllTypes);
  t.set<ArgMaxParams>(argmax_kernel, dtype_bit(DataType::kI64));
  t.set<TopKParams>(topk_kernel, kAllTypes);
  t.set<ScanParams>(scan_kernel, kAllTypes);
  t.set<NonZeroParams>(nonzero_kernel, dtype_bit(DataType::kI64));
}

}  // namespace kiln::engine::cuda
