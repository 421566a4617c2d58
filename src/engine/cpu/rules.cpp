// What the CPU backend takes, for the builder's passes (passes/pass.h).
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
  // reorder of the input and of the output on every run.
  r.channels_last = [](const Network&, const Layer&, const BuilderConfig&) { return true; };
  // Only when asked: its separate layers run faster than the fused loop (builder.h).
  r.squeeze_excitation = [](int64_t, int64_t, bool) { return true; };
  r.squeeze_excitation_by_default = false;
  return r;
}

}  // namespace kiln::engine
