// CUDA kernels of the shuffle family: shuffle (transpose, reshape, transpose), concat, slice and
// pad, all as strided copies of elements moved by their byte size.
#include <algorithm>
#include <type_traits>

#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"
#include "engine/layers/setup.h"

namespace kiln::engine::cuda {
namespace {

// An element as it is moved: copied, or converted between float types (a shuffle that casts).
template <class TO, class TI>
__device__ __forceinline__ TO moved(const TI& v) {
  if constexpr (std::is_same_v<TI, TO>) {
    return v;
  } else {
    return TO(static_cast<float>(v));
  }
}

template <class TI, class TO>
__global__ void strided_copy_kernel(const TI* src, Dims d, TO* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    dst[i] = moved<TO>(src[offset_of(d, i)]);
  }
}

// The same with 32-bit index math (several times cheaper than 64-bit division), for copies whose
// every index and offset fits.
template <class TI, class TO>
__global__ void strided_copy_kernel32(const TI* src, Dims d, TO* dst, int32_t n) {
  for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    int32_t rem = i, off = 0;
#pragma unroll
    for (int k = kMaxRank - 1; k >= 0; --k) {
      if (k < d.rank) {
        const int32_t size = static_cast<int32_t>(d.size[k]);
        off += (rem % size) * static_cast<int32_t>(d.stride[k]);
        rem /= size;
      }
    }
    dst[i] = moved<TO>(src[off]);
  }
}

template <class TI, class TO = TI>
void copy_t(const void* src, const Dims& d, void* dst, int64_t n, bool narrow, unsigned grid,
            cudaStream_t stream) {
  if (narrow) {
    strided_copy_kernel32<<<grid, kThreads, 0, stream>>>(
        static_cast<const TI*>(src), d, static_cast<TO*>(dst), static_cast<int32_t>(n));
  } else {
    strided_copy_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const TI*>(src), d,
                                                       static_cast<TO*>(dst), n);
  }
}

// Whether a copy of n elements over `d` may take 32-bit index math: i plus the grid stride stays
// below 2^31, and so does every offset.
bool narrow_indices(const Dims& d, int64_t n) {
  int64_t max_offset = 0;
  bool narrow = n < (int64_t{1} << 30);
  for (int k = 0; k < d.rank; ++k) {
    narrow = narrow && d.stride[k] >= 0;
    max_offset += (d.size[k] - 1) * std::max<int64_t>(d.stride[k], 0);
  }
  return narrow && max_offset < (int64_t{1} << 31);
}

template <class TI>
void convert_from(DataType to, const void* src, const Dims& d, void* dst, int64_t n, bool narrow,
                  unsigned grid, cudaStream_t stream) {
  switch (to) {
    case DataType::kF16:
      copy_t<TI, __half>(src, d, dst, n, narrow, grid, stream);
      break;
    case DataType::kBF16:
      copy_t<TI, __nv_bfloat16>(src, d, dst, n, narrow, grid, stream);
      break;
    default:
      copy_t<TI, float>(src, d, dst, n, narrow, grid, stream);
      break;
  }
}

// The strided copy of launch_strided_copy converting float types (from, to) element by element.
void launch_strided_convert(cudaStream_t stream, const std::string& layer, DataType from,
                            DataType to, const void* src, const std::vector<int64_t>& src_strides,
                            const Shape& shape, void* dst) {
  const int64_t n = volume(shape);
  if (n == 0) return;
  const Dims d = strided_dims(layer, shape, src_strides);
  const bool narrow = narrow_indices(d, n);
  const unsigned grid = grid_for(n);
  switch (from) {
    case DataType::kF16:
      convert_from<__half>(to, src, d, dst, n, narrow, grid, stream);
      break;
    case DataType::kBF16:
      convert_from<__nv_bfloat16>(to, src, d, dst, n, narrow, grid, stream);
      break;
    default:
      convert_from<float>(to, src, d, dst, n, narrow, grid, stream);
      break;
  }
  KILN_CUDA_CHECK_LAUNCH(layer);
}

struct PadDims {
  int rank = 0;
  int64_t out[kMaxRank] = {}, in[kMaxRank] = {}, stride[kMaxRank] = {}, begin[kMaxRank] = {};
};

