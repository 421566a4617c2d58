// CUDA kernels of the normalization family: softmax/log-softmax and batch, layer, group and
// instance normalization. Rows of at most 1024 contiguous f32/f16/bf16 elements (softmax over the
// last dim, layer norm) take typed kernels with the row in registers and float statistics; the
// rest one warp per row (softmax) or one block per normalized run (two-pass statistics in double
// like the CPU kernels).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {
namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ double block_sum(double v) {
  __shared__ double partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // partial[] may still be read from a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  v = lane < warps ? partial[lane] : 0.0;
  return warp_sum(v);
}

// The mask and causality of a masked softmax (over the last axis): row r of x (its leading dims
// merged where the mask steps through them alike, at most kMaskDims of them) reads the mask at
// row_offset(r) + j * col_stride; causal keeps columns j <= r % L. A row's offset and causal limit
// are taken once per row (row()), in 32-bit arithmetic where every index fits (`narrow`): 64-bit
// divisions cost a few hundred instructions a row, as much as a short row's exponentials.
constexpr int kMaskDims = 8;
struct SoftmaxMask {
  bool active = false;  // a mask or causal: rows with nothing kept come out zero
  const void* data = nullptr;
  DataType dtype = DataType::kBool;
  int dims = 0;
  int64_t size[kMaskDims] = {}, stride[kMaskDims] = {};
  int64_t col_stride = 0;
  bool causal = false;
  bool narrow = false;       // rows, sizes and offsets below 2^31
  bool bool_vector = false;  // a bool mask read as whole chunks (col_stride 1, offsets aligned)
  int64_t L = 1;

  // Where row r's mask starts and the last column it keeps (causal), for apply().
  struct Row {
    int64_t offset;
    int64_t last;
  };
  __device__ Row row(int64_t r, int64_t n) const {
    Row out{0, causal ? 0 : n};
    if (narrow) {
      uint32_t q = static_cast<uint32_t>(r), off = 0;
      if (causal) out.last = q % static_cast<uint32_t>(L);
      if (data) {
        for (int d = dims - 1; d >= 0; --d) {
          const uint32_t s = static_cast<uint32_t>(size[d]);
          off += (q % s) * static_cast<uint32_t>(stride[d]);
          q /= s;
        }
      }
      out.offset = off;
      return out;
    }
    if (causal) out.last = r % L;
    if (data) {
      for (int d = dims - 1; d >= 0; --d) {
        out.offset += (r % size[d]) * stride[d];
        r /= size[d];
      }
    }
    return out;
  }
  // x's value at column j of a row (`rm` from row()) after masking; -inf where not kept.
  __device__ __forceinline__ float apply(float v, int64_t j, const Row& rm) const {
    if (j > rm.last) return -INFINITY;
    if (data == nullptr) return v;
    const float m = load_as<float>(dtype, data, rm.offset + j * col_stride);
    if (dtype == DataType::kBool) return m != 0.f ? v : -INFINITY;
    return v + m;
  }
};

__global__ void softmax_kernel_t(const void* x, DataType xt, void* y, DataType yt, int64_t rows,
                                 int64_t n, int64_t inner, bool log, SoftmaxMask mask) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps_per_grid = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp; r < rows;
       r += warps_per_grid) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    // A masked softmax is over the last axis (inner == 1).
    const SoftmaxMask::Row rm = mask.active ? mask.row(r, n) : SoftmaxMask::Row{0, n};
    const auto value = [&](int64_t i) {
      const float v = load_as<float>(xt, x, base + i * inner);
      return mask.active ? mask.apply(v, i, rm) : v;
    };
    float mx = -INFINITY;
    for (int64_t i = lane; i < n; i += kWarp) mx = fmaxf(mx, value(i));
    mx = warp_max(mx);
    if (mask.active && mx == -INFINITY) {  // nothing kept: a zero row
      for (int64_t i = lane; i < n; i += kWarp) store_as<float>(yt, y, base + i * inner, 0.f);
      continue;
    }
    double sum = 0;
    for (int64_t i = lane; i < n; i += kWarp) sum += exp(static_cast<double>(value(i)) - mx);
    sum = warp_sum(sum);
    const double log_sum = ::log(sum);
    for (int64_t i = lane; i < n; i += kWarp) {
      const double z = static_cast<double>(value(i)) - mx;
      store_as<float>(yt, y, base + i * inner,
                      static_cast<float>(log ? z - log_sum : exp(z) / sum));
    }
  }
}

