// ExecutionContext's resolution of a set of input shapes: concrete shapes, the values tracked
// while resolving, the layers that are views or host values and never run, and the arena plan;
// and the shapes after data-dependent layers as their counts become known. Execution:
// runtime.cpp.
#include <algorithm>
#include <chrono>
#include <optional>
#include <tuple>

#include "engine/layer_kinds.h"
#include "engine/layers/setup.h"
#include "engine/runtime.h"
#include "util/errors.h"

namespace kiln::engine {

namespace {

// Known values a layer's result may have and still be written to the device instead of the layer
// running (the CUDA backend writes up to 64 with one kernel).
constexpr int64_t kMaxWrittenValues = 64;

// Where a slice's output starts in its (dense) input, in bytes, when the output is one
// contiguous range of it: unit steps, and at most one axis keeping part of its range, with only
// size-1 axes before it and whole axes after it. nullopt otherwise, and for empty outputs.
std::optional<int64_t> contiguous_slice_offset(const SliceParams& p, const TensorDesc& in) {
  const Shape& shape = in.shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (!is_static(shape) || volume(shape) == 0) return std::nullopt;
  Shape start(shape.size(), 0), end = shape;
  for (size_t i = 0; i < p.axes.size(); ++i) {
    const int64_t axis = p.axes[i] < 0 ? p.axes[i] + rank : p.axes[i];
    const int64_t step = p.steps.empty() ? 1 : p.steps[i];
    if (step != 1 || axis < 0 || axis >= rank) return std::nullopt;
    const size_t a = static_cast<size_t>(axis);
    const int64_t size = shape[a];
    int64_t s = p.starts[i], e = p.ends[i];
    if (s < 0) s += size;
    if (e != kSliceEnd && e < 0) e += size;
    start[a] = std::clamp<int64_t>(s, 0, size);
    end[a] = e == kSliceEnd ? size : std::clamp<int64_t>(e, start[a], size);
  }
  size_t partial = shape.size();
  for (size_t d = 0; d < shape.size() && partial == shape.size(); ++d) {
    if (start[d] != 0 || end[d] != shape[d]) partial = d;
  }
  if (partial == shape.size()) return 0;
  if (end[partial] == start[partial]) return std::nullopt;
  for (size_t d = 0; d < partial; ++d) {
    if (shape[d] != 1) return std::nullopt;
  }
  int64_t stride = static_cast<int64_t>(dtype_size(in.dtype));
  for (size_t d = partial + 1; d < shape.size(); ++d) {
    if (start[d] != 0 || end[d] != shape[d]) return std::nullopt;
    stride *= shape[d];
  }
  return start[partial] * stride;
}

// The byte offset of what a gather copies out of its data (`data`) where that is one contiguous
// range of it: indices known while resolving (`idx`) that count up by one from a start s
// (negative ones wrapped) along the axis, whose outer dims are all of size 1. index_select /
// embedding (kDefault): the indices in order; torch.gather (kElements, indices of the data's rank):
// index [..., k, t...] = s + k for every trailing position t, the trailing dims whole. An index
// range of a dynamic slice, `position_ids[:, :seq]` as exported, then reads the buffer in place.
std::optional<int64_t> contiguous_gather_offset(const GatherParams& p, const TensorDesc& data,
                                                const TensorDesc& idx) {
  const Shape& shape = data.shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t axis = p.axis < 0 ? p.axis + rank : p.axis;
  if (!idx.values || idx.values->empty() || axis < 0 || axis >= rank || !is_static(shape)) {
    return std::nullopt;
  }
  const size_t a = static_cast<size_t>(axis);
  int64_t row = static_cast<int64_t>(dtype_size(data.dtype)), inner = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (k < a && shape[k] != 1) return std::nullopt;
    if (k > a) row *= shape[k], inner *= shape[k];
  }
  const int64_t total = static_cast<int64_t>(idx.values->size());
  if (p.mode == GatherMode::kElements) {
    // The index tensor: [1..., n, trailing dims of the data].
    if (idx.shape.size() != shape.size()) return std::nullopt;
    for (size_t k = 0; k < shape.size(); ++k) {
      if ((k < a && idx.shape[k] != 1) || (k > a && idx.shape[k] != shape[k])) {
        return std::nullopt;
      }
    }
  } else {
    inner = 1;  // one index a row
  }
  const int64_t d = shape[a], n = total / inner;
  const int64_t first = (*idx.values)[0];
  const int64_t start = first < 0 ? first + d : first;
  if (start < 0 || start + n > d) return std::nullopt;
  for (int64_t i = 0; i < total; ++i) {
    const int64_t v = (*idx.values)[static_cast<size_t>(i)];
    if ((v < 0 ? v + d : v) != start + i / inner) return std::nullopt;
  }
  return start * row;
}

}  // namespace

