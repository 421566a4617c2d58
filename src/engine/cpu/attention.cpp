// CPU kernel of scaled dot-product attention: softmax(q k^T * scale + mask) v in blocks of query
// rows, in float: the two products through oneDNN's sgemm, the softmax on the CPU's widest vectors
// (vector_math.h); packed heads are read and written in place as strided matrices. Rows whose every
// position is masked out produce zeros, as torch's math path (safe softmax) does, rather than NaN.
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
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

// The matrices of one operand: that of batch index b starts at data + offset[b], with rows `ld`
// floats apart (packed heads are column windows of wider rows).
struct Matrices {
  const float* data;
  std::vector<int64_t> offset;
  int64_t ld;
  const float* at(int64_t b) const { return data + offset[static_cast<size_t>(b)]; }
};

// One attention problem over `nb` batch indices: q [L, E], k [S, E], v [S, Ev] per index; the
// result [L, Ev] goes to out (rows `ld_out` apart) at out_offset[b]. `mask` (may be null) is
// indexed through mask_map over [batch..., L, S].
struct Problem {
  int64_t nb, L, S, E, Ev;
  Matrices q, k, v;
  float* out;
  std::vector<int64_t> out_offset;
  int64_t ld_out;
  const TensorView* mask = nullptr;
  std::unique_ptr<BroadcastMap> mask_map;
};

// C = alpha op(A) B (row-major; op(A) = A or, with `trans_b`, B read as its transpose) through
// oneDNN's sgemm, on its own AVX-512/AVX2 kernels; inside the kernel's parallel region its own
// (nested) parallel region runs on the calling thread. False where oneDNN refused the arguments.
bool sgemm(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float* c, int64_t ldc) {
  return dnnl_sgemm('N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, 0.f, c, ldc) ==
         dnnl_success;
}

// Query rows a task takes: as many as keep the threads busy (4 tasks a thread) and the task's
// scores within 1 MiB, between 16 and 128.
int64_t row_block(int64_t nb, int64_t L, int64_t S) {
  const int64_t threads = omp_get_max_threads();
  int64_t rows = 128;
  while (rows > 16 && (nb * ((L + rows - 1) / rows) < 4 * threads || rows * S > (1 << 18)))
    rows /= 2;
  return rows;
}

// softmax(q k^T * scale + mask) v, in blocks of query rows: the block's scores are one GEMM
// against k read transposed, masked and soft-maxed row by row, and the block's output one GEMM
// of the weights with v. Fully masked rows come out zero.
void attend(const AttentionParams& p, const Problem& pr, const std::string& layer) {
  const int64_t nb = pr.nb, L = pr.L, S = pr.S, E = pr.E, Ev = pr.Ev;
  const float scale =
      static_cast<float>(p.scale != 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(E)));
  const int64_t block = row_block(nb, L, S);
  const int64_t blocks = (L + block - 1) / block, tasks = nb * blocks;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const TensorView* mask = pr.mask;
  if (S == 0) {  // no keys: every row's weights are empty, so its output is zeros
    for (int64_t b = 0; b < nb; ++b) {
      float* o = pr.out + pr.out_offset[static_cast<size_t>(b)];
      for (int64_t i = 0; i < L; ++i) std::fill(o + i * pr.ld_out, o + i * pr.ld_out + Ev, 0.f);
    }
    return;
  }
  std::atomic<bool> failed{false};
#pragma omp parallel if (tasks > 1 && nb * L * S * (E + Ev) > kParallelWork)
  {
    std::vector<float> score(static_cast<size_t>(block * S));
    std::vector<int64_t> moff(static_cast<size_t>(mask ? S : 0));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t b = t / blocks, i0 = t % blocks * block;
      const int64_t rows = std::min(block, L - i0);
      if (E == 0) {  // empty dot products: every score 0
        std::fill(score.begin(), score.end(), 0.f);
      } else if (!sgemm(true, rows, S, E, scale, pr.q.at(b) + i0 * pr.q.ld, pr.q.ld, pr.k.at(b),
                        pr.k.ld, score.data(), S)) {
        failed = true;
        continue;
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        float* s = score.data() + r * S;
        // Causal: keys after the query's position weigh nothing, so the row ends at i + 1.
        const int64_t n = p.causal ? std::min(S, i + 1) : S;
        if (mask) {
          pr.mask_map->offsets((b * L + i) * S, n, moff.data());
          if (mask->dtype == DataType::kBool) {
            for (int64_t j = 0; j < n; ++j) {
              if (!load_as<int64_t>(mask->dtype, mask->data, moff[static_cast<size_t>(j)]))
                s[j] = neg_inf;
            }
          } else {
            for (int64_t j = 0; j < n; ++j)
              s[j] += load_as<float>(mask->dtype, mask->data, moff[static_cast<size_t>(j)]);
          }
        }
        // A row with no key left (every position masked) gets zero weights, so a zero output.
        if (!vmath::softmax_or_zero(s, n)) std::fill(s, s + n, 0.f);
        std::fill(s + n, s + S, 0.f);
      }
      if (!sgemm(false, rows, Ev, S, 1.f, score.data(), S, pr.v.at(b), pr.v.ld,
                 pr.out + pr.out_offset[static_cast<size_t>(b)] + i0 * pr.ld_out, pr.ld_out))
        failed = true;
    }
  }
  KILN_CHECK(!failed, Unsupported, "layer `", layer, "`: oneDNN's sgemm refused the attention's ",
             L, "x", S, "x", E, " products");
}

