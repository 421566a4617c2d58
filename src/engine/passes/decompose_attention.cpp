// Attention the fused kernel does not take as two matmuls and a softmax.
#include "engine/passes/passes.h"

#include <cmath>

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
int decompose_attention(
    Network& net,
    const std::function<bool(const Shape&, const Shape&, const Shape&, DataType)>& fused) {
  std::vector<Layer> out;
  int rewritten = 0;
  for (const Layer& l : net.layers()) {
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
    const TensorId scores = tensor(":scores", dt, scores_shape);
    MatMulParams qk;
    qk.transpose_b = true;
    out.push_back(Layer{l.name + ":scores", qk, {qs, l.inputs[1]}, {scores}});
    const TensorId probs = tensor(":probs", dt, scores_shape);
    std::vector<TensorId> softmax_in = {scores};
    if (a->has_mask) softmax_in.push_back(l.inputs[3]);
    out.push_back(
        Layer{l.name + ":softmax", SoftmaxParams{-1, false, a->causal}, softmax_in, {probs}});
    out.push_back(Layer{l.name, MatMulParams{}, {probs, l.inputs[2]}, l.outputs});
    ++rewritten;
  }
  net.set_layers(std::move(out));
  return rewritten;
}

}  // namespace kiln::engine