template <class T>
__global__ void pad_kernel_t(const T* src, PadDims p, PadMode mode, T fill, T* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = i, off = 0;
    bool inside = true;
    for (int k = p.rank - 1; k >= 0; --k) {
      int64_t j = rem % p.out[k] - p.begin[k];
      rem /= p.out[k];
      const int64_t d = p.in[k];
      if (j < 0 || j >= d) {
        if (mode == PadMode::kConstant) {
          inside = false;
        } else if (mode == PadMode::kReplicate) {
          j = j < 0 ? 0 : d - 1;
        } else {
          j = j < 0 ? -j : 2 * (d - 1) - j;
        }
      }
      off += j * p.stride[k];
    }
    dst[i] = inside ? src[off] : fill;
  }
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Writes `in` (dense, `from` elements of shape `shape`) transposed by `perm` (empty: as it is) to
// `dst` as `to` elements.
void transpose(cudaStream_t stream, const std::string& layer, DataType from, DataType to,
               const void* in, const Shape& shape, const std::vector<int64_t>& perm, void* dst) {
  const auto strides = contiguous_strides(shape);
  Shape out_shape = shape;
  std::vector<int64_t> src_strides = strides;
  for (size_t i = 0; i < perm.size(); ++i) {
    out_shape[i] = shape[static_cast<size_t>(perm[i])];
    src_strides[i] = strides[static_cast<size_t>(perm[i])];
  }
  if (from == to) {
    launch_strided_copy(stream, layer, dtype_size(from), in, 0, src_strides, out_shape, dst);
  } else {
    launch_strided_convert(stream, layer, from, to, in, src_strides, out_shape, dst);
  }
}

// Planes to channels-last for few channels ([N, C, P] -> [N, P, C], C = 1 or 3: an image's NCHW
// -> NHWC), converting TI to TO on the way: a thread reads 4 pixels of each plane as one vector
// and writes the 4 x C interleaved values as C words of 4, where the element-wise strided copy
// wrote 2-byte elements one by one (bench/NOTES.md G31).
template <class TI, class TO, int C>
__global__ void planes_to_last(const TI* x, TO* y, int plane, int groups) {
  const int per_sample = plane / 4;
  for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
    const int n = g / per_sample, q = g % per_sample;
    const TI* src = x + (static_cast<int64_t>(n) * C * plane + q * 4);
    Pack<TI, 4> v[C];
#pragma unroll
    for (int c = 0; c < C; ++c) v[c] = *reinterpret_cast<const Pack<TI, 4>*>(src + c * plane);
    auto* dst = reinterpret_cast<Pack<TO, 4>*>(y) + static_cast<int64_t>(g) * C;
#pragma unroll
    for (int w = 0; w < C; ++w) {
      Pack<TO, 4> o;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int e = w * 4 + k;  // pixel e / C, channel e % C of the group
        o.v[k] = moved<TO>(v[e % C].v[e / C]);
      }
      dst[w] = o;
    }
  }
}

template <class TI, class TO>
void planes_to_last_t(cudaStream_t stream, const void* x, void* y, int channels, int plane,
                      int groups) {
  const unsigned grid = grid_for(groups);
  if (channels == 1) {
    planes_to_last<TI, TO, 1><<<grid, kThreads, 0, stream>>>(static_cast<const TI*>(x),
                                                             static_cast<TO*>(y), plane, groups);
  } else {
    planes_to_last<TI, TO, 3><<<grid, kThreads, 0, stream>>>(static_cast<const TI*>(x),
                                                             static_cast<TO*>(y), plane, groups);
  }
}

template <class TI>
void planes_to_last_from(DataType to, cudaStream_t stream, const void* x, void* y, int channels,
                         int plane, int groups) {
  switch (to) {
    case DataType::kF16:
      planes_to_last_t<TI, __half>(stream, x, y, channels, plane, groups);
      break;
    case DataType::kBF16:
      planes_to_last_t<TI, __nv_bfloat16>(stream, x, y, channels, plane, groups);
      break;
    default:
      planes_to_last_t<TI, float>(stream, x, y, channels, plane, groups);
      break;
  }
}

