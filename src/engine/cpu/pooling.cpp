// CPU kernel of the pooling family: max/average, windowed or adaptive, as one separable pass per
// pooled dim over per-dim window tables (so dilation, asymmetric padding and ceil_mode need no
// special paths).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include <omp.h>

#include "engine/cpu/convert.h"
#include "engine/cpu/vector_math.h"
#include "engine/scalar_math.h"
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

// One pooled dim of data viewed as [outer, len, inner]: dst[o, j, i] = the window `win[j]` of
// src[o, :, i] reduced (max, or sum divided by `divisor[j]`). Max and average pooling are
// separable, so a pooled plane is one such pass per dim. The outputs whose windows are whole
// and evenly spaced (first = base + j * s) take each tap as one pass over all of them (one
// flat, vectorized loop when s = 1); the edge windows go one by one.
void pool_dim(const float* src, float* dst, int64_t outer, int64_t len, int64_t inner,
              const std::vector<Window>& win, const std::vector<float>& divisor, bool is_max) {
  const int64_t out_len = static_cast<int64_t>(win.size());
  int64_t width = 0;
  for (const Window& w : win) width = std::max(width, w.count);
  int64_t lo = 0;
  while (lo < out_len && win[static_cast<size_t>(lo)].count != width) ++lo;
  int64_t hi = lo, s = 1, base = 0, step = 1;
  if (lo < out_len) {
    const Window& w = win[static_cast<size_t>(lo)];
    if (lo + 1 < out_len) s = win[static_cast<size_t>(lo + 1)].first - w.first;
    base = w.first - lo * s, step = w.step;
    while (hi < out_len) {
      const Window& n = win[static_cast<size_t>(hi)];
      if (n.count != width || n.step != step || n.first != base + hi * s) break;
      ++hi;
    }
  }
  const float init = is_max ? -std::numeric_limits<float>::infinity() : 0.f;
#pragma omp parallel for schedule(static) if (outer * len * inner > 16 * 1024)
  for (int64_t o = 0; o < outer; ++o) {
    const float* plane = src + o * len * inner;
    float* y = dst + o * out_len * inner;
    for (int64_t j = 0; j < out_len; ++j) {  // the edge windows
      if (j == lo && hi > lo) j = hi;
      if (j >= out_len) break;
      const Window& w = win[static_cast<size_t>(j)];
      float* acc = y + j * inner;
      std::fill(acc, acc + inner, init);
      for (int64_t e = 0; e < w.count; ++e) {
        const float* row = plane + (w.first + e * w.step) * inner;
        if (is_max) {
          vmath::max_nan_into(acc, row, inner);
        } else {
          vmath::add_into(acc, row, inner);
        }
      }
    }
    if (hi > lo) {  // the whole windows, tap by tap
      float* acc = y + lo * inner;
      const int64_t n = (hi - lo) * inner;
      std::fill(acc, acc + n, init);
      for (int64_t e = 0; e < width; ++e) {
        const float* tap = plane + (base + lo * s + e * step) * inner;
        if (s == 1 && is_max) {
          vmath::max_nan_into(acc, tap, n);
        } else if (s == 1) {
          vmath::add_into(acc, tap, n);
        } else if (inner == 1 && is_max) {
          for (int64_t j = 0; j < hi - lo; ++j) acc[j] = vmath::MaxNan{}(acc[j], tap[j * s]);
        } else if (inner == 1) {
          for (int64_t j = 0; j < hi - lo; ++j) acc[j] += tap[j * s];
        } else {
          for (int64_t j = 0; j < hi - lo; ++j) {
            const float* row = tap + j * s * inner;
            float* a = acc + j * inner;
            if (is_max) {
              vmath::max_nan_into(a, row, inner);
            } else {
              vmath::add_into(a, row, inner);
            }
          }
        }
      }
    }
    if (!is_max) {
      for (int64_t j = 0; j < out_len; ++j) {
        const float scale = 1.f / divisor[static_cast<size_t>(j)];
        for (int64_t i = 0; i < inner; ++i) y[j * inner + i] *= scale;
      }
    }
  }
}

// Max pooling of channels-last 2-D data [batch, H, W, C] straight into `dst`, each output
// pixel's C channels the max over its window's pixels (vectorized over C). For small windows: it
// reads each tap once per output pixel, where pool_dim's separable passes write and read back an
// intermediate of the whole height (squeezenet's first pooling: 12.5 MB at batch 8). Kernels of
// at most kMaxDirectTaps taps (a window has at most the kernel's).
constexpr int64_t kMaxDirectTaps = 16;

