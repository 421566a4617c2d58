// CPU kernels of the reduce family (pending: registers nothing yet).
#include "engine/cpu/kernels.h"

namespace kiln::engine::cpu {

void register_reduce(KernelTable&) {}

}  // namespace kiln::engine::cpu
