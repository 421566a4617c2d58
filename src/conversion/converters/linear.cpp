// Converters of the linear family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_linear_converters(Registry&) {}

}  // namespace kiln::conversion
