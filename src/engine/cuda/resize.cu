// CUDA kernel of resize (nearest, linear, cubic over 1-3 trailing spatial dims). The per-dim
// source indices and weights are built on the host by layers/setup.h (so both backends read the
// same taps), uploaded once per shape, and each thread sums its output's taps.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>

#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"
#include "engine/layers/setup.h"

namespace kiln::engine::cuda {
namespace {

constexpr int kMaxSpatial = 3;

struct ResizeDims {
  int spatial = 0;
  int taps[kMaxSpatial] = {};
  int64_t out[kMaxSpatial] = {}, in_stride[kMaxSpatial] = {}, first[kMaxSpatial] = {};
  int64_t out_plane = 1, in_plane = 1;
};

// Tap tables on the device for one pair of input and output shapes: indices then weights.
struct ResizeTables {
  ResizeDims dims;
  int64_t* index = nullptr;
  float* weight = nullptr;
  std::vector<int64_t> host_index;  // kept until the upload is certainly done
  std::vector<float> host_weight;
  ResizeTables() = default;
  ResizeTables(const ResizeTables&) = delete;
  ResizeTables& operator=(const ResizeTables&) = delete;
  ~ResizeTables() {
    if (index) cudaFree(index);
    if (weight) cudaFree(weight);
  }
};

// The tables of the shapes run lately (CUDA graphs of each shape read their own), the least
// recently used dropped past kMaxResizeTables.
constexpr size_t kMaxResizeTables = 16;
struct ResizeState : KernelState {
  std::map<Shape, std::unique_ptr<ResizeTables>> tables;
  std::deque<Shape> order;  // least recently used first
};

__global__ void resize_kernel_t(const void* x, DataType xt, void* y, DataType yt, ResizeDims d,
                                const int64_t* index, const float* weight, bool nearest,
                                size_t elem_size, int64_t total) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t plane = e / d.out_plane;
    int64_t pos = e % d.out_plane;
    int64_t c[kMaxSpatial] = {};
    for (int k = d.spatial - 1; k >= 0; --k) {
      c[k] = pos % d.out[k];
      pos /= d.out[k];
    }
    const int64_t base = plane * d.in_plane;
    if (nearest) {
      int64_t off = base;
      for (int k = 0; k < d.spatial; ++k) off += index[d.first[k] + c[k]] * d.in_stride[k];
      const auto* src = static_cast<const uint8_t*>(x) + off * elem_size;
      auto* dst = static_cast<uint8_t*>(y) + e * elem_size;
      for (size_t b = 0; b < elem_size; ++b) dst[b] = src[b];
      continue;
    }
    int combos = 1;
    for (int k = 0; k < d.spatial; ++k) combos *= d.taps[k];
    float acc = 0;
    for (int combo = 0; combo < combos; ++combo) {
      int rem = combo;
      int64_t off = base;
      float w = 1;
      for (int k = 0; k < d.spatial; ++k) {
        const int64_t t = d.first[k] + c[k] * d.taps[k] + rem % d.taps[k];
        rem /= d.taps[k];
        off += index[t] * d.in_stride[k];
        w *= weight[t];
      }
      acc += w * load_as<float>(xt, x, off);
    }
    store_as<float>(yt, y, e, acc);
  }
}

// 2-d resizes (the trailing two dims) with 32-bit index math and the taps a dim known to the
// compiler: bilinear and bicubic over float types, converted on the way out, and nearest as a
// copy of the element's bytes. The generic kernel above divides 64-bit indices for every output
// and every tap and converts through a runtime type switch: fcn_resnet50's head upsampling
// ([32, 21, 28, 28] -> 224 x 224 in f16) took 1.26 ms there, 27 outputs a ns (bench/NOTES.md
// G78). Taps are summed in the generic kernel's order (the first dim's fastest) and weighed by
// the same products, so both give the same values.
struct Resize2d {
  int32_t out_h, out_w, in_w, in_plane, first_h, first_w;
};

template <class TI, class TO, int TAPS>
__global__ void resize2d_kernel(const TI* x, TO* y, Resize2d d, const int64_t* index,
                                const float* weight, int32_t total) {
  for (int32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const int32_t ox = e % d.out_w, t = e / d.out_w;
    const int32_t oy = t % d.out_h, plane = t / d.out_h;
    const TI* src = x + plane * d.in_plane;
    const int32_t th = d.first_h + oy * TAPS, tw = d.first_w + ox * TAPS;
    int32_t row[TAPS];
    float wh[TAPS];
#pragma unroll
    for (int i = 0; i < TAPS; ++i) {
      row[i] = static_cast<int32_t>(index[th + i]) * d.in_w;
      wh[i] = weight[th + i];
    }
    float acc = 0;
#pragma unroll
    for (int j = 0; j < TAPS; ++j) {
      const int32_t col = static_cast<int32_t>(index[tw + j]);
      const float ww = weight[tw + j];
#pragma unroll
      for (int i = 0; i < TAPS; ++i) acc += wh[i] * ww * static_cast<float>(src[row[i] + col]);
    }
    y[e] = static_cast<TO>(acc);
  }
}

