// Resize, nearest/linear/cubic interpolation of the dims after the first two: shape inference and
// the taps both backends read.
#include <algorithm>
#include <cmath>

#include "engine/layers/infer.h"
#include "engine/layers/setup.h"
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

namespace {

// torch's area_pixel_compute_scale; scale factors, when given, define the mapping (as 1/scale).
float coordinate_scale(const ResizeParams& p, size_t d, int64_t in, int64_t out) {
  if (p.align_corners && p.mode != ResizeMode::kNearest) {
    return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
  }
  if (!p.scales.empty() && p.scales[d] > 0) return static_cast<float>(1.0 / p.scales[d]);
  return static_cast<float>(in) / static_cast<float>(out);
}

float cubic1(float x, float a) {  // |x| <= 1
  return ((a + 2) * x - (a + 3)) * x * x + 1;
}
float cubic2(float x, float a) {  // 1 < |x| < 2
  return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

}  // namespace

ResizeTaps resize_taps(const ResizeParams& p, size_t d, int64_t in, int64_t out) {
  ResizeTaps t;
  const float scale = coordinate_scale(p, d, in, out);
  auto source = [&](int64_t o, bool cubic) {
    if (p.align_corners) return scale * static_cast<float>(o);
    const float s = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
    return !cubic && s < 0 ? 0.f : s;
  };
  for (int64_t o = 0; o < out; ++o) {
    if (p.mode == ResizeMode::kNearest) {
      int64_t i = o;
      if (out == 2 * in) {
        i = o >> 1;
      } else if (out != in) {
        i = std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * scale)), in - 1);
      }
      t.index.push_back(i);
      t.weight.push_back(1.f);
    } else if (p.mode == ResizeMode::kLinear) {
      t.taps = 2;
      const float s = source(o, false);
      const int64_t i0 = std::min(static_cast<int64_t>(std::floor(s)), in - 1);
      const float l1 = std::min(std::max(s - static_cast<float>(i0), 0.f), 1.f);
      t.index.insert(t.index.end(), {i0, i0 + (i0 < in - 1 ? 1 : 0)});
      t.weight.insert(t.weight.end(), {1.f - l1, l1});
    } else {
      t.taps = 4;
      const float s = source(o, true);
      const float f = std::floor(s), x = s - f;
      constexpr float a = -0.75f;
      const float w[4] = {cubic2(x + 1, a), cubic1(x, a), cubic1(1 - x, a), cubic2(2 - x, a)};
      for (int k = 0; k < 4; ++k) {
        t.index.push_back(std::clamp<int64_t>(static_cast<int64_t>(f) - 1 + k, 0, in - 1));
        t.weight.push_back(w[k]);
      }
    }
  }
  return t;
}

}  // namespace kiln::engine
