// CPU kernels of resize, following torch.nn.functional.interpolate's index and weight rules.
// Every mode is separable: each output coordinate reads a few taps per spatial dim, so one
// kernel handles 1-D, 2-D and 3-D; nearest copies raw elements so every dtype works.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/convert.h"
#include "engine/layers/setup.h"
#include "util/errors.h"

namespace kiln::engine::cpu {
namespace {

constexpr int64_t kParallelElements = 16 * 1024;

void resize_kernel(KernelArgs& args) {
  const auto& p = std::get<ResizeParams>(args.layer.params);
  const TensorView &in = args.inputs[0], &out = args.outputs[0];
  if (out.numel() == 0) return;
  const size_t spatial = in.shape.size() - 2;
  std::vector<ResizeTaps> taps;
  for (size_t d = 0; d < spatial; ++d) {
    KILN_CHECK(in.shape[d + 2] > 0, InvalidArgument, "layer `", args.layer.name,
               "`: cannot resize an empty spatial dim");
    taps.push_back(resize_taps(p, d, in.shape[d + 2], out.shape[d + 2]));
  }
  const Shape out_sp(out.shape.begin() + 2, out.shape.end());
  const Shape in_sp(in.shape.begin() + 2, in.shape.end());
  const auto in_strides = contiguous_strides(in_sp);
  const int64_t vo = volume(out_sp), vi = volume(in_sp);
  const int64_t total = out.numel();
  int64_t combos = 1;
  for (const ResizeTaps& t : taps) combos *= t.taps;
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
        const ResizeTaps& t = taps[d];
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
