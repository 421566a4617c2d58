// Converters of the shuffle family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_shuffle_converters(Registry&) {}

}  // namespace kiln::conversion
