// CPU kernels of gather (index_select/embedding and torch.gather) and scatter (torch.scatter,
// scatter_add and scatter_reduce's prod/amax/amin). Indices are validated before any data moves, so
// bad indices throw, never crash.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

#include "engine/cpu/convert.h"
#include "util/errors.h"

namespace kiln::engine::cpu {
namespace {

constexpr int64_t kParallelElements = 64 * 1024;

// Indices as int64 with negative ones wrapped; throws naming the layer if any is out of range.
std::vector<int64_t> checked_indices(const std::string& layer, const TensorView& idx, int64_t dim,
                                     int axis) {
  std::vector<int64_t> out(static_cast<size_t>(idx.numel()));
  for (int64_t i = 0; i < idx.numel(); ++i) {
    const int64_t v = load_as<int64_t>(idx.dtype, idx.data, i);
    const int64_t k = v < 0 ? v + dim : v;
    KILN_CHECK(k >= 0 && k < dim, InvalidArgument, "layer `", layer, "`: index ", v,
               " is out of range for axis ", axis, " of size ", dim);
    out[static_cast<size_t>(i)] = k;
  }
  return out;
}

// Offset (in elements) in a tensor with `strides` of the element at multi-index `flat` of
// `shape`, leaving out dim `skip`.
int64_t offset_of(const Shape& shape, int64_t flat, const std::vector<int64_t>& strides,
                  size_t skip) {
  int64_t off = 0;
  for (size_t d = shape.size(); d-- > 0;) {
    if (d != skip) off += (flat % shape[d]) * strides[d];
    flat /= shape[d];
  }
  return off;
}

// A gather of single elements (rows of 1, 2, 4 or 8 bytes) as typed words, in tasks of an outer
// block's run of kWordRun outputs: the memcpy per row below costs a call and a division per
// element, several times the copy (gather_chains' element gathers: shufflenet's channel shuffle).
constexpr int64_t kWordRun = 256;

template <class U>
void gather_words(const void* data, void* out, int64_t outer, int64_t dim,
                  const std::vector<int64_t>& k) {
  const U* __restrict src = static_cast<const U*>(data);
  U* __restrict dst = static_cast<U*>(out);
  const int64_t n = static_cast<int64_t>(k.size());
  const std::vector<int32_t> k32(k.begin(), k.end());  // (indices below dim, which is an int)
  const int32_t* __restrict idx = k32.data();
  const int64_t runs = (n + kWordRun - 1) / kWordRun;
#pragma omp parallel for collapse(2) if (outer * n > kParallelElements)
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t r = 0; r < runs; ++r) {
      const U* from = src + o * dim;
      U* to = dst + o * n;
      const int64_t end = std::min(n, (r + 1) * kWordRun);
      for (int64_t j = r * kWordRun; j < end; ++j) to[j] = from[idx[j]];
    }
  }
}

void gather_kernel(KernelArgs& args) {
  const auto& p = std::get<GatherParams>(args.layer.params);
  const TensorView &data = args.inputs[0], &idx = args.inputs[1], &out = args.outputs[0];
  const int axis = normalize_axis(p.axis, data.shape.size(), args.layer.name);
  const size_t a = static_cast<size_t>(axis);
  const auto k = checked_indices(args.layer.name, idx, data.shape[a], axis);
  if (out.numel() == 0) return;
  const size_t es = dtype_size(data.dtype);
  const uint8_t* src = static_cast<const uint8_t*>(data.data);
  uint8_t* dst = static_cast<uint8_t*>(out.data);
  if (p.mode == GatherMode::kDefault) {
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < a; ++d) outer *= data.shape[d];
    for (size_t d = a + 1; d < data.shape.size(); ++d) inner *= data.shape[d];
    const int64_t n = static_cast<int64_t>(k.size()), dim = data.shape[a];
    const size_t row = static_cast<size_t>(inner) * es;
    // Typed words where rows are single elements (indices fit 32 bits).
    if (dim <= INT32_MAX) {
      switch (row) {
        case 1:
          return gather_words<uint8_t>(data.data, out.data, outer, dim, k);
        case 2:
          return gather_words<uint16_t>(data.data, out.data, outer, dim, k);
        case 4:
          return gather_words<uint32_t>(data.data, out.data, outer, dim, k);
        case 8:
          return gather_words<uint64_t>(data.data, out.data, outer, dim, k);
        default:
          break;
      }
    }
#pragma omp parallel for if (out.numel() > kParallelElements)
    for (int64_t t = 0; t < outer * n; ++t) {
      const int64_t o = t / n, j = t % n;
      std::memcpy(dst + static_cast<size_t>(t) * row,
                  src + static_cast<size_t>(o * dim + k[static_cast<size_t>(j)]) * row, row);
    }
    return;
  }
  const auto strides = contiguous_strides(data.shape);
