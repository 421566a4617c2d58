// CPU kernels of the shuffle family's data movement: shuffle, concat, slice, pad. They move raw
// elements by dtype size, so every dtype works; gather and scatter live in cpu/gather.cpp.
#include <algorithm>
#include <cstring>

#include "engine/cpu/convert.h"
#include "engine/layers/setup.h"
#include "util/errors.h"

namespace kiln::engine::cpu {

namespace {

constexpr int64_t kParallelElements = 64 * 1024;

// Copies into a dense `out_shape` from `src`, whose element for output index i lies at
// sum(i[d] * src_strides[d]) (in elements). Transposes and slices are both such views.
//
// Dims of size 1 are dropped and neighbours that stay adjacent in the source merged, so an
// NCHW -> NHWC transpose is a [H*W, C] <- [C, H*W] one. Then either the innermost dim is
// contiguous in the source (rows of memcpy), or, where some outer dim is (a transpose), the copy
// runs in tiles of that dim and the innermost, so reads and writes both stay in cache lines.
template <class T>
void strided_copy_t(const void* src, const std::vector<int64_t>& src_strides,
                    const Shape& out_shape, void* dst) {
  const int64_t n = volume(out_shape);
  if (n == 0) return;
  const T* s = static_cast<const T*>(src);
  T* o = static_cast<T*>(dst);
  Shape shape;
  std::vector<int64_t> strides;
  for (size_t d = 0; d < out_shape.size(); ++d) {
    if (out_shape[d] == 1) continue;
    if (!shape.empty() && strides.back() == src_strides[d] * out_shape[d]) {
      shape.back() *= out_shape[d];
      strides.back() = src_strides[d];
    } else {
      shape.push_back(out_shape[d]);
      strides.push_back(src_strides[d]);
    }
  }
  if (shape.empty()) {
    o[0] = s[0];
    return;
  }
  const size_t r = shape.size();
  const int64_t inner = shape[r - 1], inner_stride = strides[r - 1];
  // The source offset of row `row` (an index over all dims but the last, and but `skip`).
  const auto row_offset = [&](int64_t row, size_t skip) {
    int64_t off = 0;
    for (size_t d = r - 1; d-- > 0;) {
      if (d == skip) continue;
      off += (row % shape[d]) * strides[d];
      row /= shape[d];
    }
    return off;
  };
  size_t tdim = r;  // an outer dim contiguous in the source, for the tiled transpose
  if (inner_stride != 1) {
    for (size_t d = 0; d + 1 < r; ++d) {
      if (strides[d] == 1) tdim = d;
    }
  }
  if (tdim == r) {
    const int64_t rows = n / inner;
#pragma omp parallel for if (n > kParallelElements)
    for (int64_t row = 0; row < rows; ++row) {
      const T* from = s + row_offset(row, r);
      T* to = o + row * inner;
      if (inner_stride == 1) {
        std::memcpy(to, from, static_cast<size_t>(inner) * sizeof(T));
      } else {
        for (int64_t j = 0; j < inner; ++j) to[j] = from[j * inner_stride];
      }
    }
    return;
  }
  // out[.., i, .., j] = src[base + i + j * inner_stride] for i < shape[tdim], j < inner: tiles of
  // kTile x kTile elements, over every index of the other dims; a side shorter than kTile gives
  // the other side its share (an NCHW -> NHWC input of 3 channels: tiles of 341 pixels x 3, not
  // 32 x 3, whose set-up cost more than their copying).
  constexpr int64_t kTile = 32;
  const int64_t rows = shape[tdim];
  const int64_t tile_i = kTile * kTile / std::min(inner, kTile);
  const int64_t tile_j = kTile * kTile / std::min(rows, kTile);
  const int64_t ti = (rows + tile_i - 1) / tile_i;
  const int64_t tj = (inner + tile_j - 1) / tile_j, others = n / (rows * inner);
  int64_t out_tstride = inner;  // the output's stride of dim tdim
  for (size_t d = tdim + 1; d + 1 < r; ++d) out_tstride *= shape[d];
  const int64_t tiles = others * ti * tj;
#pragma omp parallel for if (n > kParallelElements)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t other = t / (ti * tj), i0 = (t / tj) % ti * tile_i, j0 = t % tj * tile_j;
    // `other` counts the output rows without dim tdim; its output offset puts tdim back at 0.
    int64_t out_base = 0, rem = other, mul = inner;
    for (size_t d = r - 1; d-- > 0;) {
      if (d == tdim) {
        mul *= shape[d];
        continue;
      }
      out_base += (rem % shape[d]) * mul;
      rem /= shape[d];
      mul *= shape[d];
    }
    const T* from = s + row_offset(other, tdim);
    T* to = o + out_base;
    const int64_t i1 = std::min(rows, i0 + tile_i), j1 = std::min(inner, j0 + tile_j);
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = j0; j < j1; ++j) to[i * out_tstride + j] = from[i + j * inner_stride];
    }
  }
}

