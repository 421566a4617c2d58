// Whole-engine CUDA graphs of one execution context: one graph per key (the input shapes),
// replayed whatever the caller binds, because inputs and outputs are staged through device
// buffers the context owns and the graph reads and writes only those.
#pragma once

#include <cuda_runtime_api.h>

#include <deque>
#include <functional>
#include <map>
#include <vector>

namespace kiln::engine::cuda {

// Enqueues the whole engine reading `inputs` and writing `outputs` (device pointers).
using EnqueueFn =
    std::function<void(const std::vector<const void*>& inputs, const std::vector<void*>& outputs)>;

class GraphCache {
 public:
  GraphCache() = default;
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  ~GraphCache();

  // A key seen for the first time runs eagerly (allocations, weight upload and algorithm choice
  // happen outside any capture); on its second execution it is captured; later ones replay.
  // The legacy default stream cannot be captured: there everything runs eagerly. The calling
  // thread must have the context's device current.
  void execute(cudaStream_t stream, std::vector<int64_t> key,
               const std::vector<const void*>& inputs, const std::vector<size_t>& input_bytes,
               const std::vector<void*>& outputs, const std::vector<size_t>& output_bytes,
               const EnqueueFn& enqueue);

 private:
  void clear();
  void* staging(size_t slot, size_t bytes);

  static constexpr size_t kMaxGraphs = 16;
  std::map<std::vector<int64_t>, cudaGraphExec_t> graphs_;
  std::deque<std::vector<int64_t>> order_;  // oldest first, for eviction
  std::vector<int64_t> last_eager_key_;
  std::vector<void*> staging_;
  std::vector<size_t> staging_bytes_;
};

}  // namespace kiln::engine::cuda
