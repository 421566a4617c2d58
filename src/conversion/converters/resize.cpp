// Converters of the resize family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_resize_converters(Registry&) {}

}  // namespace kiln::conversion