// Nearest: U is an unsigned word of the element's size.
template <class U>
__global__ void resize2d_nearest_kernel(const U* x, U* y, Resize2d d, const int64_t* index,
                                        int32_t total) {
  for (int32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const int32_t ox = e % d.out_w, t = e / d.out_w;
    const int32_t oy = t % d.out_h, plane = t / d.out_h;
    y[e] = x[plane * d.in_plane + static_cast<int32_t>(index[d.first_h + oy]) * d.in_w +
             static_cast<int32_t>(index[d.first_w + ox])];
  }
}

template <class TI, class TO>
void launch_resize2d_typed(cudaStream_t stream, const void* x, void* y, const Resize2d& d, int taps,
                           const int64_t* index, const float* weight, int32_t total) {
  const unsigned grid = grid_for(total);
  const auto* in = static_cast<const TI*>(x);
  auto* out = static_cast<TO*>(y);
  if (taps == 2) {
    resize2d_kernel<TI, TO, 2><<<grid, kThreads, 0, stream>>>(in, out, d, index, weight, total);
  } else {
    resize2d_kernel<TI, TO, 4><<<grid, kThreads, 0, stream>>>(in, out, d, index, weight, total);
  }
}

template <class TI>
void launch_resize2d_from(DataType to, cudaStream_t stream, const void* x, void* y,
                          const Resize2d& d, int taps, const int64_t* index, const float* weight,
                          int32_t total) {
  switch (to) {
    case DataType::kF32:
      return launch_resize2d_typed<TI, float>(stream, x, y, d, taps, index, weight, total);
    case DataType::kF16:
      return launch_resize2d_typed<TI, __half>(stream, x, y, d, taps, index, weight, total);
    default:
      return launch_resize2d_typed<TI, __nv_bfloat16>(stream, x, y, d, taps, index, weight, total);
  }
}

bool is_floating_pair(DataType a, DataType b) {
  const auto floating = [](DataType t) {
    return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16;
  };
  return floating(a) && floating(b);
}

// Runs a 2-d resize on the kernels above where it is one; false otherwise (other ranks, more
// than 2^31 elements, linear or cubic of non-float types, nearest that converts).
bool try_resize2d(cudaStream_t stream, const ResizeParams& p, const TensorView& in,
                  const TensorView& out, const ResizeDims& dims, const int64_t* index,
                  const float* weight) {
  const int64_t limit = int64_t{1} << 31;
  if (dims.spatial != 2 || out.numel() >= limit || in.numel() >= limit) return false;
  const bool nearest = p.mode == ResizeMode::kNearest;
  if (nearest ? in.dtype != out.dtype : !is_floating_pair(in.dtype, out.dtype)) return false;
  if (!nearest && dims.taps[0] != dims.taps[1]) return false;
  if (!nearest && dims.taps[0] != 2 && dims.taps[0] != 4) return false;
  Resize2d d{};
  d.out_h = static_cast<int32_t>(dims.out[0]), d.out_w = static_cast<int32_t>(dims.out[1]);
  d.in_w = static_cast<int32_t>(dims.in_stride[0]);
  d.in_plane = static_cast<int32_t>(dims.in_plane);
  d.first_h = static_cast<int32_t>(dims.first[0]), d.first_w = static_cast<int32_t>(dims.first[1]);
  const auto total = static_cast<int32_t>(out.numel());
  const unsigned grid = grid_for(total);
  if (nearest) {
    // Elements copied as unsigned words of their size.
    const auto copy = [&](auto word) {
      using U = decltype(word);
      resize2d_nearest_kernel<<<grid, kThreads, 0, stream>>>(
          static_cast<const U*>(in.data), static_cast<U*>(out.data), d, index, total);
      return true;
    };
    switch (dtype_size(in.dtype)) {
      case 1:
        return copy(uint8_t{});
      case 2:
        return copy(uint16_t{});
      case 4:
        return copy(uint32_t{});
      case 8:
        return copy(uint64_t{});
      default:
        return false;
    }
  }
  const int taps = dims.taps[0];
  switch (in.dtype) {
    case DataType::kF32:
      launch_resize2d_from<float>(out.dtype, stream, in.data, out.data, d, taps, index, weight,
                                  total);
      break;
    case DataType::kF16:
      launch_resize2d_from<__half>(out.dtype, stream, in.data, out.data, d, taps, index, weight,
                                   total);
      break;
    default:
      launch_resize2d_from<__nv_bfloat16>(out.dtype, stream, in.data, out.data, d, taps, index,
                                          weight, total);
      break;
  }
  return true;
}

