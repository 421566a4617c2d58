// CPU kernels of the pooling family (pending: registers nothing yet).
#include "engine/cpu/kernels.h"

namespace kiln::engine::cpu {

void register_pooling(KernelTable&) {}

}  // namespace kiln::engine::cpu
