// The traits of each layer kind (layer_kinds.h). A kind not named here has the defaults: not
// pointwise, not fusible, reads its inputs' values.
#include <type_traits>
#include <variant>

#include "engine/layer_kinds.h"

namespace kiln::engine {
namespace {

template <class Params>
LayerKindTraits traits_of() {
  LayerKindTraits t;
  if constexpr (std::is_same_v<Params, ElementwiseParams> || std::is_same_v<Params, UnaryParams> ||
                std::is_same_v<Params, ActivationParams> || std::is_same_v<Params, CastParams> ||
                std::is_same_v<Params, FusedElementwiseParams>) {
    t.pointwise = true;
    t.fusible = true;
  }
  if constexpr (std::is_same_v<Params, SelectParams>) t.pointwise = true;
  if constexpr (std::is_same_v<Params, ShapeParams>) t.reads_values = false;
  if constexpr (std::is_same_v<Params, FillParams>) t.shape_input = 0;
  if constexpr (std::is_same_v<Params, ShuffleParams>) t.shape_input = 1;
  if constexpr (std::is_same_v<Params, NonZeroParams>) t.data_dependent = true;
  return t;
}

}  // namespace

LayerKindTraits layer_kind_traits(const LayerParams& params) {
  return std::visit([](const auto& p) { return traits_of<std::decay_t<decltype(p)>>(); }, params);
}

}  // namespace kiln::engine
