// Converters of the pooling family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_pooling_converters(Registry&) {}

}  // namespace kiln::conversion
