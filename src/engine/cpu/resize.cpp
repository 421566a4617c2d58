// CPU kernels of resize, following torch.nn.functional.interpolate's index and weight rules.
// Every mode is separable: each output coordinate reads a few taps per spatial dim, so one
// kernel handles 1-D, 2-D and 3-D; nearest copies raw elements so every dtype works.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/convert.h"
#include "util/errors.h"

namespace kiln::engine::cpu {
namespace {

constexpr int64_t kParallelElements = 16 * 1024;

// Source indices and weights of each output index along one dim: `taps` per output index.
struct Taps {
  int taps = 1;
  std::vector<int64_t> index;
  std::vector<float> weight;
};

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

Taps make_taps(const ResizeParams& p, size_t d, int64_t in, int64_t out) {
  Taps t;
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

void resize_kernel(KernelArgs& args) {
  const auto& p = std::get<ResizeParams>(args.layer.params);
  const TensorView &in = args.inputs[0], &out = args.outputs[0];
  if (out.numel() == 0) return;
  const size_t spatial = in.shape.size() - 2;
  std::vector<Taps> taps;
  for (size_t d = 0; d < spatial; ++d) {
    KILN_CHECK(in.shape[d + 2] > 0, InvalidArgument, "layer `", args.layer.name,
               "`: cannot resize an empty spatial dim");
    taps.push_back(make_taps(p, d, in.shape[d + 2], out.shape[d + 2]));
  }
  const Shape out_sp(out.shape.begin() + 2, out.shape.end());
  const Shape in_sp(in.shape.begin() + 2, in.shape.end());
  const auto in_strides = contiguous_strides(in_sp);
  const int64_t vo = volume(out_sp), vi = volume(in_sp);
  const int64_t total = out.numel();
  int64_t combos = 1;
  for (const Taps& t : taps) combos *= t.taps;
  const size_t es = dtype_size(in.dtype);
  const uint8_t* src = static_cast<const uint8_t*>(in.data);
  uint8_t* dst = static_cast<uint8_t*>(out.data);
#pragma omp parallel for if (total > kParallelElements)
  for (int64_t e = 0; e < total; ++e) {
    const int64_t plane = e / vo;
    int64_t pos = e % vo;
    int64_t coord[8] = {};  // output coordinate per spatial dim (resize has at most 3 in torch)
    std::vector<int64_t> big;
    int64_t* c = coord;
    if (spatial > 8) {
      big.resize(spatial);
      c = big.data();
    }
    for (size_t d = spatial; d-- > 0;) {
      c[d] = pos % out_sp[d];
      pos /= out_sp[d];
    }
    const int64_t base = plane * vi;
    if (p.mode == ResizeMode::kNearest) {
      int64_t off = base;
      for (size_t d = 0; d < spatial; ++d)
        off += taps[d].index[static_cast<size_t>(c[d])] * in_strides[d];
      std::memcpy(dst + static_cast<size_t>(e) * es, src + static_cast<size_t>(off) * es, es);
      continue;
    }
    float acc = 0;
    for (int64_t combo = 0; combo < combos; ++combo) {
      int64_t rem = combo, off = base;
      float w = 1;
      for (size_t d = 0; d < spatial; ++d) {
        const Taps& t = taps[d];
        const size_t k = static_cast<size_t>(c[d] * t.taps + rem % t.taps);
        rem /= t.taps;
        off += t.index[k] * in_strides[d];
        w *= t.weight[k];
      }
      acc += w * load_as<float>(in.dtype, in.data, off);
    }
    store_as<float>(out.dtype, out.data, e, acc);
  }
}

}  // namespace

void register_resize(KernelTable& t) {
  t.set<ResizeParams>(resize_kernel);
}

}  // namespace kiln::engine::cpu