// Typed fast paths for rows of at most 1024 contiguous elements, one warp per row with the row in
// registers (one read, one write), statistics in float; rows of whole 16-byte vectors move as
// such.
template <class T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

template <class T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

__device__ __forceinline__ float warp_sum_f(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kRowWarps = 4;  // warps (rows in flight) per block of the row kernels

// kV consecutive elements of a row: one 16-byte load or store when kV * sizeof(T) == 16 (the
// launcher checks alignment), else one element.
template <class T, int kV>
struct alignas(sizeof(T) * kV) Chunk {
  T v[kV];
};

// Lane `lane` holds chunks lane, lane + 32, ... of the row (kChunks of them, kV elements each):
// a warp's load is 32 consecutive chunks. Missing elements (past n) read as `fill`.
template <class T, int kV, int kChunks>
__device__ __forceinline__ void load_row(const T* row, int n, int lane, float fill,
                                         float (&v)[kChunks][kV]) {
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int first = (lane + j * kWarp) * kV;
    if (first < n) {
      const Chunk<T, kV> c = *reinterpret_cast<const Chunk<T, kV>*>(row + first);
#pragma unroll
      for (int k = 0; k < kV; ++k) v[j][k] = to_float(c.v[k]);
    } else {
#pragma unroll
      for (int k = 0; k < kV; ++k) v[j][k] = fill;
    }
  }
}

template <class T, int kV, int kChunks>
__global__ void softmax_rows_kernel(const T* x, T* y, int64_t rows, int n, bool log,
                                    SoftmaxMask mask) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = blockIdx.x * int64_t(kRowWarps) + threadIdx.x / kWarp; r < rows;
       r += int64_t(gridDim.x) * kRowWarps) {
    float v[kChunks][kV];
    load_row<T, kV, kChunks>(x + r * n, n, lane, -INFINITY, v);
    if (mask.active) {
      const SoftmaxMask::Row rm = mask.row(r, n);
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        const int first = (lane + j * kWarp) * kV;
        if (first >= n) continue;
        if (mask.bool_vector) {  // kV mask bytes at once
          const Chunk<uint8_t, kV> m = *reinterpret_cast<const Chunk<uint8_t, kV>*>(
              static_cast<const uint8_t*>(mask.data) + rm.offset + first);
#pragma unroll
          for (int k = 0; k < kV; ++k) {
            if (m.v[k] == 0 || first + k > rm.last) v[j][k] = -INFINITY;
          }
          continue;
        }
#pragma unroll
        for (int k = 0; k < kV; ++k) {
          if (first + k < n) v[j][k] = mask.apply(v[j][k], first + k, rm);
        }
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
#pragma unroll
      for (int k = 0; k < kV; ++k) mx = fmaxf(mx, v[j][k]);
    }
    mx = warp_max(mx);
    const bool empty = mask.active && mx == -INFINITY;  // nothing kept: a zero row
    float sum = 0;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      if ((lane + j * kWarp) * kV >= n) continue;
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        // A NaN anywhere makes the sum (and so the row) NaN, as torch; fmaxf skipped it above.
        const float e = expf(v[j][k] - mx);
        sum += e;
        if (!log) v[j][k] = e;
      }
    }
    sum = warp_sum_f(sum);
    const float inv = 1.f / sum, log_sum = logf(sum);
    T* yr = y + r * n;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int first = (lane + j * kWarp) * kV;
      if (first >= n) continue;
      Chunk<T, kV> c;
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        c.v[k] = from_float<T>(empty ? 0.f : log ? v[j][k] - mx - log_sum : v[j][k] * inv);
      }
      *reinterpret_cast<Chunk<T, kV>*>(yr + first) = c;
    }
  }
}

