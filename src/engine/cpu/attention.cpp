// CPU kernels of the attention family (pending: registers nothing yet).
#include "engine/cpu/kernels.h"

namespace kiln::engine::cpu {

void register_attention(KernelTable&) {}

}  // namespace kiln::engine::cpu
