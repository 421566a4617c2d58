// CPU kernel of scaled dot-product attention: one softmax(q k^T * scale + mask) v row at a time,
// in float on the CPU's widest vectors (vector_math.h); packed heads are gathered into [B, heads,
// rows, E] first. Rows whose every position is masked out produce zeros, as torch's math path (safe
// softmax) does, rather than NaN.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "engine/cpu/convert.h"
#include "engine/cpu/vector_math.h"
#include "util/errors.h"

namespace kiln::engine::cpu {

namespace {

constexpr int64_t kParallelWork = 16 * 1024;

// The tensor as float: the data itself for f32, else a converted copy held in `storage`.
const float* as_float(const TensorView& t, std::vector<float>& storage) {
  if (t.dtype == DataType::kF32) return t.as<const float>();
  storage.resize(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    storage[static_cast<size_t>(i)] = load_as<float>(t.dtype, t.data, i);
  return storage.data();
}

// For each output batch index, the batch index of `t` (whose last two dims are matrices).
std::vector<int64_t> batch_offsets(const TensorView& t, const Shape& batch) {
  const Shape tb(t.shape.begin(), t.shape.end() - 2);
  std::vector<int64_t> r(static_cast<size_t>(volume(batch)));
  BroadcastMap(tb, batch).offsets(0, static_cast<int64_t>(r.size()), r.data());
  return r;
}

// softmax(q k^T * scale + mask) v over [batch..., rows, E] operands (mask may be null).
void attend(const AttentionParams& p, const TensorView& q, const TensorView& k, const TensorView& v,
            const TensorView* mask, const TensorView& out) {
  const Shape batch(out.shape.begin(), out.shape.end() - 2);
  const int64_t nb = volume(batch), L = q.shape[q.shape.size() - 2], E = q.shape.back();
  const int64_t S = k.shape[k.shape.size() - 2], Ev = v.shape.back();
  const double scale = p.scale != 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(E));
  std::vector<float> qs, ks, vs;
  const float* qd = as_float(q, qs);
  const float* kd = as_float(k, ks);
  const float* vd = as_float(v, vs);
  const auto qb = batch_offsets(q, batch), kb = batch_offsets(k, batch),
             vb = batch_offsets(v, batch);
  Shape weights = batch;
  weights.push_back(L);
  weights.push_back(S);
  std::unique_ptr<BroadcastMap> mask_map;
  if (mask) mask_map = std::make_unique<BroadcastMap>(mask->shape, weights);
  const int64_t rows = nb * L;
  // k transposed per batch, [E, S]: a row's scores are then E axpys over contiguous keys, and
  // its output S axpys over contiguous values, both on the CPU's widest vectors.
  const Shape k_batch(k.shape.begin(), k.shape.end() - 2);
  const int64_t kbatches = volume(k_batch);
  std::vector<float> kt(static_cast<size_t>(kbatches * E * S));
#pragma omp parallel for if (kbatches * S * E > kParallelWork)
  for (int64_t kbi = 0; kbi < kbatches; ++kbi) {
    for (int64_t j = 0; j < S; ++j) {
      for (int64_t e = 0; e < E; ++e) {
        kt[static_cast<size_t>((kbi * E + e) * S + j)] = kd[(kbi * S + j) * E + e];
      }
    }
  }
  const float fscale = static_cast<float>(scale);
  const float neg_inf = -std::numeric_limits<float>::infinity();
#pragma omp parallel if (rows > 1 && rows * S * (E + Ev) > kParallelWork)
  {
    std::vector<float> score(static_cast<size_t>(S)), acc(static_cast<size_t>(Ev));
    std::vector<int64_t> moff(static_cast<size_t>(S));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / L, i = r % L;
      const float* qrow = qd + (qb[static_cast<size_t>(b)] * L + i) * E;
      const float* ktm = kt.data() + kb[static_cast<size_t>(b)] * E * S;
      const float* vmat = vd + vb[static_cast<size_t>(b)] * S * Ev;
      if (mask) mask_map->offsets(r * S, S, moff.data());
      std::fill(score.begin(), score.end(), 0.f);
      for (int64_t e = 0; e < E; ++e) vmath::axpy(qrow[e], ktm + e * S, score.data(), S);
      float mx = neg_inf;
      for (int64_t j = 0; j < S; ++j) {
        float& s = score[static_cast<size_t>(j)];
        const bool kept =
            !(p.causal && j > i) &&
            !(mask && mask->dtype == DataType::kBool &&
              !load_as<int64_t>(mask->dtype, mask->data, moff[static_cast<size_t>(j)]));
        if (!kept) {
          s = neg_inf;
          continue;
        }
        s *= fscale;
        if (mask && mask->dtype != DataType::kBool) {
          s += load_as<float>(mask->dtype, mask->data, moff[static_cast<size_t>(j)]);
        }
        mx = std::max(mx, s);
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      if (mx != neg_inf) {  // else every position is masked: the row stays zero
        for (float& s : score) s -= mx;
        vmath::exp(score.data(), score.data(), S);  // exp(-inf) is 0: masked keys weigh nothing
        double sum = 0;
        for (float w : score) sum += w;
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < S; ++j) {
          const float w = score[static_cast<size_t>(j)] * inv;
          if (w != 0) vmath::axpy(w, vmat + j * Ev, acc.data(), Ev);
        }
      }
      for (int64_t e = 0; e < Ev; ++e)
        store_as<float>(out.dtype, out.data, r * Ev + e, acc[static_cast<size_t>(e)]);
    }
  }
}

// Packed heads: columns [col + h * E, + E) of a [B, rows, width] operand are head h.
// Gathers q, k, v as [B, heads, rows, E] f32, attends, and scatters the result into
// [B, L, heads * E].
void attend_packed(const AttentionParams& p, const std::vector<TensorView>& in,
                   const TensorView& out) {
  const int64_t B = out.shape[0], L = out.shape[1], H = p.heads, E = p.head_size;
  std::vector<float> bufs[4];
  TensorView views[4];
  for (size_t i = 0; i < 3; ++i) {
    const int64_t rows = in[i].shape[1], width = in[i].shape[2], col = p.columns[i];
    std::vector<float> staged;
    const float* src = as_float(in[i], staged);
    bufs[i].resize(static_cast<size_t>(B * H * rows * E));
    float* dst = bufs[i].data();
#pragma omp parallel for collapse(2) if (B * H * rows * E > kParallelWork)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t r = 0; r < rows; ++r) {
          const float* row = src + (b * rows + r) * width + col + h * E;
          std::copy(row, row + E, dst + ((b * H + h) * rows + r) * E);
        }
      }
    }
    views[i] = TensorView{DataType::kF32, {B, H, rows, E}, dst};
  }
  bufs[3].resize(static_cast<size_t>(B * H * L * E));
  views[3] = TensorView{DataType::kF32, {B, H, L, E}, bufs[3].data()};
  attend(p, views[0], views[1], views[2], nullptr, views[3]);
  const float* o = bufs[3].data();
#pragma omp parallel for collapse(2) if (out.numel() > kParallelWork)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t l = 0; l < L; ++l) {
      for (int64_t h = 0; h < H; ++h) {
        const float* src = o + ((b * H + h) * L + l) * E;
        const int64_t dst = ((b * L + l) * H + h) * E;
        for (int64_t e = 0; e < E; ++e) store_as<float>(out.dtype, out.data, dst + e, src[e]);
      }
    }
  }
}

void attention_kernel(KernelArgs& args) {
  const auto& p = std::get<AttentionParams>(args.layer.params);
  const TensorView& out = args.outputs[0];
  if (out.numel() == 0) return;
  if (p.heads > 0) return attend_packed(p, args.inputs, out);
  attend(p, args.inputs[0], args.inputs[1], args.inputs[2], p.has_mask ? &args.inputs[3] : nullptr,
         out);
}

}  // namespace

void register_attention(KernelTable& t) {
  t.set<AttentionParams>(attention_kernel);
}

}  // namespace kiln::engine::cpu
