// Shape inference of the fill family: shape (a tensor's dims as i64) and fill (constant/range).
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

// Integer fills must hold every value they store, as torch's full and arange insist: converting
// an out-of-range (or nan) double to an integer is undefined behaviour in the kernels.
void check_fits(const std::string& layer, const char* what, double v, DataType dt) {
  if (!is_integer(dt)) return;  // floats hold inf and nan; bool holds anything
  double lo = -9223372036854775808.0, hi = 9223372036854775808.0;  // [lo, hi) of i64
  if (dt == DataType::kI32) {
    lo = -2147483648.0;
    hi = 2147483648.0;
  } else if (dt == DataType::kI8) {
    lo = -128;
    hi = 128;
  } else if (dt == DataType::kU8) {
    lo = 0;
    hi = 256;
  }
  // Truncation toward zero is what the kernels store, so (lo - 1, hi) is in range (for i64,
  // lo - 1 rounds to lo as a double).
  KILN_CHECK((v >= lo || v > lo - 1) && v < hi, InvalidArgument, "layer `", layer, "`: fill ", what,
             " ", v, " does not fit ", dtype_name(dt));
}

}  // namespace

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
    const size_t rank = shape_input_rank(layer, st);
    check_known_dims(layer, p.shape, rank);
    shape = st.values ? *st.values : p.shape.empty() ? Shape(rank, kDynamic) : p.shape;
    for (int64_t d : shape) {
      KILN_CHECK(d >= 0 || (!st.values && d == kDynamic), InvalidArgument, "layer `", layer,
                 "`: shape input holds negative dim ", d);
    }
    if (st.values) matches_known(layer, shape, p.shape);
  } else {
    KILN_CHECK(is_static(shape), InvalidArgument, "layer `", layer, "`: fill shape ",
               shape_to_string(shape), " must be static without a shape input");
    for (int64_t d : shape) {
      KILN_CHECK(d >= 0, InvalidArgument, "layer `", layer, "`: bad fill dim ", d);
    }
  }
  if (p.mode == FillMode::kConstant) {
    check_fits(layer, "value", p.value, p.dtype);
  } else if (is_static(shape) && volume(shape) > 0) {
    // A range is linear, so its ends bound it; known once the shape is (at the latest when an
    // execution context binds its inputs).
    check_fits(layer, "start", p.start, p.dtype);
    if (is_integer(p.dtype)) check_fits(layer, "delta", p.delta, DataType::kI64);
    const double last = p.start + static_cast<double>(volume(shape) - 1) * p.delta;
    check_fits(layer, "end", last, p.dtype);
  }
  return {{p.dtype, shape}};
}

}  // namespace kiln::engine
