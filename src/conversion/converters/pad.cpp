// Converters of the pad family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_pad_converters(Registry&) {}

}  // namespace kiln::conversion
