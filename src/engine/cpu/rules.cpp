// What the CPU backend takes, for the builder's passes (passes/pass.h).
#include "engine/cpu/kernels.h"
#include "engine/passes/pass.h"

namespace kiln::engine {

BackendRules cpu_backend_rules() {
  BackendRules r;
  // f32 throughout (no precision rules, no TF32, no attention decomposition): its kernels compute
  // in f32, and its attention kernel takes every mask and any packing of the heads.
  r.packed_heads = [](const AttentionParams&, const std::vector<TensorDesc>&, const TensorDesc&) {
    return true;
  };
  // oneDNN's NHWC convolutions read and write the data as it is, where its blocked ones need a
  // reorder of the input and of the output on every run. 2-d ones: oneDNN 2.6's NDHWC 3-d
  // convolutions are slower than its NCDHW ones here (r3d_18 at [1, 3, 8, 112, 112], 2 threads:
  // 363 against 283 ms).
  r.channels_last = [](const Network& n, const Layer& conv, const BuilderConfig&) {
    return n.tensor(conv.inputs[0]).shape.size() == 4;
  };
  // One layer for the pool, the two products and the scale (builder.h).
  r.squeeze_excitation = [](int64_t, int64_t, bool) { return true; };
  r.squeeze_excitation_by_default = true;
  r.element_gathers = true;
  r.placed_concats = true;
  r.writes_placed = cpu::writes_placed;
  return r;
}

}  // namespace kiln::engine
