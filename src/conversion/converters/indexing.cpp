// Converters of the indexing family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_indexing_converters(Registry&) {}

}  // namespace kiln::conversion
