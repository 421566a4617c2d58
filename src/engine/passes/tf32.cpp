// f32 convolutions, matmuls and attention may use TF32 tensor-core math.
#include "engine/passes/passes.h"

namespace kiln::engine {

// Lets f32 convolutions, matmuls and attention use TF32 tensor-core math (their params' tf32;
// attention: the cuda flash kernel, which the attention passes kept for it): PyTorch's
// cuDNN convolutions do by default, and fp32 convolutions in FMA math ran 3x slower than them
// (bench/NOTES.md G14). Returns how many layers it marked.
int allow_tf32(Network& net) {
  int marked = 0;
  std::vector<Layer> layers = net.layers();
  for (Layer& l : layers) {
    if (l.outputs.empty() || net.tensor(l.outputs[0]).dtype != DataType::kF32) continue;
    if (auto* c = std::get_if<ConvolutionParams>(&l.params)) {
      c->tf32 = true;
      ++marked;
    } else if (auto* m = std::get_if<MatMulParams>(&l.params)) {
      m->tf32 = true;
      ++marked;
    } else if (auto* a = std::get_if<AttentionParams>(&l.params)) {
      a->tf32 = true;
      ++marked;
    }
  }
  net.set_layers(std::move(layers));
  return marked;
}

}  // namespace kiln::engine