// Runs a transpose as planes_to_last where it is one: float types, the permutation [0, 2, ...,
// r - 1, 1] of 1 or 3 channels, planes of a multiple of 4 elements, both buffers aligned to their
// 4-element words, fewer than 2^31 elements. Returns false otherwise.
bool try_planes_to_last(cudaStream_t stream, const std::string& layer, DataType from, DataType to,
                        const void* x, const Shape& shape, const std::vector<int64_t>& perm,
                        void* y) {
  if (!is_floating(from) || !is_floating(to) || shape.size() < 3 || perm.size() != shape.size() ||
      perm[0] != 0 || perm.back() != 1) {
    return false;
  }
  for (size_t i = 1; i + 1 < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i) + 1) return false;
  }
  const int64_t channels = shape[1], total = volume(shape);
  if (total == 0) return false;
  const int64_t plane = total / (shape[0] * channels);
  const auto aligned = [](const void* p, size_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  if ((channels != 1 && channels != 3) || plane == 0 || plane % 4 != 0 ||
      total >= (int64_t{1} << 31) || !aligned(x, 4 * dtype_size(from)) ||
      !aligned(y, 4 * dtype_size(to))) {
    return false;
  }
  const int groups = static_cast<int>(total / (4 * channels));
  const int c = static_cast<int>(channels), pl = static_cast<int>(plane);
  switch (from) {
    case DataType::kF16:
      planes_to_last_from<__half>(to, stream, x, y, c, pl, groups);
      break;
    case DataType::kBF16:
      planes_to_last_from<__nv_bfloat16>(to, stream, x, y, c, pl, groups);
      break;
    default:
      planes_to_last_from<float>(to, stream, x, y, c, pl, groups);
      break;
  }
  KILN_CUDA_CHECK_LAUNCH(layer);
  return true;
}

void shuffle_kernel(KernelArgs& args) {
  const auto& p = std::get<ShuffleParams>(args.layer.params);
  const TensorView &in = args.inputs[0], &out = args.outputs[0];
  const size_t es = dtype_size(in.dtype);
  const size_t bytes = static_cast<size_t>(in.numel()) * es;
  const bool perm1 = !p.first_perm.empty() && !is_identity(p.first_perm);
  const bool perm2 = !p.second_perm.empty() && !is_identity(p.second_perm);
  Shape reshaped = out.shape;  // the reshape target: the output shape before second_perm
  if (!p.second_perm.empty()) {
    for (size_t i = 0; i < p.second_perm.size(); ++i) {
      reshaped[static_cast<size_t>(p.second_perm[i])] = out.shape[i];
    }
  }
  const std::string& layer = args.layer.name;
  // A shuffle that casts converts in its last (or only) pass.
  const DataType from = in.dtype, to = out.dtype;
  if (!perm1 && !perm2) {
    if (from != to) {
      transpose(args.stream(), layer, from, to, in.data, in.shape, {}, out.data);
    } else if (out.data != in.data) {
      KILN_CUDA_CHECK(
          cudaMemcpyAsync(out.data, in.data, bytes, cudaMemcpyDeviceToDevice, args.stream()));
    }
  } else if (!perm2) {
    if (!try_planes_to_last(args.stream(), layer, from, to, in.data, in.shape, p.first_perm,
                            out.data)) {
      transpose(args.stream(), layer, from, to, in.data, in.shape, p.first_perm, out.data);
    }
  } else if (!perm1) {
    transpose(args.stream(), layer, from, to, in.data, reshaped, p.second_perm, out.data);
  } else {
    void* tmp = args.res.workspace(bytes);
    transpose(args.stream(), layer, from, from, in.data, in.shape, p.first_perm, tmp);
    transpose(args.stream(), layer, from, to, tmp, reshaped, p.second_perm, out.data);
  }
}

// Up to kConcatInputs inputs of a concat per launch, copied in units U (16, 8, 4, 2 or 1 bytes:
// the largest that divides every chunk, offset and pitch and aligns every pointer). blockIdx.y
// picks the input; its `outer` rows of chunk_units units go to their place in each output row.
// Rows follow each other `pitch_units` apart in the output and `in_pitch_units` in input k: the
// rows themselves where dense, wider where a tensor is placed in another (an in-place concat).
constexpr int kConcatInputs = 64;
struct ConcatArgs {
  int64_t outer = 0, pitch_units = 0;
  const void* in[kConcatInputs] = {};
  int64_t chunk_units[kConcatInputs] = {};
  int64_t in_pitch_units[kConcatInputs] = {};
  int64_t at_units[kConcatInputs] = {};
  void* out = nullptr;
};

template <class U, class I>
__global__ void concat_units(const ConcatArgs a) {
  const int k = blockIdx.y;
  const I chunk = static_cast<I>(a.chunk_units[k]);
  const I n = static_cast<I>(a.outer) * chunk;
  const U* src = static_cast<const U*>(a.in[k]);
  U* dst = static_cast<U*>(a.out) + a.at_units[k];
  const I in_pitch = static_cast<I>(a.in_pitch_units[k]);
  for (I i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const I row = i / chunk, col = i - row * chunk;
    dst[row * static_cast<I>(a.pitch_units) + col] = src[row * in_pitch + col];
  }
}

