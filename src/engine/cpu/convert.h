// Reading and writing any engine dtype as a compute type (float or int64), and broadcast loads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine/cpu/kernels.h"
#include "engine/scalar_math.h"

namespace kiln::engine::cpu {

// Broadcast walks keep their multi-index on the stack up to this rank (after merging dims).
constexpr size_t kSmallRank = 16;

// Maps linear indices of an output shape to element offsets of an input broadcast to it. Adjacent
// dims that step through the input alike are merged, so a per-channel operand of [N, C, H, W]
// becomes [N*C, H*W] with inner stride 0: runs of one value instead of per-element index math.
class BroadcastMap {
 public:
  BroadcastMap(const Shape& in, const Shape& out) : BroadcastMap(in, contiguous_strides(in), out) {}
  // An input laid out with `in_strides` (a tensor placed in a wider one: TensorRef::strides).
  BroadcastMap(const Shape& in, const std::vector<int64_t>& in_strides, const Shape& out);
  bool contiguous() const { return identity_; }
  bool scalar() const { return scalar_; }
  // Offsets of output elements [start, start + n) in the input.
  void offsets(int64_t start, int64_t n, int64_t* dst) const;
  // Calls run(i, offset, len, stride) for consecutive runs covering output elements
  // [start, start + n): element i + j of the range is input element offset + j * stride.
  template <class Run>
  void for_runs(int64_t start, int64_t n, Run&& run) const;

 private:
  Shape out_;                     // merged output dims
  std::vector<int64_t> strides_;  // input strides per merged dim, 0 where broadcast
  bool identity_ = false, scalar_ = false;
};

template <class Run>
void BroadcastMap::for_runs(int64_t start, int64_t n, Run&& run) const {
  const size_t rank = out_.size();
  if (n <= 0) return;
  if (rank == 0) {  // every dim is 1: a single element
    run(int64_t{0}, int64_t{0}, n, int64_t{0});
    return;
  }
  int64_t small[kSmallRank] = {};
  std::vector<int64_t> big(rank > kSmallRank ? rank : 0);
  int64_t* index = rank > kSmallRank ? big.data() : small;
  int64_t rem = start, off = 0;
  for (size_t d = rank; d-- > 0;) {
    index[d] = rem % out_[d];
    rem /= out_[d];
    off += index[d] * strides_[d];
  }
  const size_t last = rank - 1;
  const int64_t inner = out_[last], inner_stride = strides_[last];
  for (int64_t i = 0; i < n;) {
    const int64_t len = std::min(n - i, inner - index[last]);
    run(i, off, len, inner_stride);
    i += len;
    index[last] += len;
    off += len * inner_stride;
    for (size_t d = last; index[d] >= out_[d] && d > 0; --d) {  // carry into outer dims
      off += strides_[d - 1] - index[d] * strides_[d];
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

// Loads output elements [start, start + n) of input `v` (broadcast to the output) as C.
template <class C>
inline void load_block(const TensorView& v, const BroadcastMap& map, int64_t start, int64_t n,
                       C* dst, int64_t* scratch) {
  if (map.scalar()) {
    const C x = load_as<C>(v.dtype, v.data, 0);
    for (int64_t i = 0; i < n; ++i) dst[i] = x;
  } else if (map.contiguous()) {
    if (v.dtype == DataType::kF32 && std::is_same_v<C, float>) {
      const float* src = static_cast<const float*>(v.data) + start;
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<C>(src[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = load_as<C>(v.dtype, v.data, start + i);
    }
  } else if (v.dtype == DataType::kF32 && std::is_same_v<C, float>) {
    const float* src = static_cast<const float*>(v.data);
    map.for_runs(start, n, [&](int64_t i, int64_t off, int64_t len, int64_t stride) {
      C* d = dst + i;
      if (stride == 0) {
        const C x = static_cast<C>(src[off]);
        for (int64_t j = 0; j < len; ++j) d[j] = x;
      } else {
        for (int64_t j = 0; j < len; ++j) d[j] = static_cast<C>(src[off + j * stride]);
      }
    });
  } else {
    map.offsets(start, n, scratch);
    for (int64_t i = 0; i < n; ++i) dst[i] = load_as<C>(v.dtype, v.data, scratch[i]);
  }
}

// Elements [start, start + n) of `out` in its row-major order, which a placed tensor (pitch != 0)
// keeps along each row of `row` elements.
template <class C>
inline void store_block(const TensorView& out, int64_t start, int64_t n, const C* src) {
  if (!out.dense()) {
    for (int64_t i = 0; i < n;) {
      const int64_t e = start + i, r = e / out.row, c = e % out.row;
      const int64_t len = std::min(n - i, out.row - c);
      TensorView row{out.dtype,
                     {len},
                     static_cast<uint8_t*>(out.data) + (r * out.pitch + c) * dtype_size(out.dtype)};
      store_block<C>(row, 0, len, src + i);
      i += len;
    }
    return;
  }
  if (out.dtype == DataType::kF32 && std::is_same_v<C, float>) {
    float* dst = static_cast<float*>(out.data) + start;
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) store_as<C>(out.dtype, out.data, start + i, src[i]);
  }
}

}  // namespace kiln::engine::cpu
