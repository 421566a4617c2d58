// Host-side setup of layers that both backends' kernels share, computed once per shape before a
// kernel runs: what torch's rules make of a layer's parameters at concrete shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/layers.h"

namespace kiln::engine {

// Resize: the source indices and weights of each output index along spatial dim `d` (`taps` of
// each per output index), following torch.nn.functional.interpolate's index and weight rules.
struct ResizeTaps {
  int taps = 1;
  std::vector<int64_t> index;
  std::vector<float> weight;
};
ResizeTaps resize_taps(const ResizeParams& p, size_t d, int64_t in, int64_t out);

// Slice of a dense `in`: the element offset of the first output element, and per dim the input
// stride one output step moves (the output walks the input as a strided view).
struct SliceView {
  int64_t offset = 0;
  std::vector<int64_t> strides;
};
SliceView slice_view(const std::string& layer, const SliceParams& p, const Shape& in);

// Concat of `inputs`: the output is `outer` rows of
// `row` bytes, each input contributing `chunk[k]` bytes of each row, starting at byte `at[k]`.
struct ConcatRows {
  int64_t outer = 1;
  size_t row = 0;
  std::vector<size_t> chunk, at;
};
ConcatRows concat_rows(const std::string& layer, const ConcatParams& p,
                       const std::vector<TensorRef>& inputs);
// The bytes from one row of a concat's output to the next, and from one of each input's rows
// to its next: the rows themselves where dense, the pitch of those placed in wider tensors
// (TensorRef), whose rows must be the concat's (InternalError otherwise).
struct ConcatPitches {
  size_t out = 0;
  std::vector<size_t> in;
};
ConcatPitches concat_pitches(const std::string& layer, const ConcatRows& r,
                             const std::vector<TensorRef>& inputs, const TensorRef& out);

// A shape seen as [outer, n, inner] around `axis` (reductions and scans along one axis).
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at(const Shape& s, int axis);
// Top-k's input split at its axis; InvalidArgument unless 0 <= k <= the axis' size.
AxisSplit topk_split(const std::string& layer, const TopKParams& p, const Shape& in);

// Matmul of dense a and b at concrete shapes, as torch.matmul: rank-1 operands promoted (a to
// [1, K], b to [K, 1]), batch dims broadcast, the layer's transposes read as strides. The result
// is [batch..., M, N] in memory whatever dims the output drops; its matrix t (row-major over
// `batch`) reads a's element (i, p) at a_offset(t) + i * a_row + p * a_col and b's element (p, j)
// at b_offset(t) + p * b_row + j * b_col, where an operand's offset is the sum over batch dims of
// the dim's index times its batch stride (0 where it broadcasts).
struct MatMulGeometry {
  int64_t m = 0, n = 0, k = 0;
  Shape batch;
  std::vector<int64_t> a_batch_strides, b_batch_strides;
  int64_t a_row = 0, a_col = 0, b_row = 0, b_col = 0;
  int64_t batches() const { return volume(batch); }
};
MatMulGeometry matmul_geometry(const MatMulParams& p, const Shape& a, const Shape& b);

}  // namespace kiln::engine
