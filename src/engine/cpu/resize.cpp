// CPU kernels of the resize family (pending: registers nothing yet).
#include "engine/cpu/kernels.h"

namespace kiln::engine::cpu {

void register_resize(KernelTable&) {}

}  // namespace kiln::engine::cpu
