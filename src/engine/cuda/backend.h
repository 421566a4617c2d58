// The CUDA backend as the builder and the tools see it (device queries, what its kernels take),
// beside its engine/backend.h implementation: plain C++ with no CUDA headers, so the engine's
// common code builds the same with or without CUDA (cuda/no_cuda/backend.cpp answers with
// Unsupported when CMake found no CUDA).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/network.h"

namespace kiln::engine::cuda {

// The interpreter kernel's limits on a fused elementwise program (its registers): the builder
// fuses no more, so that every fused layer runs there too when its generated kernel does not.
constexpr int kFusedMaxInputs = 8;
constexpr int kFusedMaxOps = 40;

// Whether this build of kiln has the CUDA backend (KILN_WITH_CUDA).
bool built();
// Number of CUDA devices; 0 without a driver or device (never throws).
int device_count();
// Device index in "cuda" (0) or "cuda:N"; InvalidArgument for anything else.
int parse_device(const std::string& device);
// Compute capability of device `index` as major*10+minor (90 for an H100); DeviceError if there
// is no such device.
int compute_capability(int index);
// The device and libraries kernels' choices hold for (EngineTarget::choice_environment): the
// device's name and compute capability, and the CUDA runtime's, cuDNN's and cuBLASLt's versions.
// DeviceError if there is no such device.
std::string choice_environment(int index);
// How many times this process's kernels asked cuDNN's or cuBLASLt's heuristics for an algorithm
// or timed candidates (tests: a plan whose choices were made while building asks none at its
// profile points).
int64_t algorithm_searches();
// Throws Unsupported naming the first layer the CUDA backend cannot run (its kind, or a dtype its
// kernel does not declare).
void check_supported(const Network& net);

// Whether attention over q [B..., L, E], k [B..., S, E], v [B..., S, Ev] of `dtype` runs as the
// fused (flash) kernel: f16/bf16, or f32 on TF32 (the builder asks it only where the layer may
// use TF32), E == Ev a multiple of 16 up to 128, equal batch dims (with or without a mask: bool or
// float, any broadcast). The builder keeps such layers; other unmasked, non-causal ones become two
// GEMMs + softmax.
bool fused_attention_applies(const Shape& q, const Shape& k, const Shape& v, DataType dtype);

// Whether the fused kernel's tiles of `dtype` and head size E fit the shared memory a block may
// ask for on devices of `compute_capability` (f16/bf16 always; f32 needs twice the bytes: up to
// E = 64 on 99 KiB devices such as sm_86 and sm_89, 112 on sm_80 and sm_87, 128 on sm_90 and
// later). The builder asks it with the target's architecture, so that f32 attention its devices
// cannot hold is decomposed rather than fused.
bool fused_attention_fits(DataType dtype, int64_t E, int compute_capability);

// The masks the fused kernel reads: bool (keep where true), or f16/bf16/f32 added to the scores.
bool fused_attention_mask_applies(DataType mask);

// Whether the CUDA kernel takes a squeeze-excitation layer of `channels` channels squeezed to
// `squeeze`: channels-last data, both at most 4096 (the means and hidden values stay in shared
// memory).
inline bool squeeze_excitation_applies(int64_t channels, int64_t squeeze, bool channels_last) {
  return channels_last && channels >= 1 && channels <= 4096 && squeeze >= 1 && squeeze <= 4096;
}

// Whether squeeze-excitation should take the 1x1 convolution after it (`samples` x `pixels` x
// `channels` channels-last data projected to `out_channels`), scaling the projection's weights
// per sample instead of x (bench/NOTES.md G29): where the excite pass it saves (a read and a
// write of x) outweighs the scaled weights it writes (out_channels x channels per sample) at
// least 4 to 1, with at least 32 input channels (cuBLASLt's tiles are poor below, G15), and
// where the batched GEMM's matrices are either one or long enough (512 pixels) that its row
// tiles waste little.
inline bool excitation_projection_applies(int64_t samples, int64_t pixels, int64_t channels,
                                          int64_t out_channels) {
  return channels >= 32 && out_channels >= 1 && pixels >= 2 * out_channels &&
         (samples == 1 || pixels >= 512);
}

// Generates and compiles (NVRTC) a kernel for every layer of `net` that takes one into
// target.kernels, for target.compute_capability; returns how many layers run one (codegen.h). A
// kernel NVRTC fails to compile is a warning: its layers run on the interpreter kernel.
int generate_kernels(const Network& net, EngineTarget& target);

// A tensor in device memory of the engine's device.
using DeviceTensor = TensorRef;

// The engine's backend (engine/backend.h) is cuda::create_engine_backend, declared there.

}  // namespace kiln::engine::cuda
