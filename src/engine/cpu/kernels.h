// The CPU backend's kernel interface: one kernel function per layer kind, registered per family
// (register_<family>) into its KernelTable (engine/kernel_table.h).
#pragma once

#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/kernel_table.h"
#include "engine/network.h"

namespace kiln::engine::cpu {

// A dense, row-major tensor in host memory.
using TensorView = TensorRef;

using KernelState = engine::KernelState;

struct KernelArgs {
  const Layer& layer;
  const std::vector<TensorView>& inputs;
  const std::vector<TensorView>& outputs;  // already allocated with their inferred shapes
  std::unique_ptr<KernelState>& state;
};

using KernelFn = void (*)(KernelArgs& args);

using KernelTable = engine::KernelTable<KernelFn>;

// Every CPU kernel, registered once.
const KernelTable& kernel_table();

// Runs one layer on host tensors (used by the runtime, constant folding and shape-value
// evaluation). Throws Unsupported if the CPU backend has no kernel for the layer's kind.
void run_layer(const Layer& layer, const std::vector<TensorView>& inputs,
               const std::vector<TensorView>& outputs, std::unique_ptr<KernelState>& state);

// Besides concats, the CPU writes placed outputs (network.h: WritesPlacedFn) from its elementwise
// kernels (elementwise, unary, activation, fused chains: elementwise.cpp), wherever placed.
bool writes_placed(const Layer& layer, const std::vector<TensorDesc>& inputs,
                   const TensorDesc& output, const Placement& where);

// The families; each is defined in cpu/<family>.cpp.
void register_elementwise(KernelTable& t);  // elementwise, unary, activation, select, cast, fused
void register_matmul(KernelTable& t);
void register_convolution(KernelTable& t);
void register_pooling(KernelTable& t);
void register_reduce(KernelTable& t);         // reduce, argmax, topk, scan
void register_normalization(KernelTable& t);  // normalization, softmax
void register_shuffle(KernelTable& t);        // shuffle, concat, slice, pad
void register_gather(KernelTable& t);         // gather, scatter
void register_fill(KernelTable& t);           // shape, fill (constants need no kernel)
void register_resize(KernelTable& t);
void register_attention(KernelTable& t);

}  // namespace kiln::engine::cpu
