// Shape inference of the normalization family (pending).
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

std::vector<InferOutput> infer(const std::string& layer, const NormalizationParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: NormalizationParams is not implemented yet");
}

std::vector<InferOutput> infer(const std::string& layer, const SoftmaxParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: SoftmaxParams is not implemented yet");
}

}  // namespace kiln::engine
