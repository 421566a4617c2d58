// What the CUDA backend takes, for the builder's passes (passes/pass.h): its kernels' precisions,
// its fused attention, cuDNN's layouts, its squeeze-excitation and GELU epilogues.
#include "engine/cuda/backend.h"

#include <algorithm>

#include "engine/passes/pass.h"

namespace kiln::engine {

BackendRules cuda_backend_rules(const EngineTarget& target) {
  BackendRules r;
  r.precision = cuda_precision_support();
  // f32 on TF32 only (the flash kernel has no full-f32 form), with tiles the target holds.
  const int cc = target.compute_capability;
  r.fused_attention = [cc](const Shape& q, const Shape& k, const Shape& v, DataType t, bool tf32) {
    return (t != DataType::kF32 || tf32) && cuda::fused_attention_applies(q, k, v, t) &&
           cuda::fused_attention_fits(t, q.back(), cc);
  };
  // Attention the fused kernel does not take runs as two cuBLASLt batched GEMMs on tensor cores
  // and a softmax, where the general attention kernel is a simple one.
  r.decompose_attention = true;
  r.tf32 = true;
  // The fused kernel takes packed heads in f16/bf16 (and f32 on TF32: the layer's tf32, set by
  // the tf32 pass before the head passes), with 16-byte rows and column offsets, and a bool or
  // float mask (sources[3], if any).
  r.packed_heads = [cc](const AttentionParams& p, const std::vector<TensorDesc>& sources,
                        const TensorDesc& out) {
    const int64_t B = out.shape[0], L = out.shape[1], S = sources[1].shape[1];
    const Shape q = {B, p.heads, L, p.head_size}, kv = {B, p.heads, S, p.head_size};
    if (out.dtype == DataType::kF32 && !p.tf32) return false;
    if (!cuda::fused_attention_fits(out.dtype, p.head_size, cc)) return false;
    if (!cuda::fused_attention_applies(q, kv, kv, out.dtype)) return false;
    for (size_t i = 0; i < 3; ++i) {
      if (sources[i].shape[2] % 8 != 0 || p.columns[i] % 8 != 0) return false;
    }
    return sources.size() == 3 || cuda::fused_attention_mask_applies(sources[3].dtype);
  };
  // cuDNN's tensor-core kernels want channels-last: f16/bf16 convolutions, and f32 ones in TF32,
  // 2-d (NHWC) and 3-d (NDHWC; r3d_18 fp16 b32 on an H200: 11.35 -> 7.50 ms, bench/NOTES.md G54).
  r.channels_last = [](const Network& n, const Layer& conv, const BuilderConfig& config) {
    const size_t rank = n.tensor(conv.inputs[0]).shape.size();
    if (rank != 4 && rank != 5) return false;
    const DataType t = n.tensor(conv.outputs[0]).dtype;
    return t == DataType::kF16 || t == DataType::kBF16 || (t == DataType::kF32 && config.tf32);
  };
  r.squeeze_excitation = cuda::squeeze_excitation_applies;
  r.squeeze_excitation_by_default = true;  // two launches per block instead of five
  r.excitation_projection = cuda::excitation_projection_applies;
  r.casts_into_shuffles = true;
  r.attention_mask_biases = true;
  r.gelu_tanh_epilogues = true;
  r.check_supported = cuda::check_supported;
  r.max_fused_inputs = cuda::kFusedMaxInputs;
  r.max_fused_ops = cuda::kFusedMaxOps;
  r.gathered_inputs = true;
  r.placed_concats = true;
  if (std::find(target.switches.begin(), target.switches.end(), "cuda_codegen=off") ==
      target.switches.end()) {
    r.generate_kernels = cuda::generate_kernels;
  }
  return r;
}

}  // namespace kiln::engine