// Layer normalization of rows of `n` elements; scale and bias (any float dtype, or null) per
// element of the row. `typed`: scale and bias are T, laid out as x's rows (same vector width and
// alignment), and each lane loads its chunks of them once, before its rows, off the rows'
// critical path (a dtype dispatch per element otherwise). Not `centered` (RMS norm): no mean is
// taken out, the variance is the mean of squares, and bias is null.
template <class T, int kV, int kChunks>
__global__ void layer_norm_rows_kernel(const T* x, T* y, int64_t rows, int n, float eps,
                                       const void* scale, DataType st, const void* bias,
                                       DataType bt, bool typed, bool centered) {
  allow_dependents();        // a GEMM after it may start streaming its weights (device_util.cuh)
  wait_for_prerequisites();  // launched early (programmatic_launch): x is the kernel ahead's
  const int lane = threadIdx.x % kWarp;
  float sc[kChunks][kV], bi[kChunks][kV] = {};
  if (typed) {
    load_row<T, kV, kChunks>(static_cast<const T*>(scale), n, lane, 0.f, sc);
    if (bias) load_row<T, kV, kChunks>(static_cast<const T*>(bias), n, lane, 0.f, bi);
  }
  for (int64_t r = blockIdx.x * int64_t(kRowWarps) + threadIdx.x / kWarp; r < rows;
       r += int64_t(gridDim.x) * kRowWarps) {
    float v[kChunks][kV];
    load_row<T, kV, kChunks>(x + r * n, n, lane, 0.f, v);
    float mean = 0;
    if (centered) {
      float sum = 0;
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
#pragma unroll
        for (int k = 0; k < kV; ++k) sum += v[j][k];
      }
      mean = warp_sum_f(sum) / static_cast<float>(n);
    }
    float sq = 0;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      if ((lane + j * kWarp) * kV >= n) continue;
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        const float d = v[j][k] - mean;
        sq += d * d;
      }
    }
    const float inv = 1.f / sqrtf(warp_sum_f(sq) / static_cast<float>(n) + eps);
    T* yr = y + r * n;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int first = (lane + j * kWarp) * kV;
      if (first >= n) continue;
      Chunk<T, kV> c;
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        float o = (v[j][k] - mean) * inv;
        if (typed) {
          o = o * sc[j][k] + bi[j][k];
        } else if (scale) {
          o = o * load_as<float>(st, scale, first + k) +
              (bias ? load_as<float>(bt, bias, first + k) : 0.f);
        }
        c.v[k] = from_float<T>(o);
      }
      *reinterpret_cast<Chunk<T, kV>*>(yr + first) = c;
    }
  }
}

unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>((rows + kRowWarps - 1) / kRowWarps, 65535 * 16));
}

template <class T, int kV, int kChunks>
struct SoftmaxRows {
  static void run(cudaStream_t stream, const void* x, void* y, int64_t rows, int n, bool log,
                  const SoftmaxMask& mask) {
    softmax_rows_kernel<T, kV, kChunks><<<row_grid(rows), kRowWarps * kWarp, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), rows, n, log, mask);
  }
};

template <class T, int kV, int kChunks>
struct LayerNormRows {
  static void run(cudaStream_t stream, bool early, const void* x, void* y, int64_t rows, int n,
                  float eps, const void* scale, DataType st, const void* bias, DataType bt,
                  bool typed, bool centered) {
    launch_kernel({row_grid(rows), kRowWarps * kWarp, 0, stream, early},
                  layer_norm_rows_kernel<T, kV, kChunks>, static_cast<const T*>(x),
                  static_cast<T*>(y), rows, n, eps, scale, st, bias, bt, typed, centered);
  }
};

