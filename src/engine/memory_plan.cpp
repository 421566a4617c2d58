// Liveness-based arena planning (greedy by size, lowest fitting offset).
#include "engine/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace kiln::engine {

MemoryPlan plan_memory(const std::vector<BufferLifetime>& buffers) {
  auto aligned = [](size_t n) {
    return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  };
  MemoryPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<size_t> placed;
  for (size_t i : order) {
    const auto& buf = buffers[i];
    const size_t size = aligned(buf.bytes);
    plan.total_bytes += size;
    // Intervals already placed whose lifetimes overlap this one, sorted by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t j : placed) {
      const auto& other = buffers[j];
      if (other.first <= buf.last && buf.first <= other.last) {
        busy.emplace_back(plan.offsets[j], plan.offsets[j] + aligned(other.bytes));
      }
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + size <= begin) break;
      offset = std::max(offset, end);
    }
    plan.offsets[i] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    placed.push_back(i);
  }
  return plan;
}

}  // namespace kiln::engine
