// Decompositions: composite ops rewritten into ops the engine has layers for (seed 001). This
// file holds the pass and its structural rewrites (var/std, type_as, the clamps, glu,
// broadcast_tensors, the `_copy` views, the ops of several outputs); decompose_math.cpp the
// math identities, decompose_linalg.cpp the tensor algebra, decompose_losses.cpp the losses,
// decompose_arrange.cpp the arrangements (grids, shifts, norms, unpooling, circular pads),
// decompose_scatter.cpp the indexed writes, decompose_spectral.cpp the inverse real FFTs.
// A rewrite may emit ops that decompose further (the walk repeats while it rewrites); one whose
// ops do not take the node's arguments leaves the node as it was.
//
// Per op, the choice:
// - decomposed: var/std (the engine has no variance reduce: mean, sub, mul, sum, div[, sqrt]);
//   var_mean/std_mean, aminmax, native_layer_norm (layer_norm with its mean and 1/std),
//   kthvalue (element k - 1 of a sort); type_as (aten::to with `other`: one cast converter);
//   square (mul); hardtanh and relu6 (clamp, which is an engine activation); glu (chunk,
//   sigmoid, mul); where the dtype is known, prelu, threshold, hardshrink, softshrink, sinc, sgn,
//   special_entr, special_xlog1py (where, NaN kept as torch keeps it), tril/triu (a mask of
//   run-time aranges), repeat_interleave by an int along a dim (unsqueeze, expand, reshape;
//   grouped-query scaled_dot_product_attention repeats its key/value heads so), trace (index_select
//   of the flattened diagonal), nansum/nanmean (where), ravel; positive/resolve_neg/
//   resolve_conj/real/conj_physical of real tensors are the tensor;
//   the math of decompose_math.cpp (acosh, atan2, fmod, logaddexp, addcmul, lerp, mv, outer,
//   logsumexp, isnan/isinf/isfinite, cross, angle, ldexp, isin, bucketize, take, shifts,
//   take_along_dim, rot90, tile, sum_to_size, _safe_softmax, and, where the input's rank or
//   dtype is known, flip, repeat, movedim, nan_to_num, ...); decompose_linalg.cpp's diagonals,
//   kron, tensordot, bilinear, distances, cosine_similarity, renorm, trapezoid rules, pixel and
//   channel shuffles, unfold, msort/median/nanmedian, quantile/nanquantile, cov/corrcoef,
//   matrix_power (n >= 0); decompose_losses.cpp's losses; decompose_scatter.cpp's
//   index_add/copy/fill/reduce, put, masked_scatter, scatter_reduce and embedding_bag;
//   decompose_arrange.cpp's grids, shifts, norms, unpooling, nearest-exact resizes, histc;
//   decompose_spectral.cpp's irfft/hfft family; the ops torch computes in f32 for integer
//   inputs (entr, xlog1py, trapezoid rules, cov, corrcoef, distance losses) on their inputs
//   cast to f32; broadcast_tensors taken apart
//   (expand_as); the `_copy` variants of views (the view, when the copy is not written in place).
// - kept whole, because the engine runs them natively and one fused activation beats its
//   pieces: relu, sigmoid, tanh, gelu, silu, hardswish, hardsigmoid, leaky_relu, elu, softplus,
//   mish, selu, clamp (activation layer); rsqrt (unary layer); remainder (binary kMod);
//   rms_norm (normalization layer; fuse_rms_norm writes the explicit form as one).
#include <unordered_map>
#include <unordered_set>

#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/passes/decompose_math.h"
#include "lowering/passes/rewrite_builder.h"
#include "lowering/rewrite_utils.h"
#include "util/logging.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// Not an ATen native function, so not among c10::aten's interned symbols.
const c10::Symbol kNumel = c10::Symbol::fromQualString("aten::numel");

Value* insert(GraphPtr& graph, c10::Symbol kind, std::vector<torch::jit::NamedValue> args) {
  return graph->insert(kind, args);
}

