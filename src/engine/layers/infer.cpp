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

size_t shape_input_rank(const std::string& layer, const InferInput& st) {
  KILN_CHECK(st.dtype == DataType::kI64 && st.shape.size() == 1 && st.shape[0] != kDynamic,
             InvalidArgument, "layer `", layer,
             "`: the shape input must be i64 of static 1-D shape, got ", dtype_name(st.dtype), " ",
             shape_to_string(st.shape));
  return static_cast<size_t>(st.shape[0]);
}

void check_known_dims(const std::string& layer, const Shape& known, size_t rank) {
  KILN_CHECK(known.empty() || known.size() == rank, InvalidArgument, "layer `", layer,
             "`: its dims ", shape_to_string(known), " have rank ", known.size(),
             ", its shape input gives rank ", rank);
  for (int64_t d : known) {
    KILN_CHECK(d >= 0 || d == kDynamic, InvalidArgument, "layer `", layer, "`: bad dim ", d,
               " with a shape input");
  }
}

void matches_known(const std::string& layer, const Shape& resolved, const Shape& known) {
  for (size_t i = 0; i < known.size() && i < resolved.size(); ++i) {
    KILN_CHECK(known[i] == kDynamic || resolved[i] == kDynamic || known[i] == resolved[i],
               ShapeMismatch, "layer `", layer, "`: its shape input gives ",
               shape_to_string(resolved), ", the layer was built for ", shape_to_string(known));
  }
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
