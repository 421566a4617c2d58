// Converters of the convolution family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_convolution_converters(Registry&) {}

}  // namespace kiln::conversion
