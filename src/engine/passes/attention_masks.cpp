// Constant attention masks that say no more than a flag: a mask keeping every key goes, and one
// keeping exactly the keys j <= i of query row i becomes the causal flag. Models build such masks
// from shapes (transformers' GPT-2 passes its causal mask as a bool [1, 1, L, S] tensor, BERT an
// all-true padding mask when called without one); folded to constants at build time, they would
// otherwise be read for every score, where the kernels know these two cases by their indices.
// The same holds for such a constant and'ed with another bool mask (a padding mask): the other is
// the mask then. Masks true whatever the inputs (value_ranges.h) go too, alone or and'ed.
#include <cstring>

#include "engine/passes/network_index.h"
#include "engine/passes/passes.h"
#include "engine/passes/value_ranges.h"

namespace kiln::engine {

namespace {

enum class MaskKind { kOther, kAll, kCausal };

// Element i of a mask as kept (true), dropped (false) or neither (a float that is not 0 or -inf).
std::optional<bool> kept_at(const Weights& w, int64_t i) {
  const uint8_t* p = w.data->data();
  switch (w.dtype) {
    case DataType::kBool:
    case DataType::kU8:
      return p[i] != 0;
    case DataType::kF32: {
      uint32_t bits;
      std::memcpy(&bits, p + i * 4, 4);
      if ((bits & 0x7fffffffu) == 0) return true;
      if (bits == 0xff800000u) return false;
      return std::nullopt;
    }
    case DataType::kF16:
    case DataType::kBF16: {
      uint16_t bits;
      std::memcpy(&bits, p + i * 2, 2);
      if ((bits & 0x7fffu) == 0) return true;
      if (bits == (w.dtype == DataType::kF16 ? 0xfc00u : 0xff80u)) return false;
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

// What a constant mask says about scores [..., L, S]: every key kept, the causal triangle (every
// [L, S] matrix of it, which must then not broadcast over L or S), or something else.
MaskKind classify(const Weights& w, int64_t L, int64_t S) {
  const Shape& shape = w.shape;
  if (!w.data || !is_static(shape)) return MaskKind::kOther;
  const int64_t n = volume(shape);
  bool all = true;
  for (int64_t i = 0; i < n && all; ++i) {
    const auto k = kept_at(w, i);
    if (!k) return MaskKind::kOther;
    all = *k;
  }
  if (all) return MaskKind::kAll;
  const size_t r = shape.size();
  if (r < 2 || shape[r - 2] != L || shape[r - 1] != S || L == kDynamic || S == kDynamic) {
    return MaskKind::kOther;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = i / S % L, col = i % S;
    if (kept_at(w, i) != std::optional<bool>(col <= row)) return MaskKind::kOther;
  }
  return MaskKind::kCausal;
}

}  // namespace

int simplify_attention_masks(Network& net, const std::set<std::string>& keep) {
  const NetworkIndex index(net);
  std::vector<Layer> layers = net.layers();
  // The constant written to `id`, if a constant layer writes it and it may be read for its values.
  const auto constant_of = [&](TensorId id) -> const Weights* {
    const auto p = index.producer(id);
    if (!p) return nullptr;
    const auto* c = std::get_if<ConstantParams>(&net.layers()[*p].params);
    return c && !keep.count(c->weight) ? &net.weight(c->weight) : nullptr;
  };
  int changed = 0;
  for (Layer& layer : layers) {
    auto* a = std::get_if<AttentionParams>(&layer.params);
    if (!a || !a->has_mask || layer.inputs.size() != 4) continue;
    const Shape& q = net.tensor(layer.inputs[0]).shape;
    const Shape& k = net.tensor(layer.inputs[1]).shape;
    const int64_t L = q[q.size() - 2], S = k[k.size() - 2];
    // An expanded mask (the converters' expand is select(c, x, x): x broadcast to c's shape):
    // the attention reads x, which broadcasts to the scores as the expansion did. transformers'
    // ViT expands a [1, 1, L, 1] all-true mask to [B, 1, L, S], too large to fold at batch 32.
    while (const auto p = index.producer(layer.inputs[3])) {
      const Layer& expand = net.layers()[*p];
      if (!std::holds_alternative<SelectParams>(expand.params) || expand.inputs.size() != 3 ||
          expand.inputs[1] != expand.inputs[2]) {
        break;
      }
      layer.inputs[3] = expand.inputs[1];
      ++changed;
    }
    // A bool mask true whatever the inputs (built from positions: `arange(L)[:, None] >= 0`,
    // with L dynamic, so not a constant).
    if (always_true(net, index, layer.inputs[3], keep)) {
      a->has_mask = false;
      layer.inputs.resize(3);
      ++changed;
      continue;
    }
    if (const Weights* w = constant_of(layer.inputs[3])) {
      const MaskKind kind = classify(*w, L, S);
      if (kind == MaskKind::kOther) continue;
      if (kind == MaskKind::kCausal) a->causal = true;
      a->has_mask = false;
      layer.inputs.resize(3);
      ++changed;
      continue;
    }
    // A bool mask that is a constant one and'ed with another (transformers' padding mask and its
    // all-true or causal mask over [L, S]): the attention reads the other, which broadcasts to
    // the scores as the product did, and the constant becomes nothing or the causal flag.
    const auto p = index.producer(layer.inputs[3]);
    if (!p) continue;
    const Layer& product = net.layers()[*p];
    const auto* e = std::get_if<ElementwiseParams>(&product.params);
    if (!e || e->op != BinaryOp::kAnd || product.inputs.size() != 2 ||
        net.tensor(product.outputs[0]).dtype != DataType::kBool) {
      continue;
    }
    for (size_t side = 0; side < 2; ++side) {
      const Weights* w = constant_of(product.inputs[side]);
      const TensorId other = product.inputs[1 - side];
      if (net.tensor(other).dtype != DataType::kBool) continue;
      if (always_true(net, index, product.inputs[side], keep)) {
        layer.inputs[3] = other;
        ++changed;
        break;
      }
      if (!w) continue;
      const MaskKind kind = classify(*w, L, S);
      if (kind == MaskKind::kOther) continue;
      if (kind == MaskKind::kCausal) a->causal = true;
      layer.inputs[3] = other;
      ++changed;
      break;
    }
  }
  net.set_layers(std::move(layers));
  return changed;
}

}  // namespace kiln::engine