void resize_kernel(KernelArgs& args) {
  const auto& p = std::get<ResizeParams>(args.layer.params);
  const TensorView &in = args.inputs[0], &out = args.outputs[0];
  const size_t spatial = in.shape.size() - 2;
  KILN_CHECK(spatial >= 1 && spatial <= static_cast<size_t>(kMaxSpatial), Unsupported, "layer `",
             args.layer.name, "`: the CUDA resize takes 1 to 3 spatial dims, got ", spatial);
  Shape key = in.shape;
  key.insert(key.end(), out.shape.begin(), out.shape.end());
  auto* state = dynamic_cast<ResizeState*>(args.state.get());
  if (!state) {
    args.state = std::make_unique<ResizeState>();
    state = static_cast<ResizeState*>(args.state.get());
  }
  ResizeTables* tables = nullptr;
  if (auto it = state->tables.find(key); it != state->tables.end()) {
    tables = it->second.get();
    state->order.erase(std::find(state->order.begin(), state->order.end(), key));
    state->order.push_back(key);
  } else {
    if (state->tables.size() >= kMaxResizeTables) {
      state->tables.erase(state->order.front());  // frees device memory graphs may read
      state->order.pop_front();
      args.res.device_memory_moved();
    }
    auto fresh = std::make_unique<ResizeTables>();
    ResizeDims& d = fresh->dims;
    d.spatial = static_cast<int>(spatial);
    const Shape in_sp(in.shape.begin() + 2, in.shape.end());
    const auto in_strides = contiguous_strides(in_sp);
    for (size_t k = 0; k < spatial; ++k) {
      KILN_CHECK(in.shape[k + 2] > 0, InvalidArgument, "layer `", args.layer.name,
                 "`: cannot resize an empty spatial dim");
      ResizeTaps t = resize_taps(p, k, in.shape[k + 2], out.shape[k + 2]);
      d.taps[k] = t.taps;
      d.out[k] = out.shape[k + 2];
      d.in_stride[k] = in_strides[k];
      d.first[k] = static_cast<int64_t>(fresh->host_index.size());
      d.out_plane *= out.shape[k + 2];
      d.in_plane *= in.shape[k + 2];
      fresh->host_index.insert(fresh->host_index.end(), t.index.begin(), t.index.end());
      fresh->host_weight.insert(fresh->host_weight.end(), t.weight.begin(), t.weight.end());
    }
    const size_t n = fresh->host_index.size();
    KILN_CUDA_CHECK(cudaMalloc(&fresh->index, n * sizeof(int64_t)));
    KILN_CUDA_CHECK(cudaMalloc(&fresh->weight, n * sizeof(float)));
    KILN_CUDA_CHECK(cudaMemcpyAsync(fresh->index, fresh->host_index.data(), n * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, args.stream()));
    KILN_CUDA_CHECK(cudaMemcpyAsync(fresh->weight, fresh->host_weight.data(), n * sizeof(float),
                                    cudaMemcpyHostToDevice, args.stream()));
    tables = fresh.get();
    state->tables[key] = std::move(fresh);
    state->order.push_back(key);
  }
  if (try_resize2d(args.stream(), p, in, out, tables->dims, tables->index, tables->weight)) {
    KILN_CUDA_CHECK_LAUNCH(args.layer.name);
    return;
  }
  const int64_t total = out.numel();
  resize_kernel_t<<<grid_for(total), kThreads, 0, args.stream()>>>(
      in.data, in.dtype, out.data, out.dtype, tables->dims, tables->index, tables->weight,
      p.mode == ResizeMode::kNearest, dtype_size(in.dtype), total);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

std::string resize_support(const Layer& layer, const std::vector<DataType>& in,
                           const std::vector<DataType>&) {
  const auto& p = std::get<ResizeParams>(layer.params);
  if (p.mode != ResizeMode::kNearest && !is_floating(in.at(0))) {
    return "linear/cubic resize of integer data";
  }
  return "";
}

}  // namespace

void register_resize(KernelTable& t) {
  t.set<ResizeParams>(resize_kernel, kAllTypes, resize_support);
}

}  // namespace kiln::engine::cuda