void strided_copy(size_t elem_size, const void* src, const std::vector<int64_t>& src_strides,
                  const Shape& out_shape, void* dst) {
  switch (elem_size) {
    case 1:
      return strided_copy_t<uint8_t>(src, src_strides, out_shape, dst);
    case 2:
      return strided_copy_t<uint16_t>(src, src_strides, out_shape, dst);
    case 4:
      return strided_copy_t<uint32_t>(src, src_strides, out_shape, dst);
    default:
      return strided_copy_t<uint64_t>(src, src_strides, out_shape, dst);
  }
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Writes `in` (dense, shape `shape`) transposed by `perm` to `dst`.
void transpose(size_t elem_size, const void* in, const Shape& shape,
               const std::vector<int64_t>& perm, void* dst) {
  const auto strides = contiguous_strides(shape);
  Shape out_shape(perm.size());
  std::vector<int64_t> src_strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    out_shape[i] = shape[static_cast<size_t>(perm[i])];
    src_strides[i] = strides[static_cast<size_t>(perm[i])];
  }
  strided_copy(elem_size, in, src_strides, out_shape, dst);
}

void shuffle_kernel(KernelArgs& args) {
  const auto& p = std::get<ShuffleParams>(args.layer.params);
  const TensorView &in = args.inputs[0], &given_out = args.outputs[0];
  const size_t es = dtype_size(in.dtype);
  const size_t bytes = static_cast<size_t>(in.numel()) * es;
  if (bytes == 0) return;
  // A shuffle that casts moves the input's elements into a buffer of its dtype, then converts.
  std::vector<uint8_t> moved(p.cast ? bytes : 0);
  TensorView out = given_out;
  if (p.cast) {
    out.dtype = in.dtype;
    out.data = moved.data();
  }
  const auto convert = [&] {
    if (!p.cast) return;
    const int64_t n = in.numel();
    for (int64_t i = 0; i < n; ++i) {
      store_as<float>(given_out.dtype, given_out.data, i, load_as<float>(in.dtype, out.data, i));
    }
  };
  const bool perm1 = !p.first_perm.empty() && !is_identity(p.first_perm);
  const bool perm2 = !p.second_perm.empty() && !is_identity(p.second_perm);
  // The reshape is free on dense data; its target is the output shape before second_perm.
  Shape reshaped = out.shape;
  if (!p.second_perm.empty()) {
    for (size_t i = 0; i < p.second_perm.size(); ++i) {
      reshaped[static_cast<size_t>(p.second_perm[i])] = out.shape[i];
    }
  }
  if (!perm1 && !perm2) {
    if (out.data != in.data) std::memcpy(out.data, in.data, bytes);
  } else if (!perm2) {
    transpose(es, in.data, in.shape, p.first_perm, out.data);
  } else if (!perm1) {
    transpose(es, in.data, reshaped, p.second_perm, out.data);
  } else {
    std::vector<uint8_t> tmp(bytes);
    transpose(es, in.data, in.shape, p.first_perm, tmp.data());
    transpose(es, tmp.data(), reshaped, p.second_perm, out.data);
  }
  convert();
}

void concat_kernel(KernelArgs& args) {
  const auto& p = std::get<ConcatParams>(args.layer.params);
  const TensorView& out = args.outputs[0];
  const ConcatRows r = concat_rows(args.layer.name, p, args.inputs);
  if (r.row == 0) return;
  const ConcatPitches pitches = concat_pitches(args.layer.name, r, args.inputs, out);
  uint8_t* dst = static_cast<uint8_t*>(out.data);
#pragma omp parallel for if (out.numel() > kParallelElements)
  for (int64_t o = 0; o < r.outer; ++o) {
    for (size_t k = 0; k < args.inputs.size(); ++k) {
      if (r.chunk[k] == 0) continue;
      std::memcpy(
          dst + static_cast<size_t>(o) * pitches.out + r.at[k],
          static_cast<const uint8_t*>(args.inputs[k].data) + static_cast<size_t>(o) * pitches.in[k],
          r.chunk[k]);
    }
  }
}

