// Dispatch of shape inference to the per-family overloads.
#include "engine/layers/infer.h"

#include "util/errors.h"

namespace kiln::engine {

void expect_input_count(const std::string& layer, const std::vector<InferInput>& inputs, size_t min,
                        size_t max) {
  KILN_CHECK(inputs.size() >= min && inputs.size() <= max, InvalidArgument, "layer `", layer,
             "`: takes ",
             min == max ? std::to_string(min) : std::to_string(min) + " to " + std::to_string(max),
             " inputs, got ", inputs.size());
}

int64_t size_product(const std::string& layer, const char* what, int64_t a, int64_t b) {
  int64_t n = 0;
  KILN_CHECK(!__builtin_mul_overflow(a, b, &n) && n >= -(int64_t{1} << 48) && n <= int64_t{1} << 48,
             InvalidArgument, "layer `", layer, "`: ", what, " ", a, " * ", b, " is past 2^48");
  return n;
}

std::vector<InferOutput> infer_layer(const std::string& layer, const LayerParams& params,
                                     const std::vector<InferInput>& inputs) {
  return std::visit(
      [&](const auto& p) -> std::vector<InferOutput> {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, ConstantParams>) {
          KILN_THROW(InternalError, "layer `", layer,
                     "`: constants take their shape from their weights, not from inference");
        } else {
          return infer(layer, p, inputs);
        }
      },
      params);
}

}  // namespace kiln::engine
