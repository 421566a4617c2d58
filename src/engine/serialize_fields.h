// Layer parameters to and from bytes and JSON, through each struct's fields(visitor).
#pragma once

#include <string>

#include "engine/bytes.h"
#include "engine/layers.h"

namespace kiln::engine {

void write_params(ByteWriter& w, const LayerParams& params);
// Reads the parameters of the layer kind `kind_index`; throws CorruptInput on bad data.
LayerParams read_params(ByteReader& r, uint64_t kind_index);
std::string params_to_json(const LayerParams& params);

}  // namespace kiln::engine