// var/std in any overload: (self, unbiased) | .dim(self, dim, unbiased, keepdim) |
// .correction(self, dim, correction, keepdim). Returns the variance, or nullptr if the
// arguments are not constants this rewrite understands.
Value* decompose_variance(GraphPtr& graph, Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema) return nullptr;
  const std::string& overload = schema->overload_name();
  Value* x = node->input(0);
  int64_t correction = 1;
  std::optional<c10::IValue> dims;
  bool keepdim = false;
  if (overload.empty() && node->inputs().size() == 2) {
    auto unbiased = constant_value(node->input(1));
    if (!unbiased || !unbiased->isBool()) return nullptr;
    correction = unbiased->toBool() ? 1 : 0;
  } else if ((overload == "dim" || overload == "correction") && node->inputs().size() == 4) {
    dims = constant_value(node->input(1));
    auto c = constant_value(node->input(2));
    auto k = constant_value(node->input(3));
    if (!dims || !c || !k || !k->isBool()) return nullptr;
    keepdim = k->toBool();
    if (c->isBool()) {
      correction = c->toBool() ? 1 : 0;
    } else if (c->isInt()) {
      correction = c->toInt();
    } else if (c->isDouble() && c->toDouble() == static_cast<double>(int64_t(c->toDouble()))) {
      correction = static_cast<int64_t>(c->toDouble());
    } else if (!c->isNone()) {
      return nullptr;
    }
    // dim=None or [] reduce everything; with keepdim that shape needs the rank, left alone.
    if (dims->isNone() || dims->toIntVector().empty()) {
      if (keepdim) return nullptr;
      dims.reset();
    }
  } else {
    return nullptr;
  }
  torch::jit::WithInsertPoint guard(node);
  if (!dims) {
    Value* mean = insert(graph, c10::aten::mean, {x});
    Value* diff = insert(graph, c10::aten::sub, {x, mean});
    Value* sum = insert(graph, c10::aten::sum, {insert(graph, c10::aten::mul, {diff, diff})});
    Value* n = insert(graph, kNumel, {x});
    return insert(graph, c10::aten::div, {sum, insert(graph, c10::aten::sub, {n, correction})});
  }
  Value* dim_list = graph->insertConstant(dims->toIntVector());
  Value* mean = insert(graph, c10::aten::mean, {x, dim_list, true});
  Value* diff = insert(graph, c10::aten::sub, {x, mean});
  Value* square = insert(graph, c10::aten::mul, {diff, diff});
  Value* sum = insert(graph, c10::aten::sum, {square, dim_list, keepdim});
  // Elements per reduced group: numel(x) / numel(mean), known at run time for dynamic shapes.
  Value* n = insert(graph, c10::aten::floordiv,
                    {insert(graph, kNumel, {x}), insert(graph, kNumel, {mean})});
  return insert(graph, c10::aten::div, {sum, insert(graph, c10::aten::sub, {n, correction})});
}

// Whether some user of `v` writes to it in place, or takes it as an alias (a view of it that
// might be written later): then a copy cannot become a view.
bool written_in_place(const Value* v) {
  for (const torch::jit::Use& u : v->uses()) {
    const c10::FunctionSchema* schema = u.user->maybeSchema();
    if (!schema) {  // prim:: nodes (return, list and tuple constructs) write nothing
      if (u.user->kind().is_prim()) continue;
      return true;  // other unknown users: assume the worst
    }
    if (u.offset < schema->arguments().size()) {
      if (schema->arguments()[u.offset].alias_info()) return true;
    }
  }
  return false;
}

