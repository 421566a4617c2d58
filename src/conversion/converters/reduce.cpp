// Converters of the reduce family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_reduce_converters(Registry&) {}

}  // namespace kiln::conversion
