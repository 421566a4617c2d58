// decompose_ops' math identities (decompose_math.cpp), apart from the pass's own rewrites.
#pragma once

#include "lowering/passes.h"

namespace kiln::lowering {

// The value replacing `node`'s one output, computed by nodes inserted at the current insert
// point from ops the engine has layers for; nullptr when the overload, its constant arguments
// or what the graph knows of its inputs' rank and dtype are not the ones handled.
torch::jit::Value* decompose_math(GraphPtr& graph, torch::jit::Node* node);

}  // namespace kiln::lowering