// broadcast_tensors(ListConstruct(x...)) taken apart by a ListUnpack: each x expanded as the
// shape all of them broadcast to (the shape of their sum, which nothing computes once the engine
// sees that only its shape is read).
bool decompose_broadcast_tensors(GraphPtr& graph) {
  std::vector<Node*> unpacks;
  ir::for_each_node(graph->block(), [&](Node* n) {
    if (n->kind() != torch::jit::prim::ListUnpack) return;
    const Node* b = n->input(0)->node();
    if (b->kind() != c10::Symbol::fromQualString("aten::broadcast_tensors") ||
        b->output()->uses().size() != 1 ||
        b->input(0)->node()->kind() != torch::jit::prim::ListConstruct ||
        b->input(0)->node()->inputs().size() != n->outputs().size()) {
      return;
    }
    unpacks.push_back(n);
  });
  for (Node* n : unpacks) {
    Node* b = n->input(0)->node();
    const auto xs = b->input(0)->node()->inputs();
    Node* before = n->prev();  // what is inserted goes between `before` and `n`
    torch::jit::WithInsertPoint guard(n);
    Value* shape = xs[0];
    for (size_t i = 1; i < xs.size(); ++i) shape = insert(graph, c10::aten::add, {shape, xs[i]});
    for (size_t i = 0; i < xs.size(); ++i) {
      Value* x = insert(graph, c10::aten::expand_as, {xs[i], shape});
      x->setType(n->outputs()[i]->type());
      n->outputs()[i]->replaceAllUsesWith(x);
    }
    for (Node* m = before->next(); m != n; m = m->next()) inherit_fallback_mark(n, m);
    n->destroy();
    if (!b->output()->hasUses()) b->destroy();
  }
  return !unpacks.empty();
}

// Ops that torch computes in its default float dtype when every tensor input is an integer or a
// bool (their result is a float): the same op of those inputs cast to f32, which the float
// rewrites then take. Where torch subtracts the integers before its float math (the distance
// losses), the two agree for values below 2^24, f32's exact integers.
Value* with_float_inputs(GraphPtr& graph, Node* node) {
  static const std::unordered_set<std::string> kOps = {"aten::special_entr",
                                                       "aten::special_xlog1py",
                                                       "aten::trapezoid",
                                                       "aten::trapz",
                                                       "aten::cumulative_trapezoid",
                                                       "aten::cov",
                                                       "aten::corrcoef",
                                                       "aten::margin_ranking_loss",
                                                       "aten::cosine_embedding_loss",
                                                       "aten::pairwise_distance",
                                                       "aten::poisson_nll_loss",
                                                       "aten::triplet_margin_loss"};
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema || !kOps.count(schema->name()) || node->outputs().size() != 1) return nullptr;
  // cov's frequency weights must stay integers: with weights it is left as it is.
  if (schema->name() == "aten::cov" &&
      (node->inputs().size() != 4 || !is_constant_none(node->input(2)) ||
       !is_constant_none(node->input(3)))) {
    return nullptr;
  }
  std::vector<size_t> tensors;
  for (size_t i = 0; i < node->inputs().size(); ++i) {
    if (!node->input(i)->type()->cast<c10::TensorType>()) continue;
    const auto type = known_dtype(node->input(i));
    if (!type || !(c10::isIntegralType(*type, /*includeBool=*/true))) return nullptr;
    tensors.push_back(i);
  }
  if (tensors.empty()) return nullptr;
  std::unordered_map<Value*, Value*> cast;
  for (size_t i : tensors) {
    Value* x = node->input(i);
    if (cast.count(x)) continue;
    cast[x] = RewriteBuilder(graph).cast(x, c10::kFloat);
    cast[x]->setType(x->type()->expect<c10::TensorType>()->withScalarType(c10::kFloat));
  }
  Node* copy = graph->insertNode(graph->createClone(node, [&](Value* v) {
    auto it = cast.find(v);
    return it == cast.end() ? v : it->second;
  }));
  return copy->output();
}

