// cuDNN's fused attention (the graph API's scaled dot-product attention) as a second form of the
// attention layer beside the flash kernel, chosen per shape (attention_cudnn=auto|on|off):
// - attention_cudnn.cpp builds and runs cuDNN graphs; it alone includes the cuDNN frontend's
//   headers (slow to compile), and where CMake found none it is compiled out and cuDNN takes no
//   shape;
// - attention_bias.cu turns a mask into cuDNN's additive bias and zeroes the rows a mask leaves
//   without keys;
// - attention_choice.cpp chooses between the two forms per shape and runs the chosen one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {

// Where element (b, h, r, e) of a [B, H, rows, E] operand lies: b * batch + h * head + r * row + e
// elements from its data (0 along a dimension it broadcasts over).
struct SdpaStrides {
  int64_t batch = 0, head = 0, row = 0;
};

// One attention as cuDNN sees it: q and o [B, H, L, E], k and v [B, kv_heads, S, E] (query head h
// reads key/value head h / (H / kv_heads)), each with its strides; causal from the top left (query
// i keeps keys j <= i); and, if `bias`, an additive bias [bias_batch, bias_heads, L, S] (1 or B,
// 1 or H) of `bias_dtype` (q's, or f32) with its strides (1 along S, 0 along L where it
// broadcasts).
struct SdpaShape {
  DataType dtype = DataType::kF16;  // f16 or bf16
  int64_t B = 0, H = 0, kv_heads = 0, L = 0, S = 0, E = 0;
  SdpaStrides q, k, v, o;
  bool causal = false;
  float scale = 1;
  bool bias = false;
  DataType bias_dtype = DataType::kF16;
  int64_t bias_batch = 1, bias_heads = 1;
  SdpaStrides bias_strides;
  // Everything above, for keys of graphs and choices.
  std::vector<int64_t> key() const;
};

// ---- attention_cudnn.cpp ----

// A built cuDNN graph (opaque here).
class SdpaGraph;

// Whether this build has the cuDNN path (CMake found the frontend's headers).
bool cudnn_attention_built();
// The graph of `shape` built with `cudnn` (a cudnnHandle_t, on its device), or nullptr where cuDNN
// does not take the shape (why in `why`): its heuristics, support checks and plan building all
// passed. Never throws; never call it while a stream is being captured.
std::shared_ptr<const SdpaGraph> build_sdpa_graph(const SdpaShape& shape, void* cudnn,
                                                  std::string* why);
// Device memory the graph's execution needs.
size_t sdpa_workspace_bytes(const SdpaGraph& graph);
// Enqueues the graph on `stream` (the handle's stream for the call); false with the reason in
// `error` where cuDNN refused. `bias` is ignored by a graph without one.
bool run_sdpa_graph(const SdpaGraph& graph, void* cudnn, cudaStream_t stream, const void* q,
                    const void* k, const void* v, const void* bias, void* o, void* workspace,
                    std::string* error);

// ---- attention_bias.cu ----

// A mask (bool: keep where true; float: added to the scores) of `shape`, broadcast over the
// attention's weights, of shape `weights` ([..., L, S]) seen as [B, H, L, S] (B * H matrices: the
// weight of query i and key j of matrix (b, h) has the flat index ((b * H + h) * L + i) * S + j).
struct SdpaMask {
  const void* data = nullptr;
  DataType dtype = DataType::kBool;
  Shape shape, weights;
  int64_t B = 0, H = 0;
};

// Writes the mask as an additive bias of `dtype` (f16 or bf16) [bias_b, bias_h, bias_l, ld] into
// `bias` (dense, rows `ld` >= S elements apart, past S zeros), of which bias_b is 1 or B, bias_h 1
// or H and bias_l 1 or L (1: the mask is the same along that dimension): 0 where a bool mask
// keeps, -inf where it does not; a float mask's values, finite ones clamped to the dtype's range.
void launch_sdpa_bias(cudaStream_t stream, const std::string& layer, const SdpaMask& mask,
                      DataType dtype, int64_t bias_b, int64_t bias_h, int64_t bias_l, int64_t ld,
                      void* bias);
// Zeroes the output rows of query rows that keep no key (as the flash and CPU kernels give them):
// the mask leaves out (bool false, float -inf) every key the row may attend (all, or with `causal`
// the keys j <= i of row i). `o` is the [B, H, L, E] output of `dtype` with strides `os`.
void launch_sdpa_empty_rows(cudaStream_t stream, const std::string& layer, const SdpaMask& mask,
                            bool causal, void* o, DataType dtype, int64_t E, const SdpaStrides& os);

// ---- attention_choice.cpp ----

// The first element of the keys of the choices between the two forms (Resources::keep_choice,
// whose data is one byte: 0 flash, 1 cuDNN).
constexpr int64_t kAttentionFormTag = 0x5344504100;  // "SDPA"
// The flash kernel's form of the layer (attention.cu), which the choice times.
using FlashForm = void (*)(KernelArgs& args, const AttentionParams& p);
// Runs the attention layer of `args` on cuDNN where that is its shape's form and returns true;
// false where the flash kernel is to run it (`flash` launches that form; call it only for layers
// the flash kernel takes). attention_cudnn=off never takes cuDNN, on takes it wherever it applies
// (f16 and bf16 shapes cuDNN builds a graph for), and auto takes the form chosen for the shape of
// an unmasked layer (a masked one runs flash): the engine's choice if it has one, else on a run
// that may choose (Resources::tune) the faster of the two as timed now (once a shape in the
// process), kept for the engine (Resources::keep_choice), else (a first call at a new shape) flash
// for now.
bool attention_on_cudnn(KernelArgs& args, const AttentionParams& p, FlashForm flash);
// The attention layers run on cuDNN in this process so far (tests ask which form ran).
int64_t cudnn_attention_runs();

}  // namespace kiln::engine::cuda
