// Operand promotion for binary converters.
#include "conversion/converters/operands.h"

#include "conversion/dtypes.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

int category(engine::DataType t) {
  return t == engine::DataType::kBool ? 0 : engine::is_integer(t) ? 1 : 2;
}

struct OperandInfo {
  bool is_tensor = false;  // a dimensioned tensor (rank > 0)
  engine::DataType dtype = engine::DataType::kF32;
};

OperandInfo info(ConversionContext& ctx, const torch::jit::Value* v) {
  if (v->type()->kind() == c10::TypeKind::TensorType) {
    const auto& d = ctx.desc(ctx.tensor(v));
    return {!d.shape.empty(), d.dtype};
  }
  const c10::IValue& iv = ctx.ivalue(v);
  if (iv.isDouble()) return {false, engine::DataType::kF32};
  if (iv.isBool()) return {false, engine::DataType::kBool};
  KILN_CHECK(iv.isInt(), Unsupported, "operand %", v->debugName(), " of type ", iv.tagKind(),
             " is not a number or tensor");
  return {false, engine::DataType::kI64};
}

}  // namespace

bool is_none(const torch::jit::Value* v) {
  return v->type()->kind() == c10::TypeKind::NoneType;
}

double static_number(ConversionContext& ctx, const torch::jit::Value* v) {
  const c10::IValue& iv = ctx.ivalue(v);
  if (iv.isDouble()) return iv.toDouble();
  if (iv.isInt()) return static_cast<double>(iv.toInt());
  if (iv.isBool()) return iv.toBool() ? 1 : 0;
  KILN_THROW(Unsupported, "value %", v->debugName(), " must be a static number");
}

BinaryOperands binary_operands(ConversionContext& ctx, const torch::jit::Node* node,
                               const torch::jit::Value* a, const torch::jit::Value* b) {
  const OperandInfo ia = info(ctx, a), ib = info(ctx, b);
  engine::DataType dtype;
  if (ia.is_tensor == ib.is_tensor) {
    dtype = promote(ia.dtype, ib.dtype);
  } else {
    const OperandInfo& t = ia.is_tensor ? ia : ib;
    const OperandInfo& s = ia.is_tensor ? ib : ia;
    // A scalar only matters when it is of a higher category than the tensor.
    dtype = category(s.dtype) > category(t.dtype)
                ? (category(s.dtype) == 2 ? engine::DataType::kF32 : engine::DataType::kI64)
                : t.dtype;
  }
  auto operand = [&](const torch::jit::Value* v) {
    return v->type()->kind() == c10::TypeKind::TensorType ? ctx.cast(node, ctx.tensor(v), dtype)
                                                          : ctx.tensor(v, dtype);
  };
  return {operand(a), operand(b), dtype};
}

}  // namespace kiln::conversion