template <class U>
void launch_concat_units(cudaStream_t stream, const ConcatArgs& a, int inputs, int64_t max_units,
                         bool small) {
  const dim3 grid(std::min<unsigned>(grid_for(max_units), 65535u), static_cast<unsigned>(inputs));
  if (small) {
    concat_units<U, int32_t><<<grid, kThreads, 0, stream>>>(a);
  } else {
    concat_units<U, int64_t><<<grid, kThreads, 0, stream>>>(a);
  }
}

// One launch per kConcatInputs inputs (a densenet block's concat of 25 inputs is one launch,
// where a 2-D copy per input took 10x the bandwidth's time: bench/NOTES.md G35).
void concat_kernel(KernelArgs& args) {
  const auto& p = std::get<ConcatParams>(args.layer.params);
  const TensorView& out = args.outputs[0];
  const ConcatRows r = concat_rows(args.layer.name, p, args.inputs);
  if (r.outer == 0 || r.row == 0) return;
  const ConcatPitches pitches = concat_pitches(args.layer.name, r, args.inputs, out);
  size_t unit = 16;
  auto fits = [&](size_t v) { return v % unit == 0; };
  for (; unit > 1; unit /= 2) {
    bool ok = fits(pitches.out) && fits(reinterpret_cast<uintptr_t>(out.data));
    for (size_t k = 0; ok && k < args.inputs.size(); ++k) {
      ok = fits(r.chunk[k]) && fits(r.at[k]) && fits(pitches.in[k]) &&
           fits(reinterpret_cast<uintptr_t>(args.inputs[k].data));
    }
    if (ok) break;
  }
  size_t widest = pitches.out;
  for (size_t k = 0; k < args.inputs.size(); ++k) widest = std::max(widest, pitches.in[k]);
  const bool small = static_cast<uint64_t>(r.outer) * (widest / unit) < (uint64_t{1} << 31);
  for (size_t k = 0; k < args.inputs.size();) {
    ConcatArgs a;
    a.outer = r.outer;
    a.pitch_units = static_cast<int64_t>(pitches.out / unit);
    a.out = out.data;
    int n = 0;
    int64_t max_units = 0;
    for (; k < args.inputs.size() && n < kConcatInputs; ++k) {
      if (r.chunk[k] == 0) continue;
      a.in[n] = args.inputs[k].data;
      a.chunk_units[n] = static_cast<int64_t>(r.chunk[k] / unit);
      a.in_pitch_units[n] = static_cast<int64_t>(pitches.in[k] / unit);
      a.at_units[n] = static_cast<int64_t>(r.at[k] / unit);
      max_units = std::max(max_units, r.outer * a.chunk_units[n]);
      ++n;
    }
    if (n == 0) continue;
    switch (unit) {
      case 16:
        launch_concat_units<uint4>(args.stream(), a, n, max_units, small);
        break;
      case 8:
        launch_concat_units<uint2>(args.stream(), a, n, max_units, small);
        break;
      case 4:
        launch_concat_units<uint32_t>(args.stream(), a, n, max_units, small);
        break;
      case 2:
        launch_concat_units<uint16_t>(args.stream(), a, n, max_units, small);
        break;
      default:
        launch_concat_units<uint8_t>(args.stream(), a, n, max_units, small);
    }
    KILN_CUDA_CHECK_LAUNCH(args.layer.name);
  }
}

void slice_kernel(KernelArgs& args) {
  const auto& p = std::get<SliceParams>(args.layer.params);
  const TensorView &in = args.inputs[0], &out = args.outputs[0];
  const SliceView view = slice_view(args.layer.name, p, in.shape);
  launch_strided_copy(args.stream(), args.layer.name, dtype_size(in.dtype), in.data, view.offset,
                      view.strides, out.shape, out.data);
}

void pad_kernel(KernelArgs& args) {
  const auto& p = std::get<PadParams>(args.layer.params);
  launch_pad(args.stream(), args.layer.name, args.inputs[0], args.outputs[0], p.begin, p.mode,
             p.value);
}

template <class T>
void launch_pad_t(cudaStream_t stream, const void* src, const PadDims& d, PadMode mode,
                  uint64_t fill_bytes, void* dst, int64_t n) {
  T fill;
  std::memcpy(&fill, &fill_bytes, sizeof(T));
  pad_kernel_t<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(src), d, mode, fill,
                                                        static_cast<T*>(dst), n);
}

}  // namespace