// In-place concats, from the last: each places its inputs in its output, which may itself sit in
// a later one's (a concat of concats along the same axis), or, where a later one has placed all
// its inputs already, in order and along the same rows, it is a view of those bytes (the growing
// concats of a dense block). Either way it never runs. Where neither holds (shapes only known
// while running, a network output, inputs placed by different concats), it runs as a concat
// (which reads and writes placed tensors), so what the runtime places is always a choice of
// speed: the builder's concat_in_place pass has seen to it that everything reading a tensor that
// may be placed takes one.
void ExecutionContext::place_concats(const std::vector<bool>& is_output) {
  const auto& layers = engine_->network().layers();
  // Who writes each tensor, and whether every layer reading it takes placed tensors (a plan from
  // elsewhere may mark any concat in place: what its readers cannot take is not placed).
  std::vector<int64_t> writer(res_.descs.size(), -1);
  std::vector<bool> takes(res_.descs.size(), true);
  for (size_t li = 0; li < layers.size(); ++li) {
    for (TensorId id : layers[li].outputs) {
      writer[static_cast<size_t>(id)] = static_cast<int64_t>(li);
    }
    if (reads_placed(layers[li])) continue;
    for (TensorId id : layers[li].inputs) takes[static_cast<size_t>(id)] = false;
  }
  const auto root = [&](size_t t) {
    return res_.alias_of[t] >= 0 ? static_cast<size_t>(res_.alias_of[t]) : t;
  };
  for (size_t li = layers.size(); li-- > 0;) {
    const Layer& layer = layers[li];
    const auto* c = std::get_if<ConcatParams>(&layer.params);
    if (!c || !c->in_place || c->stack || layer.outputs.size() != 1 || layer.inputs.empty()) {
      continue;
    }
    const size_t out = static_cast<size_t>(layer.outputs[0]);
    const TensorDesc& od = res_.descs[out];
    bool ok = !is_output[out] && !res_.data_dependent[out] && !od.values.has_value();
    std::vector<TensorRef> refs;
    std::vector<size_t> ins;
    size_t placed = 0;
    for (TensorId id : layer.inputs) {
      const size_t t = static_cast<size_t>(id);
      const TensorDesc& d = res_.descs[t];
      ok = ok && !is_output[t] && !res_.data_dependent[t] && !d.values.has_value() &&
           d.dtype == od.dtype && std::find(ins.begin(), ins.end(), t) == ins.end();
      refs.push_back({d.dtype, d.shape});
      ins.push_back(t);
      placed += res_.alias_of[t] >= 0 ? 1 : 0;
    }
    if (!ok) continue;
    const ConcatRows r = concat_rows(layer.name, *c, refs);
    const int64_t es = static_cast<int64_t>(dtype_size(od.dtype));
    const int64_t row = static_cast<int64_t>(r.row) / es;
    // A single row is dense wherever it sits.
    const auto rows_of = [&](int64_t width, int64_t pitch) {
      return r.outer == 1 ? std::pair<int64_t, int64_t>{0, 0} : std::pair{width, pitch};
    };
    if (placed == 0) {
      // Its inputs go into its output (itself dense, or rows of `row` elements of a wider one),
      // each written there by the layer that computes it (a concat or copy: at any offset, even a
      // single row need not be aligned; another layer where the backend writes it so placed) and
      // read only by layers that take placed tensors.
      const bool fits = res_.pitch[out] == 0 || res_.row[out] == row;
      const int64_t pitch = res_.pitch[out] != 0 ? res_.pitch[out] : row;
      for (size_t k = 0; ok && k < ins.size(); ++k) {
        const size_t t = ins[k];
        const int64_t w = writer[t];
        ok = w >= 0 && !std::holds_alternative<ConstantParams>(layers[w].params) && takes[t];
        if (!ok || writes_placed(layers[static_cast<size_t>(w)])) continue;
        const Layer& wl = layers[static_cast<size_t>(w)];
        std::vector<TensorDesc> wins;
        for (TensorId id : wl.inputs) wins.push_back(res_.descs[static_cast<size_t>(id)]);
        const Placement where{(res_.alias_offset[out] + static_cast<int64_t>(r.at[k])) / es,
                              static_cast<int64_t>(r.chunk[k]) / es, pitch};
        ok = wl.outputs.size() == 1 &&
             engine_->backend().writes_placed(wl, wins, res_.descs[t], where);
      }
      if (!ok || !fits) continue;
      for (size_t k = 0; k < ins.size(); ++k) {
        const size_t t = ins[k];
        res_.alias_of[t] = static_cast<int64_t>(root(out));
        res_.alias_offset[t] = res_.alias_offset[out] + static_cast<int64_t>(r.at[k]);
        std::tie(res_.row[t], res_.pitch[t]) =
            rows_of(static_cast<int64_t>(r.chunk[k]) / es, pitch);
        res_.writes_placed[static_cast<size_t>(writer[t])] = true;
      }
      res_.view_layer[li] = true;
      continue;
    }
    if (placed != ins.size() || res_.alias_of[out] >= 0 || !takes[out]) {
      continue;
    }
    // A view of the bytes its inputs were placed in, if they lie there in order along rows.
    const size_t t0 = ins[0];
    const int64_t pitch = res_.pitch[t0];
    bool view = true;
    for (size_t k = 0; view && k < ins.size(); ++k) {
      const size_t t = ins[k];
      const int64_t width = static_cast<int64_t>(r.chunk[k]) / es;
      view = res_.alias_of[t] == res_.alias_of[t0] &&
             res_.alias_offset[t] == res_.alias_offset[t0] + static_cast<int64_t>(r.at[k]) &&
             res_.pitch[t] == pitch && (pitch == 0 ? r.outer == 1 : res_.row[t] == width);
    }
    if (!view) continue;
    res_.alias_of[out] = res_.alias_of[t0];
    res_.alias_offset[out] = res_.alias_offset[t0];
    std::tie(res_.row[out], res_.pitch[out]) = rows_of(row, pitch);
    res_.view_layer[li] = true;
  }
}

