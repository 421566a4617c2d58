// Converters of the softmax family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_softmax_converters(Registry&) {}

}  // namespace kiln::conversion