// Launches `Launch<T, kV, kChunks>` with the fewest chunks per lane (1, 2, 4, ... up to 32
// elements per lane) that hold n; kV is 16 bytes of T when rows are whole 16-byte vectors.
template <class T, int kV, template <class, int, int> class Launch, class... A>
void launch_chunks(int n, A&&... a) {
  constexpr int kMax = 32 / kV;  // at most 32 elements per lane (the callers' n <= 1024)
  const int chunks = (n + kWarp * kV - 1) / (kWarp * kV);
  if (chunks <= 1) {
    Launch<T, kV, 1>::run(a...);
  } else if (chunks <= 2 || kMax <= 2) {
    Launch<T, kV, std::min(2, kMax)>::run(a...);
  } else if (chunks <= 4 || kMax <= 4) {
    Launch<T, kV, std::min(4, kMax)>::run(a...);
  } else if (chunks <= 8 || kMax <= 8) {
    Launch<T, kV, std::min(8, kMax)>::run(a...);
  } else if (chunks <= 16 || kMax <= 16) {
    Launch<T, kV, std::min(16, kMax)>::run(a...);
  } else {
    Launch<T, kV, kMax>::run(a...);
  }
}

template <class T, template <class, int, int> class Launch, class... A>
void launch_rows(int n, bool vector, A&&... a) {
  if (vector) {
    launch_chunks<T, 16 / sizeof(T), Launch>(n, a...);
  } else {
    launch_chunks<T, 1, Launch>(n, a...);
  }
}

// Calls `Launch` for the float dtype `t` (16-byte chunks when `vector`); false for other dtypes.
template <template <class, int, int> class Launch, class... A>
bool launch_typed_rows(DataType t, int n, bool vector, A&&... a) {
  switch (t) {
    case DataType::kF32:
      launch_rows<float, Launch>(n, vector, a...);
      return true;
    case DataType::kF16:
      launch_rows<__half, Launch>(n, vector, a...);
      return true;
    case DataType::kBF16:
      launch_rows<__nv_bfloat16, Launch>(n, vector, a...);
      return true;
    default:
      return false;
  }
}

// Whether rows of n elements of x and y can be read as 16-byte chunks.
bool rows_vectorizable(const TensorView& x, const TensorView& y, int64_t n) {
  return (n * static_cast<int64_t>(dtype_size(x.dtype))) % 16 == 0 && aligned16(x.data) &&
         aligned16(y.data);
}

constexpr int64_t kMaxRowItems = 32 * kWarp;

// The mask of a masked or causal softmax of x (SoftmaxParams): the mask's strides over x's rows
// (its leading dims), merged where they step alike.
SoftmaxMask softmax_mask(const Layer& layer, const TensorView& x, const TensorView* m,
                         bool causal) {
  SoftmaxMask r;
  r.active = m != nullptr || causal;
  r.causal = causal;
  const size_t rank = x.shape.size();
  r.L = rank >= 2 ? std::max<int64_t>(x.shape[rank - 2], 1) : 1;
  if (m == nullptr) return r;
  r.data = m->data;
  r.dtype = m->dtype;
  // The mask's strides as broadcast to x (0 where it broadcasts), right-aligned.
  std::vector<int64_t> stride(rank, 0);
  int64_t step = 1;
  for (size_t i = 0; i < m->shape.size(); ++i) {
    const int64_t d = m->shape[m->shape.size() - 1 - i];
    stride[rank - 1 - i] = d == 1 ? 0 : step;
    step *= d;
  }
  r.col_stride = stride[rank - 1];
  std::vector<int64_t> size, st;  // leading dims merged
  for (size_t d = 0; d + 1 < rank; ++d) {
    const int64_t n = x.shape[d];
    if (n == 1) continue;
    if (!size.empty() && st.back() == stride[d] * n) {
      size.back() *= n;
      st.back() = stride[d];
    } else {
      size.push_back(n);
      st.push_back(stride[d]);
    }
  }
  KILN_CHECK(size.size() <= static_cast<size_t>(kMaskDims), Unsupported, "layer `", layer.name,
             "`: a softmax mask broadcast over more than ", kMaskDims, " dims of ",
             shape_to_string(x.shape));
  r.dims = static_cast<int>(size.size());
  for (int d = 0; d < r.dims; ++d) {
    r.size[d] = size[static_cast<size_t>(d)];
    r.stride[d] = st[static_cast<size_t>(d)];
  }
  return r;
}

