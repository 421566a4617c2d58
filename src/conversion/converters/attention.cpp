// Converters of the attention family (being written).
#include "conversion/registry.h"

namespace kiln::conversion {

void register_attention_converters(Registry&) {}

}  // namespace kiln::conversion