void launch_strided_copy(cudaStream_t stream, const std::string& layer, size_t elem_size,
                         const void* src, int64_t src_offset,
                         const std::vector<int64_t>& src_strides, const Shape& shape, void* dst) {
  int64_t n = volume(shape);
  if (n == 0) return;
  Dims d = strided_dims(layer, shape, src_strides);
  const auto* base =
      static_cast<const uint8_t*>(src) + src_offset * static_cast<int64_t>(elem_size);
  // Contiguous innermost runs move as wider words (up to 16 bytes) where sizes, strides and both
  // addresses allow: head transposes of attention, concat and slices along outer dims.
  if (d.rank > 0 && d.stride[d.rank - 1] == 1) {
    const auto es = static_cast<int64_t>(elem_size);
    for (int64_t w : {int64_t{16}, int64_t{8}, int64_t{4}}) {
      if (w <= es) break;
      bool fits = (d.size[d.rank - 1] * es) % w == 0 &&
                  reinterpret_cast<uintptr_t>(base) % static_cast<uintptr_t>(w) == 0 &&
                  reinterpret_cast<uintptr_t>(dst) % static_cast<uintptr_t>(w) == 0;
      for (int k = 0; fits && k + 1 < d.rank; ++k) fits = (d.stride[k] * es) % w == 0;
      if (!fits) continue;
      for (int k = 0; k + 1 < d.rank; ++k) d.stride[k] = d.stride[k] * es / w;
      d.size[d.rank - 1] = d.size[d.rank - 1] * es / w;
      n = n * es / w;
      elem_size = static_cast<size_t>(w);
      break;
    }
  }
  const unsigned grid = grid_for(n);
  const bool narrow = narrow_indices(d, n);
  switch (elem_size) {
    case 1:
      copy_t<uint8_t>(base, d, dst, n, narrow, grid, stream);
      break;
    case 2:
      copy_t<uint16_t>(base, d, dst, n, narrow, grid, stream);
      break;
    case 4:
      copy_t<uint32_t>(base, d, dst, n, narrow, grid, stream);
      break;
    case 8:
      copy_t<uint64_t>(base, d, dst, n, narrow, grid, stream);
      break;
    default:
      copy_t<uint4>(base, d, dst, n, narrow, grid, stream);
      break;
  }
  KILN_CUDA_CHECK_LAUNCH(layer);
}

void launch_pad(cudaStream_t stream, const std::string& layer, const TensorView& in,
                const TensorView& out, const std::vector<int64_t>& begin, PadMode mode,
                double value) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const size_t r = out.shape.size();
  KILN_CHECK(r <= static_cast<size_t>(kMaxRank), Unsupported, "layer `", layer,
             "`: the CUDA pad kernel takes at most ", kMaxRank, " dims");
  PadDims d;
  d.rank = static_cast<int>(r);
  const auto strides = contiguous_strides(in.shape);
  for (size_t k = 0; k < r; ++k) {
    d.out[k] = out.shape[k];
    d.in[k] = in.shape[k];
    d.stride[k] = strides[k];
    d.begin[k] = begin[k];
    const int64_t lo = -begin[k], hi = out.shape[k] - 1 - begin[k];  // source index range
    if (mode == PadMode::kReflect) {
      KILN_CHECK(lo >= -(in.shape[k] - 1) && hi <= 2 * (in.shape[k] - 1), InvalidArgument,
                 "layer `", layer, "`: reflect pad too large for a dim of size ", in.shape[k]);
    }
    if (mode == PadMode::kReplicate) {
      KILN_CHECK(in.shape[k] > 0, InvalidArgument, "layer `", layer,
                 "`: replicate pad of an empty dim");
    }
  }
  uint64_t fill = 0;  // the pad value's bytes in the tensor's dtype
  store_as<double>(in.dtype, &fill, 0, value);
  switch (dtype_size(in.dtype)) {
    case 1:
      launch_pad_t<uint8_t>(stream, in.data, d, mode, fill, out.data, n);
      break;
    case 2:
      launch_pad_t<uint16_t>(stream, in.data, d, mode, fill, out.data, n);
      break;
    case 4:
      launch_pad_t<uint32_t>(stream, in.data, d, mode, fill, out.data, n);
      break;
    default:
      launch_pad_t<uint64_t>(stream, in.data, d, mode, fill, out.data, n);
      break;
  }
  KILN_CUDA_CHECK_LAUNCH(layer);
}

void register_shuffle(KernelTable& t) {
  t.set<ShuffleParams>(shuffle_kernel, kAllTypes);
  t.set<ConcatParams>(concat_kernel, kAllTypes);
  t.set<SliceParams>(slice_kernel, kAllTypes);
  t.set<PadParams>(pad_kernel, kAllTypes);
}

}  // namespace kiln::engine::cuda
