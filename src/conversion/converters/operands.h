// Operand helpers shared by converters: torch's type promotion for tensor/scalar operands.
#pragma once

#include "conversion/context.h"

namespace kiln::conversion {

// Both operands of a binary op as engine tensors of one dtype, promoted as torch promotes
// (scalars and 0-d tensors do not widen a dimensioned tensor within its category).
struct BinaryOperands {
  engine::TensorId a, b;
  engine::DataType dtype;
};
BinaryOperands binary_operands(ConversionContext& ctx, const torch::jit::Node* node,
                               const torch::jit::Value* a, const torch::jit::Value* b);

// A static number as a double (int, float or bool value).
double static_number(ConversionContext& ctx, const torch::jit::Value* v);
bool is_none(const torch::jit::Value* v);

}  // namespace kiln::conversion
