// Whole-engine CUDA graphs: capture per input shapes, replay with staged inputs and outputs.
#include "engine/cuda/graphs.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>

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

double tuning_budget_ms() {
  const char* env = std::getenv("KILN_CUDA_TUNING_MS");
  if (env == nullptr || *env == '\0') return kDefaultTuningBudgetMs;
  if (std::string_view(env) == "unbounded") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double ms = std::strtod(env, &end);
  KILN_CHECK(*end == '\0' && ms >= 0 && std::isfinite(ms), InvalidArgument,
             "KILN_CUDA_TUNING_MS=", env,
             ": expected the milliseconds a call at a repeated shape may spend choosing "
             "algorithms, a non-negative number, or `unbounded`");
  return ms;
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

bool GraphCache::will_capture(cudaStream_t stream, const std::vector<int64_t>& key,
                              const uint64_t* moves) const {
  if (stream == nullptr) return false;
  if (*moves == moves_seen_ && graphs_.count(key) != 0) return false;
  return std::find(ready_.begin(), ready_.end(), key) != ready_.end();
}

void GraphCache::unready(const std::vector<int64_t>& key) {
  ready_.erase(std::remove(ready_.begin(), ready_.end(), key), ready_.end());
}

void GraphCache::capture(cudaStream_t stream, const std::vector<int64_t>& key,
                         const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                         const EnqueueFn& enqueue, const uint64_t* moves,
                         const std::function<bool()>& complete) {
  KILN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  bool captured = true;
  try {
    enqueue(inputs, outputs);
  } catch (...) {
    // A kernel whose state for these shapes went since the eager run (kept states are bounded
    // per layer: other shapes ran in between) allocates, which a capture refuses: the call runs
    // eagerly instead, making the state again, and the key waits for a complete eager run.
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
    captured = false;
  }
  if (!captured) {
    unready(key);
    enqueue(inputs, outputs);  // a real error throws again, outside any capture
    if (complete()) ready_.push_back(key);
    return;
  }
  cudaGraph_t graph = nullptr;
  KILN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  KILN_CHECK(status == cudaSuccess, DeviceError,
             "cudaGraphInstantiate failed: ", cudaGetErrorString(status));
  const cudaError_t launched = cudaGraphLaunch(exec, stream);
  // Kept only where nothing it reads moved while capturing and no kernel had to leave a choice
  // (a state made again without choosing, as above): otherwise it ran once.
  const bool keep = launched == cudaSuccess && *moves == moves_seen_ && complete();
  if (!keep) {
    cudaStreamSynchronize(stream);
    cudaGraphExecDestroy(exec);
    KILN_CUDA_CHECK(launched);
    unready(key);
    return;
  }
  if (graphs_.size() >= max_graphs_) {
    cudaGraphExecDestroy(graphs_[order_.front()]);
    graphs_.erase(order_.front());
    order_.pop_front();
  }
  graphs_[key] = exec;
  order_.push_back(key);
}

void GraphCache::execute(cudaStream_t stream, std::vector<int64_t> key,
                         const std::vector<const void*>& inputs,
                         const std::vector<size_t>& input_bytes, const std::vector<void*>& outputs,
                         const std::vector<size_t>& output_bytes, const EnqueueFn& enqueue,
                         const uint64_t* moves, const std::function<bool()>& complete) {
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
  } else if (const auto ready = std::find(ready_.begin(), ready_.end(), key);
             ready == ready_.end()) {
    enqueue(staged_in, staged_out);
    if (complete()) {
      if (ready_.size() >= kReadyKeys) ready_.pop_front();
      ready_.push_back(key);
    }
  } else {
    capture(stream, key, staged_in, staged_out, enqueue, moves, complete);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (output_bytes[i] == 0) continue;
    KILN_CUDA_CHECK(cudaMemcpyAsync(outputs[i], staged_out[i], output_bytes[i],
                                    cudaMemcpyDeviceToDevice, stream));
  }
}

}  // namespace kiln::engine::cuda
