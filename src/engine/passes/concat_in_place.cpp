// Concats without copies (issue #28): inputs written where they sit in the concat's output.
//
// A dense block concatenates every feature map so far before each of its layers, and all of them
// at its end: densenet121's first block copies 96, 128, ..., 256 channels for its concats where 256
// would do, and its third 24 times. Such concats form a group around the one whose inputs include
// every other's in order, its root: each input of the root is placed once in the root's output
// (a copy of it, written right before the first concat of the group reads it, where its own layer
// cannot write a placed tensor), and every concat of the group becomes in place
// (ConcatParams::in_place): the root's output is those bytes, and the others' outputs are views of
// them, rows of their own width at the root's row pitch, which only layers that read placed
// tensors (reads_placed: the elementwise family, concats) may read. A concat computing a root's
// input writes it in place itself (writes_placed), as does a layer the backend writes placed
// (BackendRules::writes_placed: the CPU's elementwise kernels), so that a lone concat of such
// layers' outputs copies nothing, and one of some copies the others' (where that moves fewer
// bytes). The runtime places what the shapes of a run
// allow (runtime.h: Resolution::row) and runs the rest as concats, which read and write placed
// tensors.
//
// A group is rewritten where it moves fewer bytes than its concats did: the copies' widths along
// the axis against the concats', and no more launches than before unless it halves the bytes.
#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <string>

#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"

