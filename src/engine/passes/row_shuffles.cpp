// Row shuffles moved across the projections of an attention (passes.h).
#include <string>

#include "engine/passes/attention_heads.h"
#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"

namespace kiln::engine {

bool moves_rows(const Layer& l, const Network& net) {
  const auto* s = std::get_if<ShuffleParams>(&l.params);
  if (!s || s->cast || l.inputs.size() != 1 || l.outputs.size() != 1) return false;
  const Shape& in = net.tensor(l.inputs[0]).shape;
  const Shape& out = net.tensor(l.outputs[0]).shape;
  if (in.empty() || out.empty() || in.back() != out.back() || in.back() <= 0 || !is_static(in) ||
      !is_static(out)) {
    return false;
  }
  if (!s->first_perm.empty() && s->first_perm.back() != static_cast<int64_t>(in.size()) - 1) {
    return false;
  }
  if (s->has_reshape && (s->reshape.empty() || s->reshape.back() != in.back())) return false;
  return s->second_perm.empty() || s->second_perm.back() == static_cast<int64_t>(out.size()) - 1;
}

namespace {

// A matmul computed row by row: [..., K] by a 2-d b, with no residual (a bias and activations
// are per row too).
bool row_wise(const Layer& l, const Network& net) {
  const auto* m = std::get_if<MatMulParams>(&l.params);
  return m && !m->transpose_a && !m->post.has_residual && l.inputs.size() >= 2 &&
         l.outputs.size() == 1 && net.tensor(l.inputs[1]).shape.size() == 2 &&
         net.tensor(l.inputs[0]).shape.size() >= 2;
}

// The shuffle's params for rows of `n` elements (a reshape's last dim).
ShuffleParams resized(const ShuffleParams& s, int64_t n) {
  ShuffleParams r = s;
  if (r.has_reshape) r.reshape.back() = n;
  return r;
}

Shape with_last(Shape s, int64_t n) {
  s.back() = n;
  return s;
}

// Whether every reader of `id` leads to attention operands through shuffles and slices (the head
// split of q, k and v from one projection), and `id` is not a network output.
bool feeds_attention(const Network& net, const NetworkIndex& index, TensorId id, int depth = 0) {
  const std::vector<size_t> readers = index.consumers(id);
  if (depth > 16 || readers.empty() || index.is_output(id)) return false;
  for (size_t c : readers) {
    const Layer& l = net.layers()[c];
    if (std::holds_alternative<AttentionParams>(l.params)) continue;
    const bool view = std::holds_alternative<ShuffleParams>(l.params) ||
                      (std::holds_alternative<SliceParams>(l.params) && l.inputs.size() == 1);
    if (!view || !feeds_attention(net, index, l.outputs[0], depth + 1)) return false;
  }
  return true;
}

// Whether `id` comes from an attention's result through shuffles, each the only reader of the one
// before.
bool from_attention(const Network& net, const NetworkIndex& index, TensorId id) {
  for (int depth = 0; depth < 16; ++depth) {
    const auto p = index.producer(id);
    if (!p) return false;
    const Layer& l = net.layers()[*p];
    if (std::holds_alternative<AttentionParams>(l.params)) return true;
    if (!std::holds_alternative<ShuffleParams>(l.params) || l.inputs.size() != 1 ||
        index.single_consumer(l.inputs[0]) != *p) {
      return false;
    }
    id = l.inputs[0];
  }
  return false;
}

// Every move there is, until none is left; returns their number.
int move_all(Network& net) {
  int moved = 0;
  const auto fresh = [&](const std::string& base) {
    return base + ":rows" + std::to_string(moved);
  };
  // Each move takes a shuffle one matmul nearer its attention, so this ends; the bound is a guard.
  const int bound = 4 * static_cast<int>(net.layers().size());
  for (bool changed = true; changed && moved < bound;) {
    changed = false;
    const NetworkIndex index(net);
    std::vector<Layer> layers = net.layers();
    for (size_t i = 0; i < layers.size() && !changed; ++i) {
      const Layer m = layers[i];
      if (!row_wise(m, net)) continue;
      // Down: shuffle(x) -> matmul, its result on its way to attention operands:
      // matmul(x) -> shuffle.
      const auto sp = index.producer(m.inputs[0]);
      // (Neither way for a matmul between two attentions, where the moves would undo each
      // other.)
      if (sp && index.single_consumer(m.inputs[0]) == i && moves_rows(layers[*sp], net) &&
          feeds_attention(net, index, m.outputs[0]) && !from_attention(net, index, m.inputs[0])) {
        const Layer s = layers[*sp];
        const int64_t n = net.tensor(m.outputs[0]).shape.back();
        TensorDesc t = net.tensor(m.outputs[0]);
        t.name = fresh(t.name);
        t.shape = with_last(net.tensor(s.inputs[0]).shape, n);
        t.values.reset();
        const TensorId product = net.add_tensor(t);
        Layer mm = m;
        mm.inputs[0] = s.inputs[0];
        mm.outputs = {product};
        Layer shuffle{s.name, resized(std::get<ShuffleParams>(s.params), n), {product}, m.outputs};
        // The matmul stays where it was (its weights may come after the shuffle), the shuffle
        // follows it.
        std::vector<Layer> out;
        for (size_t j = 0; j < layers.size(); ++j) {
          if (j == *sp) continue;
          if (j == i) {
            out.push_back(std::move(mm));
            out.push_back(std::move(shuffle));
          } else {
            out.push_back(std::move(layers[j]));
          }
        }
        layers = std::move(out);
        changed = true;
        continue;
      }
      // Up: an attention's result -> ... -> matmul -> shuffle: ... -> shuffle -> matmul.
      const auto sc = index.single_consumer(m.outputs[0]);
      if (sc && moves_rows(layers[*sc], net) && from_attention(net, index, m.inputs[0]) &&
          !feeds_attention(net, index, m.outputs[0])) {
        const Layer s = layers[*sc];
        const TensorId y = m.inputs[0];
        TensorDesc t = net.tensor(y);
        t.name = fresh(s.name);
        t.shape = with_last(net.tensor(s.outputs[0]).shape, t.shape.back());
        t.values.reset();
        const TensorId rows = net.add_tensor(t);
        Layer shuffle{
            t.name, resized(std::get<ShuffleParams>(s.params), t.shape.back()), {y}, {rows}};
        Layer mm = m;
        mm.inputs[0] = rows;
        mm.outputs = s.outputs;
        layers[i] = std::move(shuffle);  // y is defined before the matmul
        layers[*sc] = std::move(mm);     // the weights are defined before it too
        changed = true;
      }
    }
    if (changed) {
      net.set_layers(std::move(layers));
      ++moved;
    }
  }
  return moved;
}

// The elements the shuffles of `net` that move data write, once the head folding has taken what
// it takes and the views it leaves are gone (a dynamic dim counts as 1: both networks compared
// have the same ones).
int64_t shuffled_after_folding(Network net, const PackedHeads& accept) {
  fold_attention_heads(net, accept);
  remove_dead_layers(net);
  int64_t n = 0;
  for (const Layer& l : net.layers()) {
    const auto* s = std::get_if<ShuffleParams>(&l.params);
    if (s == nullptr || !shuffle_moves_data(*s)) continue;
    int64_t elements = 1;
    for (int64_t d : net.tensor(l.outputs[0]).shape) elements *= d > 0 ? d : 1;
    n += elements;
  }
  return n;
}

}  // namespace

int move_row_shuffles(Network& net, const PackedHeads& accept) {
  Network moved = net;
  const int n = move_all(moved);
  if (n == 0 || shuffled_after_folding(moved, accept) >= shuffled_after_folding(net, accept)) {
    return 0;
  }
  net = std::move(moved);
  return n;
}

}  // namespace kiln::engine
