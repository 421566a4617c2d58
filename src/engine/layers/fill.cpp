// Shape inference of the fill family: shape (a tensor's dims as i64) and fill (constant/range).
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

// The rank is static even for dynamic inputs, so the output is always i64 [rank].
std::vector<InferOutput> infer(const std::string& layer, const ShapeParams&,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  return {{DataType::kI64, {static_cast<int64_t>(in[0].shape.size())}}};
}

std::vector<InferOutput> infer(const std::string& layer, const FillParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 0, 1);
  KILN_CHECK(p.mode != FillMode::kRange || p.dtype != DataType::kBool, InvalidArgument, "layer `",
             layer, "`: a range cannot be bool");
  Shape shape = p.shape;
  if (!in.empty()) {
    const InferInput& st = in[0];
    KILN_CHECK(st.dtype == DataType::kI64 && st.shape.size() == 1 && st.shape[0] != kDynamic,
               InvalidArgument, "layer `", layer,
               "`: the shape input must be i64 of static 1-D shape, got ", dtype_name(st.dtype),
               " ", shape_to_string(st.shape));
    shape = st.values ? *st.values : Shape(static_cast<size_t>(st.shape[0]), kDynamic);
    for (int64_t d : shape) {
      KILN_CHECK(d >= 0 || (!st.values && d == kDynamic), InvalidArgument, "layer `", layer,
                 "`: shape input holds negative dim ", d);
    }
  } else {
    KILN_CHECK(is_static(shape), InvalidArgument, "layer `", layer, "`: fill shape ",
               shape_to_string(shape), " must be static without a shape input");
    for (int64_t d : shape) {
      KILN_CHECK(d >= 0, InvalidArgument, "layer `", layer, "`: bad fill dim ", d);
    }
  }
  return {{p.dtype, shape}};
}

}  // namespace kiln::engine
