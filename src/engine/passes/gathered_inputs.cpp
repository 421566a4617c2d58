// A gather by constant 1-D indices whose only reader is a fused elementwise layer becomes part of
// it: the layer reads the gather's source at the indices (FusedElementwiseParams::gathers)
// instead of a gathered copy, one kernel and one pass over memory fewer. Rotary embeddings'
// rotate_half, a gather along the head dim after concat_slices, is read this way by the kernel
// that multiplies it by sin and adds x * cos.
//
// A lone elementwise layer (which fuse_elementwise leaves as it is) becomes a fused layer of one
// operation to take a gather in. And a gather may sit behind a view (a reshape that moves no
// data) where every input of the reader has the reader's shape: the reader then runs at the
// gather's shape, its other inputs and its result viewed as that. A shuffle that moves whole rows
// (moves_rows) is read the same way, as a gather of rows by constant indices. Swin's window
// reverse, `x + window_reverse(attn).view(B, H, W, C)`, is a row gather (after a shifted window:
// roll and window merge composed by gather_chains) or a row permute, then views, then the
// residual add: one kernel instead of two either way.
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "engine/layers/elementwise_rules.h"
#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"
#include "engine/passes/positions.h"
#include "engine/scalar_math.h"

namespace kiln::engine {
namespace {

// The longest aligned run (16, 8, 4, 2 or 1) the indices come in: idx[c * r + e] == idx[c * r] + e
// with idx[c * r] and the source's axis size `d` multiples of r.
int64_t aligned_run(const std::vector<int32_t>& idx, int64_t d) {
  const auto n = static_cast<int64_t>(idx.size());
  for (int64_t r = 16; r > 1; r /= 2) {
    bool ok = n % r == 0 && d % r == 0;
    for (int64_t k = 0; k < n && ok; ++k) {
      const int32_t first = idx[static_cast<size_t>(k - k % r)];
      ok = first % r == 0 && idx[static_cast<size_t>(k)] == first + k % r;
    }
    if (ok) return r;
  }
  return 1;
}

// The rows of shuffle `l` (moves_rows) as a gather: output row r is input row indices[r], rows
// counted over all dims but the last.
std::vector<int32_t> row_indices(const Network& net, const Layer& l) {
  const auto& s = std::get<ShuffleParams>(l.params);
  const Shape& in = net.tensor(l.inputs[0]).shape;
  const Shape& out = net.tensor(l.outputs[0]).shape;
  const auto leading = [](const std::vector<int64_t>& perm) {  // the row dim stays last
    return perm.empty() ? perm : std::vector<int64_t>(perm.begin(), perm.end() - 1);
  };
  Positions rows{std::vector<int64_t>(static_cast<size_t>(volume(in) / in.back())),
                 Shape(in.begin(), in.end() - 1)};
  std::iota(rows.at.begin(), rows.at.end(), 0);
  rows = shuffled(rows, leading(s.first_perm), leading(s.second_perm),
                  Shape(out.begin(), out.end() - 1));
  return std::vector<int32_t>(rows.at.begin(), rows.at.end());
}

// What layer `reader` could read in place through its input `in` (each layer on the way its
// input's only reader): a gather by constant 1-D integer indices in range, or a shuffle that
// moves whole rows (a gather of rows), of a static float source; views may come between.
struct FoldableGather {
  std::vector<size_t> layers;  // what goes: the gather or shuffle and the views after it
  TensorId source;             // read at the indices
  std::optional<Shape> rows;   // the source viewed as [rows, row] first (a row shuffle's)
  Shape at;                    // the gathered tensor's shape, at which the reader then runs
  int64_t axis = 0;
  std::vector<int32_t> indices;
  std::optional<size_t> index_constant;  // the gather's index list, if no one else reads it
};

std::optional<FoldableGather> foldable_gather(const Network& net, const std::vector<Layer>& layers,
                                              const NetworkIndex& index,
                                              const std::vector<bool>& gone, TensorId in,
                                              size_t reader) {
  FoldableGather fg;
  size_t consumer = reader;
  for (int depth = 0;; ++depth) {
    const auto p = index.producer(in);
    if (!p || gone[*p] || index.single_consumer(in) != consumer || depth > 16) {
      return std::nullopt;
    }
    const Layer& l = layers[*p];
    const auto* sh = std::get_if<ShuffleParams>(&l.params);
    if (!sh || shuffle_moves_data(*sh) || l.inputs.size() != 1) break;
    fg.layers.push_back(*p);  // a view
    in = l.inputs[0];
    consumer = *p;
  }
  const size_t p = *index.producer(in);
  const Layer& g = layers[p];
  fg.layers.push_back(p);
  fg.at = net.tensor(g.outputs[0]).shape;
  if (std::holds_alternative<ShuffleParams>(g.params)) {
    const TensorDesc& data = net.tensor(g.inputs[0]);
    if (!moves_rows(g, net) || !is_floating(data.dtype)) return std::nullopt;
    fg.source = g.inputs[0];
    fg.rows = Shape{volume(data.shape) / data.shape.back(), data.shape.back()};
    // Rows of 16 bytes or more (an index a row is then at most a quarter of what is read), and
    // an index list of at most 16 MB.
    if (data.shape.back() * static_cast<int64_t>(dtype_size(data.dtype)) < 16 ||
        volume(*fg.rows) > (int64_t{1} << 22)) {
      return std::nullopt;
    }
    fg.indices = row_indices(net, g);
    fg.at = {static_cast<int64_t>(fg.indices.size()), data.shape.back()};
    if (fg.indices.size() < 2) return std::nullopt;
    return fg;
  }
  const auto* gp = std::get_if<GatherParams>(&g.params);
  if (!gp || gp->mode != GatherMode::kDefault || g.inputs.size() != 2) return std::nullopt;
  const auto ip = index.producer(g.inputs[1]);
  const auto* c = ip ? std::get_if<ConstantParams>(&layers[*ip].params) : nullptr;
  const TensorDesc& data = net.tensor(g.inputs[0]);
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  const int64_t axis = gp->axis < 0 ? gp->axis + rank : gp->axis;
  if (!c || !is_floating(data.dtype) || axis < 0 || axis >= rank || !is_static(data.shape) ||
      !is_static(fg.at)) {
    return std::nullopt;
  }
  const Weights& w = net.weight(c->weight);
  const int64_t d = data.shape[static_cast<size_t>(axis)], n = volume(w.shape);
  // 1-D integer indices of at least two (a gathered dim of size 1 is merged away by the
  // kernels' dims), in range after wrapping.
  if (!w.data || w.shape.size() != 1 || n < 2 || !is_integer(w.dtype)) return std::nullopt;
  for (int64_t k = 0; k < n; ++k) {
    int64_t v = load_as<int64_t>(w.dtype, w.data->data(), k);
    if (v < 0) v += d;
    if (v < 0 || v >= d) return std::nullopt;
    fg.indices.push_back(static_cast<int32_t>(v));
  }
  fg.source = g.inputs[0];
  fg.axis = axis;
  if (index.single_consumer(g.inputs[1]) == p) fg.index_constant = *ip;
  return fg;
}

// Whether every input of layer `l` and its result have one static shape (no broadcast), so
// that it can run at any shape of as many elements, its tensors viewed as that.
bool of_one_shape(const Network& net, const Layer& l) {
  const Shape& s = net.tensor(l.outputs[0]).shape;
  if (!is_static(s)) return false;
  for (TensorId id : l.inputs) {
    if (net.tensor(id).shape != s) return false;
  }
  return true;
}

// Lone elementwise layer `l` (fusible_elementwise) as a fused layer of one operation.
Layer as_fused(const Layer& l) {
  const FusedOp op = fused_op(l);
  std::vector<TensorId> inputs = {l.inputs[0]};
  int64_t b = 0;
  if (op.kind == 0 && l.inputs[1] != l.inputs[0]) {
    inputs.push_back(l.inputs[1]);
    b = 1;
  }
  FusedElementwiseParams f;
  f.program = {op.kind, op.op, 0, b};
  f.constants = {op.alpha, op.beta};
  f.fused_layers = {l.name};
  return Layer{l.name, f, inputs, l.outputs};
}

}  // namespace

int fold_gathers_into_elementwise(Network& net, int max_inputs) {
  std::vector<Layer> layers = net.layers();
  const NetworkIndex index(net, layers);
  std::vector<bool> gone(layers.size(), false);
  // Index constants and views of the inputs, placed before a layer; views of results, after.
  std::vector<std::vector<Layer>> before(layers.size()), after(layers.size());
  // Whether reader `l` can take `fg` in: where it must run at another shape, only if it has one
  // shape throughout and no gathered input yet (whose axes are of its shape).
  const auto takes = [&](const Layer& l, const FoldableGather& fg) {
    if (fg.layers.size() == 1 && !fg.rows) return true;  // a gather read as it is
    if (fg.at == net.tensor(l.outputs[0]).shape) return true;
    const auto* f = std::get_if<FusedElementwiseParams>(&l.params);
    return (!f || f->gathers.empty()) && of_one_shape(net, l) &&
           volume(fg.at) == volume(net.tensor(l.outputs[0]).shape);
  };
  const auto view = [&](const std::string& name, TensorId from, TensorId to) {
    ShuffleParams s;
    s.has_reshape = true;
    s.reshape = net.tensor(to).shape;
    return Layer{name, s, {from}, {to}};
  };
  int folded = 0;
  for (size_t f = 0; f < layers.size(); ++f) {
    if (!std::holds_alternative<FusedElementwiseParams>(layers[f].params)) {
      const Layer& l = layers[f];
      if (!fusible_elementwise(net, l) || l.inputs.empty() || l.inputs.size() > 2 ||
          (max_inputs > 0 && max_inputs <= static_cast<int>(l.inputs.size()))) {
        continue;
      }
      bool any = false;
      for (TensorId in : l.inputs) {
        const auto fg = foldable_gather(net, layers, index, gone, in, f);
        any = any || (fg && takes(l, *fg));
      }
      if (!any) continue;
      layers[f] = as_fused(l);
    }
    auto* fused = std::get_if<FusedElementwiseParams>(&layers[f].params);
    const size_t regs = fused_registers(layers[f].name, *fused, layers[f].inputs.size());
    for (size_t j = 0; j < regs; ++j) {
      if (max_inputs > 0 && static_cast<int>(layers[f].inputs.size()) >= max_inputs) break;
      bool gathered = false;
      for (size_t k = 0; k < fused->gathers.size(); k += 3) {
        gathered = gathered || fused->gathers[k] == static_cast<int64_t>(j);
      }
      if (gathered) continue;
      const auto fg = foldable_gather(net, layers, index, gone, layers[f].inputs[j], f);
      if (!fg || !takes(layers[f], *fg)) continue;
      Layer& l = layers[f];
      if ((fg->layers.size() > 1 || fg->rows) && fg->at != net.tensor(l.outputs[0]).shape) {
        // The reader runs at the gathered shape: its other inputs and its result viewed.
        for (size_t k = 0; k < l.inputs.size(); ++k) {
          if (k == j) continue;
          const TensorDesc d = net.tensor(l.inputs[k]);
          const std::string name = l.name + ":input" + std::to_string(k) + ":viewed";
          const TensorId v = net.add_tensor(TensorDesc{name, d.dtype, fg->at, {}});
          before[f].push_back(view(name, l.inputs[k], v));
          l.inputs[k] = v;
        }
        const TensorDesc o = net.tensor(l.outputs[0]);
        const TensorId r = net.add_tensor(TensorDesc{l.name + ":at_gather", o.dtype, fg->at, {}});
        after[f].push_back(view(l.name + ":viewed", r, l.outputs[0]));
        l.outputs[0] = r;
      }
      TensorId source = fg->source;
      if (fg->rows) {
        const TensorDesc d = net.tensor(source);
        const std::string name = layers[fg->layers.back()].name + ":rows";
        source = net.add_tensor(TensorDesc{name, d.dtype, *fg->rows, {}});
        before[f].push_back(view(name, fg->source, source));
      }
      const Layer& g = layers[fg->layers.back()];
      const int64_t n = static_cast<int64_t>(fg->indices.size());
      const int64_t d = net.tensor(source).shape[static_cast<size_t>(fg->axis)];
      const std::string name = g.name + ":gathered_indices";
      std::vector<uint8_t> bytes(fg->indices.size() * sizeof(int32_t));
      std::memcpy(bytes.data(), fg->indices.data(), bytes.size());
      net.add_weight(name, Weights::from_bytes(DataType::kI32, {n}, std::move(bytes)));
      const TensorId id = net.add_tensor(TensorDesc{name, DataType::kI32, {n}, {}});
      before[f].insert(before[f].begin(), Layer{name, ConstantParams{name}, {}, {id}});
      l.inputs[j] = source;
      l.inputs.push_back(id);
      fused->gathers.insert(fused->gathers.end(),
                            {static_cast<int64_t>(j), fg->axis, aligned_run(fg->indices, d)});
      for (size_t k = fg->layers.size(); k-- > 0;) {
        fused->fused_layers.push_back(layers[fg->layers[k]].name);
        gone[fg->layers[k]] = true;
      }
      if (fg->index_constant) gone[*fg->index_constant] = true;
      ++folded;
    }
  }
  if (folded == 0) return 0;
  std::vector<Layer> result;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (gone[i]) continue;
    for (Layer& l : before[i]) result.push_back(std::move(l));
    result.push_back(std::move(layers[i]));
    for (Layer& l : after[i]) result.push_back(std::move(l));
  }
  net.set_layers(std::move(result));
  return folded;
}

}  // namespace kiln::engine