// Sets the mask's fast paths for rows of x (n elements, read kV at a time): 32-bit row arithmetic
// where every row index and mask offset fits, and whole-chunk loads of a bool mask whose rows
// start at multiples of kV of an aligned buffer.
void choose_mask_paths(SoftmaxMask& m, int64_t rows, int64_t n, int kV) {
  constexpr int64_t kNarrow = int64_t{1} << 31;
  int64_t last = m.data ? (n - 1) * m.col_stride : 0;
  bool aligned = m.data && m.dtype == DataType::kBool && m.col_stride == 1 &&
                 reinterpret_cast<uintptr_t>(m.data) % static_cast<uintptr_t>(kV) == 0;
  for (int d = 0; d < m.dims; ++d) {
    last += (m.size[d] - 1) * m.stride[d];
    aligned = aligned && m.stride[d] % kV == 0;
  }
  m.narrow = rows < kNarrow && last < kNarrow && m.L < kNarrow;
  for (int d = 0; d < m.dims; ++d) m.narrow = m.narrow && m.size[d] < kNarrow;
  m.bool_vector = aligned;
}

void softmax_kernel(KernelArgs& args) {
  const auto& p = std::get<SoftmaxParams>(args.layer.params);
  const TensorView &x = args.inputs[0], &y = args.outputs[0];
  const int axis = normalize_axis(p.axis, x.shape.size(), "softmax");
  const SoftmaxMask mask =
      softmax_mask(args.layer, x, args.inputs.size() == 2 ? &args.inputs[1] : nullptr, p.causal);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  const int64_t n = x.shape[static_cast<size_t>(axis)], rows = outer * inner;
  if (x.numel() == 0) return;
  if (inner == 1 && n > 0 && n <= kMaxRowItems && x.dtype == y.dtype) {
    const bool vector = rows_vectorizable(x, y, n);
    SoftmaxMask typed = mask;
    choose_mask_paths(typed, rows, n, vector ? 16 / static_cast<int>(dtype_size(x.dtype)) : 1);
    if (launch_typed_rows<SoftmaxRows>(x.dtype, static_cast<int>(n), vector, args.stream(), x.data,
                                       y.data, rows, static_cast<int>(n), p.log, typed)) {
      KILN_CUDA_CHECK_LAUNCH(args.layer.name);
      return;
    }
  }
  SoftmaxMask general = mask;
  choose_mask_paths(general, rows, n, 1);  // (bool_vector: the general kernel reads elements)
  const int warps = kThreads / kWarp;
  softmax_kernel_t<<<grid_for(rows, warps), kThreads, 0, args.stream()>>>(
      x.data, x.dtype, y.data, y.dtype, rows, n, inner, p.log, general);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

// Run r covers elements [r * len, (r + 1) * len); element j of it uses affine channel
// (r % group_mod) * group_mul + j / j_div. Not `centered` (RMS norm): no mean taken out, no bias.
__global__ void normalize_runs_kernel(const void* x, DataType xt, void* y, DataType yt,
                                      int64_t runs, int64_t len, double eps, const void* scale,
                                      DataType st, const void* bias, DataType bt, int64_t group_mod,
                                      int64_t group_mul, int64_t j_div, bool centered) {
  for (int64_t r = blockIdx.x; r < runs; r += gridDim.x) {
    const int64_t base = r * len;
    double mean = 0;
    if (centered) {  // (the same for every thread: block_sum's barriers are met by all)
      double sum = 0;
      for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
        sum += load_as<double>(xt, x, base + j);
      mean = block_sum(sum) / static_cast<double>(len);
    }
    double sq = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const double d = load_as<double>(xt, x, base + j) - mean;
      sq += d * d;
    }
    const double inv = 1.0 / sqrt(block_sum(sq) / static_cast<double>(len) + eps);
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      double v = (load_as<double>(xt, x, base + j) - mean) * inv;
      if (scale) {
        const int64_t c = (r % group_mod) * group_mul + j / j_div;
        v = v * load_as<double>(st, scale, c) + (bias ? load_as<double>(bt, bias, c) : 0.0);
      }
      store_as<double>(yt, y, base + j, v);
    }
  }
}

