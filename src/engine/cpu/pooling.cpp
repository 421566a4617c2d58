// CPU kernel of the pooling family: max/average, windowed or adaptive, as direct loops over
// per-dim window tables (so dilation, asymmetric padding and ceil_mode need no special paths).
#include <cmath>
#include <limits>

#include "engine/cpu/convert.h"
#include "util/errors.h"

namespace kiln::engine::cpu {

namespace {

// The taps of one output position along one dim: `count` input positions first, first + step,
// ...; `padded` is the window size counting padding (average pooling with count_include_pad).
struct Window {
  int64_t first = 0, step = 1, count = 0, padded = 0;
};

int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

std::vector<Window> windows(const PoolingParams& p, size_t d, int64_t in, int64_t out) {
  std::vector<Window> w(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    Window& win = w[static_cast<size_t>(o)];
    if (p.adaptive) {  // torch: [floor(o * in / out), ceil((o + 1) * in / out))
      win.first = (o * in) / out;
      win.count = ((o + 1) * in + out - 1) / out - win.first;
      win.padded = win.count;
      continue;
    }
    const int64_t k = p.kernel[d];
    const int64_t s = p.strides.empty() ? k : p.strides[d];
    const int64_t pb = p.padding_begin.empty() ? 0 : p.padding_begin[d];
    const int64_t pe = p.padding_end.empty() ? 0 : p.padding_end[d];
    const int64_t dil = p.dilations.empty() ? 1 : p.dilations[d];
    const int64_t start = o * s - pb;
    // Valid taps j satisfy 0 <= start + j * dil < in and 0 <= j < k.
    const int64_t j0 = start >= 0 ? 0 : (-start + dil - 1) / dil;
    const int64_t j1 = std::min(k - 1, floor_div(in - 1 - start, dil));
    win.first = start + j0 * dil;
    win.step = dil;
    win.count = std::max<int64_t>(0, j1 - j0 + 1);
    // Torch's average divisor with padding: the window clipped to the padded input.
    win.padded = std::min(start + k, in + pe) - start;
  }
  return w;
}

void pooling_kernel(KernelArgs& args) {
  const auto& p = std::get<PoolingParams>(args.layer.params);
  const TensorView& x = args.inputs[0];
  const TensorView& out = args.outputs[0];
  if (out.numel() == 0) return;
  const size_t nd = p.adaptive ? p.output_size.size() : p.kernel.size();
  // Channels-first: every (n, c) pair is a plane of its own, elements adjacent. Channels-last
  // ([N, spatial..., C]): a plane per n, elements `ch` apart, channel innermost.
  const bool cl = p.channels_last;
  const size_t lead = cl ? 1 : x.shape.size() - nd;
  const int64_t ch = cl ? x.shape.back() : 1;
  int64_t batch = 1;
  for (size_t d = 0; d < lead; ++d) batch *= x.shape[d];
  // Pad to 3 pooled dims with size-1 dims whose single window is the single element.
  int64_t in[3] = {1, 1, 1}, os[3] = {1, 1, 1};
  std::vector<Window> win[3];
  for (size_t d = 0; d < 3; ++d) {
    const size_t pad = 3 - nd;
    if (d < pad) {
      win[d] = {Window{0, 1, 1, 1}};
      continue;
    }
    in[d] = x.shape[lead + d - pad];
    os[d] = out.shape[lead + d - pad];
    win[d] = windows(p, d - pad, in[d], os[d]);
  }
  std::vector<float> staged;
  const float* src = x.as<float>();
  if (x.dtype != DataType::kF32) {
    staged.resize(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      staged[static_cast<size_t>(i)] = load_as<float>(x.dtype, x.data, i);
    }
    src = staged.data();
  }
  const int64_t in_plane = in[0] * in[1] * in[2], out_plane = os[0] * os[1] * os[2];
  const bool is_max = p.kind == PoolingKind::kMax;
  const int64_t total = batch * out_plane * ch;
#pragma omp parallel for schedule(static) if (total > 4096)
  for (int64_t i = 0; i < total; ++i) {
    const int64_t b = i / (out_plane * ch), r = (i / ch) % out_plane, c = i % ch;
    const Window& w0 = win[0][static_cast<size_t>(r / (os[1] * os[2]))];
    const Window& w1 = win[1][static_cast<size_t>((r / os[2]) % os[1])];
    const Window& w2 = win[2][static_cast<size_t>(r % os[2])];
    const float* plane = src + b * in_plane * ch + c;
    float result;
    if (is_max) {
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t a = 0; a < w0.count; ++a) {
        for (int64_t e1 = 0; e1 < w1.count; ++e1) {
          const int64_t row = ((w0.first + a * w0.step) * in[1] + w1.first + e1 * w1.step) * in[2];
          for (int64_t e = 0; e < w2.count; ++e) {
            const float v = plane[(row + w2.first + e * w2.step) * ch];
            if (v > m || std::isnan(v)) m = v;  // NaN wins, as in torch
          }
        }
      }
      result = m;
    } else {
      double sum = 0;
      for (int64_t a = 0; a < w0.count; ++a) {
        for (int64_t e1 = 0; e1 < w1.count; ++e1) {
          const int64_t row = ((w0.first + a) * in[1] + w1.first + e1) * in[2] + w2.first;
          for (int64_t e = 0; e < w2.count; ++e) sum += plane[(row + e) * ch];
        }
      }
      const int64_t divisor = p.count_include_pad && !p.adaptive ? w0.padded * w1.padded * w2.padded
                                                                 : w0.count * w1.count * w2.count;
      result = static_cast<float>(sum / static_cast<double>(divisor));
    }
    store_as<float>(out.dtype, out.data, i, result);
  }
}

}  // namespace

void register_pooling(KernelTable& t) {
  t.set<PoolingParams>(pooling_kernel);
}

}  // namespace kiln::engine::cpu
