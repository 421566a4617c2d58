// Shape inference of the matmul family (pending).
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

std::vector<InferOutput> infer(const std::string& layer, const MatMulParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: MatMulParams is not implemented yet");
}

}  // namespace kiln::engine
