// Shape inference of the pooling family (pending).
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

std::vector<InferOutput> infer(const std::string& layer, const PoolingParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: PoolingParams is not implemented yet");
}

}  // namespace kiln::engine
