// A transpose of the last two dims that feeds a matmul is the matmul's transpose flag: the GEMM
// reads the operand transposed where it lies (`q @ k.transpose(-2, -1)` in every traced
// attention, swin's and the transformers' alike), instead of a shuffle writing the transposed copy
// first. The shuffle stays for its other readers, if any (dead-layer removal takes it otherwise).
#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"

namespace kiln::engine {

namespace {

// A shuffle that only swaps the last two dims (one permutation, no reshape, no cast).
bool swaps_last_two(const Layer& layer) {
  const auto* p = std::get_if<ShuffleParams>(&layer.params);
  if (!p || p->cast || p->has_reshape || !p->second_perm.empty() || layer.inputs.size() != 1) {
    return false;
  }
  const std::vector<int64_t>& perm = p->first_perm;
  const size_t r = perm.size();
  if (r < 2) return false;
  for (size_t d = 0; d + 2 < r; ++d) {
    if (perm[d] != static_cast<int64_t>(d)) return false;
  }
  return perm[r - 2] == static_cast<int64_t>(r - 1) && perm[r - 1] == static_cast<int64_t>(r - 2);
}

}  // namespace

int fold_matmul_transposes(Network& net) {
  const NetworkIndex index(net);
  std::vector<Layer> layers = net.layers();
  int folded = 0;
  for (Layer& layer : layers) {
    auto* mm = std::get_if<MatMulParams>(&layer.params);
    if (!mm) continue;
    for (size_t k = 0; k < 2 && k < layer.inputs.size(); ++k) {
      const auto p = index.producer(layer.inputs[k]);
      if (!p || !swaps_last_two(net.layers()[*p])) continue;
      const Layer& shuffle = net.layers()[*p];
      if (net.tensor(shuffle.inputs[0]).dtype != net.tensor(layer.inputs[k]).dtype) continue;
      layer.inputs[k] = shuffle.inputs[0];
      bool& flag = k == 0 ? mm->transpose_a : mm->transpose_b;
      flag = !flag;
      ++folded;
    }
  }
  net.set_layers(std::move(layers));
  return folded;
}

}  // namespace kiln::engine