// Ops of several outputs: var_mean/std_mean (the variance's rewrite and a mean), aminmax
// (amin, amax), native_layer_norm (layer_norm, and the mean and 1/std it computed); empty when
// the node is not one of them or its arguments are not handled.
std::vector<Value*> decompose_multi(GraphPtr& graph, Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema) return {};
  const std::string& name = schema->name();
  if ((name == "aten::var_mean" || name == "aten::std_mean") && node->outputs().size() == 2) {
    Value* var = decompose_variance(graph, node);
    if (!var) return {};
    torch::jit::WithInsertPoint guard(node);
    Value* spread = name == "aten::std_mean" ? insert(graph, c10::aten::sqrt, {var}) : var;
    // The variance's rewrite took the overload apart already: dims and keepdim are constants
    // (no dims, or an empty list, without keepdim: the mean of everything).
    const auto dims = node->inputs().size() == 4 ? constant_value(node->input(1)) : std::nullopt;
    Value* mean =
        !dims || dims->isNone() || dims->toIntVector().empty()
            ? insert(graph, c10::aten::mean, {node->input(0)})
            : insert(graph, c10::aten::mean, {node->input(0), node->input(1), node->input(3)});
    return {spread, mean};
  }
  torch::jit::WithInsertPoint guard(node);
  if (name == "aten::kthvalue" && node->outputs().size() == 2 && node->inputs().size() == 4) {
    // The k-th smallest along dim and its index: element k - 1 of the sorted dim (NaN last).
    auto k = constant_value(node->input(1)), dim = constant_value(node->input(2)),
         keep = constant_value(node->input(3));
    if (!k || !k->isInt() || k->toInt() < 1 || !dim || !dim->isInt() || !keep || !keep->isBool()) {
      return {};
    }
    RewriteBuilder b(graph);
    std::vector<Value*> sorted =
        b.outputs("aten::sort", {node->input(0), node->input(2), b.constant(false)}, 2);
    for (Value*& v : sorted) {
      v = b("aten::select", {v, dim->toInt(), k->toInt() - 1});
      if (keep->toBool()) v = b("aten::unsqueeze", {v, dim->toInt()});
    }
    return sorted;
  }
  if (name == "aten::aminmax" && node->outputs().size() == 2 && node->inputs().size() == 3) {
    auto dim = constant_value(node->input(1));
    auto keep = constant_value(node->input(2));
    if (!dim || !keep || !keep->isBool()) return {};
    if (dim->isInt()) {
      Value* dims = graph->insertConstant(std::vector<int64_t>{dim->toInt()});
      return {insert(graph, c10::aten::amin, {node->input(0), dims, node->input(2)}),
              insert(graph, c10::aten::amax, {node->input(0), dims, node->input(2)})};
    }
    if (!dim->isNone() || keep->toBool()) return {};
    // Over everything: the flattened tensor's only dim.
    Value* flat = insert(graph, c10::aten::reshape, {node->input(0), std::vector<int64_t>{-1}});
    Value* dims = graph->insertConstant(std::vector<int64_t>{0});
    return {insert(graph, c10::aten::amin, {flat, dims, false}),
            insert(graph, c10::aten::amax, {flat, dims, false})};
  }
  if (name == "aten::embedding_bag" || name == "aten::_embedding_bag") {
    return decompose_embedding_bag(graph, node);
  }
  if (name == "aten::native_layer_norm" && node->outputs().size() == 3 &&
      node->inputs().size() == 5) {
    auto shape = constant_value(node->input(1));
    auto eps = constant_value(node->input(4));
    if (!shape || !shape->isIntList() || shape->toIntVector().empty() || !eps || !eps->isDouble()) {
      return {};
    }
    // Of 16-bit floats, torch's mean and 1/std are f32 on the GPU and of x's dtype on the CPU:
    // a module traced on one and run on the other cannot tell which, so used ones stay whole.
    const auto type = known_dtype(node->input(0));
    if ((!type || *type == c10::kHalf || *type == c10::kBFloat16) &&
        (node->outputs()[1]->hasUses() || node->outputs()[2]->hasUses())) {
      return {};
    }
    std::vector<int64_t> dims;
    for (int64_t d = -static_cast<int64_t>(shape->toIntVector().size()); d < 0; ++d) {
      dims.push_back(d);
    }
    Value* x = node->input(0);
    Value* out = insert(graph, c10::aten::layer_norm,
                        {x, node->input(1), node->input(2), node->input(3), node->input(4), false});
    Value* mean = insert(graph, c10::aten::mean, {x, dims, true});
    Value* diff = insert(graph, c10::aten::sub, {x, mean});
    Value* var =
        insert(graph, c10::aten::mean, {insert(graph, c10::aten::mul, {diff, diff}), dims, true});
    Value* rstd =
        insert(graph, c10::aten::rsqrt, {insert(graph, c10::aten::add, {var, eps->toDouble()})});
    return {out, mean, rstd};
  }
  return {};
}

