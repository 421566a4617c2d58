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
    KILN_CHECK(st.dtype == DataType::kI64 && st.shape.size() == 1 && st.shape[0] != kDynamic,
               InvalidArgument, "layer `", layer,
               "`: the shape input must be i64 of static 1-D shape, got ", dtype_name(st.dtype),
               " ", shape_to_string(st.shape));
    const size_t rank = static_cast<size_t>(st.shape[0]);
    // With a shape input, `shape` is empty or what is known of it while building: a dim each,
    // kDynamic where only the shape input knows it.
    KILN_CHECK(p.shape.empty() || p.shape.size() == rank, InvalidArgument, "layer `", layer,
               "`: fill shape ", shape_to_string(p.shape), " has ", p.shape.size(),
               " dims, its shape input ", rank);
    for (int64_t d : p.shape) {
      KILN_CHECK(d >= 0 || d == kDynamic, InvalidArgument, "layer `", layer, "`: bad fill dim ", d);
    }
    shape = st.values ? *st.values : p.shape.empty() ? Shape(rank, kDynamic) : p.shape;
    for (size_t i = 0; i < shape.size(); ++i) {
      KILN_CHECK(shape[i] >= 0 || (!st.values && shape[i] == kDynamic), InvalidArgument, "layer `",
                 layer, "`: shape input holds negative dim ", shape[i]);
      KILN_CHECK(!st.values || p.shape.empty() || p.shape[i] == kDynamic || p.shape[i] == shape[i],
                 ShapeMismatch, "layer `", layer, "`: its shape input gives ",
                 shape_to_string(shape), ", the layer was built for ", shape_to_string(p.shape));
    }
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
