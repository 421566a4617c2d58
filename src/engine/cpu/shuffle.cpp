// CPU kernels of the shuffle family (pending: registers nothing yet).
#include "engine/cpu/kernels.h"

namespace kiln::engine::cpu {

void register_shuffle(KernelTable&) {}

}  // namespace kiln::engine::cpu
