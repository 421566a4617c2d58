// Data types, shape helpers and fp16/bf16 conversion.
#include "engine/types.h"

#include <cmath>
#include <sstream>

#include "util/errors.h"

namespace kiln::engine {

namespace {
struct DtypeInfo {
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[kNumDataTypes] = {{"f32", 4}, {"f16", 2}, {"bf16", 2}, {"i64", 8},
                                              {"i32", 4}, {"i8", 1},  {"u8", 1},   {"bool", 1}};
const DtypeInfo& info(DataType t) {
  const auto i = static_cast<size_t>(t);
  KILN_CHECK(i < kNumDataTypes, InternalError, "data type code ", i, " out of range");
  return kDtypes[i];
}
}  // namespace

size_t dtype_size(DataType t) {
  return info(t).size;
}
const char* dtype_name(DataType t) {
  return info(t).name;
}

bool parse_dtype(const std::string& name, DataType* out) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    if (name == kDtypes[i].name) {
      *out = static_cast<DataType>(i);
      return true;
    }
  }
  return false;
}

bool is_floating(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16;
}
bool is_integer(DataType t) {
  return t == DataType::kI64 || t == DataType::kI32 || t == DataType::kI8 || t == DataType::kU8;
}

bool is_static(const Shape& s) {
  for (int64_t d : s) {
    if (d < 0) return false;
  }
  return true;
}

// No tensor has more than 2^48 elements: byte sizes and arena offsets computed from shapes then
// cannot overflow, whatever a plan or an input claims (plan.cpp checks the same bound).
constexpr int64_t kMaxVolume = int64_t{1} << 48;

int64_t volume(const Shape& s) {
  for (int64_t d : s) {
    KILN_CHECK(d >= 0, InternalError, "volume of dynamic shape ", shape_to_string(s));
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : s) {
    KILN_CHECK(!__builtin_mul_overflow(n, d, &n) && n <= kMaxVolume, InvalidArgument, "shape ",
               shape_to_string(s), " has more than 2^48 elements");
  }
  return n;
}

std::string shape_to_string(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) os << ", ";
    if (s[i] < 0) {
      os << '?';
    } else {
      os << s[i];
    }
  }
  os << ']';
  return os.str();
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> strides(s.size());
  int64_t stride = 1;
  for (size_t i = s.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(s[i], 1);
  }
  return strides;
}

std::vector<int64_t> placed_strides(const Shape& s, int64_t row, int64_t pitch) {
  std::vector<int64_t> strides(s.size());
  int64_t stride = 1;
  bool outer = pitch == 0;
  for (size_t i = s.size(); i-- > 0;) {
    if (!outer && stride == row) stride = pitch, outer = true;
    strides[i] = stride;
    stride *= std::max<int64_t>(s[i], 1);
  }
  KILN_CHECK(outer || stride == row, InternalError, "a tensor of shape ", shape_to_string(s),
             " has no rows of ", row, " elements");
  return strides;
}

int normalize_axis(int64_t axis, size_t rank, const std::string& what) {
  const int64_t r = static_cast<int64_t>(rank);
  const int64_t a = axis < 0 ? axis + r : axis;
  KILN_CHECK(a >= 0 && a < r, InvalidArgument, what, ": axis ", axis, " out of range for rank ",
             rank);
  return static_cast<int>(a);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& what) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else if (db == 1) {
      out[i] = da;
    } else if (da == kDynamic || db == kDynamic) {
      out[i] = da == kDynamic ? db : da;  // the dynamic dim must equal the static one at run time
    } else {
      KILN_THROW(ShapeMismatch, what, ": shapes ", shape_to_string(a), " and ", shape_to_string(b),
                 " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    }
  }
  return out;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));  // inf/nan
  int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);  // underflow to zero
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t midpoint = 1u << (shift - 1);
    if (rem > midpoint || (rem == midpoint && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;  // may carry into the exponent
  return static_cast<uint16_t>(half);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      x = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_to_float(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

Shape to_channels_last(const Shape& s) {
  if (s.size() < 3) return s;
  Shape r = {s[0]};
  r.insert(r.end(), s.begin() + 2, s.end());
  r.push_back(s[1]);
  return r;
}

Shape to_channels_first(const Shape& s) {
  if (s.size() < 3) return s;
  Shape r = {s[0], s.back()};
  r.insert(r.end(), s.begin() + 1, s.end() - 1);
  return r;
}

}  // namespace kiln::engine
