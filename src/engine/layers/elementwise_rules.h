// Dtype rules of the elementwise family, shared by inference, the builder's fusion and kernels.
#pragma once

#include <string>
#include <vector>

#include "engine/layers.h"

namespace kiln::engine {

bool is_comparison(BinaryOp op);
bool is_logical(BinaryOp op);
DataType binary_result_dtype(const std::string& layer, BinaryOp op, DataType a, DataType b);
DataType unary_result_dtype(const std::string& layer, UnaryOp op, DataType a);

// One decoded step of a FusedElementwiseParams program.
struct FusedOp {
  int64_t kind, op, a, b;  // kind: 0 binary, 1 unary, 2 activation, 3 cast
  double alpha, beta;
};
// Validates and decodes the program; registers 0..num_inputs-1 are the inputs.
std::vector<FusedOp> decode_program(const std::string& layer, const FusedElementwiseParams& p,
                                    size_t num_inputs);

// One gathered input of a fused layer (FusedElementwiseParams::gathers): register `reg` read
// along its `axis` (normalized) at the indices of layer input `index_input`, in aligned runs of
// `run`.
struct FusedGather {
  int64_t reg, axis, run;
  size_t index_input;
};
// How many of a fused layer's `num_inputs` inputs are registers (the rest are index lists).
size_t fused_registers(const std::string& layer, const FusedElementwiseParams& p,
                       size_t num_inputs);
// Validates and decodes the gathers against the inputs' ranks (`ranks`, every layer input's).
std::vector<FusedGather> decode_gathers(const std::string& layer, const FusedElementwiseParams& p,
                                        const std::vector<size_t>& ranks);

}  // namespace kiln::engine