// The problem of attention over [batch..., rows, E] operands (mask may be null), into `out` (f32).
Problem plain_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView* mask, const float* qd, const float* kd, const float* vd,
                      float* out, const Shape& out_shape) {
  const Shape batch(out_shape.begin(), out_shape.end() - 2);
  Problem pr;
  pr.nb = volume(batch);
  pr.L = q.shape[q.shape.size() - 2];
  pr.E = q.shape.back();
  pr.S = k.shape[k.shape.size() - 2];
  pr.Ev = v.shape.back();
  const auto scaled = [](std::vector<int64_t> idx, int64_t size) {
    for (int64_t& i : idx) i *= size;
    return idx;
  };
  pr.q = {qd, scaled(batch_offsets(q, batch), pr.L * pr.E), pr.E};
  pr.k = {kd, scaled(batch_offsets(k, batch), pr.S * pr.E), pr.E};
  pr.v = {vd, scaled(batch_offsets(v, batch), pr.S * pr.Ev), pr.Ev};
  pr.out = out;
  pr.out_offset.resize(static_cast<size_t>(pr.nb));
  for (int64_t b = 0; b < pr.nb; ++b) pr.out_offset[static_cast<size_t>(b)] = b * pr.L * pr.Ev;
  pr.ld_out = pr.Ev;
  if (mask) {
    Shape weights = batch;
    weights.push_back(pr.L);
    weights.push_back(pr.S);
    pr.mask = mask;
    pr.mask_map = std::make_unique<BroadcastMap>(mask->shape, weights);
  }
  return pr;
}

// Packed heads: columns [col + h * E, + E) of a [B, rows, width] operand are head h (of k and v:
// h / (heads / kv_heads) with grouped-query attention), and the result is [B, L, heads * E]: the
// heads are read and written in place, as strided matrices; a mask broadcasts to [B, heads, L, S].
Problem packed_problem(const AttentionParams& p, const float* const data[3],
                       const std::vector<TensorView>& in, float* out, const Shape& out_shape) {
  const int64_t B = out_shape[0], L = out_shape[1], H = p.heads, E = p.head_size;
  Problem pr;
  pr.nb = B * H;
  pr.L = L;
  pr.S = in[1].shape[1];
  pr.E = E;
  pr.Ev = E;
  Matrices* ops[3] = {&pr.q, &pr.k, &pr.v};
  // Grouped-query attention: query head h reads key/value head h / group.
  const int64_t group = p.kv_heads > 0 ? H / p.kv_heads : 1;
  for (size_t i = 0; i < 3; ++i) {
    const int64_t rows = in[i].shape[1], width = in[i].shape[2], col = p.columns[i];
    ops[i]->data = data[i];
    ops[i]->ld = width;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        ops[i]->offset.push_back(b * rows * width + col + (i == 0 ? h : h / group) * E);
      }
    }
  }
  pr.out = out;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) pr.out_offset.push_back(b * L * H * E + h * E);
  }
  pr.ld_out = H * E;
  if (p.has_mask) {
    pr.mask = &in[3];
    pr.mask_map = std::make_unique<BroadcastMap>(in[3].shape, Shape{B, H, L, pr.S});
  }
  return pr;
}

void attention_kernel(KernelArgs& args) {
  const auto& p = std::get<AttentionParams>(args.layer.params);
  const TensorView& out = args.outputs[0];
  if (out.numel() == 0) return;
  const auto& in = args.inputs;
  // Operands in any float dtype run as f32 (converted copies); so does the result, stored back.
  std::vector<float> staged[3], result;
  const float* data[3];
  for (size_t i = 0; i < 3; ++i) data[i] = as_float(in[i], staged[i]);
  float* o = out.dtype == DataType::kF32 ? out.as<float>() : nullptr;
  if (o == nullptr) {
    result.resize(static_cast<size_t>(out.numel()));
    o = result.data();
  }
  attend(p,
         p.heads > 0 ? packed_problem(p, data, in, o, out.shape)
                     : plain_problem(in[0], in[1], in[2], p.has_mask ? &in[3] : nullptr, data[0],
                                     data[1], data[2], o, out.shape),
         args.layer.name);
  for (size_t i = 0; i < result.size(); ++i)
    store_as<float>(out.dtype, out.data, static_cast<int64_t>(i), result[i]);
}

}  // namespace

void register_attention(KernelTable& t) {
  t.set<AttentionParams>(attention_kernel);
}

}  // namespace kiln::engine::cpu
