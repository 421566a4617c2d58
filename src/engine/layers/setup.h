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

// A shape seen as [outer, n, inner] around `axis` (reductions and scans along one axis).
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at(const Shape& s, int axis);
// Top-k's input split at its axis; InvalidArgument unless 0 <= k <= the axis' size.
AxisSplit topk_split(const std::string& layer, const TopKParams& p, const Shape& in);

}  // namespace kiln::engine
