// Reading and writing any engine dtype as a compute type (float or int64), and broadcast loads.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/cpu/kernels.h"

namespace kiln::engine::cpu {

template <class C>
inline C load_as(DataType t, const void* base, int64_t i) {
  switch (t) {
    case DataType::kF32:
      return static_cast<C>(static_cast<const float*>(base)[i]);
    case DataType::kF16:
      return static_cast<C>(half_to_float(static_cast<const uint16_t*>(base)[i]));
    case DataType::kBF16:
      return static_cast<C>(bf16_to_float(static_cast<const uint16_t*>(base)[i]));
    case DataType::kI64:
      return static_cast<C>(static_cast<const int64_t*>(base)[i]);
    case DataType::kI32:
      return static_cast<C>(static_cast<const int32_t*>(base)[i]);
    case DataType::kI8:
      return static_cast<C>(static_cast<const int8_t*>(base)[i]);
    case DataType::kU8:
      return static_cast<C>(static_cast<const uint8_t*>(base)[i]);
    case DataType::kBool:
      return static_cast<C>(static_cast<const uint8_t*>(base)[i] != 0);
  }
  return C{};
}

template <class C>
inline void store_as(DataType t, void* base, int64_t i, C v) {
  switch (t) {
    case DataType::kF32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DataType::kF16:
      static_cast<uint16_t*>(base)[i] = float_to_half(static_cast<float>(v));
      break;
    case DataType::kBF16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(v));
      break;
    case DataType::kI64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kI32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kI8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kU8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kBool:
      static_cast<uint8_t*>(base)[i] = v != C{} ? 1 : 0;
      break;
  }
}

// Maps linear indices of an output shape to element offsets of an input broadcast to it.
class BroadcastMap {
 public:
  BroadcastMap(const Shape& in, const Shape& out);
  bool contiguous() const { return identity_; }
  bool scalar() const { return scalar_; }
  // Offsets of output elements [start, start + n) in the input.
  void offsets(int64_t start, int64_t n, int64_t* dst) const;

 private:
  Shape out_;
  std::vector<int64_t> strides_;  // input strides per output dim, 0 where broadcast
  bool identity_ = false, scalar_ = false;
};

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
  } else {
    map.offsets(start, n, scratch);
    for (int64_t i = 0; i < n; ++i) dst[i] = load_as<C>(v.dtype, v.data, scratch[i]);
  }
}

template <class C>
inline void store_block(const TensorView& out, int64_t start, int64_t n, const C* src) {
  if (out.dtype == DataType::kF32 && std::is_same_v<C, float>) {
    float* dst = static_cast<float*>(out.data) + start;
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) store_as<C>(out.dtype, out.data, start + i, src[i]);
  }
}

}  // namespace kiln::engine::cpu
