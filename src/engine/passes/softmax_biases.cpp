// Constants added to a matmul's result on its way to a softmax over the last axis are the
// softmax's additive mask: swin's relative position bias on its attention scores and, in its
// shifted blocks, the window mask added behind a view of the scores ([W, H, L, S] viewed as
// [B, W / B, H, L, S]); T5's and ALiBi's biases likewise (decomposed attention on the GPU in f32,
// written out on the CPU). The adds, each a kernel and a pass over the scores, go: the softmax
// runs on the view where the constants broadcast (a softmax over the last axis commutes with
// views that keep it) and reads their sum, computed here, as a mask.
// Only constants of finite values: a masked softmax gives a row with nothing kept zeros where a
// plain one gives NaN, and with finite biases on a matmul's finite scores no row is such a row.
#include <cmath>
#include <optional>

#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"
#include "engine/scalar_math.h"

namespace kiln::engine {
namespace {

// The most elements the summed mask may have.
constexpr int64_t kMaxMaskElements = int64_t{1} << 22;

// A constant of finite floating values, with its shape; nullopt otherwise.
std::optional<Weights> finite_constant(const Network& net, const Layer& layer) {
  const auto* c = std::get_if<ConstantParams>(&layer.params);
  if (!c) return std::nullopt;
  const Weights& w = net.weight(c->weight);
  if (!is_floating(w.dtype) || !w.data || !is_static(w.shape)) return std::nullopt;
  const int64_t n = volume(w.shape);
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(load_as<double>(w.dtype, w.data->data(), i))) return std::nullopt;
  }
  return w;
}

// A view of the scores that keeps the last dim (a reshape, no permutation or cast).
bool last_dim_view(const Network& net, const Layer& l) {
  const auto* s = std::get_if<ShuffleParams>(&l.params);
  if (!s || !s->first_perm.empty() || !s->second_perm.empty() || s->cast || l.inputs.size() != 1)
    return false;
  const Shape &in = net.tensor(l.inputs[0]).shape, &out = net.tensor(l.outputs[0]).shape;
  return !in.empty() && !out.empty() && in.back() == out.back() && in.back() > 0;
}

// One constant added on the way, at a tensor of shape `at`.
struct Bias {
  Weights weights;
  Shape at;
};

// How many trailing dims `c` spans (from its first dim that is not 1).
size_t span(const Shape& c) {
  for (size_t i = 0; i < c.size(); ++i) {
    if (c[i] != 1) return c.size() - i;
  }
  return 0;
}

// `c` broadcasts to `at` (right-aligned, each dim 1 or at's, at's dim static where c's is not 1).
bool broadcasts_to(const Shape& c, const Shape& at) {
  if (c.size() > at.size()) return false;
  for (size_t i = 0; i < c.size(); ++i) {
    const int64_t d = c[c.size() - 1 - i], ad = at[at.size() - 1 - i];
    if (d != 1 && d != ad) return false;
  }
  return true;
}

// Where every bias can move to `ref`: the trailing dims it spans are the same in both shapes (the
// views between keep the elements' order, so those dims' indices stay as they are).
bool movable_to(const std::vector<Bias>& biases, const Shape& ref, size_t* widest) {
  *widest = 0;
  for (const Bias& b : biases) {
    const size_t k = span(b.weights.shape);
    if (k > ref.size() || k > b.at.size()) return false;
    for (size_t i = 0; i < k; ++i) {
      const int64_t d = ref[ref.size() - 1 - i];
      if (d < 0 || d != b.at[b.at.size() - 1 - i]) return false;
    }
    *widest = std::max(*widest, k);
  }
  return true;
}

// The biases summed over ref's last `k` dims (f32).
Weights summed(const std::vector<Bias>& biases, const Shape& ref, size_t k) {
  const Shape shape(ref.end() - static_cast<std::ptrdiff_t>(k), ref.end());
  const int64_t n = volume(shape);
  std::vector<double> sum(static_cast<size_t>(n), 0.0);
  for (const Bias& b : biases) {
    // b's shape over the same k dims, right-aligned (1 where it has fewer).
    const Shape& c = b.weights.shape;
    std::vector<int64_t> dims(k, 1), strides(k, 0);
    int64_t step = 1;
    for (size_t i = 0; i < k && i < c.size(); ++i) {
      const int64_t d = c[c.size() - 1 - i];
      dims[k - 1 - i] = d;
      strides[k - 1 - i] = d == 1 ? 0 : step;
      step *= d;
    }
    for (int64_t e = 0; e < n; ++e) {
      int64_t rest = e, offset = 0;
      for (size_t j = k; j-- > 0;) {
        offset += rest % shape[j] * strides[j];
        rest /= shape[j];
      }
      sum[static_cast<size_t>(e)] +=
          load_as<double>(b.weights.dtype, b.weights.data->data(), offset);
    }
  }
  return Weights::from_floats(shape, std::vector<float>(sum.begin(), sum.end()));
}

}  // namespace

