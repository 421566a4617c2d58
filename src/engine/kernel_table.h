// A backend's kernels by layer kind: one entry per LayerParams alternative, filled by the
// backend's families (its register_<family> functions), each family once, in one list.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>

#include "engine/layers.h"

namespace kiln::engine {

// State a kernel keeps between runs of one layer in one execution context (oneDNN primitives or
// cuDNN descriptors for the last shapes, reordered weights, ...).
struct KernelState {
  virtual ~KernelState() = default;
};

template <class Entry>
class KernelTable {
 public:
  template <class Params>
  void set(Entry entry) {
    table_[LayerParams(Params{}).index()] = entry;
  }
  const Entry& get(const LayerParams& params) const { return table_[params.index()]; }

  // The table the families fill, in the order given.
  template <class Table>
  static Table of(std::initializer_list<void (*)(Table&)> families) {
    Table t;
    for (auto family : families) family(t);
    return t;
  }

 private:
  std::array<Entry, kNumLayerKinds> table_{};
};

}  // namespace kiln::engine
