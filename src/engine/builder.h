// The builder: runs the optimizer's passes over a network (passes/pipeline.cpp: precision, layout,
// constant folding, dead layers, fusions, ...) for the backend of its target, plans memory, and
// produces a Plan. It reports what each pass did.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/passes/layout.h"
#include "engine/passes/precision.h"
#include "engine/plan.h"

namespace kiln::engine {

// Which 2-d convolutions run on channels-last data (the layout pass, layout.h). kAuto: all of a
// CPU plan's (oneDNN's NHWC kernels need no per-run reorders), those a cuda plan runs in f16/bf16
// or in f32 with TF32 (cuDNN's tensor-core kernels want NHWC).
enum class ConvLayout : uint8_t { kAuto, kChannelsFirst, kChannelsLast };

struct BuilderConfig {
  // "cpu", "cuda" (device 0) or "cuda:N": a cuda plan targets that device's compute capability
  // (DeviceError without it) and holds only layers the CUDA backend can run (Unsupported).
  std::string device = "cpu";
  std::vector<DataType> enabled_precisions = {DataType::kF32};
  size_t workspace_bytes = 0;  // the most activation-arena bytes at the opt shapes; 0: no limit
  int timing_iterations = 0;   // 0: choose kernels by heuristics, no timing
  // No rewrite depends on a weight's values (attention masks that are weights stay masks), and
  // the plan records its source for refit (PlanSource).
  bool refittable = false;
  bool strip_weights = false;  // serialize plans without weight data
  ConvLayout conv_layout = ConvLayout::kAuto;
  // cuda: f32 convolutions and matmuls may use TF32 tensor-core math (their params' tf32).
  // kiln::compile sets it unless CompileSpec::disable_tf32; off here so that engine-level users
  // and tests get plain f32 unless they ask.
  bool tf32 = false;
  // cuda: f16/bf16 matmuls with a fused erf GELU compute it in its tanh form, in cuBLASLt's
  // epilogue (within 4.7e-4 of erf; builder.cpp). kiln::compile sets it unless
  // CompileSpec::exact_gelu; off here, as tf32.
  bool gelu_tanh_epilogues = false;
  // Squeeze-excitation blocks (global average pool, two 1x1 convolutions, the product with the
  // pool's input) become one layer. Unset: on in both backends (cuda: three launches fewer per
  // block; cpu: four passes with the two small products vectorized over the weights as they are,
  // against four layers whose products are oneDNN 1x1 convolutions over one pixel a sample,
  // mobilenet_v3_small b1 1.40 -> 1.21 ms on 2 threads: bench/NOTES.md G80).
  std::optional<bool> squeeze_excitation;
  // Measurement switches (each on by default; off keeps the layers apart, for A/B timings):
  // cuda squeeze-excitation layers take the 1x1 projection after them (bench/NOTES.md G29);
  // cuda float casts feeding a shuffle are done by the shuffle (G31).
  // cuda attention the fused kernel does not take runs as two batched GEMMs and a masked softmax
  // (off: the general attention kernel; G51).
  bool excitation_projection = true;
  bool cast_into_shuffle = true;
  // Concats whose inputs are written in place (concat_in_place.cpp; bench/NOTES.md G79).
  bool concat_in_place = true;
  bool decompose_attention = true;
  // cuda f16/bf16 attention with a bool mask reads it as an additive bias made once for all the
  // layers reading it (attention_mask_biases.cpp), as cuDNN's fused attention needs it. Off until
  // measured against the flash kernel's bool reads (bench/NOTES.md G68).
  bool attention_mask_biases = false;
  // cuda plans built on their device: run the engine once at each profile point (every input at
  // its min, at its opt, at its max) on random data, so that its kernels choose their algorithms
  // (cuDNN's and cuBLASLt's heuristics, timed GEMM candidates) while building, as TensorRT's
  // builder does, and keep the choices in the plan (EngineTarget::choices): a loaded plan's first
  // calls there then choose nothing. Switch choose_at_build=off leaves it to the first calls.
  bool choose_at_build = true;
  // The switches set through apply_switch, recorded in the plan (EngineTarget::switches).
  std::vector<std::string> switches;
  // Verify the network after every pass (verify.h): a broken rewrite is an InternalError naming
  // its pass. Costs one shape inference per layer per pass.
  bool verify_passes = true;
  // Print the network to stderr after every pass (kilnc --print-after-all).
  bool print_after_all = false;
};

// What one pass did: how many rewrites, and a line per rewrite where it says more.
struct PassRecord {
  std::string name;
  int changes = 0;
  std::vector<std::string> lines;  // e.g. "conv1 + relu1 -> conv1"
};

struct BuildReport {
  int layers_before = 0, layers_after = 0;
  std::vector<PassRecord> passes;  // every pass that ran, in order
  PrecisionReport precision;       // per layer, for cuda builds with f16/bf16 enabled
  LayoutReport layout;             // what the channels-last pass did
  size_t arena_bytes = 0;          // activations at the opt shapes, planned by liveness
  size_t activation_bytes = 0;     // the same activations allocated separately
  int generated_layers = 0;        // cuda: layers that run a generated kernel (cuda/codegen.h)
  int generated_kernels = 0;       // cuda: the distinct kernels they run, stored in the plan
  int kernel_choices = 0;          // cuda: the kernels' choices made while building (plan)
  int shuffles = 0;                // shuffle layers left that move data (count_moving_shuffles)
  // Rewrites by the pass `name`; 0 when it did not run.
  int changes(const std::string& name) const;
  // The lines of every pass, in order (the fusions').
  std::vector<std::string> lines() const;
  std::string to_string() const;
};

// Sets a measurement switch given as "name=value" (kilnc --switch) and records it in
// config.switches: conv_layout=auto|channels_first|channels_last, squeeze_excitation=on|off,
// excitation_projection=on|off, cast_into_shuffle=on|off, concat_in_place=on|off,
// decompose_attention=on|off,
// attention_mask_biases=on|off, choose_at_build=on|off set the fields above; the CUDA kernels'
// cuda_pointwise=auto|cudnn, cuda_depthwise=auto|strip, cuda_grouped=auto|cudnn|kernel,
// gemm_fold=on|off, gemm_timing=on|off, gemm_split_k=on|off, gemm_skinny=off|on|only,
// attention_key_split=on|off, attention_cudnn=auto|on|off, reuse_algorithms=on|off,
// first_call_gemm=on|off, repeat_tuning=on|off and programmatic_launch=on|off are only
// recorded, and read from the plan when its engine is created (cuda::KernelOptions);
// cuda_codegen=off builds no generated kernels (pointwise layers run on the interpreter kernel);
// cuda_arch=NN builds a cuda plan for compute capability NN without a device (the engine runs
// only on such a GPU).
// InvalidArgument names an unknown switch or value.
void apply_switch(BuilderConfig& config, const std::string& name_value);

// Throws InvalidArgument/Unsupported naming the layer or setting at fault.
Plan build(const Network& network, const BuilderConfig& config, BuildReport* report = nullptr);

// Writes the weights of `source`, the same architecture as the refittable plan's source network
// with new weights, into the plan: the builder's passes run over `source` for the plan's target
// with `config` (the build's), and each weight they leave goes to the plan's weight in the same
// slot; the kernels the build chose and generated stay. Throws InvalidArgument naming `what` (and
// the weight, where one does not fit) when the plan is not refittable, `source` is another
// network, or the passes rewrote it otherwise; changes nothing then.
void refit(Plan& plan, const Network& source, const BuilderConfig& config, const std::string& what);

}  // namespace kiln::engine