int fold_softmax_biases(Network& net) {
  std::vector<Layer> layers = net.layers();
  const NetworkIndex index(net, layers);
  std::vector<bool> gone(layers.size(), false);
  std::vector<std::vector<Layer>> instead(layers.size());
  int rewritten = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& s = layers[i];
    const auto* p = std::get_if<SoftmaxParams>(&s.params);
    if (!p || p->log || s.inputs.size() != 1) continue;
    const TensorDesc x = net.tensor(s.inputs[0]);
    if (x.shape.empty() ||
        normalize_axis(p->axis, x.shape.size(), s.name) != static_cast<int>(x.shape.size()) - 1)
      continue;
    // Back from the softmax through views and constant adds, each read by the next alone, to the
    // matmul's scores.
    std::vector<Bias> biases;
    std::vector<size_t> chain;  // the adds and views
    std::vector<Shape> shapes = {x.shape};
    TensorId t = s.inputs[0];
    std::optional<TensorId> scores;
    while (!scores) {
      const auto from = index.producer(t);
      if (!from || !index.single_consumer(t) || gone[*from]) break;
      const Layer& l = layers[*from];
      if (std::holds_alternative<MatMulParams>(l.params)) {
        if (!chain.empty()) scores = t;
        break;
      }
      if (last_dim_view(net, l)) {
        chain.push_back(*from);
        t = l.inputs[0];
        shapes.push_back(net.tensor(t).shape);
        continue;
      }
      const auto* e = std::get_if<ElementwiseParams>(&l.params);
      if (!e || e->op != BinaryOp::kAdd || l.inputs.size() != 2) break;
      const Shape& at = net.tensor(l.outputs[0]).shape;
      std::optional<TensorId> other;
      for (int side = 0; side < 2 && !other; ++side) {
        const TensorId a = l.inputs[static_cast<size_t>(side)];
        const TensorId c = l.inputs[static_cast<size_t>(1 - side)];
        const auto cp = index.producer(c);
        if (!cp || net.tensor(a).shape != at || net.tensor(a).dtype != x.dtype) continue;
        auto w = finite_constant(net, layers[*cp]);
        if (!w || !broadcasts_to(w->shape, at)) continue;
        biases.push_back({std::move(*w), at});
        other = a;
      }
      if (!other) break;
      chain.push_back(*from);
      t = *other;
    }
    if (!scores || biases.empty()) continue;
    // The softmax runs at the first shape on the chain (from the softmax back) where every bias
    // broadcasts; at most one dynamic dim there, which the views carry as -1.
    std::optional<Shape> ref;
    size_t k = 0;
    const auto viewable = [](const Shape& v) {
      return std::count(v.begin(), v.end(), kDynamic) <= 1 &&
             std::count(v.begin(), v.end(), 0) == 0;
    };
    if (!viewable(x.shape)) continue;
    // A causal softmax keeps its query rows: the last two dims as the softmax's.
    const auto rows_kept = [&](const Shape& v) {
      const size_t n = x.shape.size();
      return !p->causal || (v.size() >= 2 && n >= 2 && x.shape[n - 2] >= 0 &&
                            v[v.size() - 2] == x.shape[n - 2] && v.back() == x.shape.back());
    };
    for (const Shape& candidate : shapes) {
      if (viewable(candidate) && rows_kept(candidate) && movable_to(biases, candidate, &k)) {
        ref = candidate;
        break;
      }
    }
    if (!ref) continue;
    Shape mask_shape(ref->end() - static_cast<std::ptrdiff_t>(k), ref->end());
    if (volume(mask_shape) > kMaxMaskElements) continue;
    const std::string& name = s.name;
    const auto view = [&](TensorId from, const Shape& to, const std::string& suffix,
                          std::optional<TensorId> output) {
      ShuffleParams r;
      r.has_reshape = true;
      r.reshape = to;
      const TensorId o =
          output ? *output : net.add_tensor(TensorDesc{name + suffix, x.dtype, to, {}});
      instead[i].push_back(Layer{name + suffix, r, {from}, {o}});
      return o;
    };
    const std::string mask_name = name + ":bias";
    net.add_weight(mask_name, summed(biases, *ref, k));
    const TensorId mask = net.add_tensor(TensorDesc{mask_name, DataType::kF32, mask_shape, {}});
    instead[i].push_back(Layer{mask_name, ConstantParams{mask_name}, {}, {mask}});
    const Shape& scores_shape = net.tensor(*scores).shape;
    const TensorId in = *ref == scores_shape ? *scores : view(*scores, *ref, ":scores", {});
    if (*ref == x.shape) {
      instead[i].push_back(Layer{name, *p, {in, mask}, s.outputs});
    } else {
      const TensorId probs = net.add_tensor(TensorDesc{name + ":probs", x.dtype, *ref, {}});
      instead[i].push_back(Layer{name + ":probs", *p, {in, mask}, {probs}});
      view(probs, x.shape, "", s.outputs[0]);
    }
    for (size_t l : chain) gone[l] = true;
    ++rewritten;
  }
  if (rewritten > 0) splice_layers(net, std::move(layers), gone, std::move(instead));
  return rewritten;
}

}  // namespace kiln::engine
