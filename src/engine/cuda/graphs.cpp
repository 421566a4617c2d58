// Whole-engine CUDA graphs: capture per input shapes, replay with staged inputs and outputs.
#include "engine/cuda/graphs.h"

#include <algorithm>
#include <cstdlib>

#include "engine/cuda/cuda_check.h"

namespace kiln::engine::cuda {

size_t graph_cache_size() {
  const char* env = std::getenv("KILN_CUDA_GRAPH_CACHE");
  if (env == nullptr || *env == '\0') return 16;
  char* end = nullptr;
  const long long n = std::strtoll(env, &end, 10);
  KILN_CHECK(*end == '\0' && n > 0, InvalidArgument, "KILN_CUDA_GRAPH_CACHE=", env,
             ": expected the number of CUDA graphs an engine context keeps, a positive integer");
  return static_cast<size_t>(n);
}

GraphCache::~GraphCache() {
  clear();
  for (void* p : staging_) {
    if (p) cudaFree(p);
  }
}

void GraphCache::clear() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  order_.clear();
}

void* GraphCache::staging(size_t slot, size_t bytes) {
  if (staging_.size() <= slot) {
    staging_.resize(slot + 1, nullptr);
    staging_bytes_.resize(slot + 1, 0);
  }
  if (staging_[slot] == nullptr || staging_bytes_[slot] < bytes) {
    // Captured graphs hold the old buffer's address: they go with it. Growth is rare (it follows
    // the largest shape seen), so this synchronous free/allocate stays off the steady path.
    clear();
    if (staging_[slot]) KILN_CUDA_CHECK(cudaFree(staging_[slot]));
    staging_[slot] = nullptr;
    const size_t size = std::max<size_t>((bytes + 255) / 256 * 256, 256);
    KILN_CUDA_CHECK(cudaMalloc(&staging_[slot], size));
    staging_bytes_[slot] = size;
  }
  return staging_[slot];
}

void GraphCache::execute(cudaStream_t stream, std::vector<int64_t> key,
                         const std::vector<const void*>& inputs,
                         const std::vector<size_t>& input_bytes, const std::vector<void*>& outputs,
                         const std::vector<size_t>& output_bytes, const EnqueueFn& enqueue,
                         const uint64_t* moves, bool tuned) {
  if (stream == nullptr) {
    enqueue(inputs, outputs);
    return;
  }
  if (*moves != moves_seen_) {  // what the graphs read has moved
    clear();
    moves_seen_ = *moves;
  }
  std::vector<const void*> staged_in(inputs.size());
  std::vector<void*> staged_out(outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) staged_in[i] = staging(i, input_bytes[i]);
  for (size_t i = 0; i < outputs.size(); ++i) {
    staged_out[i] = staging(inputs.size() + i, output_bytes[i]);
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (input_bytes[i] == 0) continue;
    KILN_CUDA_CHECK(cudaMemcpyAsync(const_cast<void*>(staged_in[i]), inputs[i], input_bytes[i],
                                    cudaMemcpyDeviceToDevice, stream));
  }
  auto it = graphs_.find(key);
  if (it != graphs_.end()) {
    if (order_.back() != key) {  // the most recently run goes last
      order_.erase(std::find(order_.begin(), order_.end(), key));
      order_.push_back(key);
    }
    KILN_CUDA_CHECK(cudaGraphLaunch(it->second, stream));
  } else if (last_eager_key_ != key || !last_eager_tuned_) {
    last_eager_key_ = key;
    last_eager_tuned_ = tuned;
    enqueue(staged_in, staged_out);
  } else {
    KILN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue(staged_in, staged_out);
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream, &partial);
      if (partial) cudaGraphDestroy(partial);
      cudaGetLastError();
      throw;
    }
    cudaGraph_t graph = nullptr;
    KILN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    KILN_CHECK(status == cudaSuccess, DeviceError,
               "cudaGraphInstantiate failed: ", cudaGetErrorString(status));
    const cudaError_t launched = cudaGraphLaunch(exec, stream);
    if (launched != cudaSuccess || *moves != moves_seen_) {
      // Memory moved while capturing (not expected: the eager run before allocated for this
      // key): the graph ran once and is not kept.
      cudaStreamSynchronize(stream);
      cudaGraphExecDestroy(exec);
      KILN_CUDA_CHECK(launched);
    } else {
      if (graphs_.size() >= max_graphs_) {
        cudaGraphExecDestroy(graphs_[order_.front()]);
        graphs_.erase(order_.front());
        order_.pop_front();
      }
      graphs_[key] = exec;
      order_.push_back(key);
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (output_bytes[i] == 0) continue;
    KILN_CUDA_CHECK(cudaMemcpyAsync(outputs[i], staged_out[i], output_bytes[i],
                                    cudaMemcpyDeviceToDevice, stream));
  }
}

}  // namespace kiln::engine::cuda