void ExecutionContext::resolve_shapes() {
  if (resolved_) return;
  const auto start = std::chrono::steady_clock::now();
  const Network& net = engine_->network();
  for (size_t i = 0; i < input_set_.size(); ++i) {
    KILN_CHECK(input_set_[i], InvalidArgument, "input `", engine_->input(i).name,
               "` has a dynamic shape that was not set");
  }
  // The current resolution is kept for its shapes (data-dependent tensors back at their bounds);
  // one kept for these shapes is taken again.
  if (!res_shapes_.empty()) {
    restore_bounds();
    resolutions_.emplace_front(std::move(res_shapes_), std::move(res_));
    res_shapes_.clear();
    if (resolutions_.size() > kResolutions) resolutions_.pop_back();
  }
  for (auto it = resolutions_.begin(); it != resolutions_.end(); ++it) {
    if (it->first != input_shapes_) continue;
    res_ = std::move(it->second);
    res_shapes_ = std::move(it->first);
    resolutions_.erase(it);
    resolved_ = true;
    return;
  }
  res_ = Resolution{};
  res_.descs.assign(net.num_tensors(), TensorDesc{});
  res_.data_dependent.assign(net.num_tensors(), false);
  for (size_t i = 0; i < net.num_tensors(); ++i)
    res_.descs[i] = net.tensor(static_cast<TensorId>(i));
  for (size_t i = 0; i < net.inputs().size(); ++i) {
    TensorDesc& d = res_.descs[static_cast<size_t>(net.inputs()[i])];
    d.shape = input_shapes_[i];
  }
  const auto& layers = net.layers();
  for (const Layer& layer : layers) {
    if (const auto* c = std::get_if<ConstantParams>(&layer.params)) {
      // Integer and bool constants' values, for the values tracked while resolving.
      TensorDesc& d = res_.descs[static_cast<size_t>(layer.outputs[0])];
      const Weights& w = net.weight(c->weight);
      if (!d.values && w.data && volume(w.shape) <= kMaxRunTimeValues &&
          (w.dtype == DataType::kI64 || w.dtype == DataType::kI32 || w.dtype == DataType::kBool)) {
        d.values = tracked_values(w.dtype, w.data->data(), volume(w.shape));
      }
      continue;
    }
    std::vector<const TensorDesc*> in;
    for (TensorId id : layer.inputs) in.push_back(&res_.descs[static_cast<size_t>(id)]);
    std::vector<TensorDesc> outs = infer_layer_outputs(layer, in, ValueTracking::kRun);
    KILN_CHECK(outs.size() == layer.outputs.size(), InternalError, "layer `", layer.name,
               "`: inferred ", outs.size(), " outputs, plan has ", layer.outputs.size());
    // Data-dependent dims (nonzero's count) are planned at their bound; so is everything
    // computed from them, whose shapes execution resolves again as the counts become known.
    bool tainted = false;
    for (TensorId id : layer.inputs)
      tainted = tainted || res_.data_dependent[static_cast<size_t>(id)];
    const bool counts = layer_kind_traits(layer.params).data_dependent;
    if (counts) outs[0].shape[0] = volume(in[0]->shape);
    for (size_t k = 0; k < outs.size(); ++k) {
      TensorDesc& d = res_.descs[static_cast<size_t>(layer.outputs[k])];
      KILN_CHECK(is_static(outs[k].shape), Unsupported, "layer `", layer.name, "`: output shape ",
                 shape_to_string(outs[k].shape),
                 " depends on tensor values that are only known while running");
      d.shape = outs[k].shape;
      d.values = outs[k].values;
      if (tainted || (counts && k == 0)) {
        res_.data_dependent[static_cast<size_t>(layer.outputs[k])] = true;
        d.values.reset();  // (values of the bound, not of the run)
      }
    }
  }
  res_.bound_shapes.assign(net.num_tensors(), Shape{});
  res_.any_data_dependent = false;
  for (size_t t = 0; t < net.num_tensors(); ++t) {
    if (res_.data_dependent[t])
      res_.bound_shapes[t] = res_.descs[t].shape, res_.any_data_dependent = true;
  }

  // Arena: every layer output that is not a network output, a constant or a view.
  std::vector<bool> is_output(net.num_tensors(), false);
  for (TensorId id : net.outputs()) is_output[static_cast<size_t>(id)] = true;
  // A reshape of dense data (a shuffle without permutations or cast) is a view: its output shares
  // its input's bytes (or, through a chain of views, the first one's), and the layer never runs.
  // So is a slice that keeps one contiguous range of its input (q, k and v taken from a packed
  // [3, ...] projection), where the range starts at the arena's alignment, which kernels may
  // rely on. Not for network outputs (written to the caller's buffer) or values known while
  // resolving.
  res_.alias_of.assign(net.num_tensors(), -1);
  res_.alias_offset.assign(net.num_tensors(), 0);
  res_.view_layer.assign(layers.size(), false);
  res_.view_source.assign(layers.size(), 0);
  const auto root = [&](TensorId id) {
    const int64_t a = res_.alias_of[static_cast<size_t>(id)];
    return a >= 0 ? static_cast<size_t>(a) : static_cast<size_t>(id);
  };
  res_.row.assign(net.num_tensors(), 0);
  res_.pitch.assign(net.num_tensors(), 0);
  res_.writes_placed.assign(layers.size(), false);
  place_concats(is_output);
  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& layer = layers[li];
    if (res_.view_layer[li]) continue;  // an in-place concat
    std::optional<int64_t> offset;
    size_t source = 0, arity = 1;  // the input the view shares bytes with; the layer's inputs
    if (const auto* sh = std::get_if<ShuffleParams>(&layer.params)) {
      if (!shuffle_moves_data(*sh)) offset = 0;
    } else if (const auto* sl = std::get_if<SliceParams>(&layer.params)) {
      offset = contiguous_slice_offset(*sl, res_.descs[static_cast<size_t>(layer.inputs[0])]);
      if (offset && *offset % static_cast<int64_t>(kArenaAlignment) != 0) offset.reset();
    } else if (const auto* g = std::get_if<GatherParams>(&layer.params);
               g && layer.inputs.size() == 2) {
      arity = 2;
      offset = contiguous_gather_offset(*g, res_.descs[static_cast<size_t>(layer.inputs[0])],
                                        res_.descs[static_cast<size_t>(layer.inputs[1])]);
      if (offset && *offset % static_cast<int64_t>(kArenaAlignment) != 0) offset.reset();
    } else if (std::holds_alternative<SelectParams>(layer.params) && layer.inputs.size() == 3 &&
               layer.inputs[1] == layer.inputs[2]) {
      // where(c, a, a): a, where the condition does not broadcast it larger.
      source = 1, arity = 3;
      const TensorDesc& a = res_.descs[static_cast<size_t>(layer.inputs[1])];
      const TensorDesc& o = res_.descs[static_cast<size_t>(layer.outputs[0])];
      if (a.shape == o.shape && a.dtype == o.dtype) offset = 0;
    }
    // Gathers and selects are views where their results have known values too: the view serves
    // every reader on the device.
    const bool computed = arity > 1;
    if (!offset || layer.inputs.size() != arity) continue;
    const size_t out = static_cast<size_t>(layer.outputs[0]);
    const size_t in = static_cast<size_t>(layer.inputs[source]);
    if (is_output[out] || (!computed && res_.descs[out].values.has_value()) ||
        res_.data_dependent[out] || res_.data_dependent[in] || res_.pitch[in] != 0 ||
        res_.alias_of[out] >= 0) {
      continue;
    }
    res_.view_source[li] = source;
    res_.alias_of[out] = static_cast<int64_t>(root(layer.inputs[source]));
    res_.alias_offset[out] = res_.alias_offset[in] + *offset;
    res_.view_layer[li] = true;
  }
  // Layers whose outputs are known on the host and read by no kernel (a fill's shape, a
  // reshape's target, arithmetic on them): they need not run. From the last layer back, a tensor
  // is read on the device when a network output, or an input of a layer that runs other than
  // its shape input (layers whose outputs are known read no input: their values are written).
  // Known values read on the device are written there when few (shape tensors); a layer whose
  // known result is too large for that runs as it would have, its values dropped. A view read on
  // the device reads only its data there (a gather's indices stay on the host).
  res_.host_layer.assign(layers.size(), false);
  std::vector<bool> device_read = is_output;
  for (size_t li = layers.size(); li-- > 0;) {
    const Layer& layer = layers[li];
    if (std::holds_alternative<ConstantParams>(layer.params)) continue;
    if (res_.view_layer[li]) {
      if (device_read[static_cast<size_t>(layer.outputs[0])]) {
        if (std::holds_alternative<ConcatParams>(layer.params)) {  // in place: all its inputs
          for (TensorId id : layer.inputs) device_read[static_cast<size_t>(id)] = true;
        } else {
          device_read[static_cast<size_t>(layer.inputs[res_.view_source[li]])] = true;
        }
      }
      continue;
    }
    bool known = true, read = false, few = true;
    for (TensorId id : layer.outputs) {
      const TensorDesc& d = res_.descs[static_cast<size_t>(id)];
      known = known && d.values.has_value();
      read = read || device_read[static_cast<size_t>(id)];
      few = few && d.values && static_cast<int64_t>(d.values->size()) <= kMaxWrittenValues;
    }
    if (known && (!read || few)) {
      res_.host_layer[li] = !read;
      continue;
    }
    if (known) {
      for (TensorId id : layer.outputs) res_.descs[static_cast<size_t>(id)].values.reset();
    }
    const int shape_input = layer_kind_traits(layer.params).shape_input;
    for (size_t i = 0; i < layer.inputs.size(); ++i) {
      if (static_cast<int>(i) != shape_input)
        device_read[static_cast<size_t>(layer.inputs[i])] = true;
    }
  }
  std::vector<int> first(net.num_tensors(), -1), last(net.num_tensors(), -1);
  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& layer = layers[li];
    if (res_.host_layer[li]) continue;
    // A view's readers keep the bytes it shares alive; the first layer writing a tensor placed
    // in an in-place concat's output makes the bytes of that output live.
    for (TensorId id : layer.inputs) last[root(id)] = static_cast<int>(li);
    if (std::holds_alternative<ConstantParams>(layer.params) || res_.view_layer[li]) continue;
    for (TensorId id : layer.outputs) {
      const size_t r = root(id);
      if (first[r] < 0) first[r] = static_cast<int>(li);
      last[r] = std::max(last[r], static_cast<int>(li));
    }
  }
  std::vector<BufferLifetime> lifetimes;
  std::vector<TensorId> planned;
  for (size_t t = 0; t < net.num_tensors(); ++t) {
    if (first[t] < 0 || is_output[t]) continue;
    lifetimes.push_back(
        {static_cast<size_t>(volume(res_.descs[t].shape)) * dtype_size(res_.descs[t].dtype),
         first[t], last[t]});
    planned.push_back(static_cast<TensorId>(t));
  }
  res_.plan = plan_memory(lifetimes);
  res_.arena_offset.assign(net.num_tensors(), -1);
  for (size_t i = 0; i < planned.size(); ++i) {
    res_.arena_offset[static_cast<size_t>(planned[i])] = static_cast<int64_t>(res_.plan.offsets[i]);
  }
  // Engine weights never change while the engine lives: kernels may key caches by address.
  res_.constant.assign(net.num_tensors(), false);
  for (const Layer& l : layers) {
    if (std::holds_alternative<ConstantParams>(l.params)) {
      res_.constant[static_cast<size_t>(l.outputs[0])] = true;
    }
  }
  for (size_t t = 0; t < net.num_tensors(); ++t) {
    if (res_.alias_of[t] >= 0)
      res_.constant[t] = res_.constant[static_cast<size_t>(res_.alias_of[t])];
  }
  res_.at_profile_point = true;
  for (size_t i = 0; i < input_shapes_.size(); ++i) {
    const Profile& p = net.profile(net.inputs()[i]);
    const Shape& s = input_shapes_[i];
    res_.at_profile_point = res_.at_profile_point && (s == p.min || s == p.opt || s == p.max);
  }
  res_shapes_ = input_shapes_;
  resolved_ = true;
  if (profiling_) {
    resolve_ms_ +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    ++resolves_;
  }
}

