// How cuDNN convolutions get their algorithms (convolution.cpp runs them): a layer's states by
// shape, the heuristic's answers (kept in the process by what the query reads), the algorithm
// kept from the nearest shape that chose, and the engine's choices (Resources::kept_choice) in
// the bytes the engine keeps.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {

#define KILN_CUDNN_CHECK(call)                                           \
  do {                                                                   \
    const cudnnStatus_t kiln_status_ = (call);                           \
    KILN_CHECK(kiln_status_ == CUDNN_STATUS_SUCCESS, DeviceError, #call, \
               " failed: ", cudnnGetErrorString(kiln_status_));          \
  } while (0)

constexpr size_t kMaxAlgoWorkspace = size_t{512} << 20;

struct ConvState : KernelState {
  std::vector<int64_t> key;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t relu = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  // The heuristic's usable forward algorithms after fwd_algo, best first, with their workspace.
  std::vector<cudnnConvolutionFwdAlgoPerf_t> fallbacks;
  cudnnConvolutionBwdDataAlgo_t bwd_algo{};
  size_t algo_workspace = 0;
  Shape padded_input;          // non-empty when the input is padded explicitly (asymmetric padding)
  bool fusion_failed = false;  // cuDNN refused bias + activation fusion for these descriptors
  bool tuned = false;          // the algorithm was chosen for this shape (not kept from another)
  bool kept_in_engine = false;  // its choice is the engine's (Resources::keep_choice)
  ConvState() {
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias));
    KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    KILN_CUDNN_CHECK(cudnnCreateActivationDescriptor(&relu));
  }
  ~ConvState() override {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(bias);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyActivationDescriptor(relu);
  }
};

// A cuDNN convolution layer's states by shape, and the GEMM its first calls at new shapes run
// (first_call_gemm_applies), whose own states follow the shapes too.
struct ConvStates : StatesByShape<ConvState> {
  std::unique_ptr<KernelState> first_call_gemm;
};

// An algorithm cuDNN offers that runs within our workspace limit and, for strict f32, without
// tensor cores (forward and backward-data results have the same fields).
template <class Perf>
bool usable(const Perf& perf, bool strict_f32) {
  return perf.status == CUDNN_STATUS_SUCCESS && perf.memory <= kMaxAlgoWorkspace &&
         !(strict_f32 && (perf.mathType == CUDNN_TENSOR_OP_MATH ||
                          perf.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
}

// Where a kept algorithm comes from: of the states chosen for their shapes with the same
// operation (dtype, layout, TF32, filter), the one whose input is nearest in size.
ConvState* nearest_tuned(ConvStates& states, const std::vector<int64_t>& key, size_t rank);

// cuDNN's heuristic forward algorithms for `s`'s descriptors, best first: the first usable one
// chosen, the other usable ones its fallbacks. False when none is usable.
bool heuristic_forward(cudnnHandle_t handle, ConvState& s, bool strict_f32);

// A state's choice as the engine keeps it (Resources::keep_choice): the algorithms, whether cuDNN
// refused the fused bias + activation, and the forward fallbacks.
std::vector<uint8_t> encode_choice(const ConvState& s);

// Takes the engine's choice for `s`'s descriptors where it has one that they take (its
// algorithm's workspace asked for them); false otherwise (nothing changed that matters).
bool adopt_choice(Resources& res, cudnnHandle_t handle, ConvState& s, bool transposed);

// cuDNN's heuristic answer for a convolution depends only on what its query reads (the
// descriptors, the math, the device): layers of one operation (a network's repeated blocks, the
// engines of one model) share one query in the process.
struct HeuristicAnswer {
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t bwd_algo{};
  size_t workspace = 0;
  std::vector<cudnnConvolutionFwdAlgoPerf_t> fallbacks;
};
// What the heuristic query reads, as a key: each list with its length first.
std::vector<int64_t> heuristic_query(int device, bool transposed, bool strict_f32,
                                     cudnnMathType_t math, cudnnDataType_t type, bool cl,
                                     std::initializer_list<const std::vector<int64_t>*> lists,
                                     int64_t groups);
// The process's answer to `query`, if it was asked before (up to 4,096 kept, all dropped when
// full: a bound for processes that run endless shapes).
std::optional<HeuristicAnswer> find_heuristic_answer(const std::vector<int64_t>& query);
void keep_heuristic_answer(const std::vector<int64_t>& query, HeuristicAnswer answer);

}  // namespace kiln::engine::cuda
