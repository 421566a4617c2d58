// The fused inference fast paths of nn.TransformerEncoderLayer and nn.MultiheadAttention, written
// as the linear, attention, layer_norm and activation ops they compute.
//
// In eval mode without autograd, torch runs each layer as one op that no converter takes:
// aten::_transformer_encoder_layer_fwd and aten::_native_multi_head_attention. Traced and frozen
// models keep that op, so each layer fell back to PyTorch and split the model into one engine per
// layer. The rewrite follows ATen's implementation (native/transformers/transformer.cpp and
// attention.cpp):
// - attention: q, k, v = split(linear(x, in_proj_weight, in_proj_bias)) per head, q / sqrt(d);
//   softmax(q k^T) v; heads merged; linear(out_proj). Self-attention (one value for query, key
//   and value) keeps the one [3E, E] projection; otherwise each of q, k, v has its own linear
//   on a slice of the packed weight. With torch's scaled_dot_product_attention op registered
//   (torch 2.x, the engine's fused attention layer) and no attention weights used, the core is
//   that op; otherwise matmul + softmax + matmul. Weights, when used (need_weights): the softmax,
//   averaged over heads when average_attn_weights.
// - encoder layer: attention with need_weights off, then residual add and layer norm 1 (before
//   the attention when norm_first, after the add otherwise), the same with the feed-forward block
//   linear -> relu | gelu (exact, use_gelu) -> linear and layer norm 2; one eps for both norms.
// Left alone (they fall back as before): a mask that is not None (its meaning has changed
// between torch versions: older ones turned float masks into bool ones and gave NaN rows where
// everything is masked, later ones add float masks), flags or sizes that are not constants,
// attention weights used although need_weights is off (an undefined tensor), and every fast-path
// node of a graph that makes nested tensors (the nested path of nn.TransformerEncoder), which these
// ops do not take.
#include <torch/csrc/jit/runtime/operator.h>

#include <cmath>
#include <string>

#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kEncoderLayer =
    c10::Symbol::fromQualString("aten::_transformer_encoder_layer_fwd");
const c10::Symbol kMultiHeadAttention =
    c10::Symbol::fromQualString("aten::_native_multi_head_attention");
const c10::Symbol kSdpa = c10::Symbol::fromQualString("aten::scaled_dot_product_attention");

// The arguments of one attention, read from either op.
struct Attention {
  Value* query = nullptr;
  Value* key = nullptr;
  Value* value = nullptr;
  int64_t embed_dim = 0;
  int64_t num_heads = 0;
  Value* qkv_weight = nullptr;
  Value* qkv_bias = nullptr;
  Value* proj_weight = nullptr;
  Value* proj_bias = nullptr;
};

enum class AttentionWeights { kNone, kPerHead, kAveraged };

std::optional<int64_t> constant_int(const Value* v) {
  auto iv = constant_value(v);
  if (!iv || !iv->isInt()) return std::nullopt;
  return iv->toInt();
}

std::optional<bool> constant_bool(const Value* v) {
  auto iv = constant_value(v);
  if (!iv || !iv->isBool()) return std::nullopt;
  return iv->toBool();
}

// embed_dim and num_heads constant, the heads dividing the embedding; inputs 3-D where known.
bool read_sizes(const Node* node, size_t embed_dim_index, Attention& a) {
  auto embed_dim = constant_int(node->input(embed_dim_index));
  auto num_heads = constant_int(node->input(embed_dim_index + 1));
  if (!embed_dim || !num_heads || *num_heads <= 0 || *embed_dim <= 0 ||
      *embed_dim % *num_heads != 0) {
    return false;
  }
  a.embed_dim = *embed_dim;
  a.num_heads = *num_heads;
  for (const Value* v : {a.query, a.key, a.value}) {
    if (auto rank = known_rank(v); rank && *rank != 3) return false;
  }
  return true;
}

// Inserts ops at the graph's insertion point; schema matching fills in default arguments.
class Emitter {
 public:
  explicit Emitter(torch::jit::Graph& graph) : graph_(graph) {}

  Value* op(c10::Symbol kind, std::vector<torch::jit::NamedValue> args) {
    return graph_.insert(kind, args);
  }
  Value* ints(std::vector<int64_t> values) { return graph_.insertConstant(values); }
  Value* none() { return graph_.insertConstant(c10::IValue()); }

