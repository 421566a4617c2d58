// Converters of the normalization family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_normalization_converters(Registry&) {}

}  // namespace kiln::conversion
