// Whole-engine CUDA graphs of one execution context: one graph per key (the input shapes),
// replayed whatever the caller binds, because inputs and outputs are staged through device
// buffers the context owns and the graph reads and writes only those.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <vector>

namespace kiln::engine::cuda {

// Enqueues the whole engine reading `inputs` and writing `outputs` (device pointers).
using EnqueueFn =
    std::function<void(const std::vector<const void*>& inputs, const std::vector<void*>& outputs)>;

// The graphs one execution context keeps (KILN_CUDA_GRAPH_CACHE, default 16): an
// InvalidArgument naming the variable when it is not a positive integer.
size_t graph_cache_size();

class GraphCache {
 public:
  explicit GraphCache(size_t max_graphs = 16) : max_graphs_(max_graphs) {}
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  ~GraphCache();

  // A key seen for the first time runs eagerly (allocations, weight upload and algorithm choice
  // happen outside any capture); when it comes again right after an eager run in which kernels
  // tuned (`tuned`: ContextBackend::set_tuning), it is captured; later ones replay. (A dynamic
  // engine's first call at a shape that is no profile point does not tune: its second runs
  // eagerly again, tuning, and its third is captured.) At most max_graphs graphs are kept, the
  // least recently run evicted first. `*moves` counts moves of device memory the enqueued work
  // reads (a grown arena, a kernel's new buffers): when it changed since the graphs were captured,
  // they are all dropped. The legacy default stream cannot be captured: there everything runs
  // eagerly. The calling thread must have the context's device current.
  void execute(cudaStream_t stream, std::vector<int64_t> key,
               const std::vector<const void*>& inputs, const std::vector<size_t>& input_bytes,
               const std::vector<void*>& outputs, const std::vector<size_t>& output_bytes,
               const EnqueueFn& enqueue, const uint64_t* moves, bool tuned = true);

  size_t size() const { return graphs_.size(); }
  bool has(const std::vector<int64_t>& key) const { return graphs_.count(key) != 0; }

 private:
  void clear();
  void* staging(size_t slot, size_t bytes);

  size_t max_graphs_;
  uint64_t moves_seen_ = 0;
  std::map<std::vector<int64_t>, cudaGraphExec_t> graphs_;
  std::deque<std::vector<int64_t>> order_;  // least recently run first, for eviction
  std::vector<int64_t> last_eager_key_;
  bool last_eager_tuned_ = false;
  std::vector<void*> staging_;
  std::vector<size_t> staging_bytes_;
};

}  // namespace kiln::engine::cuda