#pragma omp parallel for if (out.numel() > kParallelElements)
  for (int64_t t = 0; t < out.numel(); ++t) {
    const int64_t off =
        offset_of(idx.shape, t, strides, a) + k[static_cast<size_t>(t)] * strides[a];
    std::memcpy(dst + static_cast<size_t>(t) * es, src + static_cast<size_t>(off) * es, es);
  }
}

template <class C>
void scatter_reduce(ScatterReduce reduce, const TensorView& out, int64_t dst, const TensorView& upd,
                    int64_t src) {
  store_as<C>(out.dtype, out.data, dst,
              scatter_combine<C>(reduce, load_as<C>(out.dtype, out.data, dst),
                                 load_as<C>(upd.dtype, upd.data, src)));
}

void scatter_kernel(KernelArgs& args) {
  const auto& p = std::get<ScatterParams>(args.layer.params);
  const TensorView &data = args.inputs[0], &idx = args.inputs[1], &upd = args.inputs[2];
  const TensorView& out = args.outputs[0];
  const int axis = normalize_axis(p.axis, data.shape.size(), args.layer.name);
  const size_t a = static_cast<size_t>(axis);
  const auto k = checked_indices(args.layer.name, idx, data.shape[a], axis);
  const size_t es = dtype_size(data.dtype);
  if (out.data != data.data) {
    std::memcpy(out.data, data.data, static_cast<size_t>(data.numel()) * es);
  }
  if (idx.numel() == 0) return;
  // Index positions that differ outside `axis` write different output elements, so they run in
  // parallel; positions along `axis` run in order, so the last duplicate wins as in torch.
  int64_t inner = 1;
  for (size_t d = a + 1; d < idx.shape.size(); ++d) inner *= idx.shape[d];
  const int64_t len = idx.shape[a], lanes = idx.numel() / len;
  const auto ds = contiguous_strides(data.shape), us = contiguous_strides(upd.shape);
  const bool floating = is_floating(data.dtype);
  uint8_t* dst = static_cast<uint8_t*>(out.data);
  const uint8_t* src = static_cast<const uint8_t*>(upd.data);
#pragma omp parallel for if (idx.numel() > kParallelElements)
  for (int64_t lane = 0; lane < lanes; ++lane) {
    const int64_t t0 = (lane / inner) * len * inner + lane % inner;
    const int64_t doff = offset_of(idx.shape, t0, ds, a);
    const int64_t uoff = offset_of(idx.shape, t0, us, a);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t to = doff + k[static_cast<size_t>(t0 + j * inner)] * ds[a];
      const int64_t from = uoff + j * us[a];
      if (p.reduce == ScatterReduce::kNone) {
        std::memcpy(dst + static_cast<size_t>(to) * es, src + static_cast<size_t>(from) * es, es);
      } else if (floating) {
        scatter_reduce<float>(p.reduce, out, to, upd, from);
      } else {
        scatter_reduce<int64_t>(p.reduce, out, to, upd, from);
      }
    }
  }
}

}  // namespace

void register_gather(KernelTable& t) {
  t.set<GatherParams>(gather_kernel);
  t.set<ScatterParams>(scatter_kernel);
}

}  // namespace kiln::engine::cpu
