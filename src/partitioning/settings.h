// What the user controls in partitioning (the partitioning fields of CompileSpec).
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

namespace kiln::partitioning {

enum class Strategy {
  kDependencyAware,  // seed 000: one open engine and one open torch segment (default)
  kGlobal,           // seed 002: also merges non-adjacent segments when no dependency forbids it
};

struct PartitionSettings {
  // Engine segments with fewer ops than this fall back (constants, list and tuple packing and
  // values recomputed for the segment do not count; see is_bookkeeping).
  size_t min_block_size = 3;
  // "aten::add" (every overload) or "aten::add.Tensor" (one overload).
  std::set<std::string> torch_executed_ops;
  // Lowering's module-fallback pass turns these into ir::kTorchExecutedAttr marks on nodes; here
  // they only name the modules in reasons.
  std::set<std::string> torch_executed_modules;
  // Throw Unsupported listing every node that cannot go to the engine, instead of falling back.
  // min_block_size is ignored: a fully compiled graph needs no minimum.
  bool require_full_compilation = false;
  Strategy strategy = Strategy::kDependencyAware;
  // Resource partitioning (seed 002): an engine segment whose weights (the bytes of the tensor
  // constants its nodes read, each counted once) exceed this is split into consecutive pieces
  // that each hold at most this much, cutting only between atomic patterns (atomic.h); a node
  // whose own weights exceed it is a piece alone. 0: no splitting.
  uint64_t max_engine_weight_bytes = 0;
};

}  // namespace kiln::partitioning