namespace kiln::engine {
namespace {

struct Member {
  size_t layer = 0;
  int axis = 0;
};

// The concat at `i`, if it may be in place: not a stack, one output of the inputs' dtype that
// is no network output, a static width along its axis.
std::optional<Member> candidate(const Network& net, const NetworkIndex& index,
                                const std::vector<Layer>& layers, size_t i) {
  const Layer& l = layers[i];
  const auto* c = std::get_if<ConcatParams>(&l.params);
  if (!c || c->stack || c->in_place || l.outputs.size() != 1 || l.inputs.empty() ||
      index.is_output(l.outputs[0])) {
    return std::nullopt;
  }
  const TensorDesc& out = net.tensor(l.outputs[0]);
  const int axis = normalize_axis(c->axis, out.shape.size(), l.name);
  if (out.shape[static_cast<size_t>(axis)] == kDynamic) return std::nullopt;
  for (TensorId id : l.inputs) {
    const TensorDesc& in = net.tensor(id);
    if (in.dtype != out.dtype || in.shape.size() != out.shape.size() ||
        in.shape[static_cast<size_t>(axis)] == kDynamic || in.values.has_value()) {
      return std::nullopt;
    }
  }
  return Member{i, axis};
}

// Whether `part`'s inputs are a run of `whole`'s, in order.
bool run_of(const std::vector<TensorId>& part, const std::vector<TensorId>& whole) {
  if (part.size() > whole.size()) return false;
  return std::search(whole.begin(), whole.end(), part.begin(), part.end()) != whole.end();
}

int64_t width(const Network& net, TensorId id, int axis) {
  return net.tensor(id).shape[static_cast<size_t>(axis)];
}

}  // namespace

int place_concat_inputs(Network& net, const WritesPlacedFn& backend_writes,
                        std::vector<std::string>& lines) {
  std::vector<Layer> layers = net.layers();
  const NetworkIndex index(net, layers);
  // Groups: candidates along one axis joined by the inputs they share (union-find over layer
  // indices).
  std::map<size_t, Member> members;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (auto m = candidate(net, index, layers, i)) members[i] = *m;
  }
  std::map<size_t, size_t> parent;
  for (const auto& [i, m] : members) parent[i] = i;
  const auto find = [&](size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  std::map<std::pair<TensorId, int>, size_t> first_reader;
  for (const auto& [i, m] : members) {
    for (TensorId id : layers[i].inputs) {
      const auto [it, fresh] = first_reader.emplace(std::pair{id, m.axis}, i);
      if (!fresh) parent[find(i)] = find(it->second);
    }
  }
  std::map<size_t, std::vector<size_t>> groups;
  for (const auto& [i, m] : members) groups[find(i)].push_back(i);

  std::vector<std::vector<Layer>> instead(layers.size());
  int rewritten = 0;
  for (auto& [unused, group] : groups) {
    (void)unused;
    // The root: the last of the group, whose inputs are distinct and hold every other's as a run.
    const size_t root = group.back();
    const Layer& rl = layers[root];
    const int axis = members[root].axis;
    const Shape& rshape = net.tensor(rl.outputs[0]).shape;
    std::vector<TensorId> sorted = rl.inputs;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) continue;
    // Members other than the root are views: their outputs only read by layers reading placed
    // tensors. Those that are not stay concats (reading placed inputs).
    std::vector<size_t> kept;
    for (size_t i : group) {
      const Layer& l = layers[i];
      const Shape& s = net.tensor(l.outputs[0]).shape;
      bool ok = members[i].axis == axis && s.size() == rshape.size() && run_of(l.inputs, rl.inputs);
      for (size_t d = 0; ok && d < s.size(); ++d) {
        ok = static_cast<int>(d) == axis || s[d] == rshape[d];
      }
      for (size_t r : index.consumers(l.outputs[0]))
        ok = ok && (i == root || reads_placed(layers[r]));
      if (ok) kept.push_back(i);
    }
    if (kept.empty() || kept.back() != root) continue;
    // Each input of the root: written in place by its own layer (a concat), or copied there.
    std::vector<bool> copy(rl.inputs.size(), true);
    int64_t before = 0, after = 0;
    int copies = 0;
    for (size_t i : kept) before += width(net, layers[i].outputs[0], axis);
    // Where each input sits in the root's rows (elements), where the dims after the axis are known.
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(axis) + 1; d < rshape.size(); ++d) {
      inner = rshape[d] == kDynamic || inner < 0 ? -1 : inner * rshape[d];
    }
    int64_t column = 0;
    const auto writes_here = [&](const Layer& l, TensorId x) {
      if (writes_placed(l)) return true;
      if (!backend_writes || l.outputs.size() != 1) return false;
      std::vector<TensorDesc> ins;
      for (TensorId id : l.inputs) ins.push_back(net.tensor(id));
      const Placement where =
          inner < 0 ? Placement{}
                    : Placement{column * inner, width(net, x, axis) * inner, rshape[axis] * inner};
      return backend_writes(l, ins, net.tensor(x), where);
    };
    for (size_t k = 0; k < rl.inputs.size(); ++k) {
      const TensorId x = rl.inputs[k];
      const auto w = index.producer(x);
      bool direct = w && !index.is_output(x) && writes_here(layers[*w], x);
      column += width(net, x, axis);
      for (size_t r : index.consumers(x)) {
        const bool member = std::find(kept.begin(), kept.end(), r) != kept.end();
        direct = direct && (member || reads_placed(layers[r]));
      }
      copy[k] = !direct;
      if (copy[k]) after += width(net, x, axis), ++copies;
    }
    if (after >= before || (copies > static_cast<int>(kept.size()) && 2 * after > before)) {
      continue;
    }
    // The copies, each right before the first member reading its input; then the members in
    // place, reading the copies.
    std::map<TensorId, TensorId> placed;
    std::string names;
    for (size_t k = 0; k < rl.inputs.size(); ++k) {
      if (!copy[k]) continue;
      const TensorId x = rl.inputs[k];
      TensorDesc d = net.tensor(x);
      const std::string name = rl.name + ":place" + std::to_string(k);
      d.name = name;
      const TensorId y = net.add_tensor(d);
      placed[x] = y;
      size_t at = root;
      for (size_t i : kept) {
        const auto& in = layers[i].inputs;
        if (std::find(in.begin(), in.end(), x) != in.end()) at = std::min(at, i);
      }
      if (instead[at].empty()) instead[at].push_back(layers[at]);
      instead[at].insert(instead[at].end() - 1,
                         Layer{name, ConcatParams{axis, false, false}, {x}, {y}});
    }
    for (size_t i : kept) {
      Layer& l = instead[i].empty() ? layers[i] : instead[i].back();
      for (TensorId& id : l.inputs) {
        if (auto it = placed.find(id); it != placed.end()) id = it->second;
      }
      std::get<ConcatParams>(l.params).in_place = true;
      names += (names.empty() ? "" : ", ") + l.name;
      ++rewritten;
    }
    lines.push_back("in place: " + names + " (" + std::to_string(copies) + " copies of " +
                    std::to_string(after) + " along the axis, where the concats wrote " +
                    std::to_string(before) + ")");
  }
  if (rewritten > 0) {
    const std::vector<bool> none(instead.size(), false);
    splice_layers(net, std::move(layers), none, std::move(instead));
  }
  return rewritten;
}

}  // namespace kiln::engine
