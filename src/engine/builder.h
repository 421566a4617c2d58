// The builder: optimizes a network (dead layers, constant folding, fusions) and plans memory,
// producing a Plan. It reports what it did.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/layout.h"
#include "engine/plan.h"
#include "engine/precision.h"

namespace kiln::engine {

// Which 2-d convolutions run on channels-last data (the layout pass, layout.h). kAuto: all of a
// CPU plan's (oneDNN's NHWC kernels need no per-run reorders), those a cuda plan runs in f16/bf16
// or in f32 with TF32 (cuDNN's tensor-core kernels want NHWC). Refittable plans always stay
// channels-first (the weights must not be rewritten).
enum class ConvLayout : uint8_t { kAuto, kChannelsFirst, kChannelsLast };

struct BuilderConfig {
  // "cpu", "cuda" (device 0) or "cuda:N": a cuda plan targets that device's compute capability
  // (DeviceError without it) and holds only layers the CUDA backend can run (Unsupported).
  std::string device = "cpu";
  std::vector<DataType> enabled_precisions = {DataType::kF32};
  size_t workspace_bytes = size_t{1} << 30;
  int timing_iterations = 0;   // 0: choose kernels by heuristics, no timing
  bool refittable = false;     // keep named weights out of constant folding
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
  // pool's input) become one layer. Unset: cuda plans only, where it saves three launches per
  // block; the CPU backend runs the separate layers faster (its fused loop does the two small
  // products without oneDNN: efficientnet_b0 at batch 8 took 24 of 34 ms in them).
  std::optional<bool> squeeze_excitation;
};

struct BuildReport {
  int layers_before = 0, layers_after = 0;
  int dead_layers_removed = 0, layers_folded = 0;
  std::vector<std::string> fusions;  // one line per fusion: "conv1 + relu1 -> conv1"
  PrecisionReport precision;         // per layer, for cuda builds with f16/bf16 enabled
  LayoutReport layout;               // what the channels-last pass did
  int attention_decomposed = 0;      // cuda: attention layers rewritten as two GEMMs + softmax
  int attention_heads_folded = 0;    // attention layers reading packed heads (attention_heads.h)
  int tf32_layers = 0;               // cuda: f32 convolutions and matmuls allowed TF32 math
  int shuffle_chains_folded = 0;     // shuffle chains that keep element order, now one reshape
  int gelu_tanh_layers = 0;          // cuda: f16/bf16 matmuls whose GELU takes the tanh form
  int squeeze_excitations = 0;       // pool + 1x1 conv + 1x1 conv + multiply, now one layer
  int excitation_projections = 0;    // cuda: of those, ones that took the 1x1 conv after them
  int casts_into_shuffles = 0;       // cuda: float casts done by the shuffle they fed
  size_t arena_bytes = 0;            // activations at the opt shapes, planned by liveness
  size_t activation_bytes = 0;       // the same activations allocated separately
  std::string to_string() const;
};

// Throws InvalidArgument/Unsupported naming the layer or setting at fault.
Plan build(const Network& network, const BuilderConfig& config, BuildReport* report = nullptr);

}  // namespace kiln::engine
