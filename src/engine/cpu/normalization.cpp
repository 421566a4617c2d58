// CPU kernels of the normalization family. Statistics are two-pass (mean, then centered squares),
// summed in double so that large or offset inputs keep their precision. f32 data takes the vector
// row loops of vector_math.h; f16/bf16 data is read as double and the result stored in its dtype.
#include <omp.h>

#include <cmath>
#include <limits>
#include <memory>

#include "engine/cpu/convert.h"
#include "engine/cpu/vector_math.h"
#include "util/errors.h"

namespace kiln::engine::cpu {

namespace {

constexpr int64_t kParallelWork = 32 * 1024;

// A parameter vector (scale, bias, mean, var) as doubles; empty when absent.
std::vector<double> load_param(const TensorView* t) {
  std::vector<double> r;
  if (t == nullptr) return r;
  r.resize(static_cast<size_t>(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i)
    r[static_cast<size_t>(i)] = load_as<double>(t->dtype, t->data, i);
  return r;
}

std::vector<float> as_floats(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Normalizes `groups` contiguous runs of `len` elements each; element j of run r uses the affine
// parameters at channel(r, j), which is constant over spans of `span` elements of a run (`span`
// divides `len`); span 0: element j of every run has parameter j (layer norm). Not `centered`
// (RMS norm): no mean is taken out, the variance is the mean of squares.
template <class Channel>
void normalize_runs(const TensorView& x, const TensorView& y, int64_t groups, int64_t len,
                    int64_t span, double eps, const std::vector<double>& scale,
                    const std::vector<double>& bias, Channel channel, bool centered = true) {
  if (x.dtype == DataType::kF32 && y.dtype == DataType::kF32) {
    const float* xs = static_cast<const float*>(x.data);
    float* ys = static_cast<float*>(y.data);
    const auto fscale = as_floats(scale), fbias = as_floats(bias);
#pragma omp parallel for if (groups > 1 && groups * len > kParallelWork)
    for (int64_t r = 0; r < groups; ++r) {
      const float* a = xs + r * len;
      float* d = ys + r * len;
      vmath::Mean mean;
      float rstd;
      vmath::moments(a, len, eps, &mean, &rstd, centered);
      if (span == 0) {
        vmath::normalize(d, a, len, mean, rstd, fscale.empty() ? nullptr : fscale.data(),
                         fbias.empty() ? nullptr : fbias.data());
        continue;
      }
      for (int64_t j = 0; j < len; j += span) {
        const size_t c = static_cast<size_t>(channel(r, j));
        const float mul = fscale.empty() ? rstd : rstd * fscale[c];
        vmath::shift_scale(d + j, a + j, span, mean, mul, fbias.empty() ? 0.f : fbias[c]);
      }
    }
    return;
  }
#pragma omp parallel for if (groups > 1 && groups * len > kParallelWork)
  for (int64_t r = 0; r < groups; ++r) {
    const int64_t base = r * len;
    double sum = 0;
    for (int64_t j = 0; centered && j < len; ++j) sum += load_as<double>(x.dtype, x.data, base + j);
    const double mean = sum / static_cast<double>(len);
    double sq = 0;
    for (int64_t j = 0; j < len; ++j) {
      const double d = load_as<double>(x.dtype, x.data, base + j) - mean;
      sq += d * d;
    }
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(len) + eps);
    for (int64_t j = 0; j < len; ++j) {
      double v = (load_as<double>(x.dtype, x.data, base + j) - mean) * inv;
      if (!scale.empty()) {
        const size_t c = static_cast<size_t>(channel(r, j));
        v = v * scale[c] + bias[c];
      }
      store_as<double>(y.dtype, y.data, base + j, v);
    }
  }
}

void normalization_kernel(KernelArgs& args) {
  const auto& p = std::get<NormalizationParams>(args.layer.params);
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  const Shape& s = x.shape;
  if (x.numel() == 0) return;
  const auto& in = args.inputs;
  if (p.kind == NormalizationKind::kLayer || p.kind == NormalizationKind::kRms) {
    int64_t len = 1;
    for (size_t d = s.size() - static_cast<size_t>(p.normalized_dims); d < s.size(); ++d)
      len *= s[d];
    const bool rms = p.kind == NormalizationKind::kRms;
    const auto scale = load_param(p.has_affine ? &in[1] : nullptr);
    // RMS norm has a scale only: a zero bias beside it.
    const auto bias =
        rms ? std::vector<double>(scale.size(), 0.0) : load_param(p.has_affine ? &in[2] : nullptr);
    normalize_runs(
        x, y, x.numel() / len, len, 0, p.epsilon, scale, bias, [](int64_t, int64_t j) { return j; },
        !rms);
    return;
  }
  const int64_t n = s[0], c = s[1], spatial = x.numel() / (n * c);
  if (p.kind == NormalizationKind::kBatch) {
    const size_t first = p.has_affine ? 3 : 1;
    const auto scale = load_param(p.has_affine ? &in[1] : nullptr);
    const auto bias = load_param(p.has_affine ? &in[2] : nullptr);
    const auto mean = load_param(&in[first]), var = load_param(&in[first + 1]);
    // Folded per channel: y = x * a + b.
    std::vector<double> a(static_cast<size_t>(c)), b(static_cast<size_t>(c));
    for (size_t ch = 0; ch < a.size(); ++ch) {
      a[ch] = 1.0 / std::sqrt(var[ch] + p.epsilon) * (scale.empty() ? 1.0 : scale[ch]);
      b[ch] = (bias.empty() ? 0.0 : bias[ch]) - mean[ch] * a[ch];
    }
    const int64_t rows = n * c;
    if (x.dtype == DataType::kF32 && y.dtype == DataType::kF32) {
      const float* xs = static_cast<const float*>(x.data);
      float* ys = static_cast<float*>(y.data);
#pragma omp parallel for if (rows > 1 && x.numel() > kParallelWork)
      for (int64_t r = 0; r < rows; ++r) {
        const size_t ch = static_cast<size_t>(r % c);
        vmath::shift_scale(ys + r * spatial, xs + r * spatial, spatial, vmath::Mean{0.f, 0.f},
                           static_cast<float>(a[ch]), static_cast<float>(b[ch]));
      }
      return;
    }
#pragma omp parallel for if (rows > 1 && x.numel() > kParallelWork)
    for (int64_t r = 0; r < rows; ++r) {
      const size_t ch = static_cast<size_t>(r % c);
      for (int64_t j = r * spatial; j < (r + 1) * spatial; ++j) {
        store_as<double>(y.dtype, y.data, j, load_as<double>(x.dtype, x.data, j) * a[ch] + b[ch]);
      }
    }
    return;
  }
  const auto scale = load_param(p.has_affine ? &in[1] : nullptr);
  const auto bias = load_param(p.has_affine ? &in[2] : nullptr);
  if (p.kind == NormalizationKind::kGroup) {
    KILN_CHECK(c % p.num_groups == 0, InvalidArgument, "layer `", args.layer.name, "`: num_groups ",
               p.num_groups, " does not divide ", c, " channels");
    const int64_t g = p.num_groups, per = c / g;
    normalize_runs(x, y, n * g, per * spatial, spatial, p.epsilon, scale, bias,
                   [=](int64_t r, int64_t j) { return (r % g) * per + j / spatial; });
  } else {
    normalize_runs(x, y, n * c, spatial, spatial, p.epsilon, scale, bias,
                   [=](int64_t r, int64_t) { return r % c; });
  }
}

// Softmax over the last axis with a mask (bool: keep where true; float: added) broadcast to x
// and/or causal; rows with nothing kept come out zero.
void masked_softmax(const SoftmaxParams& p, const TensorView& x, const TensorView* mask,
                    const TensorView& y) {
  const int64_t n = x.shape.back(), rows = n == 0 ? 0 : x.numel() / n;
  const int64_t L = x.shape.size() >= 2 ? x.shape[x.shape.size() - 2] : 1;
  std::unique_ptr<BroadcastMap> map;
  if (mask) map = std::make_unique<BroadcastMap>(mask->shape, x.shape);
  const float neg_inf = -std::numeric_limits<float>::infinity();
#pragma omp parallel if (rows > 1 && x.numel() > kParallelWork)
  {
    std::vector<float> row(static_cast<size_t>(n));
    std::vector<int64_t> off(static_cast<size_t>(mask ? n : 0));
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      if (mask) map->offsets(r * n, n, off.data());
      const int64_t keep_through = p.causal ? r % L : n - 1;  // last kept column
      float mx = neg_inf;
      for (int64_t j = 0; j < n; ++j) {
        float v = load_as<float>(x.dtype, x.data, r * n + j);
        if (j > keep_through) {
          v = neg_inf;
        } else if (mask && mask->dtype == DataType::kBool) {
          if (!load_as<int64_t>(mask->dtype, mask->data, off[static_cast<size_t>(j)])) v = neg_inf;
        } else if (mask) {
          v += load_as<float>(mask->dtype, mask->data, off[static_cast<size_t>(j)]);
        }
        row[static_cast<size_t>(j)] = v;
        mx = std::max(mx, v);
      }
      double sum = 0;
      if (mx != neg_inf) {
        for (int64_t j = 0; j < n; ++j)
          sum += std::exp(static_cast<double>(row[static_cast<size_t>(j)]) - mx);
      }
      for (int64_t j = 0; j < n; ++j) {
        const double e =
            mx == neg_inf ? 0.0
                          : std::exp(static_cast<double>(row[static_cast<size_t>(j)]) - mx) / sum;
        store_as<double>(y.dtype, y.data, r * n + j, e);
      }
    }
  }
}

void softmax_kernel(KernelArgs& args) {
  const auto& p = std::get<SoftmaxParams>(args.layer.params);
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  if (args.inputs.size() == 2 || p.causal) {
    masked_softmax(p, x, args.inputs.size() == 2 ? &args.inputs[1] : nullptr, y);
    return;
  }
  const int axis = normalize_axis(p.axis, x.shape.size(), "softmax");
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.shape.size(); ++d) inner *= x.shape[d];
  const int64_t n = x.shape[static_cast<size_t>(axis)], rows = outer * inner;
  if (x.numel() == 0) return;
  if (inner == 1 && x.dtype == DataType::kF32 && y.dtype == DataType::kF32) {
    const float* xs = static_cast<const float*>(x.data);
    float* ys = static_cast<float*>(y.data);
#pragma omp parallel for if (rows > 1 && x.numel() > kParallelWork)
    for (int64_t r = 0; r < rows; ++r) vmath::softmax(ys + r * n, xs + r * n, n, p.log);
    return;
  }
#pragma omp parallel if (rows > 1 && x.numel() > kParallelWork)
  {
    std::vector<float> row(static_cast<size_t>(n));
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t base = (r / inner) * n * inner + r % inner;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < n; ++i) {
        row[static_cast<size_t>(i)] = load_as<float>(x.dtype, x.data, base + i * inner);
        mx = std::max(mx, row[static_cast<size_t>(i)]);
      }
      // Subtracting the max keeps exp() in range; a row of -inf yields NaN, as torch does.
      double sum = 0;
      for (int64_t i = 0; i < n; ++i)
        sum += std::exp(static_cast<double>(row[static_cast<size_t>(i)]) - mx);
      const double log_sum = std::log(sum);
      for (int64_t i = 0; i < n; ++i) {
        const double z = static_cast<double>(row[static_cast<size_t>(i)]) - mx;
        store_as<double>(y.dtype, y.data, base + i * inner,
                         p.log ? z - log_sum : std::exp(z) / sum);
      }
    }
  }
}

}  // namespace

void register_normalization(KernelTable& t) {
  t.set<NormalizationParams>(normalization_kernel);
  t.set<SoftmaxParams>(softmax_kernel);
}

}  // namespace kiln::engine::cpu
