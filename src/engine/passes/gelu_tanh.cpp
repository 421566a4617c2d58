// f16/bf16 matmuls with a fused erf GELU take its tanh form.
#include "engine/passes/passes.h"

namespace kiln::engine {

// f16/bf16 matmuls whose fused activation is the erf GELU take its tanh form, which cuBLASLt
// computes in the GEMM's epilogue: the separate pass over the FFN's widest tensor goes (BERT
// and ViT, bench/NOTES.md G16). The two forms differ by at most 4.7e-4 in absolute terms (at
// |x| = 2.70; the difference is even in x): under half an f16 ulp wherever |GELU| >= 0.5, and of
// the order of the f16 rounding of the values it is summed with in the next layer (an ulp is
// 4.9e-4 to 9.8e-4 at 0.5 to 2). Only layers whose epilogue takes it (no bias, or a bias of the
// output's dtype over its last dim) are marked. Returns how many layers it changed.
int gelu_tanh_epilogues(Network& net) {
  int marked = 0;
  std::vector<Layer> layers = net.layers();
  for (Layer& l : layers) {
    auto* m = std::get_if<MatMulParams>(&l.params);
    if (!m || m->post.activation != ActivationKind::kGelu) continue;
    const TensorDesc& out = net.tensor(l.outputs[0]);
    if ((out.dtype != DataType::kF16 && out.dtype != DataType::kBF16) || out.shape.empty()) {
      continue;
    }
    if (m->post.has_bias) {
      const TensorDesc& bias = net.tensor(l.inputs.at(2));
      // (A dynamic last dim, kDynamic < 0, never equals the bias's size.)
      if (bias.dtype != out.dtype || volume(bias.shape) != out.shape.back()) continue;
    }
    m->post.activation = ActivationKind::kGeluTanh;
    ++marked;
  }
  net.set_layers(std::move(layers));
  return marked;
}

}  // namespace kiln::engine
