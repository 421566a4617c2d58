// The flash attention kernels for float (attention_flash.cuh).
#include "engine/cuda/attention_flash.cuh"

namespace kiln::engine::cuda::flash {

KILN_FLASH_TYPE(float, )

}  // namespace kiln::engine::cuda::flash
