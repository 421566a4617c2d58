// CPU kernels of the normalization family (pending: registers nothing yet).
#include "engine/cpu/kernels.h"

namespace kiln::engine::cpu {

void register_normalization(KernelTable&) {}

}  // namespace kiln::engine::cpu
