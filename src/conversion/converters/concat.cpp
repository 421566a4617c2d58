// Converters of the concat family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_concat_converters(Registry&) {}

}  // namespace kiln::conversion