  Value* linear(Value* x, Value* weight, Value* bias) {
    return op(c10::aten::linear, {x, weight, bias});
  }
  // [B, L, heads * head_dim] -> [B, heads, L, head_dim]
  Value* split_heads(Value* x, const Attention& a) {
    Value* split =
        op(c10::aten::unflatten, {x, -1, ints({a.num_heads, a.embed_dim / a.num_heads})});
    return op(c10::aten::transpose, {split, 1, 2});
  }
  // Rows [begin, end) of a packed projection weight or bias; None stays None.
  Value* rows(Value* packed, int64_t begin, int64_t end) {
    if (is_constant_none(packed)) return packed;
    return op(c10::aten::slice, {packed, 0, begin, end, 1});
  }

 private:
  torch::jit::Graph& graph_;
};

// The attention output [B, L, E] and, unless `weights` is kNone, the attention weights.
std::pair<Value*, Value*> emit_attention(Emitter& e, const Attention& a, AttentionWeights weights) {
  const int64_t E = a.embed_dim, H = a.num_heads, head_dim = E / H;
  Value *q, *k, *v;
  if (a.query == a.key && a.key == a.value) {
    // One projection: [B, L, 3E] -> [B, L, 3, H, d] -> [3, B, H, L, d].
    Value* qkv = e.linear(a.query, a.qkv_weight, a.qkv_bias);
    qkv = e.op(c10::aten::unflatten, {qkv, -1, e.ints({3, H, head_dim})});
    qkv = e.op(c10::aten::permute, {qkv, e.ints({2, 0, 3, 1, 4})});
    q = e.op(c10::aten::select, {qkv, 0, 0});
    k = e.op(c10::aten::select, {qkv, 0, 1});
    v = e.op(c10::aten::select, {qkv, 0, 2});
  } else {
    auto project = [&](Value* x, int64_t i) {
      return e.split_heads(e.linear(x, e.rows(a.qkv_weight, i * E, (i + 1) * E),
                                    e.rows(a.qkv_bias, i * E, (i + 1) * E)),
                           a);
    };
    q = project(a.query, 0);
    k = project(a.key, 1);
    v = project(a.value, 2);
  }
  Value* context = nullptr;
  Value* probabilities = nullptr;
  if (weights == AttentionWeights::kNone && !torch::jit::getAllOperatorsFor(kSdpa).empty()) {
    // Default scale 1/sqrt(d), no mask, no dropout, not causal.
    context = e.op(kSdpa, {q, k, v});
  } else {
    // ATen scales q before the product (_transform_bias_rescale_qkv).
    Value* scaled = e.op(c10::aten::div, {q, std::sqrt(static_cast<double>(head_dim))});
    Value* scores = e.op(c10::aten::matmul, {scaled, e.op(c10::aten::transpose, {k, -2, -1})});
    probabilities = e.op(c10::aten::softmax, {scores, -1});
    context = e.op(c10::aten::matmul, {probabilities, v});
  }
  // [B, H, L, d] -> [B, L, H, d] -> [B, L, E]
  Value* merged = e.op(c10::aten::flatten, {e.op(c10::aten::transpose, {context, 1, 2}), 2, 3});
  Value* out = e.linear(merged, a.proj_weight, a.proj_bias);
  Value* attention_weights = nullptr;
  if (weights == AttentionWeights::kPerHead) attention_weights = probabilities;
  if (weights == AttentionWeights::kAveraged) {
    attention_weights = e.op(c10::aten::mean, {probabilities, e.ints({1}), false});
  }
  return {out, attention_weights};
}

// aten::_native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight,
// qkv_bias, proj_weight, proj_bias, mask=None, need_weights=True, average_attn_weights=True,
// mask_type=None) -> (Tensor, Tensor). Like the rewrite below: inserts the decomposition before
// the node and moves its uses there, or returns false having changed nothing.
// The packed in-projection weight and bias and the out-projection weight and bias, which both
// ops take as four consecutive inputs from `first`.
void read_projections(Node* node, size_t first, Attention& a) {
  a.qkv_weight = node->input(first);
  a.qkv_bias = node->input(first + 1);
  a.proj_weight = node->input(first + 2);
  a.proj_bias = node->input(first + 3);
}

