// Names of layer kinds and operations, for errors, the inspector and JSON.
#include "engine/layers.h"

namespace kiln::engine {

const char* layer_kind_name(size_t index) {
  static const char* const kNames[] = {"convolution",
                                       "matmul",
                                       "elementwise",
                                       "unary",
                                       "activation",
                                       "pooling",
                                       "reduce",
                                       "softmax",
                                       "normalization",
                                       "concat",
                                       "shuffle",
                                       "slice",
                                       "gather",
                                       "scatter",
                                       "select",
                                       "cast",
                                       "constant",
                                       "pad",
                                       "resize",
                                       "topk",
                                       "argmax",
                                       "scan",
                                       "shape",
                                       "fill",
                                       "attention",
                                       "fused_elementwise",
                                       "squeeze_excitation",
                                       "nonzero"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumLayerKinds, "one name per layer kind");
  return index < kNumLayerKinds ? kNames[index] : "unknown";
}

const char* layer_kind_name(const LayerParams& params) {
  return layer_kind_name(params.index());
}

bool shuffle_moves_data(const ShuffleParams& params) {
  const auto moves = [](const std::vector<int64_t>& perm) {
    for (size_t d = 0; d < perm.size(); ++d) {
      if (perm[d] != static_cast<int64_t>(d)) return true;
    }
    return false;
  };
  return params.cast || moves(params.first_perm) || moves(params.second_perm);
}

const char* binary_op_name(BinaryOp op) {
  // clang-format off
  static const char* const kNames[] = {
      "add", "sub", "mul", "div", "pow", "max", "min", "floor_div", "mod",
      "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor",
      "zeta", "polygamma", "igamma", "igammac",
      "chebyshev_t", "chebyshev_u", "chebyshev_v", "chebyshev_w",
      "shifted_chebyshev_t", "shifted_chebyshev_u", "shifted_chebyshev_v", "shifted_chebyshev_w",
      "hermite_h", "hermite_he", "laguerre_l", "legendre_p", "copysign"};
  // clang-format on
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumBinaryOps, "one name per binary op");
  const auto i = static_cast<size_t>(op);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

const char* unary_op_name(UnaryOp op) {
  static const char* const kNames[] = {"neg",        "abs",
                                       "exp",        "log",
                                       "sqrt",       "rsqrt",
                                       "reciprocal", "sin",
                                       "cos",        "tan",
                                       "asin",       "acos",
                                       "atan",       "sinh",
                                       "cosh",       "erf",
                                       "floor",      "ceil",
                                       "round",      "trunc",
                                       "sign",       "not",
                                       "log2",       "log1p",
                                       "expm1",      "isnan",
                                       "lgamma",     "digamma",
                                       "erfinv",     "erfcx",
                                       "ndtr",       "ndtri",
                                       "log_ndtr",   "i0",
                                       "i0e",        "i1",
                                       "i1e",        "k0",
                                       "k0e",        "k1",
                                       "k1e",        "bessel_j0",
                                       "bessel_j1",  "bessel_y0",
                                       "bessel_y1",  "spherical_bessel_j0",
                                       "airy_ai"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumUnaryOps, "one name per unary op");
  const auto i = static_cast<size_t>(op);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

const char* activation_name(ActivationKind k) {
  static const char* const kNames[] = {"none",        "relu",     "sigmoid",    "tanh", "gelu",
                                       "gelu_tanh",   "silu",     "leaky_relu", "elu",  "hardswish",
                                       "hardsigmoid", "softplus", "clamp",      "mish", "selu"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumActivationKinds,
                "one name per activation");
  const auto i = static_cast<size_t>(k);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

}  // namespace kiln::engine
