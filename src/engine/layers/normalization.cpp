// Shape inference of the normalization family: batch/layer/group/instance/RMS norm and softmax.
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

const char* norm_name(NormalizationKind k) {
  switch (k) {
    case NormalizationKind::kBatch:
      return "batch_norm";
    case NormalizationKind::kLayer:
      return "layer_norm";
    case NormalizationKind::kGroup:
      return "group_norm";
    case NormalizationKind::kInstance:
      return "instance_norm";
    case NormalizationKind::kRms:
      return "rms_norm";
  }
  return "?";
}

bool dims_compatible(int64_t a, int64_t b) {
  return a == b || a == kDynamic || b == kDynamic;
}

// Checks that a parameter input (scale, bias, mean, var) is floating and shaped `want`.
void expect_param(const std::string& what, const char* role, const InferInput& in,
                  const Shape& want) {
  KILN_CHECK(is_floating(in.dtype), InvalidArgument, what, ": ", role, " must be floating, got ",
             dtype_name(in.dtype));
  bool ok = in.shape.size() == want.size();
  for (size_t d = 0; ok && d < want.size(); ++d) ok = dims_compatible(in.shape[d], want[d]);
  KILN_CHECK(ok, ShapeMismatch, what, ": ", role, " has shape ", shape_to_string(in.shape),
             ", expected ", shape_to_string(want));
}

}  // namespace

std::vector<InferOutput> infer(const std::string& layer, const NormalizationParams& p,
                               const std::vector<InferInput>& in) {
  KILN_CHECK(static_cast<uint8_t>(p.kind) <= static_cast<uint8_t>(NormalizationKind::kRms),
             InvalidArgument, "layer `", layer, "`: unknown normalization kind ",
             static_cast<int>(p.kind));
  const std::string what = "layer `" + layer + "` (" + norm_name(p.kind) + ")";
  KILN_CHECK(!in.empty(), InvalidArgument, what, ": missing input x");
  const Shape& x = in[0].shape;
  KILN_CHECK(is_floating(in[0].dtype), InvalidArgument, what, ": needs a floating input, got ",
             dtype_name(in[0].dtype));
  KILN_CHECK(p.epsilon >= 0, InvalidArgument, what, ": epsilon ", p.epsilon, " is negative");
  const size_t affine = p.has_affine ? 2 : 0;
  if (p.kind == NormalizationKind::kLayer || p.kind == NormalizationKind::kRms) {
    const size_t params = p.kind == NormalizationKind::kRms ? affine / 2 : affine;
    expect_input_count(layer, in, 1 + params, 1 + params);
    KILN_CHECK(p.normalized_dims >= 1 && p.normalized_dims <= static_cast<int64_t>(x.size()),
               InvalidArgument, what, ": normalized_dims ", p.normalized_dims,
               " out of range for input ", shape_to_string(x));
    const Shape tail(x.end() - p.normalized_dims, x.end());
    if (p.has_affine) expect_param(what, "scale", in[1], tail);
    if (params == 2) expect_param(what, "bias", in[2], tail);
    return {{in[0].dtype, x}};
  }
  KILN_CHECK(x.size() >= 2, InvalidArgument, what, ": needs an input [N, C, ...], got ",
             shape_to_string(x));
  const Shape channels{x[1]};
  if (p.kind == NormalizationKind::kBatch) {
    // Inference form: scale, bias (when affine), then running mean and var.
    expect_input_count(layer, in, 3 + affine, 3 + affine);
    const char* roles[] = {"scale", "bias", "mean", "var"};
    for (size_t i = 1; i < in.size(); ++i) {
      expect_param(what, roles[i - 1 + (2 - affine)], in[i], channels);
    }
    return {{in[0].dtype, x}};
  }
  expect_input_count(layer, in, 1 + affine, 1 + affine);
  if (p.kind == NormalizationKind::kGroup) {
    KILN_CHECK(p.num_groups >= 1, InvalidArgument, what, ": num_groups ", p.num_groups,
               " must be positive");
    KILN_CHECK(x[1] == kDynamic || x[1] % p.num_groups == 0, InvalidArgument, what, ": num_groups ",
               p.num_groups, " does not divide the ", x[1], " channels");
  }
  if (p.has_affine) {
    expect_param(what, "scale", in[1], channels);
    expect_param(what, "bias", in[2], channels);
  }
  return {{in[0].dtype, x}};
}

std::vector<InferOutput> infer(const std::string& layer, const SoftmaxParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 2);
  const std::string what = "layer `" + layer + "` (" + (p.log ? "log_softmax" : "softmax") + ")";
  const Shape& x = in[0].shape;
  const int axis = normalize_axis(p.axis, x.size(), what);
  KILN_CHECK(is_floating(in[0].dtype), InvalidArgument, what, ": needs a floating input, got ",
             dtype_name(in[0].dtype));
  if (in.size() == 2 || p.causal) {
    KILN_CHECK(!p.log && axis == static_cast<int>(x.size()) - 1, InvalidArgument, what,
               ": a masked or causal softmax is over the last axis and not log, got axis ", p.axis,
               p.log ? " (log)" : "");
    KILN_CHECK(!p.causal || x.size() >= 2, InvalidArgument, what,
               ": causal needs an input of rank 2 or more, got ", shape_to_string(x));
  }
  if (in.size() == 2) check_mask(what, in[1], x, "the input");
  return {{in[0].dtype, x}};
}

}  // namespace kiln::engine
