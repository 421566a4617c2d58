// The part of libtorch's CUDA API the runtime uses. It exists only when libtorch was built with
// CUDA (KILN_TORCH_CUDA, set by src/runtime/CMakeLists.txt) and kiln has its CUDA backend
// (KILN_WITH_CUDA); a CPU-only libtorch builds a runtime that runs cpu engines only.
// Only c10's CUDA headers are used (ATen's pull in cuBLAS/cuSPARSE/cuSOLVER headers too).
#pragma once

#if defined(KILN_WITH_CUDA) && defined(KILN_TORCH_CUDA)
#define KILN_RUNTIME_CUDA 1
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#else
#define KILN_RUNTIME_CUDA 0
#endif

namespace kiln::runtime::torch_cuda {

// Whether libtorch has CUDA (what this runtime was built against).
constexpr bool kTorchHasCuda =
#if defined(KILN_TORCH_CUDA)
    true;
#else
    false;
#endif

}  // namespace kiln::runtime::torch_cuda
