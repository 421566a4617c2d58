// Dtype mapping and weight conversion.
#include "conversion/dtypes.h"

#include <cstring>

#include "util/errors.h"

namespace kiln::conversion {

using engine::DataType;

engine::DataType to_engine_dtype(at::ScalarType t, const std::string& what) {
  switch (t) {
    case at::kFloat:
      return DataType::kF32;
    case at::kDouble:
      return DataType::kF32;
    case at::kHalf:
      return DataType::kF16;
    case at::kBFloat16:
      return DataType::kBF16;
    case at::kLong:
      return DataType::kI64;
    case at::kInt:
      return DataType::kI32;
    case at::kChar:
      return DataType::kI8;
    case at::kByte:
      return DataType::kU8;
    case at::kBool:
      return DataType::kBool;
    default:
      KILN_THROW(Unsupported, what, ": dtype ", c10::toString(t), " has no engine counterpart");
  }
}

at::ScalarType to_scalar_type(DataType t) {
  switch (t) {
    case DataType::kF32:
      return at::kFloat;
    case DataType::kF16:
      return at::kHalf;
    case DataType::kBF16:
      return at::kBFloat16;
    case DataType::kI64:
      return at::kLong;
    case DataType::kI32:
      return at::kInt;
    case DataType::kI8:
      return at::kChar;
    case DataType::kU8:
      return at::kByte;
    case DataType::kBool:
      return at::kBool;
  }
  return at::kFloat;
}

at::Tensor to_engine_compatible(const at::Tensor& t) {
  at::Tensor c = t.scalar_type() == at::kDouble ? t.to(at::kFloat) : t;
  return c.contiguous().cpu();
}

engine::Weights to_weights(const at::Tensor& tensor) {
  const at::Tensor t = to_engine_compatible(tensor);
  const DataType dtype = to_engine_dtype(t.scalar_type(), "weight");
  std::vector<uint8_t> bytes(static_cast<size_t>(t.numel()) * engine::dtype_size(dtype));
  if (!bytes.empty()) std::memcpy(bytes.data(), t.data_ptr(), bytes.size());
  return engine::Weights::from_bytes(dtype, t.sizes().vec(), std::move(bytes));
}

DataType promote(DataType a, DataType b) {
  if (a == b) return a;
  auto category = [](DataType t) {
    return t == DataType::kBool ? 0 : engine::is_integer(t) ? 1 : 2;
  };
  if (category(a) != category(b)) return category(a) > category(b) ? a : b;
  if (category(a) == 2) {
    if (a == DataType::kF32 || b == DataType::kF32) return DataType::kF32;
    return DataType::kF32;  // f16 with bf16
  }
  // Integers: the wider one; u8 with i8 gives i16 in torch, which we widen to i32.
  auto width = [](DataType t) { return engine::dtype_size(t); };
  if ((a == DataType::kU8 && b == DataType::kI8) || (a == DataType::kI8 && b == DataType::kU8)) {
    return DataType::kI32;
  }
  return width(a) >= width(b) ? a : b;
}

}  // namespace kiln::conversion