bool rewrite_multi_head_attention(torch::jit::Graph& graph, Node* node) {
  if (node->inputs().size() != 13 || node->outputs().size() != 2) return false;
  Attention a{node->input(0), node->input(1), node->input(2)};
  if (!read_sizes(node, 3, a) || !is_constant_none(node->input(9))) return false;
  read_projections(node, 5, a);
  auto need_weights = constant_bool(node->input(10));
  auto average = constant_bool(node->input(11));
  if (!need_weights || !average) return false;
  AttentionWeights weights = AttentionWeights::kNone;
  if (node->output(1)->hasUses()) {
    if (!*need_weights) return false;  // an undefined tensor: nothing to compute it from
    weights = *average ? AttentionWeights::kAveraged : AttentionWeights::kPerHead;
  }
  torch::jit::WithInsertPoint guard(node);
  Emitter e(graph);
  auto [out, attention_weights] = emit_attention(e, a, weights);
  out->setType(node->output(0)->type());
  node->output(0)->replaceAllUsesWith(out);
  if (attention_weights) {
    attention_weights->setType(node->output(1)->type());
    node->output(1)->replaceAllUsesWith(attention_weights);
  }
  return true;
}

// aten::_transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias,
// proj_weight, proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
// norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None).
bool rewrite_encoder_layer(torch::jit::Graph& graph, Node* node) {
  if (node->inputs().size() != 20 || node->outputs().size() != 1) return false;
  Value* src = node->input(0);
  Attention a{src, src, src};
  if (!read_sizes(node, 1, a) || !is_constant_none(node->input(18))) return false;
  read_projections(node, 3, a);
  auto use_gelu = constant_bool(node->input(7));
  auto norm_first = constant_bool(node->input(8));
  auto eps = constant_value(node->input(9));
  if (!use_gelu || !norm_first || !eps || !eps->isDouble()) return false;

  torch::jit::WithInsertPoint guard(node);
  Emitter e(graph);
  Value* normalized_shape = e.ints({a.embed_dim});
  auto norm = [&](Value* x, size_t weight_index) {
    return e.op(c10::aten::layer_norm, {x, normalized_shape, node->input(weight_index),
                                        node->input(weight_index + 1), eps->toDouble(), true});
  };
  auto feed_forward = [&](Value* x) {
    Value* hidden = e.linear(x, node->input(14), node->input(15));
    hidden = *use_gelu ? e.op(c10::aten::gelu, {hidden}) : e.op(c10::aten::relu, {hidden});
    return e.linear(hidden, node->input(16), node->input(17));
  };
  if (*norm_first) a.query = a.key = a.value = norm(src, 10);
  Value* x = e.op(c10::aten::add, {emit_attention(e, a, AttentionWeights::kNone).first, src});
  if (!*norm_first) x = norm(x, 10);
  Value* residual = x;
  if (*norm_first) x = norm(x, 12);
  x = e.op(c10::aten::add, {feed_forward(x), residual});
  if (!*norm_first) x = norm(x, 12);
  x->setType(node->output()->type());
  node->output()->replaceAllUsesWith(x);
  return true;
}

// Whether any node makes a nested tensor (whose layers these ops would not compute).
bool makes_nested_tensors(const GraphPtr& graph) {
  bool nested = false;
  ir::for_each_node(graph->block(), [&](Node* node) {
    const std::string kind = node->kind().toQualString();
    if (kind.find("nested") == std::string::npos) return;
    for (const Value* out : node->outputs()) {
      nested |= out->type()->kind() == c10::TypeKind::TensorType;
    }
  });
  return nested;
}

}  // namespace

bool decompose_transformer_fast_paths(GraphPtr& graph) {
  bool found = false;
  ir::for_each_node(graph->block(), [&](Node* node) {
    found |= node->kind() == kEncoderLayer || node->kind() == kMultiHeadAttention;
  });
  if (!found || makes_nested_tensors(graph)) return false;
  bool changed = false;
  ir::for_each_node(graph->block(), [&](Node* node) {
    if (node->kind() != kEncoderLayer && node->kind() != kMultiHeadAttention) return;
    Node* before = node->prev();  // the rewrite inserts between `before` and `node`
    const bool rewritten = node->kind() == kEncoderLayer
                               ? rewrite_encoder_layer(*graph, node)
                               : rewrite_multi_head_attention(*graph, node);
    if (!rewritten) return;
    for (Node* n = before->next(); n != node; n = n->next()) {
      if (n->kind() != c10::prim::Constant) inherit_fallback_mark(node, n);
    }
    node->destroy();
    changed = true;
  });
  return changed;
}

}  // namespace kiln::lowering
