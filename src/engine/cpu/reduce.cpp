// CPU kernels of the reduce family: reduce, argmax/argmin, topk, scan. Floating data accumulates
// in double (sums, products) so results match a float64 reference to the output's precision;
// integer data accumulates in int64 with wrap-around, as torch does.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/cpu/convert.h"
#include "engine/layers/setup.h"
#include "util/errors.h"

namespace kiln::engine::cpu {

namespace {

constexpr int64_t kParallelWork = 32 * 1024;

inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// Reduces the elements at base + offsets[...] of `in` into one value, stored at `o` of `out`.
template <class C>
void reduce_one(ReduceOp op, const TensorView& in, int64_t base, const std::vector<int64_t>& offs,
                const TensorView& out, int64_t o) {
  const DataType t = in.dtype;
  const void* d = in.data;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: {
      C acc = 0;
      for (int64_t off : offs) {
        if constexpr (std::is_same_v<C, double>) {
          acc += load_as<double>(t, d, base + off);
        } else {
          acc = wrap_add(acc, load_as<int64_t>(t, d, base + off));
        }
      }
      if (op == ReduceOp::kMean) acc = acc / static_cast<C>(offs.size());
      store_as<C>(out.dtype, out.data, o, acc);
      break;
    }
    case ReduceOp::kProd: {
      C acc = 1;
      for (int64_t off : offs) {
        if constexpr (std::is_same_v<C, double>) {
          acc *= load_as<double>(t, d, base + off);
        } else {
          acc = wrap_mul(acc, load_as<int64_t>(t, d, base + off));
        }
      }
      store_as<C>(out.dtype, out.data, o, acc);
      break;
    }
    case ReduceOp::kMax:
    case ReduceOp::kMin: {
      const bool is_max = op == ReduceOp::kMax;
      C acc = load_as<C>(t, d, base + offs[0]);
      for (int64_t off : offs) {
        const C v = load_as<C>(t, d, base + off);
        if constexpr (std::is_same_v<C, double>) {
          if (std::isnan(acc)) break;  // NaN propagates, as in torch
          if (std::isnan(v) || (is_max ? v > acc : v < acc)) acc = v;
        } else {
          acc = is_max ? std::max(acc, v) : std::min(acc, v);
        }
      }
      store_as<C>(out.dtype, out.data, o, acc);
      break;
    }
    case ReduceOp::kAny:
    case ReduceOp::kAll: {
      const bool any = op == ReduceOp::kAny;
      bool acc = !any;
      for (int64_t off : offs) {
        if ((load_as<C>(t, d, base + off) != C{}) == any) {
          acc = any;
          break;
        }
      }
      store_as<int64_t>(out.dtype, out.data, o, acc);
      break;
    }
  }
}

// Sum or mean of f32 over one run of adjacent dims followed by kept ones, [outer, R, inner] with
// the R dims reduced: channels-last global pooling and squeeze-excitation. The generic loop below
// gathers each output's R elements one at a time; here each of the R rows of `inner` elements is
// added into a row of double accumulators, in the generic loop's order, so the
// results are the same bits. False where the layer is not of that form.
bool reduce_middle_dims(ReduceOp op, const TensorView& in, const TensorView& out,
                        const std::vector<bool>& reduced) {
  if (in.dtype != DataType::kF32 || (op != ReduceOp::kSum && op != ReduceOp::kMean)) return false;
  const Shape& x = in.shape;
  const auto first = std::find(reduced.begin(), reduced.end(), true) - reduced.begin();
  const auto end = std::find(reduced.begin() + first, reduced.end(), false) - reduced.begin();
  if (end == static_cast<int64_t>(x.size()) ||
      std::find(reduced.begin() + end, reduced.end(), true) != reduced.end())
    return false;  // no kept inner dims, or reduced dims apart
  int64_t outer = 1, R = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
    (d < first ? outer : d < end ? R : inner) *= x[static_cast<size_t>(d)];
  }
  if (R == 0 || inner < 8) return false;
  constexpr int64_t kChunk = 256;  // accumulators a task keeps: one L1-sized row piece
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  const float* src = in.as<const float>();
#pragma omp parallel for if (outer * chunks > 1 && outer * R * inner > kParallelWork)
  for (int64_t t = 0; t < outer * chunks; ++t) {
    const int64_t o = t / chunks, c0 = t % chunks * kChunk, n = std::min(kChunk, inner - c0);
    double acc[kChunk] = {};
    for (int64_t r = 0; r < R; ++r) {
      const float* row = src + (o * R + r) * inner + c0;
      for (int64_t c = 0; c < n; ++c) acc[c] += row[c];
    }
    for (int64_t c = 0; c < n; ++c) {
      const double v = op == ReduceOp::kMean ? acc[c] / static_cast<double>(R) : acc[c];
      store_as<double>(out.dtype, out.data, o * inner + c0 + c, v);
    }
  }
  return true;
}

