// Shape inference of the reduce family (pending).
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

std::vector<InferOutput> infer(const std::string& layer, const ReduceParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: ReduceParams is not implemented yet");
}

std::vector<InferOutput> infer(const std::string& layer, const ArgMaxParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: ArgMaxParams is not implemented yet");
}

std::vector<InferOutput> infer(const std::string& layer, const TopKParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: TopKParams is not implemented yet");
}

std::vector<InferOutput> infer(const std::string& layer, const CumSumParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: CumSumParams is not implemented yet");
}

}  // namespace kiln::engine