// scaled_dot_product_attention with enable_gqa=True (grouped-query attention): head h of the
// query attends with key/value head h / (Hq / Hkv), torch's repeat_interleave of the key and
// value heads (dim -3); the attention then sees as many key/value heads as query heads (the
// builder reads them unrepeated again, attention_heads.h). Needs no known rank.
Value* repeat_grouped_heads(GraphPtr& graph, Node* node) {
  const auto gqa = constant_value(node->input(7));
  if (!gqa || !gqa->isBool() || !gqa->toBool()) return nullptr;
  const auto call = [&](const char* op, std::vector<torch::jit::NamedValue> args) {
    return graph->insert(c10::Symbol::fromQualString(op), args);
  };
  Value* kv_heads = call("aten::size", {node->input(1), -3});
  Value* groups = call("aten::floordiv", {call("aten::size", {node->input(0), -3}), kv_heads});
  // [0, 0, .., 1, 1, ..]: each key/value head `groups` times.
  Value* heads = call("aten::unsqueeze", {call("aten::arange", {kv_heads}), 1});
  Value* index =
      call("aten::reshape",
           {call("aten::expand", {heads, RewriteBuilder(graph).list({kv_heads, groups})}),
            RewriteBuilder(graph).list({graph->insertConstant(int64_t{-1})})});
  return graph->insert(c10::Symbol::fromQualString("aten::scaled_dot_product_attention"),
                       {node->input(0), call("aten::index_select", {node->input(1), -3, index}),
                        call("aten::index_select", {node->input(2), -3, index}), node->input(3),
                        node->input(4), node->input(5)},
                       {torch::jit::NamedValue("scale", node->input(6)),
                        torch::jit::NamedValue("enable_gqa", false)});
}