void reduce_kernel(KernelArgs& args) {
  const auto& p = std::get<ReduceParams>(args.layer.params);
  const TensorView& in = args.inputs[0];
  const TensorView& out = args.outputs[0];
  const Shape& x = in.shape;
  std::vector<bool> reduced(x.size(), p.axes.empty());
  for (int64_t a : p.axes)
    reduced[static_cast<size_t>(normalize_axis(a, x.size(), "reduce"))] = true;
  if (reduce_middle_dims(p.op, in, out, reduced)) return;
  const auto strides = contiguous_strides(x);
  // Offsets of every reduced position, and the kept dims (with strides) that address outputs.
  std::vector<int64_t> offs{0};
  Shape kept, kept_strides;
  for (size_t d = 0; d < x.size(); ++d) {
    if (!reduced[d]) {
      kept.push_back(x[d]);
      kept_strides.push_back(strides[d]);
      continue;
    }
    std::vector<int64_t> next;
    next.reserve(offs.size() * static_cast<size_t>(x[d]));
    for (int64_t o : offs) {
      for (int64_t i = 0; i < x[d]; ++i) next.push_back(o + i * strides[d]);
    }
    offs.swap(next);
  }
  const int64_t num_out = out.numel();
  KILN_CHECK(!offs.empty() || (p.op != ReduceOp::kMax && p.op != ReduceOp::kMin), InvalidArgument,
             "layer `", args.layer.name, "`: max/min over a zero-size dim");
  const bool floating = is_floating(in.dtype);
  const bool parallel = num_out > 1 && num_out * static_cast<int64_t>(offs.size()) > kParallelWork;
#pragma omp parallel for if (parallel)
  for (int64_t o = 0; o < num_out; ++o) {
    int64_t base = 0, rem = o;
    for (size_t k = kept.size(); k-- > 0;) {
      base += (rem % kept[k]) * kept_strides[k];
      rem /= kept[k];
    }
    if (floating) {
      reduce_one<double>(p.op, in, base, offs, out, o);
    } else {
      reduce_one<int64_t>(p.op, in, base, offs, out, o);
    }
  }
}

template <class C>
void argmax_typed(const TensorView& in, const TensorView& out, const AxisSplit& s, bool is_min) {
  const int64_t rows = s.outer * s.inner;
#pragma omp parallel for if (rows * s.n > kParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = (r / s.inner) * s.n * s.inner + r % s.inner;
    out.as<int64_t>()[r] = arg_best<C>(in.dtype, in.data, base, s.n, s.inner, is_min);
  }
}

void argmax_kernel(KernelArgs& args) {
  const auto& p = std::get<ArgMaxParams>(args.layer.params);
  const TensorView& in = args.inputs[0];
  const AxisSplit s = split_at(in.shape, normalize_axis(p.axis, in.shape.size(), "argmax"));
  KILN_CHECK(s.n > 0 || s.outer * s.inner == 0, InvalidArgument, "layer `", args.layer.name,
             "`: argmax over a zero-size dim");
  if (is_floating(in.dtype)) {
    argmax_typed<float>(in, args.outputs[0], s, p.min);
  } else {
    argmax_typed<int64_t>(in, args.outputs[0], s, p.min);
  }
}