void ExecutionContext::restore_bounds() {
  if (!res_.any_data_dependent) return;
  for (size_t t = 0; t < res_.descs.size(); ++t) {
    if (res_.data_dependent[t]) res_.descs[t].shape = res_.bound_shapes[t];
  }
}

void ExecutionContext::resolve_data_dependent(const Layer& layer) {
  if (!res_.any_data_dependent) return;
  bool tainted = false;
  for (TensorId id : layer.inputs)
    tainted = tainted || res_.data_dependent[static_cast<size_t>(id)];
  if (!tainted) return;
  std::vector<const TensorDesc*> in;
  for (TensorId id : layer.inputs) in.push_back(&res_.descs[static_cast<size_t>(id)]);
  std::vector<TensorDesc> outs = infer_layer_outputs(layer, in);
  if (layer_kind_traits(layer.params).data_dependent) outs[0].shape[0] = volume(in[0]->shape);
  for (size_t k = 0; k < outs.size(); ++k) {
    const size_t t = static_cast<size_t>(layer.outputs[k]);
    // Within the bound memory was planned for (sizes grow with the counts they follow).
    KILN_CHECK(is_static(outs[k].shape) && volume(outs[k].shape) <= volume(res_.bound_shapes[t]),
               InternalError, "layer `", layer.name, "`: output ", shape_to_string(outs[k].shape),
               " at the counts of this run exceeds the ", shape_to_string(res_.bound_shapes[t]),
               " planned for it");
    res_.descs[t].shape = outs[k].shape;
  }
}

}  // namespace kiln::engine