void max_pool_2d_channels_last(const float* src, float* dst, int64_t batch, int64_t h, int64_t w,
                               int64_t c, const std::vector<Window>& wh,
                               const std::vector<Window>& ww) {
  const int64_t oh = static_cast<int64_t>(wh.size()), ow = static_cast<int64_t>(ww.size());
#pragma omp parallel for schedule(static) if (batch * oh * ow * c > 16 * 1024)
  for (int64_t row = 0; row < batch * oh; ++row) {
    const int64_t n = row / oh;
    const Window& vert = wh[static_cast<size_t>(row % oh)];
    float* y = dst + row * ow * c;
    const float* taps[kMaxDirectTaps];
    for (int64_t j = 0; j < ow; ++j) {
      const Window& horiz = ww[static_cast<size_t>(j)];
      int64_t ntaps = 0;
      for (int64_t e = 0; e < vert.count; ++e) {
        const float* line = src + (n * h + vert.first + e * vert.step) * w * c;
        for (int64_t f = 0; f < horiz.count; ++f) {
          taps[ntaps++] = line + (horiz.first + f * horiz.step) * c;
        }
      }
      vmath::max_nan_taps(y + j * c, taps, ntaps, c);
    }
  }
}

void pooling_kernel(KernelArgs& args) {
  const auto& p = std::get<PoolingParams>(args.layer.params);
  const TensorView& x = args.inputs[0];
  const TensorView& out = args.outputs[0];
  if (out.numel() == 0) return;
  const size_t nd = p.adaptive ? p.output_size.size() : p.kernel.size();
  // Channels-first: [batch..., spatial...], channels part of the batch; channels-last:
  // [N, spatial..., C], channels innermost.
  const bool cl = p.channels_last;
  const size_t lead = cl ? 1 : x.shape.size() - nd;
  const int64_t ch = cl ? x.shape.back() : 1;
  int64_t batch = 1;
  for (size_t d = 0; d < lead; ++d) batch *= x.shape[d];
  std::vector<int64_t> in(nd), os(nd);
  for (size_t d = 0; d < nd; ++d) in[d] = x.shape[lead + d], os[d] = out.shape[lead + d];
  const bool is_max = p.kind == PoolingKind::kMax;
  std::vector<float> staged;
  const float* src = x.as<float>();
  if (x.dtype != DataType::kF32) {
    staged.resize(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      staged[static_cast<size_t>(i)] = load_as<float>(x.dtype, x.data, i);
    }
    src = staged.data();
  }
  if (is_max && cl && nd == 2 && !p.adaptive && p.kernel[0] * p.kernel[1] <= kMaxDirectTaps) {
    std::unique_ptr<float[]> staged_out;
    float* dst =
        out.dtype == DataType::kF32
            ? out.as<float>()
            : (staged_out.reset(new float[static_cast<size_t>(out.numel())]), staged_out.get());
    max_pool_2d_channels_last(src, dst, batch, in[0], in[1], ch, windows(p, 0, in[0], os[0]),
                              windows(p, 1, in[1], os[1]));
    if (staged_out) {
      for (int64_t i = 0; i < out.numel(); ++i) store_as<float>(out.dtype, out.data, i, dst[i]);
    }
    return;
  }
  // One pass per pooled dim, last dim first; shape tracks [batch, in/os..., ch].
  std::vector<int64_t> shape = in;
  std::unique_ptr<float[]> bufs[2];  // not zeroed: pool_dim writes every element
  int which = 0;
  for (size_t k = nd; k-- > 0;) {
    const std::vector<Window> win = windows(p, k, in[k], os[k]);
    std::vector<float> divisor(win.size(), 1.f);
    const bool padded = p.count_include_pad && !p.adaptive;
    for (size_t j = 0; j < win.size(); ++j) {
      divisor[j] = static_cast<float>(padded ? win[j].padded : win[j].count);
    }
    int64_t outer = batch, inner = ch;
    for (size_t d = 0; d < k; ++d) outer *= shape[d];
    for (size_t d = k + 1; d < nd; ++d) inner *= shape[d];
    shape[k] = os[k];
    const bool last = k == 0;
    float* dst;
    if (last && out.dtype == DataType::kF32) {
      dst = out.as<float>();
    } else {
      bufs[which].reset(new float[static_cast<size_t>(outer * os[k] * inner)]);
      dst = bufs[which].get();
    }
    pool_dim(src, dst, outer, in[k], inner, win, divisor, is_max);
    src = dst;
    which ^= 1;
  }
  if (out.dtype != DataType::kF32) {
    for (int64_t i = 0; i < out.numel(); ++i) store_as<float>(out.dtype, out.data, i, src[i]);
  }
}

