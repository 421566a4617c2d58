// Shape inference of the attention family (pending).
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

std::vector<InferOutput> infer(const std::string& layer, const AttentionParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: AttentionParams is not implemented yet");
}

}  // namespace kiln::engine
