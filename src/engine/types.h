// Engine value types: data types, shapes (with dynamic dims), and host fp16/bf16 conversion.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::engine {

enum class DataType : uint8_t { kF32 = 0, kF16, kBF16, kI64, kI32, kI8, kU8, kBool };
constexpr int kNumDataTypes = 8;

size_t dtype_size(DataType t);
const char* dtype_name(DataType t);  // "f32", "f16", ...
bool parse_dtype(const std::string& name, DataType* out);
bool is_floating(DataType t);
bool is_integer(DataType t);  // i64, i32, i8, u8 (not bool)

// A shape; a dim of kDynamic is unknown until run time.
using Shape = std::vector<int64_t>;
constexpr int64_t kDynamic = -1;

bool is_static(const Shape& s);
int64_t volume(const Shape& s);               // product of dims; requires a static shape
std::string shape_to_string(const Shape& s);  // "[1, 3, ?, 224]"
// Row-major strides, in elements.
std::vector<int64_t> contiguous_strides(const Shape& s);
// The strides of a tensor of shape `s` whose elements come in rows of `row` elements (a suffix of
// its dims), each `pitch` elements after the one before: a tensor placed in a wider one along an
// axis (TensorRef). contiguous_strides(s) where pitch is 0.
std::vector<int64_t> placed_strides(const Shape& s, int64_t row, int64_t pitch);
// The channels-last order of a [N, C, spatial...] shape, [N, spatial..., C], and back. Shapes of
// rank < 3 are returned unchanged.
Shape to_channels_last(const Shape& channels_first);
Shape to_channels_first(const Shape& channels_last);
// Maps a possibly negative axis to [0, rank); throws InvalidArgument naming `what` if out of range.
int normalize_axis(int64_t axis, size_t rank, const std::string& what);
// Numpy broadcasting of two shapes (dynamic dims broadcast to dynamic unless the other is > 1);
// throws ShapeMismatch naming `what`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& what);

// IEEE binary16 and bfloat16 on the host (round to nearest even).
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t b);

}  // namespace kiln::engine
