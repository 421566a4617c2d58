// The CPU kernel table: every family registers here, in one explicit list.
#include "engine/cpu/kernels.h"

#include "util/errors.h"

namespace kiln::engine::cpu {

const KernelTable& kernel_table() {
  static const KernelTable table = KernelTable::of<KernelTable>(
      {register_elementwise, register_matmul, register_convolution, register_pooling,
       register_reduce, register_normalization, register_shuffle, register_gather, register_fill,
       register_resize, register_attention});
  return table;
}

void run_layer(const Layer& layer, const std::vector<TensorView>& inputs,
               const std::vector<TensorView>& outputs, std::unique_ptr<KernelState>& state) {
  KernelFn fn = kernel_table().get(layer.params);
  KILN_CHECK(fn != nullptr, Unsupported, "layer `", layer.name, "` (",
             layer_kind_name(layer.params), "): the CPU backend has no kernel for this kind");
  KernelArgs args{layer, inputs, outputs, state};
  fn(args);
}

}  // namespace kiln::engine::cpu
