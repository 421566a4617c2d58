// The flash attention kernels for __half (attention_flash.cuh).
#include "engine/cuda/attention_flash.cuh"

namespace kiln::engine::cuda::flash {

KILN_FLASH_TYPE(__half, )

}  // namespace kiln::engine::cuda::flash
