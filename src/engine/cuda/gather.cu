// CUDA kernels of gather (index_select/embedding and torch.gather) and scatter (torch.scatter,
// scatter_add and scatter_reduce's prod/amax/amin). Out-of-range indices cannot throw on the
// device: they read zeros (gather) or are skipped (scatter), never touching memory outside the
// tensors.
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {
namespace {

// index_select: element t of the output is (o, j, r) over [outer, n_idx, inner]. I: the type of
// that index arithmetic, 32 bits where the output and the data have fewer than 2^31 elements (the
// divisions by inner and n_idx cost a few instructions there, dozens in 64 bits).
template <class T, class I>
__global__ void gather_rows_kernel(const T* src, const void* idx, DataType it, I n_idx, I dim,
                                   I inner, T* dst, I total) {
  for (I t = blockIdx.x * I(blockDim.x) + threadIdx.x; t < total; t += I(gridDim.x) * blockDim.x) {
    const I r = t % inner, row = t / inner;
    const I j = row % n_idx, o = row / n_idx;
    int64_t k = load_as<int64_t>(it, idx, static_cast<int64_t>(j));
    if (k < 0) k += dim;
    dst[t] = (k >= 0 && k < static_cast<int64_t>(dim))
                 ? src[(static_cast<int64_t>(o) * dim + k) * inner + r]
                 : T{};
  }
}

// index_select writing V consecutive output elements (one 16-byte store) a thread, for outputs
// of a multiple of V elements at a 16-byte boundary: rotary's gather along the last axis, where a
// thread a 2-byte element left the memory system idle. With `rows` (inner a multiple of V, data
// at a 16-byte boundary too), the V elements are one 16-byte load from one source row.
template <class T, int V, bool kRows>
__global__ void gather_rows_vec_kernel(const T* src, const void* idx, DataType it, uint32_t n_idx,
                                       uint32_t dim, uint32_t inner, T* dst, uint32_t chunks) {
  struct alignas(16) Chunk {
    T v[V];
  };
  for (uint32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < chunks;
       c += gridDim.x * blockDim.x) {
    Chunk out;
    const uint32_t t0 = c * V;
    if constexpr (kRows) {
      const uint32_t r = t0 % inner, row = t0 / inner;
      const uint32_t j = row % n_idx, o = row / n_idx;
      int64_t k = load_as<int64_t>(it, idx, static_cast<int64_t>(j));
      if (k < 0) k += dim;
      if (k >= 0 && k < static_cast<int64_t>(dim)) {
        out =
            *reinterpret_cast<const Chunk*>(src + (static_cast<int64_t>(o) * dim + k) * inner + r);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) out.v[v] = T{};
      }
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const uint32_t t = t0 + v, r = t % inner, row = t / inner;
        const uint32_t j = row % n_idx, o = row / n_idx;
        int64_t k = load_as<int64_t>(it, idx, static_cast<int64_t>(j));
        if (k < 0) k += dim;
        out.v[v] = (k >= 0 && k < static_cast<int64_t>(dim))
                       ? src[(static_cast<int64_t>(o) * dim + k) * inner + r]
                       : T{};
      }
    }
    reinterpret_cast<Chunk*>(dst)[c] = out;
  }
}

constexpr uint32_t kMinElementChunks = 64 * 1024;

template <class T>
bool gather_rows_vectorized(KernelArgs& args, const T* src, const TensorView& idx, int64_t dim,
                            int64_t inner, T* dst, int64_t total, int64_t data_numel) {
  constexpr int V = 16 / sizeof(T);
  if constexpr (V <= 1) {
    return false;
  } else {
    if (total % V != 0 || !aligned16(dst) || total >= INT32_MAX || data_numel >= INT32_MAX) {
      return false;
    }
    const auto chunks = static_cast<uint32_t>(total / V);
    const auto n_idx = static_cast<uint32_t>(idx.numel());
    const bool rows = inner % V == 0 && aligned16(src);
    // Element by element, V serial index loads a thread pay off only with threads enough to
    // fill the device (a 4096-element mask gather took 9.3 us so, 5.4 us a thread an element).
    if (!rows && chunks < kMinElementChunks) return false;
    if (rows) {
      gather_rows_vec_kernel<T, V, true><<<grid_for(chunks), kThreads, 0, args.stream()>>>(
          src, idx.data, idx.dtype, n_idx, static_cast<uint32_t>(dim), static_cast<uint32_t>(inner),
          dst, chunks);
    } else {
      gather_rows_vec_kernel<T, V, false><<<grid_for(chunks), kThreads, 0, args.stream()>>>(
          src, idx.data, idx.dtype, n_idx, static_cast<uint32_t>(dim), static_cast<uint32_t>(inner),
          dst, chunks);
    }
    return true;
  }
}

// torch.gather: `d` walks the index tensor's shape with the data's strides (0 on the axis).
template <class T>
__global__ void gather_elements_kernel(const T* src, Dims d, int64_t axis_stride, int64_t dim,
                                       const void* idx, DataType it, T* dst, int64_t total) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    int64_t k = load_as<int64_t>(it, idx, t);
    if (k < 0) k += dim;
    dst[t] = (k >= 0 && k < dim) ? src[offset_of(d, t) + k * axis_stride] : T{};
  }
}