Value* decompose(GraphPtr& graph, Node* node) {
  const auto kind = node->kind();
  if (kind == c10::aten::var) return decompose_variance(graph, node);
  if (kind == c10::aten::std) {
    Value* var = decompose_variance(graph, node);
    if (!var) return nullptr;
    torch::jit::WithInsertPoint guard(node);
    return insert(graph, c10::aten::sqrt, {var});
  }
  torch::jit::WithInsertPoint guard(node);
  if (kind == c10::aten::type_as && node->inputs().size() == 2) {
    return insert(graph, c10::aten::to, {node->input(0), node->input(1), false, false});
  }
  if (kind == c10::aten::square && node->inputs().size() == 1) {
    return insert(graph, c10::aten::mul, {node->input(0), node->input(0)});
  }
  if (kind == c10::aten::hardtanh && node->inputs().size() == 3) {
    return insert(graph, c10::aten::clamp, {node->input(0), node->input(1), node->input(2)});
  }
  if (kind == c10::aten::relu6 && node->inputs().size() == 1) {
    return insert(graph, c10::aten::clamp, {node->input(0), 0.0, 6.0});
  }
  if (kind == c10::aten::glu && node->inputs().size() == 2) {
    // glu(x, dim) = a * sigmoid(b), a and b the halves of x along dim (torch refuses an odd
    // size, and so do the unequal chunks here: their product does not broadcast).
    Value* halves = insert(graph, c10::aten::chunk, {node->input(0), 2, node->input(1)});
    Node* unpack = graph->insertNode(graph->createListUnpack(halves, 2));
    Value* gate = insert(graph, c10::aten::sigmoid, {unpack->output(1)});
    return insert(graph, c10::aten::mul, {unpack->output(0), gate});
  }
  if (node->kind() == c10::Symbol::fromQualString("aten::scaled_dot_product_attention") &&
      node->inputs().size() == 8) {
    if (Value* r = repeat_grouped_heads(graph, node)) return r;
  }
  if (Value* r = with_float_inputs(graph, node)) return r;
  // The functional copies of views (`view_copy`, `permute_copy`, ...): the view itself, unless
  // the copy is written in place later.
  const std::string qualified = kind.toQualString();
  const size_t copy = qualified.rfind("_copy");
  if (copy != std::string::npos && copy + 5 == qualified.size() && node->maybeSchema() &&
      !written_in_place(node->output())) {
    const std::string base =
        qualified.substr(0, copy) == "aten::alias" ? "aten::clone" : qualified.substr(0, copy);
    std::vector<torch::jit::NamedValue> args, kwargs;
    const auto& params = node->schema().arguments();
    for (size_t i = 0; i < node->inputs().size() && i < params.size(); ++i) {
      if (params[i].kwarg_only()) {
        kwargs.emplace_back(params[i].name(), node->input(i));
      } else {
        args.emplace_back(node->input(i));
      }
    }
    try {
      return graph->insert(c10::Symbol::fromQualString(base), args, kwargs);
    } catch (const std::exception&) {
      // No view op of that name takes these arguments (index_copy is no copy of aten::index):
      // the other rewrites may know the op.
    }
  }
  if (Value* r = decompose_math(graph, node)) return r;
  if (Value* r = decompose_linalg(graph, node)) return r;
  if (Value* r = decompose_loss(graph, node)) return r;
  if (Value* r = decompose_arrange(graph, node)) return r;
  if (Value* r = decompose_spectral(graph, node)) return r;
  return decompose_scatter(graph, node);
}

}  // namespace

bool decompose_ops(GraphPtr& graph) {
  bool changed = decompose_broadcast_tensors(graph);
  // A rewrite may produce ops that decompose further (tile's repeat, triplet_margin_loss's
  // pairwise_distance): they sit before the node, where this walk has been, so the walk repeats
  // while it rewrites (a few rounds: no rewrite produces its own op).
  for (int round = 0; round < 4; ++round) {
    bool rewrote = false;
    ir::for_each_node(graph->block(), [&](Node* node) {
      Node* before = node->prev();  // the rewrite inserts between `before` and `node`
      std::vector<Value*> replacements;
      try {
        if (node->outputs().size() == 1) {
          if (Value* r = decompose(graph, node)) replacements.push_back(r);
        } else {
          replacements = decompose_multi(graph, node);
        }
      } catch (const std::exception& e) {
        // A rewrite whose ops did not take its arguments (an overload it did not foresee): the
        // node stays as it was, for its converter or PyTorch.
        KILN_LOG(kDebug, "decompose_ops: ", node->kind().toQualString(), " left whole: ", e.what());
        replacements.clear();
      }
      if (replacements.empty()) {
        // Whatever a rewrite inserted before giving up goes (its nodes use only each other).
        while (node->prev() != before) node->prev()->destroy();
        return;
      }
      for (Node* n = before->next(); n != node; n = n->next()) inherit_fallback_mark(node, n);
      for (size_t i = 0; i < replacements.size(); ++i) {
        Value* out = node->outputs()[i];
        // The node's type, unless the rewrite knows more (a rank the node's type lacks).
        if (!known_rank(replacements[i]) || known_rank(out)) {
          replacements[i]->setType(out->type());
        }
        out->replaceAllUsesWith(replacements[i]);
      }
      node->destroy();
      rewrote = true;
    });
    if (!rewrote) break;
    changed = true;
  }
  return changed;
}

}  // namespace kiln::lowering
