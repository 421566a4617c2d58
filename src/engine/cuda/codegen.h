// Generated kernels (issue #28): the builder writes a CUDA kernel for each float pointwise
// computation of a plan (a FusedElementwise chain, or one binary, unary or activation layer),
// compiles it with NVRTC for the plan's compute capability and stores the machine code in the
// plan (EngineTarget::kernels), so that loading a plan compiles nothing. The generated code calls
// scalar_ops.h's functions with constant ops, which NVRTC folds: the same semantics as every other
// kernel, with the program's registers in registers instead of an interpreter's local array.
// Plain C++ (no CUDA headers): the generator and the compiler run wherever the toolkit's NVRTC
// library is, GPU or not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/layers/elementwise_rules.h"
#include "engine/network.h"
#include "engine/runtime.h"

namespace kiln::engine::cuda {

// One float pointwise computation: the program over registers 0..inputs-1 (elementwise_rules.h)
// and the dtypes of its inputs and output (f32, f16 or bf16).
struct PointwiseSpec {
  std::vector<FusedOp> ops;
  std::vector<DataType> inputs;
  DataType output = DataType::kF32;
  std::vector<bool> gathered;  // per input: read at indices along one dim (gathered inputs)
};

// The most inputs and merged dims a generated pointwise kernel takes.
constexpr int kPointwiseMaxInputs = 16;
constexpr int kPointwiseMaxRank = 8;

// The pointwise computation layer `layer` runs, if it is one the generator takes: float
// FusedElementwise, Elementwise, Unary and Activation layers of at most kPointwiseMaxInputs
// inputs (a fused layer's gathered inputs' index lists not counted as inputs of the spec). Dtypes
// are read from `net`.
std::optional<PointwiseSpec> pointwise_spec(const Network& net, const Layer& layer);
// The same from the dtypes of the layer's inputs (index lists included) and output (the kernels'
// view).
std::optional<PointwiseSpec> pointwise_spec(const Layer& layer, const std::vector<DataType>& inputs,
                                            DataType output);

// The key that names `spec`'s kernel in a plan: the dtypes and the program, constants included
// (exactly: as hexadecimal floats). Two layers with one key share one kernel.
std::string pointwise_key(const PointwiseSpec& spec);

// The kernel's CUDA source. Entry points (each __launch_bounds__(256), one PointwiseArgs by
// value): kiln_pw_vec (each thread computes pointwise_vector_width(spec) consecutive elements of
// the innermost dim, 32-bit indices), kiln_pw_nd32 and kiln_pw_nd64 (one element per thread,
// 32- or 64-bit indices).
std::string pointwise_source(const PointwiseSpec& spec);
// Elements per thread of kiln_pw_vec: 16 bytes of the output's dtype.
int pointwise_vector_width(const PointwiseSpec& spec);

// The arguments of every pointwise entry point, by value (the generated source declares the same
// struct and checks its size). Dims are the output's after merging (row-major, innermost last);
// stride[j][k] is input j's stride in elements along dim k (0 where it broadcasts).
struct PointwiseArgs {
  int64_t n = 0;     // output elements
  int32_t rank = 0;  // merged dims
  int32_t nvec = 0;  // kiln_pw_vec: n / vector width
  int64_t size[kPointwiseMaxRank] = {};
  int64_t stride[kPointwiseMaxInputs][kPointwiseMaxRank] = {};
  const void* in[kPointwiseMaxInputs] = {};
  void* out = nullptr;
  int32_t contiguous[kPointwiseMaxInputs] = {};  // kiln_pw_vec: innermost stride 1 (else 0)
  // Gathered inputs: input j is read at gidx[j][i] along merged dim gaxis[j] where the output is
  // at i (kiln_pw_vec: the first of V consecutive elements there), zeros where that is outside
  // its gsize[j] elements along the dim.
  const int32_t* gidx[kPointwiseMaxInputs] = {};
  int64_t gsize[kPointwiseMaxInputs] = {};
  int32_t gaxis[kPointwiseMaxInputs] = {};
};

// NVRTC's machine code (a cubin) for `source` on compute capability `cc` (e.g. 90). Compiled once
// per process for each (source, cc); InternalError with NVRTC's log if it fails. `name` names the
// kernel in messages.
std::vector<uint8_t> compile_kernel(const std::string& name, const std::string& source, int cc);
// How many NVRTC compilations this process has run (tests: loading a plan runs none).
int kernels_compiled();

// generate_kernels (cuda/backend.h) compiles the kernels of a network's layers in parallel, one
// per distinct key.

}  // namespace kiln::engine::cuda