// One thread per lane of the index tensor along the axis; positions along it run in order, so
// the last duplicate wins and reductions combine in the CPU's order. Lanes write disjoint
// elements (they differ outside the axis), so no atomics are needed.
__global__ void scatter_kernel_t(void* out, DataType dt, const void* upd, DataType ut,
                                 const void* idx, DataType it, Dims dd, Dims ud, int64_t len,
                                 int64_t inner, int64_t d_axis_stride, int64_t u_axis_stride,
                                 int64_t dim, ScatterReduce reduce, int64_t lanes) {
  const bool floating = dt == DataType::kF32 || dt == DataType::kF16 || dt == DataType::kBF16;
  for (int64_t lane = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; lane < lanes;
       lane += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t0 = (lane / inner) * len * inner + lane % inner;
    const int64_t doff = offset_of(dd, t0), uoff = offset_of(ud, t0);
    for (int64_t j = 0; j < len; ++j) {
      int64_t k = load_as<int64_t>(it, idx, t0 + j * inner);
      if (k < 0) k += dim;
      if (k < 0 || k >= dim) continue;
      const int64_t to = doff + k * d_axis_stride, from = uoff + j * u_axis_stride;
      if (floating) {
        const float v = load_as<float>(ut, upd, from);
        store_as<float>(dt, out, to,
                        scatter_combine<float>(reduce, load_as<float>(dt, out, to), v));
      } else {
        const int64_t v = load_as<int64_t>(ut, upd, from);
        store_as<int64_t>(dt, out, to,
                          scatter_combine<int64_t>(reduce, load_as<int64_t>(dt, out, to), v));
      }
    }
  }
}

// Dims walking `shape` with `strides`, the axis' stride zeroed; no merging (the axis must stay).
Dims axis_dims(const std::string& layer, const Shape& shape, std::vector<int64_t> strides,
               size_t axis) {
  KILN_CHECK(shape.size() <= static_cast<size_t>(kMaxRank), Unsupported, "layer `", layer,
             "`: the CUDA gather/scatter kernels take at most ", kMaxRank, " dims");
  Dims d;
  d.rank = static_cast<int>(shape.size());
  for (size_t k = 0; k < shape.size(); ++k) {
    d.size[k] = shape[k];
    d.stride[k] = k == axis ? 0 : strides[k];
  }
  return d;
}

template <class T>
void gather_typed(KernelArgs& args, size_t a) {
  const auto& p = std::get<GatherParams>(args.layer.params);
  const TensorView &data = args.inputs[0], &idx = args.inputs[1], &out = args.outputs[0];
  const int64_t total = out.numel(), dim = data.shape[a];
  const T* src = static_cast<const T*>(data.data);
  T* dst = static_cast<T*>(out.data);
  if (p.mode == GatherMode::kDefault) {
    int64_t inner = 1;
    for (size_t d = a + 1; d < data.shape.size(); ++d) inner *= data.shape[d];
    if (total > 0 &&
        gather_rows_vectorized<T>(args, src, idx, dim, inner, dst, total, data.numel())) {
      // launched
    } else if (total < INT32_MAX && data.numel() < INT32_MAX) {
      gather_rows_kernel<T, uint32_t><<<grid_for(total), kThreads, 0, args.stream()>>>(
          src, idx.data, idx.dtype, static_cast<uint32_t>(idx.numel()), static_cast<uint32_t>(dim),
          static_cast<uint32_t>(inner), dst, static_cast<uint32_t>(total));
    } else {
      gather_rows_kernel<T, int64_t><<<grid_for(total), kThreads, 0, args.stream()>>>(
          src, idx.data, idx.dtype, idx.numel(), dim, inner, dst, total);
    }
  } else {
    const auto strides = contiguous_strides(data.shape);
    const Dims d = axis_dims(args.layer.name, idx.shape, strides, a);
    gather_elements_kernel<T><<<grid_for(total), kThreads, 0, args.stream()>>>(
        src, d, strides[a], dim, idx.data, idx.dtype, dst, total);
  }
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

void gather_kernel(KernelArgs& args) {
  const auto& p = std::get<GatherParams>(args.layer.params);
  const TensorView& data = args.inputs[0];
  const size_t a = static_cast<size_t>(normalize_axis(p.axis, data.shape.size(), args.layer.name));
  switch (dtype_size(data.dtype)) {
    case 1:
      return gather_typed<uint8_t>(args, a);
    case 2:
      return gather_typed<uint16_t>(args, a);
    case 4:
      return gather_typed<uint32_t>(args, a);
    default:
      return gather_typed<uint64_t>(args, a);
  }
}

void scatter_kernel(KernelArgs& args) {
  const auto& p = std::get<ScatterParams>(args.layer.params);
  const TensorView &data = args.inputs[0], &idx = args.inputs[1], &upd = args.inputs[2];
  const TensorView& out = args.outputs[0];
  const size_t a = static_cast<size_t>(normalize_axis(p.axis, data.shape.size(), args.layer.name));
  if (out.data != data.data) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(out.data, data.data,
                                    static_cast<size_t>(data.numel()) * dtype_size(data.dtype),
                                    cudaMemcpyDeviceToDevice, args.stream()));
  }
  if (idx.numel() == 0) return;
  int64_t inner = 1;
  for (size_t d = a + 1; d < idx.shape.size(); ++d) inner *= idx.shape[d];
  const int64_t len = idx.shape[a], lanes = idx.numel() / len;
  const auto ds = contiguous_strides(data.shape), us = contiguous_strides(upd.shape);
  const Dims dd = axis_dims(args.layer.name, idx.shape, ds, a);
  const Dims ud = axis_dims(args.layer.name, idx.shape, us, a);
  scatter_kernel_t<<<grid_for(lanes), kThreads, 0, args.stream()>>>(
      out.data, out.dtype, upd.data, upd.dtype, idx.data, idx.dtype, dd, ud, len, inner, ds[a],
      us[a], data.shape[a], p.reduce, lanes);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

}  // namespace

void register_gather(KernelTable& t) {
  t.set<GatherParams>(gather_kernel, kAllTypes);
  t.set<ScatterParams>(scatter_kernel, kAllTypes);
}

}  // namespace kiln::engine::cuda
