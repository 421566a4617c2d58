// An activation after a reshape runs before it instead: the same values, and the activation then
// follows its producer directly, where post_ops can take it into a GEMM's epilogue (GPT-2's
// `addmm(bias, x, w).view(B, L, 4 D)` before gelu_new: matmul, bias add, reshape, activation).
// Only where the reshape is the activation's only input and each is its input's only reader.
//
// So does the add of a tensor of the reshape's own shape (a residual): it adds that tensor viewed
// as the reshape's input, and the sum is reshaped instead (GPT-2's attention and MLP projections,
// `addmm(...).view(B, L, D)` then `+ residual`: the residual add joins the GEMM's epilogue instead
// of running as a kernel of its own, 24 a run). Only behind a GEMM's result (anything else gains
// nothing), and static shapes only: the residual's view is written out as a shape.
#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"

namespace kiln::engine {
namespace {

// Whether `x` is what post_ops can give a residual: a matmul's or convolution's result, or a
// matmul's plus a vector (the bias it takes too).
bool gemm_result(const Network& net, const std::vector<Layer>& layers, const NetworkIndex& index,
                 TensorId x) {
  const auto p = index.producer(x);
  if (!p) return false;
  const Layer& l = layers[*p];
  if (std::holds_alternative<MatMulParams>(l.params) ||
      std::holds_alternative<ConvolutionParams>(l.params)) {
    return true;
  }
  const auto* add = std::get_if<ElementwiseParams>(&l.params);
  if (!add || add->op != BinaryOp::kAdd || l.inputs.size() != 2) return false;
  for (size_t i = 0; i < 2; ++i) {
    const auto q = index.producer(l.inputs[i]);
    if (q && std::holds_alternative<MatMulParams>(layers[*q].params) &&
        index.single_consumer(l.inputs[i]) && net.tensor(l.inputs[1 - i]).shape.size() == 1) {
      return true;
    }
  }
  return false;
}

}  // namespace

int activations_before_reshapes(Network& net) {
  int moved = 0;
  std::vector<Layer> layers = net.layers();
  const NetworkIndex index(net, layers);
  // Layers a move rewrote, which the index no longer describes.
  std::vector<bool> moved_here(layers.size(), false);
  // The residual adds' rewrites: the add's place takes three layers, the reshape goes.
  std::vector<bool> gone(layers.size(), false);
  std::vector<std::vector<Layer>> instead(layers.size());
  const auto view = [](const std::string& name, TensorId from, const Shape& to, TensorId out) {
    ShuffleParams s;
    s.has_reshape = true;
    s.reshape = to;
    return Layer{name, s, {from}, {out}};
  };
  for (size_t r = 0; r < layers.size(); ++r) {
    if (moved_here[r]) continue;
    const auto* sh = std::get_if<ShuffleParams>(&layers[r].params);
    if (!sh || shuffle_moves_data(*sh) || layers[r].inputs.size() != 1) continue;
    const TensorId x = layers[r].inputs[0];
    const auto a = index.single_consumer(layers[r].outputs[0]);
    if (!a || moved_here[*a] || !index.single_consumer(x)) continue;
    if (const auto* add = std::get_if<ElementwiseParams>(&layers[*a].params)) {
      const Layer& sum = layers[*a];
      const TensorId reshaped = layers[r].outputs[0];
      if (add->op != BinaryOp::kAdd || sum.inputs.size() != 2 || sum.inputs[0] == sum.inputs[1] ||
          !gemm_result(net, layers, index, x)) {
        continue;
      }
      const TensorId other = sum.inputs[0] == reshaped ? sum.inputs[1] : sum.inputs[0];
      // (Copies: adding tensors below may move the network's table of them.)
      const TensorDesc in = net.tensor(x), mid = net.tensor(reshaped), o = net.tensor(other),
                       out = net.tensor(sum.outputs[0]);
      if (!is_static(in.shape) || !is_static(mid.shape) || o.shape != mid.shape ||
          out.shape != mid.shape || o.dtype != in.dtype || out.dtype != in.dtype ||
          mid.dtype != in.dtype) {
        continue;
      }
      const std::string& name = sum.name;
      const TensorId other_view =
          net.add_tensor(TensorDesc{name + ":residual_view", o.dtype, in.shape, {}});
      const TensorId added =
          net.add_tensor(TensorDesc{name + ":before_reshape", out.dtype, in.shape, {}});
      Layer before = sum;
      before.inputs =
          sum.inputs[0] == reshaped ? std::vector{x, other_view} : std::vector{other_view, x};
      before.outputs = {added};
      instead[*a] = {view(name + ":residual_view", other, in.shape, other_view), before,
                     view(layers[r].name, added, mid.shape, sum.outputs[0])};
      gone[r] = true;
      moved_here[r] = moved_here[*a] = true;
      ++moved;
      continue;
    }
    if (!std::holds_alternative<ActivationParams>(layers[*a].params) ||
        layers[*a].inputs.size() != 1) {
      continue;
    }
    const TensorDesc& in = net.tensor(x);
    const TensorId activated = net.add_tensor(TensorDesc{layers[*a].name + ":before_reshape",
                                                         net.tensor(layers[*a].outputs[0]).dtype,
                                                         in.shape,
                                                         {}});
    Layer act = layers[*a];
    Layer reshape = layers[r];
    act.inputs = {x};
    act.outputs = {activated};
    reshape.inputs = {activated};
    reshape.outputs = layers[*a].outputs;
    // The activation takes the reshape's place (x exists there), the reshape the activation's.
    layers[r] = std::move(act);
    layers[*a] = std::move(reshape);
    moved_here[r] = moved_here[*a] = true;
    ++moved;
  }
  splice_layers(net, std::move(layers), gone, std::move(instead));
  return moved;
}

}  // namespace kiln::engine
