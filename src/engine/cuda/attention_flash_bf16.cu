// The flash attention kernels for __nv_bfloat16 (attention_flash.cuh).
#include "engine/cuda/attention_flash.cuh"

namespace kiln::engine::cuda::flash {

KILN_FLASH_TYPE(__nv_bfloat16, )

}  // namespace kiln::engine::cuda::flash
