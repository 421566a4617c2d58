// What the builder's passes ask of a layer's kind, as attributes of the kind (one place to read
// and extend) instead of if-chains over the parameter variant in each pass.
#pragma once

#include "engine/layers.h"

namespace kiln::engine {

struct LayerKindTraits {
  // Each output element is computed from the same element of each (broadcast) input and nothing
  // else: the layer runs in any layout its operands share (the layout pass moves transposes
  // through it).
  bool pointwise = false;
  // The elementwise fusion takes it into a fused program (float tensors; casts only to floats).
  bool fusible = false;
  // Whether it reads its inputs' values (not only their shapes): a layer that does not needs no
  // cast when the precision pass changes its input's dtype.
  bool reads_values = true;
  // An input read only for its values, on the host, while shapes resolve (a shape tensor: a
  // fill's shape, a reshape's target), never by the kernel; -1: none.
  int shape_input = -1;
  // Its output 0's first dim is data-dependent: known once the layer has run, from output 1 (an
  // i64 scalar the kernel writes), and at most the number of elements of input 0.
  bool data_dependent = false;
};

LayerKindTraits layer_kind_traits(const LayerParams& params);

}  // namespace kiln::engine
