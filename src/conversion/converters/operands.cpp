// Operand promotion for binary converters.
#include "conversion/converters/operands.h"

#include <optional>

#include "conversion/converters/shuffle_helpers.h"
#include "conversion/dtypes.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

// torch's three priorities of operands in type promotion.
enum Tier { kNumber = 0, kZeroDim = 1, kDimensioned = 2 };

struct OperandInfo {
  Tier tier = kNumber;
  engine::DataType dtype = engine::DataType::kF32;  // a Python float counts as f32 (default)
};

// An int known only at run time (x.size(0) of a dynamic dim, arithmetic on such sizes).
bool run_time_int_operand(ConversionContext& ctx, const torch::jit::Value* v) {
  return v->type()->kind() == c10::TypeKind::IntType && !ctx.try_ivalue(v);
}

OperandInfo info(ConversionContext& ctx, const torch::jit::Value* v) {
  if (v->type()->kind() == c10::TypeKind::TensorType) {
    const auto& d = ctx.desc(ctx.tensor(v));
    return {d.shape.empty() ? kZeroDim : kDimensioned, d.dtype};
  }
  if (run_time_int_operand(ctx, v)) return {kNumber, engine::DataType::kI64};
  const c10::IValue& iv = ctx.ivalue(v);
  if (iv.isDouble()) return {kNumber, engine::DataType::kF32};
  if (iv.isBool()) return {kNumber, engine::DataType::kBool};
  KILN_CHECK(iv.isInt(), Unsupported, "operand %", v->debugName(), " of type ", iv.tagKind(),
             " is not a number or tensor");
  return {kNumber, engine::DataType::kI64};
}

// torch's combine_categories: the higher priority's dtype, unless the lower one is of a higher
// category (a float against integers, or anything against bool): then both promote.
std::optional<engine::DataType> combine(std::optional<engine::DataType> higher,
                                        std::optional<engine::DataType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (engine::is_floating(*higher)) return higher;
  if (*higher == engine::DataType::kBool || engine::is_floating(*lower)) {
    return promote(*higher, *lower);
  }
  return higher;
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
  // torch's result_type: each priority's operands promote among themselves, then
  // dimensioned, zero-dim and number results combine in that order.
  std::optional<engine::DataType> tiers[3];
  for (const OperandInfo& o : {info(ctx, a), info(ctx, b)}) {
    auto& t = tiers[o.tier];
    t = t ? promote(*t, o.dtype) : o.dtype;
  }
  const engine::DataType dtype =
      *combine(tiers[kDimensioned], combine(tiers[kZeroDim], tiers[kNumber]));
  auto operand = [&](const torch::jit::Value* v) {
    if (v->type()->kind() == c10::TypeKind::TensorType) return ctx.cast(node, ctx.tensor(v), dtype);
    if (run_time_int_operand(ctx, v)) {  // computed from the shapes, as a 0-d tensor
      const engine::TensorId size = run_time_int(ctx, node, v, 0);
      return ctx.cast(node, drop_dim(ctx, node, size, 0, v->debugName() + ".scalar"), dtype);
    }
    return ctx.tensor(v, dtype);
  };
  return {operand(a), operand(b), dtype};
}

}  // namespace kiln::conversion
