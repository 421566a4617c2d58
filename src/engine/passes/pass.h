// The builder's optimizer as a pipeline of named passes over a Network. Each pass is a file in
// this folder; pipeline.cpp lists them in order, each with the reason it stands where it does.
// The builder runs them through run_passes: every pass is recorded in the BuildReport, the network
// is verified after each (verify.h: a bad rewrite is reported by the pass that made it), and may
// be printed after each (BuilderConfig::print_after_all, kilnc --print-after-all).
#pragma once

#include <functional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "engine/builder.h"
#include "engine/network.h"
#include "engine/passes/precision.h"

namespace kiln::engine {

// What the target backend takes, asked by the passes instead of testing device names: the
// build-time half of a backend (cpu/rules.cpp, cuda/rules.cpp). Null functions mean "never".
struct BackendRules {
  // Which precisions its kernels take per layer (precision.h); null: it computes in f32 only.
  PrecisionSupportFn precision;
  // Unmasked attention its fused kernel does not take runs as two GEMMs and a softmax. `tf32`:
  // f32 attention may use TF32 tensor-core math (BackendRules::tf32 and BuilderConfig::tf32).
  std::function<bool(const Shape& q, const Shape& k, const Shape& v, DataType, bool tf32)>
      fused_attention;
  bool decompose_attention = false;
  // f32 convolutions and matmuls may use TF32 tensor-core math (with BuilderConfig::tf32).
  bool tf32 = false;
  // Attention reading its heads packed in wider rows (attention_heads.h), for these operands.
  std::function<bool(const AttentionParams&, const std::vector<TensorDesc>&, const TensorDesc&)>
      packed_heads;
  // ConvLayout::kAuto: whether a 2-d convolution runs channels-last.
  std::function<bool(const Network&, const Layer& conv, const BuilderConfig&)> channels_last;
  // Squeeze-excitation as one layer (channels, squeeze width, channels_last), and its projection
  // folded in (samples, pixels, channels, out channels); the default for
  // BuilderConfig::squeeze_excitation.
  std::function<bool(int64_t, int64_t, bool)> squeeze_excitation;
  std::function<bool(int64_t, int64_t, int64_t, int64_t)> excitation_projection;
  bool squeeze_excitation_by_default = false;
  // A float cast feeding a shuffle done by the shuffle.
  bool casts_into_shuffles = false;
  // f16/bf16 attention reads its mask as an additive bias better than as bools (cuDNN's fused
  // attention takes only biases; BuilderConfig::attention_mask_biases).
  bool attention_mask_biases = false;
  // f16/bf16 matmuls may compute a fused erf GELU in its tanh form (BuilderConfig::gelu_tanh).
  bool gelu_tanh_epilogues = false;
  // The most distinct inputs and ops one fused elementwise layer may have (0: no limit).
  int max_fused_inputs = 0;
  int max_fused_ops = 0;
  // Fused elementwise layers read gathers by constant indices themselves (gathered inputs); the
  // CPU's fused loop would gather into a copy, as the gather layer does.
  bool gathered_inputs = false;
  // Chains of shuffles and slices ending in slices fold into one gather by constant indices even
  // where the gathered rows are single elements (gather_chains.cpp): its gather kernel copies
  // small rows as typed words. The CUDA backend's is not measured on them yet.
  bool element_gathers = false;
  // Concats may be in place (concat_in_place.cpp): its concat and elementwise kernels read
  // tensors placed in wider ones, and its concat writes them, as do the layers writes_placed
  // takes (null: no others).
  bool placed_concats = false;
  WritesPlacedFn writes_placed;
  // Throws Unsupported naming a layer the backend cannot run; null: it runs every layer.
  std::function<void(const Network&)> check_supported;
  // Generates and compiles kernels for the built network into the target (cuda/codegen.h);
  // returns how many layers run one. Null: the backend generates none.
  std::function<int(const Network&, EngineTarget&)> generate_kernels;
};

// The rules of the CPU backend and of the CUDA backend for `target` (cuda/rules.cpp; Unsupported
// in a build without CUDA).
BackendRules cpu_backend_rules();
BackendRules cuda_backend_rules(const EngineTarget& target);

struct PassContext {
  const BuilderConfig& config;
  const EngineTarget& target;
  const BackendRules& backend;
  BuildReport& report;
  // Refittable builds: the weights refit replaces (the network's own, before any pass), whose
  // values no pass may read into a decision.
  std::set<std::string> refit_weights = {};
  // Appends a line to the running pass's record ("conv1 + relu1 -> conv1").
  void note(std::string line) const;
};

struct Pass {
  std::string name;
  // Whether the pass runs in this build (config switches, what the backend takes); null: always.
  std::function<bool(const PassContext&)> enabled;
  // Rewrites the network; returns how many rewrites it made (0: it changed nothing).
  std::function<int(Network&, const PassContext&)> run;
};

// Runs the enabled passes in order, recording each in ctx.report.passes. After each, the network
// is verified (config.verify_passes; InternalError "after pass `NAME`: ..." on failure) and, with
// config.print_after_all, printed to `dump` (network_to_text).
void run_passes(Network& net, const std::vector<Pass>& passes, const PassContext& ctx,
                std::ostream& dump);

// The builder's passes, in order (pipeline.cpp).
const std::vector<Pass>& builder_pipeline();

}  // namespace kiln::engine
