// The CUDA backend as the runtime and builder see it: plain C++ with no CUDA headers, so the
// engine's common code builds the same with or without CUDA (cuda/no_cuda/backend.cpp answers
// every call with Unsupported when CMake found no CUDA).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/network.h"

namespace kiln::engine {
struct EngineTarget;
}

namespace kiln::engine::cuda {

// Whether this build of kiln has the CUDA backend (KILN_WITH_CUDA).
bool built();
// Number of CUDA devices; 0 without a driver or device (never throws).
int device_count();
// Device index in "cuda" (0) or "cuda:N"; InvalidArgument for anything else.
int parse_device(const std::string& device);
// Compute capability of device `index` as major*10+minor (90 for an H100); DeviceError if there
// is no such device.
int compute_capability(int index);
// Throws Unsupported naming the first layer the CUDA backend cannot run (its kind, or a dtype its
// kernel does not declare).
void check_supported(const Network& net);

// Whether attention over q [B..., L, E], k [B..., S, E], v [B..., S, Ev] of `dtype` runs as the
// fused (flash) kernel: f16/bf16, no mask, E == Ev a multiple of 16 up to 128, equal batch dims.
// The builder keeps such layers; other unmasked, non-causal ones become two GEMMs + softmax.
bool fused_attention_applies(const Shape& q, const Shape& k, const Shape& v, DataType dtype,
                             bool has_mask);

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

// A dense row-major tensor in device memory.
struct DeviceTensor {
  DataType dtype = DataType::kF32;
  Shape shape;
  void* data = nullptr;
  int64_t numel() const { return volume(shape); }
};

// The device side of one Engine: the device it is bound to and its weights, uploaded once
// (lazily, on the first execution, thread-safely). Shared by the engine's contexts.
class EngineState;
// DeviceError if `target`'s device is missing or has another compute capability.
std::shared_ptr<EngineState> create_engine_state(const Network& net, const EngineTarget& target);
int device_index(const EngineState& engine);

// The device side of one ExecutionContext: its stream, activation arena, library handles,
// workspace and per-layer kernel state. Every call runs with the engine's device current.
class ContextState;
std::shared_ptr<ContextState> create_context_state(std::shared_ptr<EngineState> engine,
                                                   size_t num_layers);
// A cudaStream_t; nullptr is the legacy default stream.
void set_stream(ContextState& ctx, void* stream);
void* stream(const ContextState& ctx);
// Device address of weight `name` (uploads every weight on first use, ordered on the stream).
const void* weight(ContextState& ctx, const std::string& name);
// The activation arena, grown (stream-ordered) to at least `bytes`.
void* arena(ContextState& ctx, size_t bytes);
// InvalidArgument/DeviceError unless `ptr` is device memory of the engine's device.
void check_device_pointer(const ContextState& ctx, const void* ptr, const std::string& what);
// Enqueues layer `index` of the plan on the stream.
void run_layer(ContextState& ctx, size_t index, const Layer& layer,
               const std::vector<DeviceTensor>& inputs, const std::vector<DeviceTensor>& outputs);
// Enqueues the whole engine reading `inputs` and writing `outputs` (device pointers).
using EnqueueFn =
    std::function<void(const std::vector<const void*>& inputs, const std::vector<void*>& outputs)>;
// Runs the engine through whole-engine CUDA graphs, one per `key` (the input shapes): inputs and
// outputs are staged through context-owned buffers, so the caller's bindings may change freely.
// A key runs eagerly on its first execution, is captured on its second and replays after that;
// on the legacy default stream everything runs eagerly.
void execute_graph(ContextState& ctx, const std::vector<int64_t>& key,
                   const std::vector<const void*>& inputs, const std::vector<size_t>& input_bytes,
                   const std::vector<void*>& outputs, const std::vector<size_t>& output_bytes,
                   const EnqueueFn& enqueue);
// Writes host-computed integer values (shape tensors) into `dst`, ordered on the stream.
void write_values(ContextState& ctx, const DeviceTensor& dst, const std::vector<int64_t>& values);
// Stream-ordered copies; `kind` of the pointers: device to device, host to device, device to host.
void copy_device_to_device(ContextState& ctx, void* dst, const void* src, size_t bytes);
void copy_host_to_device(ContextState& ctx, void* dst, const void* src, size_t bytes);
void copy_device_to_host(ContextState& ctx, void* dst, const void* src, size_t bytes);
// Waits for the context's stream (only the convenience run() calls this).
void synchronize(ContextState& ctx);
// Per-layer device time for profiling, free of host time: profile_begin() holds the stream
// behind a gate kernel while the host enqueues the layers, recording an event after each
// (profile_mark); profile_end() opens the gate, waits, and returns the milliseconds between
// consecutive marks as (layer index, ms) pairs.
void profile_begin(ContextState& ctx);
void profile_mark(ContextState& ctx, size_t layer);
std::vector<std::pair<size_t, double>> profile_end(ContextState& ctx);
// Device memory on the engine's device, freed when the last reference goes.
std::shared_ptr<void> allocate(ContextState& ctx, size_t bytes);

}  // namespace kiln::engine::cuda
