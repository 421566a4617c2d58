// Shape inference of resize: nearest/linear/cubic interpolation of the dims after the first two.
#include <cmath>

#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

std::vector<InferOutput> infer(const std::string& layer, const ResizeParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  const Shape& s = in[0].shape;
  KILN_CHECK(s.size() >= 3, InvalidArgument, "layer `", layer,
             "`: resize needs [N, C, spatial...], got ", shape_to_string(s));
  const size_t spatial = s.size() - 2;
  KILN_CHECK(p.mode == ResizeMode::kNearest || is_floating(in[0].dtype), InvalidArgument, "layer `",
             layer, "`: linear and cubic resize need a floating input, got ",
             dtype_name(in[0].dtype));
  KILN_CHECK(
      p.output_size.size() == spatial || (p.output_size.empty() && p.scales.size() == spatial),
      InvalidArgument, "layer `", layer, "`: needs ", spatial, " output sizes or scales for input ",
      shape_to_string(s));
  KILN_CHECK(p.scales.empty() || p.scales.size() == spatial, InvalidArgument, "layer `", layer,
             "`: has ", p.scales.size(), " scales for ", spatial, " spatial dims");
  Shape out = s;
  for (size_t d = 0; d < spatial; ++d) {
    if (!p.scales.empty()) {
      KILN_CHECK(p.scales[d] > 0 && std::isfinite(p.scales[d]), InvalidArgument, "layer `", layer,
                 "`: scale ", p.scales[d], " must be positive");
    }
    int64_t& o = out[d + 2];
    const int64_t i = s[d + 2];
    if (!p.output_size.empty()) {
      KILN_CHECK(p.output_size[d] >= 0, InvalidArgument, "layer `", layer, "`: output size ",
                 p.output_size[d], " is negative");
      o = p.output_size[d];
    } else {
      const double scaled = std::floor(static_cast<double>(i) * p.scales[d]);
      // Checked as a double: converting one past int64's range would be undefined behaviour.
      KILN_CHECK(i == kDynamic || scaled <= static_cast<double>(int64_t{1} << 48), InvalidArgument,
                 "layer `", layer, "`: scale ", p.scales[d], " makes dim ", d + 2, " of ",
                 shape_to_string(s), " larger than 2^48");
      o = i == kDynamic ? kDynamic : static_cast<int64_t>(scaled);
    }
    KILN_CHECK(i != 0 || o == 0, InvalidArgument, "layer `", layer,
               "`: cannot resize empty spatial dim ", d + 2, " of ", shape_to_string(s), " to ", o);
  }
  return {{in[0].dtype, out}};
}

}  // namespace kiln::engine
