// The reduce family (reduce, argmax/argmin, topk, scan): shape inference and the axis split
// both backends' kernels use.
#include <algorithm>

#include "engine/layers/infer.h"
#include "engine/layers/setup.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kAny:
      return "any";
    case ReduceOp::kAll:
      return "all";
  }
  return "?";
}

const char* scan_op_name(ScanOp op) {
  switch (op) {
    case ScanOp::kSum:
      return "sum";
    case ScanOp::kProd:
      return "prod";
    case ScanOp::kMax:
      return "max";
    case ScanOp::kMin:
      return "min";
    case ScanOp::kLogSumExp:
      return "logsumexp";
  }
  return "?";
}

}  // namespace

std::vector<InferOutput> infer(const std::string& layer, const ReduceParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  const Shape& x = in[0].shape;
  const DataType t = in[0].dtype;
  const std::string what = "layer `" + layer + "` (reduce " + reduce_op_name(p.op) + ")";
  std::vector<bool> reduced(x.size(), p.axes.empty());
  for (int64_t a : p.axes) {
    const int d = normalize_axis(a, x.size(), what);
    KILN_CHECK(!reduced[static_cast<size_t>(d)], InvalidArgument, what, ": axis ", a,
               " listed twice in axes");
    reduced[static_cast<size_t>(d)] = true;
  }
  DataType out_dtype = t;
  switch (p.op) {
    case ReduceOp::kSum:
    case ReduceOp::kProd:
      // As torch: integer and bool sums/products accumulate and return in int64.
      if (!is_floating(t)) out_dtype = DataType::kI64;
      break;
    case ReduceOp::kMean:
      KILN_CHECK(is_floating(t), InvalidArgument, what, ": needs a floating input, got ",
                 dtype_name(t), " (cast first)");
      break;
    case ReduceOp::kMax:
    case ReduceOp::kMin:
      for (size_t d = 0; d < x.size(); ++d) {
        // torch errors here: an empty max/min has no identity.
        KILN_CHECK(!reduced[d] || x[d] != 0, InvalidArgument, what,
                   ": reducing over zero-size dim ", d, " of ", shape_to_string(x),
                   " has no identity");
      }
      break;
    case ReduceOp::kAny:
    case ReduceOp::kAll:
      out_dtype = DataType::kBool;
      break;
  }
  Shape out;
  for (size_t d = 0; d < x.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(x[d]);
    } else if (p.keep_dims) {
      out.push_back(1);
    }
  }
  return {{out_dtype, out}};
}

std::vector<InferOutput> infer(const std::string& layer, const ArgMaxParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  const Shape& x = in[0].shape;
  const std::string what = "layer `" + layer + "` (" + (p.min ? "argmin" : "argmax") + ")";
  const int axis = normalize_axis(p.axis, x.size(), what);
  KILN_CHECK(x[static_cast<size_t>(axis)] != 0, InvalidArgument, what,
             ": reducing over zero-size dim ", axis, " of ", shape_to_string(x));
  Shape out = x;
  if (p.keep_dims) {
    out[static_cast<size_t>(axis)] = 1;
  } else {
    out.erase(out.begin() + axis);
  }
  return {{DataType::kI64, out}};
}

std::vector<InferOutput> infer(const std::string& layer, const NonZeroParams&,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  return {{DataType::kI64, Shape{kDynamic, static_cast<int64_t>(in[0].shape.size())}},
          {DataType::kI64, Shape{}}};
}

std::vector<InferOutput> infer(const std::string& layer, const TopKParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  const Shape& x = in[0].shape;
  const std::string what = "layer `" + layer + "` (topk)";
  const int axis = normalize_axis(p.axis, x.size(), what);
  const int64_t n = x[static_cast<size_t>(axis)];
  KILN_CHECK(p.k >= 0 && (n == kDynamic || p.k <= n), InvalidArgument, what, ": k = ", p.k,
             " out of range for dim ", axis, " of size ", n, " in ", shape_to_string(x));
  KILN_CHECK(in[0].dtype != DataType::kBool, InvalidArgument, what, ": not defined for bool");
  Shape out = x;
  out[static_cast<size_t>(axis)] = p.k;
  return {{in[0].dtype, out}, {DataType::kI64, out}};
}

std::vector<InferOutput> infer(const std::string& layer, const ScanParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  const DataType t = in[0].dtype;
  const std::string what = "layer `" + layer + "` (scan " + scan_op_name(p.op) + ")";
  KILN_CHECK(static_cast<uint8_t>(p.op) <= static_cast<uint8_t>(ScanOp::kLogSumExp),
             InvalidArgument, what, ": unknown scan op ", int(p.op));
  normalize_axis(p.axis, in[0].shape.size(), what);
  switch (p.op) {
    case ScanOp::kSum:
    case ScanOp::kProd:
      // As torch: integer and bool prefix sums and products are int64.
      return {{is_floating(t) ? t : DataType::kI64, in[0].shape}};
    case ScanOp::kMax:
    case ScanOp::kMin:
      KILN_CHECK(!p.exclusive, InvalidArgument, what,
                 ": an exclusive max/min has no value at the first position");
      return {{t, in[0].shape}, {DataType::kI64, in[0].shape}};
    case ScanOp::kLogSumExp:
      KILN_CHECK(is_floating(t), InvalidArgument, what, ": needs a floating input, got ",
                 dtype_name(t), " (as torch.logcumsumexp)");
      break;
  }
  return {{t, in[0].shape}};
}

AxisSplit split_at(const Shape& s, int axis) {
  AxisSplit r;
  for (int d = 0; d < axis; ++d) r.outer *= s[static_cast<size_t>(d)];
  r.n = s[static_cast<size_t>(axis)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < s.size(); ++d) r.inner *= s[d];
  return r;
}

AxisSplit topk_split(const std::string& layer, const TopKParams& p, const Shape& in) {
  const AxisSplit s = split_at(in, normalize_axis(p.axis, in.size(), "topk"));
  KILN_CHECK(p.k >= 0 && p.k <= s.n, InvalidArgument, "layer `", layer, "`: k = ", p.k,
             " exceeds the dim size ", s.n);
  return s;
}

}  // namespace kiln::engine
