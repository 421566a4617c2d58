// Mapping between torch scalar types and engine dtypes, and torch tensors to engine weights.
#pragma once

#include <torch/script.h>

#include <optional>

#include "engine/network.h"

namespace kiln::conversion {

// Unsupported for dtypes the engine has no counterpart for (f64 maps to f32, see below).
engine::DataType to_engine_dtype(at::ScalarType t, const std::string& what);
at::ScalarType to_scalar_type(engine::DataType t);
// The engine computes in at most 32-bit floats: f64 tensors are narrowed to f32.
at::Tensor to_engine_compatible(const at::Tensor& t);
engine::Weights to_weights(const at::Tensor& t);

// torch's type promotion for two tensor operands (result_type of dimensioned tensors).
engine::DataType promote(engine::DataType a, engine::DataType b);

}  // namespace kiln::conversion