__global__ void batch_norm_kernel(const void* x, DataType xt, void* y, DataType yt, int64_t total,
                                  int64_t c, int64_t spatial, double eps, const void* scale,
                                  DataType st, const void* bias, DataType bt, const void* mean,
                                  DataType mt, const void* var, DataType vt) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = (i / spatial) % c;
    double a = 1.0 / sqrt(load_as<double>(vt, var, ch) + eps);
    if (scale) a *= load_as<double>(st, scale, ch);
    const double b =
        (bias ? load_as<double>(bt, bias, ch) : 0.0) - load_as<double>(mt, mean, ch) * a;
    store_as<double>(yt, y, i, load_as<double>(xt, x, i) * a + b);
  }
}

void normalization_kernel(KernelArgs& args) {
  const auto& p = std::get<NormalizationParams>(args.layer.params);
  const TensorView &x = args.inputs[0], &y = args.outputs[0];
  const Shape& s = x.shape;
  const auto& in = args.inputs;
  const TensorView* scale = p.has_affine ? &in[1] : nullptr;
  const bool rms = p.kind == NormalizationKind::kRms;
  const TensorView* bias = p.has_affine && !rms ? &in[2] : nullptr;
  const void* sd = scale ? scale->data : nullptr;
  const void* bd = bias ? bias->data : nullptr;
  const DataType st = scale ? scale->dtype : DataType::kF32;
  const DataType bt = bias ? bias->dtype : DataType::kF32;
  const cudaStream_t stream = args.stream();
  auto runs = [&](int64_t count, int64_t len, int64_t mod, int64_t mul, int64_t div) {
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(count, 65535 * 16));
    normalize_runs_kernel<<<grid, kThreads, 0, stream>>>(x.data, x.dtype, y.data, y.dtype, count,
                                                         len, p.epsilon, sd, st, bd, bt, mod, mul,
                                                         div, !rms);
  };
  if (p.kind == NormalizationKind::kLayer || rms) {
    int64_t len = 1;
    for (size_t d = s.size() - static_cast<size_t>(p.normalized_dims); d < s.size(); ++d)
      len *= s[d];
    const bool vector = rows_vectorizable(x, y, len);
    // Scale and bias of x's dtype (16-byte aligned where x's rows are vectors): loaded as x is.
    const bool typed = sd && st == x.dtype && (!vector || aligned16(sd)) &&
                       (rms || (bd && bt == x.dtype && (!vector || aligned16(bd))));
    if (len > 0 && len <= kMaxRowItems && x.dtype == y.dtype &&
        launch_typed_rows<LayerNormRows>(
            x.dtype, static_cast<int>(len), vector, stream, args.res.options().programmatic_launch,
            x.data, y.data, x.numel() / len, static_cast<int>(len), static_cast<float>(p.epsilon),
            sd, st, bd, bt, typed, !rms)) {
      KILN_CUDA_CHECK_LAUNCH(args.layer.name);
      return;
    }
    runs(x.numel() / len, len, 1, 0, 1);
  } else {
    const int64_t n = s[0], c = s[1], spatial = x.numel() / (n * c);
    if (p.kind == NormalizationKind::kBatch) {
      const size_t first = p.has_affine ? 3 : 1;
      const int64_t total = x.numel();
      batch_norm_kernel<<<grid_for(total), kThreads, 0, stream>>>(
          x.data, x.dtype, y.data, y.dtype, total, c, spatial, p.epsilon, sd, st, bd, bt,
          in[first].data, in[first].dtype, in[first + 1].data, in[first + 1].dtype);
    } else if (p.kind == NormalizationKind::kGroup) {
      KILN_CHECK(c % p.num_groups == 0, InvalidArgument, "layer `", args.layer.name,
                 "`: num_groups ", p.num_groups, " does not divide ", c, " channels");
      const int64_t g = p.num_groups, per = c / g;
      runs(n * g, per * spatial, g, per, spatial);
    } else {
      runs(n * c, spatial, c, 1, spatial > 0 ? spatial : 1);
    }
  }
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

}  // namespace

void register_normalization(KernelTable& t) {
  t.set<NormalizationParams>(normalization_kernel, kFloatTypes);
  t.set<SoftmaxParams>(softmax_kernel, kFloatTypes);
}

}  // namespace kiln::engine::cuda
