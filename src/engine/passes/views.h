// Views of tensors, traced through shuffles and slices: where each element of a view sits in the
// tensor it comes from. The head-folding pass reads attention operands as views of projections
// (attention_heads.h), and the shuffle passes compose chains of shuffles into one copy.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/network.h"

namespace kiln::engine {

// The permutation (identity when empty), if it is one of n dims.
std::optional<std::vector<size_t>> permutation(const std::vector<int64_t>& perm, size_t n);

// A tensor's elements as positions in a base tensor, dim by dim: each dim a list of (size,
// stride) modes, major first (its index splits into their indices, mixed radix). Strides alone
// cannot say where a view that merges dims not adjacent in memory puts its elements (MHA's
// [L, B * H, E] of a batch-first projection); modes can, and a later split gives the dims back.
using Mode = std::pair<int64_t, int64_t>;
using Modes = std::vector<std::vector<Mode>>;

// A dense tensor of `shape` (dims of size 1 have no mode).
Modes contiguous_modes(const Shape& shape);

// The dims regrouped into `to` (a reshape): modes split where a dim of `to` ends inside one,
// which must then divide it.
std::optional<Modes> reshape_modes(const Modes& in, const Shape& to);

// One dim's modes as a single stride, if they coalesce (each major mode's stride is the minor
// one's span); 0 for a dim of size 1.
std::optional<int64_t> single_stride(const std::vector<Mode>& dim);

// Every dim's single stride (single_stride), if each has one.
std::optional<std::vector<int64_t>> single_strides(const Modes& m);

// The modes after shuffle `p` (permute, reshape, permute) of an input of shape `in`.
std::optional<Modes> shuffle_modes(const ShuffleParams& p, const Modes& m, const Shape& in,
                                   const Shape& out);

// The modes of a shuffle's input (shape `in`) from those of its output (shape `out`): the
// shuffle that undoes it applied to them.
std::optional<Modes> shuffle_modes_back(const ShuffleParams& p, const Modes& m, const Shape& in,
                                        const Shape& out);

// A slice (shapes `in` -> `out`) applied to `m`, its start added to `offset`: each sliced dim
// must be one mode (or coalesce into one). False where it cannot be traced.
bool slice_modes(const SliceParams& p, const Shape& in, const Shape& out, Modes& m,
                 int64_t& offset);

// A shuffle is permute(first_perm) -> reshape -> permute(second_perm). Its input (shape `in`)
// laid out with `strides` gives its output (shape `out`) these strides, if the reshape is a view.
std::optional<std::vector<int64_t>> forward_shuffle(const ShuffleParams& p, const Shape& in,
                                                    const std::vector<int64_t>& strides,
                                                    const Shape& out);

// The strides of a view of `shape` laid out with `strides` as `target` (torch's view rules),
// if one exists without copying.
std::optional<std::vector<int64_t>> view_strides(const Shape& shape,
                                                 const std::vector<int64_t>& strides,
                                                 const Shape& target);

// What a chain of shuffles does, as one: `move` (a shuffle of the source that moves elements, or
// keeps them in order when `moves` is false: then a reshape) gives `moved`, and where that is
// not the result's shape a reshape (a view) follows.
struct ComposedShuffle {
  ShuffleParams move;
  Shape moved;
  bool moves = false;
};

// The shuffle that puts the elements of a dense tensor of static `source` shape where modes `m`
// of a result of shape `out` say, if `m` reads each element of the source once (a permutation of
// the source's elements, not a broadcast or a crop) and its permutation takes at most `max_rank`
// dims once adjacent dims that stay adjacent are merged.
std::optional<ComposedShuffle> shuffle_for_modes(const Shape& source, const Modes& m,
                                                 const Shape& out, size_t max_rank = 8);

// A chain of shuffles traced one shuffle at a time (trace_shuffle): the modes of the result so
// far over the chain's input, its shape, how many of the shuffles moved data and the chain's cast.
struct TracedShuffles {
  Modes modes;
  Shape shape;
  int moving = 0;
  const ShuffleParams* cast = nullptr;  // the one shuffle that casts, if any (points into net)
};

// Traces shuffle layer `l` (reading a tensor of `t.shape`) onto `t`; false, leaving `t` as it
// was, where `l` is no one-input shuffle of a static result, its view cannot be traced, or it is
// the chain's second cast.
bool trace_shuffle(const Network& net, const Layer& l, TracedShuffles& t);

// The layers that write `c`, the composition of chain `t` of `source`, to `result`: the copy (with
// the chain's cast), and where it does not give the result's shape a view after it, which is then
// named `name` while the copy is named `move_name` and writes a new tensor named `moved_name`.
std::vector<Layer> composed_layers(Network& net, const ComposedShuffle& c, const TracedShuffles& t,
                                   TensorId source, TensorId result, const std::string& name,
                                   const std::string& move_name, const std::string& moved_name);

}  // namespace kiln::engine
