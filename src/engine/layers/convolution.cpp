// Shape inference of the convolution family (pending).
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

std::vector<InferOutput> infer(const std::string& layer, const ConvolutionParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: ConvolutionParams is not implemented yet");
}

}  // namespace kiln::engine
