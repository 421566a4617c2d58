// Converters of the cast family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_cast_converters(Registry&) {}

}  // namespace kiln::conversion
