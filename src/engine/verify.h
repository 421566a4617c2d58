// The network verifier: the invariants every pass must keep and every plan must have. The plan
// loader runs it on what it read; the builder runs it after each pass (verify_passes), so that a
// bad rewrite is reported by the pass that made it.
#pragma once

#include <string>

#include "engine/network.h"

namespace kiln::engine {

// Checks, in layer order: every tensor a layer reads is an input or written by an earlier layer;
// no tensor is written twice and no input is written; constants have no inputs, one output, and
// name a weight of the output's dtype and shape; every other layer is valid for its inputs and
// its stored outputs are what its kind computes from them; every output is written. Throws an
// error whose message starts with `where`: InternalError (a pass broke the network: a bug), or
// CorruptInput for kCorrupt (a plan read from bytes).
enum class VerifyFailure { kInternal, kCorrupt };
void verify_network(const Network& net, const std::string& where,
                    VerifyFailure failure = VerifyFailure::kInternal);

// One line per layer, for dumps after each pass: `name = kind(inputs) -> outputs {params}`,
// tensors as `%name:dtype[shape]`.
std::string network_to_text(const Network& net);

}  // namespace kiln::engine