// The row-major indices of the nonzero elements (NaN counts: it is not 0), then their count.
void nonzero_kernel(KernelArgs& args) {
  const TensorView& in = args.inputs[0];
  const int64_t n = in.numel(), rank = static_cast<int64_t>(in.shape.size());
  int64_t* out = args.outputs[0].as<int64_t>();
  int64_t count = 0;
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (load_as<double>(in.dtype, in.data, i) != 0) {
      std::copy(index.begin(), index.end(), out + count * rank);
      ++count;
    }
    for (int64_t d = rank - 1; d >= 0; --d) {  // the next element's index
      if (++index[static_cast<size_t>(d)] < in.shape[static_cast<size_t>(d)]) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
  *args.outputs[1].as<int64_t>() = count;
}

// Orders (value, index) pairs for topk: NaN above everything (as torch), ties by lower index.
template <class C>
struct TopKOrder {
  bool largest;
  bool operator()(const std::pair<C, int64_t>& a, const std::pair<C, int64_t>& b) const {
    if constexpr (std::is_same_v<C, float>) {
      const bool na = std::isnan(a.first), nb = std::isnan(b.first);
      if (na || nb) {
        if (na && nb) return a.second < b.second;
        return largest ? na : nb;
      }
    }
    if (a.first != b.first) return largest ? a.first > b.first : a.first < b.first;
    return a.second < b.second;
  }
};

template <class C>
void topk_typed(const TopKParams& p, const TensorView& in, const TensorView& values,
                const TensorView& indices, const AxisSplit& s) {
  const int64_t rows = s.outer * s.inner, k = p.k;
#pragma omp parallel if (rows * s.n > kParallelWork)
  {
    std::vector<std::pair<C, int64_t>> row(static_cast<size_t>(s.n));
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t outer = r / s.inner, inner = r % s.inner;
      const int64_t base = outer * s.n * s.inner + inner;
      for (int64_t i = 0; i < s.n; ++i) {
        row[static_cast<size_t>(i)] = {load_as<C>(in.dtype, in.data, base + i * s.inner), i};
      }
      std::partial_sort(row.begin(), row.begin() + k, row.end(), TopKOrder<C>{p.largest});
      const int64_t out_base = outer * k * s.inner + inner;
      for (int64_t i = 0; i < k; ++i) {
        store_as<C>(values.dtype, values.data, out_base + i * s.inner,
                    row[static_cast<size_t>(i)].first);
        indices.as<int64_t>()[out_base + i * s.inner] = row[static_cast<size_t>(i)].second;
      }
    }
  }
}

void topk_kernel(KernelArgs& args) {
  const auto& p = std::get<TopKParams>(args.layer.params);
  const TensorView& in = args.inputs[0];
  const AxisSplit s = topk_split(args.layer.name, p, in.shape);
  if (is_floating(in.dtype)) {
    topk_typed<float>(p, in, args.outputs[0], args.outputs[1], s);
  } else {
    topk_typed<int64_t>(p, in, args.outputs[0], args.outputs[1], s);
  }
}

template <class C>
void scan_typed(const ScanParams& p, const TensorView& in, KernelArgs& args, const AxisSplit& s) {
  const TensorView& out = args.outputs[0];
  int64_t* index = args.outputs.size() > 1 ? args.outputs[1].as<int64_t>() : nullptr;
  const int64_t rows = s.outer * s.inner;
#pragma omp parallel for if (rows * s.n > kParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = (r / s.inner) * s.n * s.inner + r % s.inner;
    scan_row<C>(p.op, p.exclusive, p.reverse, in.dtype, in.data, out.dtype, out.data, index, base,
                s.n, s.inner);
  }
}

void scan_kernel(KernelArgs& args) {
  const auto& p = std::get<ScanParams>(args.layer.params);
  const TensorView& in = args.inputs[0];
  const AxisSplit s = split_at(in.shape, normalize_axis(p.axis, in.shape.size(), "scan"));
  if (is_floating(in.dtype)) {
    scan_typed<double>(p, in, args, s);
  } else {
    scan_typed<int64_t>(p, in, args, s);
  }
}

}  // namespace

void register_reduce(KernelTable& t) {
  t.set<ReduceParams>(reduce_kernel);
  t.set<ArgMaxParams>(argmax_kernel);
  t.set<TopKParams>(topk_kernel);
  t.set<ScanParams>(scan_kernel);
  t.set<NonZeroParams>(nonzero_kernel);
}

}  // namespace kiln::engine::cpu
