// Attention the fused kernel does not take as two matmuls and a softmax.
#include "engine/passes/passes.h"

#include <cmath>

#include "engine/passes/attention_heads.h"
#include "engine/passes/network_index.h"

namespace kiln::engine {

namespace {

// The largest attention weights ([..., L, S], written once and read once) a decomposition makes;
// beyond it the attention layer, which holds no weights, stays.
constexpr int64_t kMaxWeightsBytes = int64_t{1} << 30;

}  // namespace

// Attention that the fused kernel does not take (f32, or head sizes or masks it does not handle)
// as matmul(q * scale, k^T) -> softmax (masked and/or causal as the attention) -> matmul(., v),
// in the attention's dtype (after the precision pass): both products then run as cuBLASLt
// batched GEMMs on tensor cores, where the general attention kernel is a simple one. The masked
// softmax gives rows with nothing kept zeros, as the attention does. Packed-head attention keeps
// its layer (the fused kernel takes it), as does one whose weights would pass kMaxWeightsBytes.
// Keys and values whose heads are repeated for grouped-query attention ([B, Hkv, S, E] sources,
// group G = H / Hkv) are read unrepeated: the G query heads of a key head are G * L rows of one
// product (q viewed as [B, Hkv, G * L, E], a reshape), so the repeat (a broadcast copy of k and v
// each) goes with the dead layers.
int decompose_attention(
    Network& net,
    const std::function<bool(const Shape&, const Shape&, const Shape&, DataType)>& fused) {
  const std::vector<Layer>& layers = net.layers();
  const NetworkIndex index(net, layers);
  std::vector<Layer> out;
  int rewritten = 0;
  for (const Layer& l : layers) {
    const auto* a = std::get_if<AttentionParams>(&l.params);
    if (a == nullptr || a->heads > 0) {
      out.push_back(l);
      continue;
    }
    const TensorDesc q = net.tensor(l.inputs[0]), k = net.tensor(l.inputs[1]),
                     v = net.tensor(l.inputs[2]);
    const DataType dt = q.dtype;
    const int64_t e = q.shape.back();
    if (e == kDynamic || k.dtype != dt || v.dtype != dt || net.tensor(l.outputs[0]).dtype != dt ||
        fused(q.shape, k.shape, v.shape, dt)) {
      out.push_back(l);
      continue;
    }
    const Shape out_shape = net.tensor(l.outputs[0]).shape;
    Shape scores_shape = out_shape;
    scores_shape.back() = k.shape[k.shape.size() - 2];
    if (is_static(scores_shape) &&
        volume(scores_shape) > kMaxWeightsBytes / static_cast<int64_t>(dtype_size(dt))) {
      out.push_back(l);
      continue;
    }
    const double scale = a->scale != 0 ? a->scale : 1.0 / std::sqrt(static_cast<double>(e));
    const auto tensor = [&](const std::string& suffix, DataType t, Shape shape) {
      return net.add_tensor(TensorDesc{l.name + suffix, t, std::move(shape), {}});
    };
    const std::string weight = l.name + ":scale";
    net.add_weight(weight, Weights::from_floats({1}, {static_cast<float>(scale)}));
    TensorId scale_t = tensor(":scale", DataType::kF32, {1});
    out.push_back(Layer{weight, ConstantParams{weight}, {}, {scale_t}});
    if (dt != DataType::kF32) {  // folds into a constant of the attention's dtype
      const TensorId cast = tensor(":scale_cast", dt, {1});
      out.push_back(Layer{l.name + ":scale_cast", CastParams{dt}, {scale_t}, {cast}});
      scale_t = cast;
    }
    const TensorId qs = tensor(":q_scaled", dt, q.shape);
    out.push_back(Layer{
        l.name + ":q_scaled", ElementwiseParams{BinaryOp::kMul}, {l.inputs[0], scale_t}, {qs}});
    // Grouped heads: rank 4 throughout, k and v both repeats of one group.
    std::optional<RepeatedHeads> rk, rv;
    if (q.shape.size() == 4 && is_static(q.shape) && is_static(out_shape)) {
      rk = repeated_heads(net, layers, index, l.inputs[1]);
      rv = repeated_heads(net, layers, index, l.inputs[2]);
    }
    const bool grouped = rk && rv && rk->group == rv->group && rk->group > 1 &&
                         q.shape[1] % rk->group == 0 && net.tensor(rk->source).shape.size() == 4 &&
                         net.tensor(rv->source).shape.size() == 4;
    // `id` of shape [B, H, rows, cols] as [B, H / G, G * rows, cols] (or back).
    const auto regroup = [&](TensorId id, const std::string& suffix, bool back) {
      Shape s = net.tensor(id).shape;
      const int64_t group = rk->group;
      s = back ? Shape{s[0], s[1] * group, s[2] / group, s[3]}
               : Shape{s[0], s[1] / group, s[2] * group, s[3]};
      ShuffleParams r;
      r.has_reshape = true;
      r.reshape = s;
      const TensorId t = tensor(suffix, net.tensor(id).dtype, s);
      out.push_back(Layer{l.name + suffix, r, {id}, {t}});
      return t;
    };
    const TensorId q_rows = grouped ? regroup(qs, ":q_grouped", false) : qs;
    const TensorId keys = grouped ? rk->source : l.inputs[1];
    const TensorId values = grouped ? rv->source : l.inputs[2];
    Shape products_shape = scores_shape;
    if (grouped) {
      products_shape = {scores_shape[0], scores_shape[1] / rk->group, scores_shape[2] * rk->group,
                        scores_shape[3]};
    }
    const TensorId products = tensor(grouped ? ":scores_grouped" : ":scores", dt, products_shape);
    MatMulParams qk;
    qk.transpose_b = true;
    out.push_back(
        Layer{l.name + (grouped ? ":scores_grouped" : ":scores"), qk, {q_rows, keys}, {products}});
    const TensorId scores = grouped ? regroup(products, ":scores", true) : products;
    const TensorId probs = tensor(":probs", dt, scores_shape);
    std::vector<TensorId> softmax_in = {scores};
    if (a->has_mask) softmax_in.push_back(l.inputs[3]);
    out.push_back(
        Layer{l.name + ":softmax", SoftmaxParams{-1, false, a->causal}, softmax_in, {probs}});
    if (grouped) {
      const TensorId p_rows = regroup(probs, ":probs_grouped", false);
      Shape o = out_shape;
      o = {o[0], o[1] / rk->group, o[2] * rk->group, o[3]};
      const TensorId result = tensor(":grouped", dt, o);
      out.push_back(Layer{l.name + ":grouped", MatMulParams{}, {p_rows, values}, {result}});
      ShuffleParams r;
      r.has_reshape = true;
      r.reshape = out_shape;
      out.push_back(Layer{l.name, r, {result}, l.outputs});
    } else {
      out.push_back(Layer{l.name, MatMulParams{}, {probs, values}, l.outputs});
    }
    ++rewritten;
  }
  net.set_layers(std::move(out));
  return rewritten;
}

}  // namespace kiln::engine