void slice_kernel(KernelArgs& args) {
  const auto& p = std::get<SliceParams>(args.layer.params);
  const TensorView &in = args.inputs[0], &out = args.outputs[0];
  if (out.numel() == 0) return;
  const SliceView view = slice_view(args.layer.name, p, in.shape);
  const size_t es = dtype_size(in.dtype);
  strided_copy(es, static_cast<const uint8_t*>(in.data) + view.offset * static_cast<int64_t>(es),
               view.strides, out.shape, out.data);
}

// Source index along one dim for each output index, or -1 for the constant fill.
std::vector<int64_t> pad_map(const std::string& layer, PadMode mode, int64_t d, int64_t begin,
                             int64_t out_dim) {
  std::vector<int64_t> map(static_cast<size_t>(out_dim));
  for (int64_t o = 0; o < out_dim; ++o) {
    int64_t i = o - begin;
    if (i < 0 || i >= d) {
      if (mode == PadMode::kConstant) {
        i = -1;
      } else if (mode == PadMode::kReplicate) {
        KILN_CHECK(d > 0, InvalidArgument, "layer `", layer, "`: replicate pad of an empty dim");
        i = std::clamp<int64_t>(i, 0, d - 1);
      } else {
        i = i < 0 ? -i : 2 * (d - 1) - i;
        KILN_CHECK(i >= 0 && i < d, InvalidArgument, "layer `", layer,
                   "`: reflect pad too large for a dim of size ", d);
      }
    }
    map[static_cast<size_t>(o)] = i;
  }
  return map;
}

template <class T>
T bytes_as(uint64_t bytes) {
  T v;
  std::memcpy(&v, &bytes, sizeof(T));
  return v;
}

template <class T>
void pad_typed(const std::vector<std::vector<int64_t>>& maps, const TensorView& in,
               const TensorView& out, T fill) {
  const size_t r = out.shape.size();
  const T* src = static_cast<const T*>(in.data);
  T* dst = static_cast<T*>(out.data);
  const auto strides = contiguous_strides(in.shape);
  const int64_t inner = out.shape[r - 1];
  const int64_t rows = out.numel() / inner;
  const std::vector<int64_t>& last = maps[r - 1];
#pragma omp parallel for if (out.numel() > kParallelElements)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rem = row, off = 0;
    bool inside = true;
    for (size_t d = r - 1; d-- > 0;) {
      const int64_t i = maps[d][static_cast<size_t>(rem % out.shape[d])];
      rem /= out.shape[d];
      inside = inside && i >= 0;
      off += i * strides[d];
    }
    T* to = dst + row * inner;
    for (int64_t j = 0; j < inner; ++j) {
      const int64_t i = last[static_cast<size_t>(j)];
      to[j] = inside && i >= 0 ? src[off + i] : fill;
    }
  }
}

void pad_kernel(KernelArgs& args) {
  const auto& p = std::get<PadParams>(args.layer.params);
  const TensorView &in = args.inputs[0], &out = args.outputs[0];
  if (out.numel() == 0) return;
  const size_t es = dtype_size(in.dtype);
  if (out.shape.empty()) {
    std::memcpy(out.data, in.data, es);
    return;
  }
  std::vector<std::vector<int64_t>> maps;
  for (size_t d = 0; d < out.shape.size(); ++d) {
    maps.push_back(pad_map(args.layer.name, p.mode, in.shape[d], p.begin[d], out.shape[d]));
  }
  uint64_t fill = 0;  // the pad value's bytes in the tensor's dtype
  store_as<double>(in.dtype, &fill, 0, p.value);
  switch (es) {
    case 1:
      return pad_typed<uint8_t>(maps, in, out, bytes_as<uint8_t>(fill));
    case 2:
      return pad_typed<uint16_t>(maps, in, out, bytes_as<uint16_t>(fill));
    case 4:
      return pad_typed<uint32_t>(maps, in, out, bytes_as<uint32_t>(fill));
    default:
      return pad_typed<uint64_t>(maps, in, out, fill);
  }
}

}  // namespace

void register_shuffle(KernelTable& t) {
  t.set<ShuffleParams>(shuffle_kernel);
  t.set<ConcatParams>(concat_kernel);
  t.set<SliceParams>(slice_kernel);
  t.set<PadParams>(pad_kernel);
}

}  // namespace kiln::engine::cpu
