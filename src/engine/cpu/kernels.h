// The CPU backend's kernel interface: one kernel function per layer kind, registered per family
// (register_<family>) into a table indexed by the LayerParams variant index.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "engine/network.h"

namespace kiln::engine::cpu {

// A dense, row-major tensor in host memory.
struct TensorView {
  DataType dtype = DataType::kF32;
  Shape shape;
  void* data = nullptr;
  // The runtime's promise that these bytes never change while the engine lives (an engine
  // weight), so a kernel may cache what it derives from them keyed by `data` alone.
  bool constant = false;
  int64_t numel() const { return volume(shape); }
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// State a kernel keeps between runs of one layer in one execution context (oneDNN primitives
// for the last shape, reordered weights, ...).
struct KernelState {
  virtual ~KernelState() = default;
};

struct KernelArgs {
  const Layer& layer;
  const std::vector<TensorView>& inputs;
  const std::vector<TensorView>& outputs;  // already allocated with their inferred shapes
  std::unique_ptr<KernelState>& state;
};

using KernelFn = void (*)(KernelArgs& args);

class KernelTable {
 public:
  template <class Params>
  void set(KernelFn fn) {
    table_[variant_index<Params>()] = fn;
  }
  KernelFn get(const LayerParams& params) const { return table_[params.index()]; }
  bool has(size_t variant_index) const { return table_[variant_index] != nullptr; }

  template <class Params>
  static constexpr size_t variant_index() {
    return LayerParams(Params{}).index();
  }

 private:
  std::array<KernelFn, kNumLayerKinds> table_{};
};

// Every CPU kernel, registered once.
const KernelTable& kernel_table();

// Runs one layer on host tensors (used by the runtime, constant folding and shape-value
// evaluation). Throws Unsupported if the CPU backend has no kernel for the layer's kind.
void run_layer(const Layer& layer, const std::vector<TensorView>& inputs,
               const std::vector<TensorView>& outputs, std::unique_ptr<KernelState>& state);

// The families; each is defined in cpu/<family>.cpp.
void register_elementwise(KernelTable& t);  // elementwise, unary, activation, select, cast, fused
void register_matmul(KernelTable& t);
void register_convolution(KernelTable& t);
void register_pooling(KernelTable& t);
void register_reduce(KernelTable& t);         // reduce, argmax, topk, cumsum
void register_normalization(KernelTable& t);  // normalization, softmax
void register_shuffle(KernelTable& t);        // shuffle, concat, slice, pad
void register_gather(KernelTable& t);         // gather, scatter
void register_fill(KernelTable& t);           // shape, fill (constants need no kernel)
void register_resize(KernelTable& t);
void register_attention(KernelTable& t);

}  // namespace kiln::engine::cpu
