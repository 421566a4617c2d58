// Activation memory planning: every intermediate tensor gets an offset in one arena, and tensors
// whose lifetimes do not overlap share bytes.
#pragma once

#include <cstddef>
#include <vector>

namespace kiln::engine {

constexpr size_t kArenaAlignment = 64;

struct BufferLifetime {
  size_t bytes = 0;
  int first = 0;  // index of the layer that writes it
  int last = 0;   // index of the last layer that reads it
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per lifetime, aligned to kArenaAlignment
  size_t arena_bytes = 0;
  size_t total_bytes = 0;  // what separate allocations would take (aligned sizes)
};

// Greedy: largest buffers first, each at the lowest offset that overlaps no live buffer.
MemoryPlan plan_memory(const std::vector<BufferLifetime>& buffers);

}  // namespace kiln::engine