// Squeeze-excitation in f32 (x, weights, biases and y) in four passes, each over contiguous
// memory and split over threads where it is large enough: every sample's means (float sums of at
// most 64 terms added in double, rounded to float as the pooling layer's are), the two products
// for all samples at once (vmath::dot, each weight row read once), and the scale. One layer for
// the four that pool, multiply twice (oneDNN 1x1 convolutions over one pixel a sample) and scale
// (bench/NOTES.md G80). False where an operand is not f32.
bool squeeze_excitation_f32(const SqueezeExcitationParams& p, const TensorView& x,
                            const TensorView& w1, const TensorView* b1, const TensorView& w2,
                            const TensorView* b2, const TensorView& out) {
  for (const TensorView* t : {&x, &w1, b1, &w2, b2, &out}) {
    if (t && t->dtype != DataType::kF32) return false;
  }
  constexpr int64_t kParallelWork = 32 * 1024, kBlockRows = 64;
  const int64_t n_total = x.shape[0];
  const int64_t c_total = p.channels_last ? x.shape.back() : x.shape[1];
  const int64_t s_total = w1.shape[0];
  const int64_t plane = x.numel() / (n_total * c_total);
  const float *xf = x.as<const float>(), *w1f = w1.as<const float>(), *w2f = w2.as<const float>();
  const float* b1f = b1 ? b1->as<const float>() : nullptr;
  const float* b2f = b2 ? b2->as<const float>() : nullptr;
  float* yf = out.as<float>();
  const auto at = [](int64_t row, int64_t col, int64_t cols) {
    return static_cast<size_t>(row * cols + col);
  };
  std::vector<float> mean(at(n_total, 0, c_total)), hidden(at(n_total, 0, s_total)),
      gate(at(n_total, 0, c_total));
  const bool big = x.numel() > kParallelWork;
  if (p.channels_last) {
    // Each task sums a share of one sample's rows into its own row of accumulators (so any
    // channel count keeps every thread busy); the shares' rows are then added.
    const int64_t shares = big ? std::min<int64_t>(omp_get_max_threads(), plane) : 1;
    std::vector<double> partial(at(n_total * shares, 0, c_total));
    std::vector<float> block(partial.size());
#pragma omp parallel for if (big)
    for (int64_t task = 0; task < n_total * shares; ++task) {
      const int64_t n = task / shares, t = task % shares, end = plane * (t + 1) / shares;
      const float* xs = xf + n * plane * c_total;
      double* acc = partial.data() + at(task, 0, c_total);
      float* blk = block.data() + at(task, 0, c_total);
      for (int64_t q0 = plane * t / shares; q0 < end; q0 += kBlockRows) {
        std::fill(blk, blk + c_total, 0.f);
        for (int64_t q = q0; q < std::min(q0 + kBlockRows, end); ++q) {
          const float* row = xs + q * c_total;
          for (int64_t c = 0; c < c_total; ++c) blk[c] += row[c];
        }
        for (int64_t c = 0; c < c_total; ++c) acc[c] += blk[c];
      }
    }
    for (int64_t n = 0; n < n_total; ++n) {
      for (int64_t c = 0; c < c_total; ++c) {
        double sum = 0;
        for (int64_t t = 0; t < shares; ++t) sum += partial[at(n * shares + t, c, c_total)];
        mean[at(n, c, c_total)] = static_cast<float>(sum / static_cast<double>(plane));
      }
    }
  } else {
#pragma omp parallel for if (big)
    for (int64_t nc = 0; nc < n_total * c_total; ++nc) {
      mean[static_cast<size_t>(nc)] =
          static_cast<float>(vmath::sum(xf + nc * plane, plane) / static_cast<double>(plane));
    }
  }
  const bool big_products = n_total * s_total * c_total > kParallelWork;
#pragma omp parallel for if (big_products)
  for (int64_t s = 0; s < s_total; ++s) {
    for (int64_t n = 0; n < n_total; ++n) {
      double acc = vmath::dot(w1f + s * c_total, mean.data() + at(n, 0, c_total), c_total);
      if (b1f) acc += b1f[s];
      hidden[at(n, s, s_total)] =
          activate(p.activation1, static_cast<float>(acc), p.alpha1, p.beta1);
    }
  }
#pragma omp parallel for if (big_products)
  for (int64_t c = 0; c < c_total; ++c) {
    for (int64_t n = 0; n < n_total; ++n) {
      double acc = vmath::dot(w2f + c * s_total, hidden.data() + at(n, 0, s_total), s_total);
      if (b2f) acc += b2f[c];
      gate[at(n, c, c_total)] = activate(p.activation2, static_cast<float>(acc), p.alpha2, p.beta2);
    }
  }
  if (p.channels_last) {
#pragma omp parallel for if (big)
    for (int64_t r = 0; r < n_total * plane; ++r) {
      const float* g = gate.data() + at(r / plane, 0, c_total);
      const float* src = xf + r * c_total;
      float* dst = yf + r * c_total;
      for (int64_t c = 0; c < c_total; ++c) dst[c] = src[c] * g[c];
    }
  } else {
#pragma omp parallel for if (big)
    for (int64_t nc = 0; nc < n_total * c_total; ++nc) {
      const float g = gate[static_cast<size_t>(nc)];
      const float* src = xf + nc * plane;
      float* dst = yf + nc * plane;
      for (int64_t q = 0; q < plane; ++q) dst[q] = src[q] * g;
    }
  }
  return true;
}

