// Checks of CUDA runtime calls: a failure is a DeviceError naming the call and CUDA's message.
#pragma once

#include <cuda_runtime_api.h>

#include "util/errors.h"

#define KILN_CUDA_CHECK(call)                                                                \
  do {                                                                                       \
    const cudaError_t kiln_cuda_status_ = (call);                                            \
    if (kiln_cuda_status_ != cudaSuccess) {                                                  \
      KILN_THROW(DeviceError, #call, " failed: ", cudaGetErrorName(kiln_cuda_status_), " (", \
                 cudaGetErrorString(kiln_cuda_status_), ")");                                \
    }                                                                                        \
  } while (0)

// After a kernel launch: a bad configuration is reported at once, naming the layer.
#define KILN_CUDA_CHECK_LAUNCH(layer_name)                                               \
  do {                                                                                   \
    const cudaError_t kiln_cuda_status_ = cudaGetLastError();                            \
    if (kiln_cuda_status_ != cudaSuccess) {                                              \
      KILN_THROW(DeviceError, "layer `", (layer_name),                                   \
                 "`: kernel launch failed: ", cudaGetErrorName(kiln_cuda_status_), " (", \
                 cudaGetErrorString(kiln_cuda_status_), ")");                            \
    }                                                                                    \
  } while (0)
