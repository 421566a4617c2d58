// CPU kernels of the fill family (pending: registers nothing yet).
#include "engine/cpu/kernels.h"

namespace kiln::engine::cpu {

void register_fill(KernelTable&) {}

}  // namespace kiln::engine::cpu
