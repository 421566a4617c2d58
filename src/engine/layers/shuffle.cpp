// Shape inference of the shuffle family (pending).
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

std::vector<InferOutput> infer(const std::string& layer, const ShuffleParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: ShuffleParams is not implemented yet");
}

std::vector<InferOutput> infer(const std::string& layer, const ConcatParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: ConcatParams is not implemented yet");
}

std::vector<InferOutput> infer(const std::string& layer, const SliceParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: SliceParams is not implemented yet");
}

std::vector<InferOutput> infer(const std::string& layer, const PadParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: PadParams is not implemented yet");
}

std::vector<InferOutput> infer(const std::string& layer, const GatherParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: GatherParams is not implemented yet");
}

std::vector<InferOutput> infer(const std::string& layer, const ScatterParams&,
                               const std::vector<InferInput>&) {
  KILN_THROW(Unsupported, "layer `", layer, "`: ScatterParams is not implemented yet");
}

}  // namespace kiln::engine
