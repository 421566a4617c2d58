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

// The host time a call at a repeated shape of a dynamic engine may spend choosing algorithms
// (ContextBackend::Tuning::kBudgeted; KILN_CUDA_TUNING_MS, kDefaultTuningBudgetMs when unset,
// `unbounded`: the shape's second call makes every choice): what is left is chosen at the shape's
// next calls. An InvalidArgument naming the variable when it is neither a non-negative number
// (0: one layer's choice a call) nor `unbounded`.
double tuning_budget_ms();
// 10 ms: a repeated shape's calls take 12-24 ms each until all is chosen (mobilenet_v2, hf_bert:
// 3-5 calls), against one call of 44-195 ms unbounded, and settle as fast (bench/NOTES.md G69).
constexpr double kDefaultTuningBudgetMs = 10;

class GraphCache {
 public:
  explicit GraphCache(size_t max_graphs = 16) : max_graphs_(max_graphs) {}
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  ~GraphCache();

  // A key without a graph runs eagerly (allocations, weight upload and algorithm choice happen
  // outside any capture) until an eager run at it made every choice for its shapes (`complete`,
  // asked after the run: ContextBackend::set_tuning; a dynamic engine spreads a new shape's
  // choices over its calls); its next call, whatever ran in between, is captured (will_capture:
  // the caller turns choosing off for it), and later ones replay. At most max_graphs graphs are
  // kept, the least recently run evicted first (an evicted key that was complete is captured
  // again at its next call). `*moves` counts moves of device memory the enqueued work reads (a
  // grown arena, a kernel's new buffers): when it changed since the graphs were captured, they
  // are all dropped. The legacy default stream cannot be captured: there everything runs
  // eagerly. The calling thread must have the context's device current.
  void execute(cudaStream_t stream, std::vector<int64_t> key,
               const std::vector<const void*>& inputs, const std::vector<size_t>& input_bytes,
               const std::vector<void*>& outputs, const std::vector<size_t>& output_bytes,
               const EnqueueFn& enqueue, const uint64_t* moves,
               const std::function<bool()>& complete);
  // Whether execute(stream, key, ..., moves, ...) would capture a graph now.
  bool will_capture(cudaStream_t stream, const std::vector<int64_t>& key,
                    const uint64_t* moves) const;

  size_t size() const { return graphs_.size(); }
  bool has(const std::vector<int64_t>& key) const { return graphs_.count(key) != 0; }

 private:
  void clear();
  void* staging(size_t slot, size_t bytes);

  size_t max_graphs_;
  uint64_t moves_seen_ = 0;
  std::map<std::vector<int64_t>, cudaGraphExec_t> graphs_;
  std::deque<std::vector<int64_t>> order_;  // least recently run first, for eviction
  // Keys whose last eager run was complete, most recent last (up to kReadyKeys).
  static constexpr size_t kReadyKeys = 256;
  std::deque<std::vector<int64_t>> ready_;
  std::vector<void*> staging_;
  std::vector<size_t> staging_bytes_;
  void capture(cudaStream_t stream, const std::vector<int64_t>& key,
               const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
               const EnqueueFn& enqueue, const uint64_t* moves,
               const std::function<bool()>& complete);
  void unready(const std::vector<int64_t>& key);
};

}  // namespace kiln::engine::cuda
