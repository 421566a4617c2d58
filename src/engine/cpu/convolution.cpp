// CPU kernels of the convolution family (pending: registers nothing yet).
#include "engine/cpu/kernels.h"

namespace kiln::engine::cpu {

void register_convolution(KernelTable&) {}

}  // namespace kiln::engine::cpu