// y = x * act2(w2 . act1(w1 . mean(x) + b1) + b2) per sample (SqueezeExcitationParams): f32 in
// squeeze_excitation_f32, other dtypes here with the means and the two small products in double
// and the scale applied in float.
void squeeze_excitation_kernel(KernelArgs& args) {
  const auto& p = std::get<SqueezeExcitationParams>(args.layer.params);
  const TensorView& x = args.inputs[0];
  const TensorView& out = args.outputs[0];
  const TensorView& w1 = args.inputs[1];
  const TensorView* b1 = p.has_bias1 ? &args.inputs[2] : nullptr;
  const TensorView& w2 = args.inputs[p.has_bias1 ? 3 : 2];
  const TensorView* b2 = p.has_bias2 ? &args.inputs[p.excitation_inputs() - 1] : nullptr;
  KILN_CHECK(!p.project, Unsupported, "layer `", args.layer.name,
             "` (squeeze_excitation): the form with the following projection is built for cuda "
             "plans only (the CPU backend runs the projection as its own convolution)");
  const int64_t n_total = x.shape[0];
  const int64_t c_total = p.channels_last ? x.shape.back() : x.shape[1];
  const int64_t s_total = w1.shape[0];
  const int64_t plane = n_total * c_total > 0 ? x.numel() / (n_total * c_total) : 0;
  if (out.numel() == 0) return;
  if (squeeze_excitation_f32(p, x, w1, b1, w2, b2, out)) return;
  // Element (n, c, q) of x for spatial position q.
  const auto at = [&](int64_t n, int64_t c, int64_t q) {
    return p.channels_last ? (n * plane + q) * c_total + c : (n * c_total + c) * plane + q;
  };
  // x and the result as floats (staged where the dtype is another), the weights as doubles.
  std::vector<float> x_staged, y_staged;
  const float* xf = x.as<const float>();
  if (x.dtype != DataType::kF32) {
    x_staged.resize(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      x_staged[static_cast<size_t>(i)] = load_as<float>(x.dtype, x.data, i);
    }
    xf = x_staged.data();
  }
  float* yf = out.as<float>();
  if (out.dtype != DataType::kF32) {
    y_staged.resize(static_cast<size_t>(out.numel()));
    yf = y_staged.data();
  }
  const auto doubles = [](const TensorView* t) {
    std::vector<double> v(t ? static_cast<size_t>(t->numel()) : 0);
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = load_as<double>(t->dtype, t->data, static_cast<int64_t>(i));
    }
    return v;
  };
  const std::vector<double> w1d = doubles(&w1), w2d = doubles(&w2), b1d = doubles(b1),
                            b2d = doubles(b2);
  std::vector<double> mean(static_cast<size_t>(c_total));
  std::vector<double> hidden(static_cast<size_t>(s_total));
  for (int64_t n = 0; n < n_total; ++n) {
    for (int64_t c = 0; c < c_total; ++c) {
      double sum = 0;
      for (int64_t q = 0; q < plane; ++q) sum += xf[at(n, c, q)];
      mean[static_cast<size_t>(c)] = sum / static_cast<double>(plane);
    }
    for (int64_t s = 0; s < s_total; ++s) {
      double acc = b1 ? b1d[static_cast<size_t>(s)] : 0.0;
      const double* w = w1d.data() + s * c_total;
      for (int64_t c = 0; c < c_total; ++c) acc += w[c] * mean[static_cast<size_t>(c)];
      hidden[static_cast<size_t>(s)] =
          activate(p.activation1, static_cast<float>(acc), p.alpha1, p.beta1);
    }
    for (int64_t c = 0; c < c_total; ++c) {
      double acc = b2 ? b2d[static_cast<size_t>(c)] : 0.0;
      const double* w = w2d.data() + c * s_total;
      for (int64_t s = 0; s < s_total; ++s) acc += w[s] * hidden[static_cast<size_t>(s)];
      const float g = activate(p.activation2, static_cast<float>(acc), p.alpha2, p.beta2);
      for (int64_t q = 0; q < plane; ++q) yf[at(n, c, q)] = xf[at(n, c, q)] * g;
    }
  }
  for (size_t i = 0; i < y_staged.size(); ++i) {
    store_as<float>(out.dtype, out.data, static_cast<int64_t>(i), y_staged[i]);
  }
}

}  // namespace

void register_pooling(KernelTable& t) {
  t.set<PoolingParams>(pooling_kernel);
  t.set<SqueezeExcitationParams>(squeeze_excitation_kernel);
}

}  // namespace kiln::engine::cpu
