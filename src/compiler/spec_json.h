// The compile spec a compiled module carries (its `kiln_spec` attribute), so that refit partitions
// and converts a module with new weights exactly as compile() did.
#pragma once

#include <string>

#include "kiln/kiln.h"

namespace kiln::compiler {

inline constexpr const char* kSpecAttribute = "kiln_spec";

// Every field but `progress` (a callback), as JSON.
std::string spec_to_json(const CompileSpec& spec);
// The inverse; CorruptInput naming `where` and the field for anything that is not what
// spec_to_json writes.
CompileSpec spec_from_json(const std::string& text, const std::string& where);

}  // namespace kiln::compiler
