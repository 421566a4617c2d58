// Converters of the select family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_select_converters(Registry&) {}

}  // namespace kiln::conversion
