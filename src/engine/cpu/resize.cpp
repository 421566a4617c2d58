// CPU kernels of resize, following torch.nn.functional.interpolate's index and weight rules.
// Every mode is separable: each output coordinate reads a few taps per spatial dim, so one
// kernel handles 1-D, 2-D and 3-D, and 2-D ones (most) also have a row-wise kernel; nearest
// copies raw elements so every dtype works.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/cpu/convert.h"
#include "engine/layers/setup.h"
#include "util/errors.h"

namespace kiln::engine::cpu {
namespace {

constexpr int64_t kParallelElements = 16 * 1024;

// Nearest of one output row: its elements' bytes, as words of the element's size.
template <class U>
void nearest_row(const U* src_row, const int64_t* cols, U* dst, int64_t ow) {
  for (int64_t ox = 0; ox < ow; ++ox) dst[ox] = src_row[cols[ox]];
}

// 2-d resizes (segmentation heads' bilinear upsampling, FPNs' nearest) row by row: an output
// row's source rows and their weights once, then each output's taps along the row, f32 read and
// written directly. The taps are summed in the generic loop's order (the first dim's fastest)
// and weighed by the same products, so both give the same values. The generic loop divided
// 64-bit indices for every output and every tap: fcn_resnet50 b1's [1, 21, 28, 28] -> 224 x 224
// took 19.8 ms on 2 threads (bench/NOTES.md G78). False where the taps are more than 4 a dim.
bool resize2d(const ResizeParams& p, const TensorView& in, const TensorView& out,
              const std::vector<ResizeTaps>& taps) {
  constexpr int kMaxTaps = 4;
  const ResizeTaps &th = taps[0], &tw = taps[1];
  if (th.taps > kMaxTaps || tw.taps > kMaxTaps) return false;
  const int64_t ih = in.shape[2], iw = in.shape[3], oh = out.shape[2], ow = out.shape[3];
  const int64_t rows = in.shape[0] * in.shape[1] * oh;
  const bool nearest = p.mode == ResizeMode::kNearest;
  const size_t es = dtype_size(in.dtype);
  const bool f32 = in.dtype == DataType::kF32 && out.dtype == DataType::kF32;
  const auto* src = static_cast<const uint8_t*>(in.data);
  auto* dst = static_cast<uint8_t*>(out.data);
#pragma omp parallel for if (rows * ow > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t plane = r / oh, oy = r % oh, out_at = r * ow;
    if (nearest) {
      const int64_t at = (plane * ih + th.index[static_cast<size_t>(oy)]) * iw;
      const int64_t* cols = tw.index.data();
      switch (es) {
        case 1:
          nearest_row(src + at, cols, dst + out_at, ow);
          break;
        case 2:
          nearest_row(reinterpret_cast<const uint16_t*>(src) + at, cols,
                      reinterpret_cast<uint16_t*>(dst) + out_at, ow);
          break;
        case 4:
          nearest_row(reinterpret_cast<const uint32_t*>(src) + at, cols,
                      reinterpret_cast<uint32_t*>(dst) + out_at, ow);
          break;
        default:
          for (int64_t ox = 0; ox < ow; ++ox) {
            std::memcpy(dst + static_cast<size_t>(out_at + ox) * es,
                        src + static_cast<size_t>(at + cols[ox]) * es, es);
          }
          break;
      }
      continue;
    }
    int64_t row[kMaxTaps];
    float wh[kMaxTaps];
    for (int i = 0; i < th.taps; ++i) {
      const size_t k = static_cast<size_t>(oy * th.taps + i);
      row[i] = (plane * ih + th.index[k]) * iw;
      wh[i] = th.weight[k];
    }
    for (int64_t ox = 0; ox < ow; ++ox) {
      float acc = 0;
      for (int j = 0; j < tw.taps; ++j) {
        const size_t k = static_cast<size_t>(ox * tw.taps + j);
        const int64_t col = tw.index[k];
        const float ww = tw.weight[k];
        for (int i = 0; i < th.taps; ++i) {
          const int64_t at = row[i] + col;
          const float x =
              f32 ? reinterpret_cast<const float*>(src)[at] : load_as<float>(in.dtype, in.data, at);
          acc += wh[i] * ww * x;
        }
      }
      if (f32) {
        reinterpret_cast<float*>(dst)[out_at + ox] = acc;
      } else {
        store_as<float>(out.dtype, out.data, out_at + ox, acc);
      }
    }
  }
  return true;
}

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
  if (spatial == 2 && resize2d(p, in, out, taps)) return;
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
