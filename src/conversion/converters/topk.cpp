// Converters of the topk family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_topk_converters(Registry&) {}

}  // namespace kiln::conversion
