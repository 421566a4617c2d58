// The builder's precision pass: floating layers of a cuda network run in f16 (or bf16) where the
// kernels allow it, with casts where precisions meet; outputs keep their dtypes and names.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/network.h"

namespace kiln::engine {

// Why the target cannot run `layer` with these input and output dtypes; empty when it can.
using PrecisionSupportFn = std::function<std::string(
    const Layer& layer, const std::vector<DataType>& inputs, const std::vector<DataType>& outputs)>;

// The CUDA backend's answer, from its kernel table (output dtypes and support checks). Needs no
// device; in a build without CUDA every answer is "no".
PrecisionSupportFn cuda_precision_support();

struct LayerPrecision {
  std::string layer;
  DataType precision = DataType::kF32;
  std::string reason;  // why the layer stayed f32 (empty when it runs low)
};

struct PrecisionReport {
  DataType low = DataType::kF32;       // f32: the pass did nothing
  std::vector<LayerPrecision> layers;  // every layer computing on floating tensors, in order
  int casts_inserted = 0;
  int count(DataType precision) const;
  // "precision: 12 layers f16, 1 f32 (sum: ...), 5 casts inserted"
  std::string summary() const;
};

// The precision the pass lowers to: f16 when enabled, else bf16, else f32 (nothing to do).
DataType low_precision(const std::vector<DataType>& enabled);

// Rewrites `net` so that f32 activations and weights are computed in low_precision(enabled):
// each floating layer runs low when `supports` accepts it with low-precision inputs and outputs
// (and f16's range suits it), else stays f32. Casts are inserted where a tensor is consumed in
// another precision than it was produced in (after f32 inputs and constants, before f32 layers);
// casts of constants are left for constant folding. Integer, bool and shape tensors are never
// touched; outputs that were f32 get a cast back to f32 and keep their names. Returns whether the
// network changed; `report` says what was chosen per layer.
bool choose_precisions(Network& net, const std::vector<DataType>& enabled,
                       const PrecisionSupportFn& supports, PrecisionReport* report = nullptr);

}  // namespace kiln::engine
