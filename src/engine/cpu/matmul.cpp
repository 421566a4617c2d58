// CPU kernels of the matmul family (pending: registers nothing yet).
#include "engine/cpu/kernels.h"

namespace kiln::engine::cpu {

void register_matmul(KernelTable&) {}

}  // namespace kiln::engine::cpu
