// Shape inference of the fill family (pending).
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

std::vector<InferOutput> infer(const std::string& layer, const ShapeParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: ShapeParams is not implemented yet");
}

std::vector<InferOutput> infer(const std::string& layer, const FillParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: FillParams is not implemented yet");
}

}  // namespace kiln::engine
