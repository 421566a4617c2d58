// Converters of the fill family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_fill_converters(Registry&) {}

}  // namespace kiln::conversion
