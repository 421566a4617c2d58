// Core ATen (torch.export's run_decompositions) into the ops the rest of kiln takes, where only the
// first result of a multi-result op is used (the rest are training statistics, indices, random
// state): _native_batch_norm_legit_no_training and native_batch_norm (training false) into
// batch_norm, native_layer_norm into layer_norm, max_poolNd_with_indices into max_poolNd,
// native_dropout (train false) into its input, the _scaled_dot_product_*_attention kernels into
// scaled_dot_product_attention; and single-result spellings: _to_copy into to.dtype_layout,
// _unsafe_view into view, alias into its input, convolution into convNd / conv_transposeNd. Ops
// whose other results are used stay as they are (and reach partitioning, which says why).
#include <torch/csrc/jit/frontend/schema_matching.h>

#include "ir/graph_utils.h"
#include "lowering/passes.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

bool only_first_used(const Node* n) {
  for (size_t i = 1; i < n->outputs().size(); ++i) {
    if (n->output(i)->hasUses()) return false;
  }
  return true;
}

// A node of `kind` over `inputs` (schema order), matched against the schema named `schema`
// ("aten::batch_norm"); its result replaces `n`'s first. Inputs are values already in the graph,
// or constants given as IValues.
struct Arg {
  Value* value = nullptr;
  c10::IValue constant;
  Arg(Value* v) : value(v) {}                     // NOLINT: implicit, for brace lists
  Arg(c10::IValue c) : constant(std::move(c)) {}  // NOLINT
};

void replace_first(Node* n, const char* kind, const std::vector<Arg>& args) {
  torch::jit::Graph& g = *n->owningGraph();
  torch::jit::WithInsertPoint guard(n);
  std::vector<Value*> inputs;
  for (const Arg& a : args) inputs.push_back(a.value ? a.value : g.insertConstant(a.constant));
  Node* r = g.create(c10::Symbol::fromQualString(kind), inputs, 1);
  r->insertBefore(n);
  r->output()->setType(n->output(0)->type());
  inherit_fallback_mark(n, r);
  n->output(0)->replaceAllUsesWith(r->output());
  n->destroy();
}

bool is(const Node* n, const char* schema_name, const char* overload = "") {
  const c10::FunctionSchema* s = n->maybeSchema();
  return s && s->name() == schema_name && s->overload_name() == overload;
}

bool rewrite(Node* n) {
  const c10::FunctionSchema* s = n->maybeSchema();
  if (!s) return false;
  const std::string& name = s->name();
  if (name == "aten::alias" && n->outputs().size() == 1) {
    n->output()->replaceAllUsesWith(n->input(0));
    n->destroy();
    return true;
  }
  if (is(n, "aten::_unsafe_view")) {
    replace_first(n, "aten::view", {n->input(0), n->input(1)});
    return true;
  }
  if (is(n, "aten::_to_copy")) {
    // (self, *, dtype, layout, device, pin_memory, non_blocking, memory_format); copy=True, as
    // _to_copy never returns its input (remove_noop_to keeps it; conversion drops a no-op cast).
    replace_first(n, "aten::to",
                  {n->input(0), n->input(1), n->input(2), n->input(3), n->input(4), n->input(5),
                   c10::IValue(true), n->input(6)});
    return true;
  }
  if (is(n, "aten::convolution")) {
    // (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups) into
    // the convNd / conv_transposeNd the batch-norm fold and the converters match.
    const auto rank = known_rank(n->input(1));
    const auto transposed = constant_value(n->input(6));
    if (!rank || *rank < 3 || *rank > 5 || !transposed || !transposed->isBool()) return false;
    const std::string dims = std::to_string(*rank - 2) + "d";
    if (!transposed->toBool()) {
      replace_first(n, ("aten::conv" + dims).c_str(),
                    {n->input(0), n->input(1), n->input(2), n->input(3), n->input(4), n->input(5),
                     n->input(8)});
    } else {
      replace_first(n, ("aten::conv_transpose" + dims).c_str(),
                    {n->input(0), n->input(1), n->input(2), n->input(3), n->input(4), n->input(7),
                     n->input(8), n->input(5)});
    }
    return true;
  }
  if (!only_first_used(n)) return false;
  if (is(n, "aten::_native_batch_norm_legit_no_training")) {
    // (input, weight, bias, running_mean, running_var, momentum, eps)
    replace_first(n, "aten::batch_norm",
                  {n->input(0), n->input(1), n->input(2), n->input(3), n->input(4),
                   c10::IValue(false), n->input(5), n->input(6), c10::IValue(true)});
    return true;
  }
  if (is(n, "aten::native_batch_norm") && is_constant_bool(n->input(5), false)) {
    // (input, weight, bias, running_mean, running_var, training, momentum, eps)
    replace_first(n, "aten::batch_norm",
                  {n->input(0), n->input(1), n->input(2), n->input(3), n->input(4), n->input(5),
                   n->input(6), n->input(7), c10::IValue(true)});
    return true;
  }
  if (is(n, "aten::native_layer_norm")) {
    // (input, normalized_shape, weight, bias, eps)
    replace_first(
        n, "aten::layer_norm",
        {n->input(0), n->input(1), n->input(2), n->input(3), n->input(4), c10::IValue(true)});
    return true;
  }
  for (const char* pool : {"aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d"}) {
    if (name == std::string(pool) + "_with_indices") {
      // (self, kernel_size, stride, padding, dilation, ceil_mode): the same arguments.
      replace_first(n, pool,
                    {n->input(0), n->input(1), n->input(2), n->input(3), n->input(4), n->input(5)});
      return true;
    }
  }
  if (is(n, "aten::native_dropout") && is_constant_bool(n->input(2), false)) {
    n->output(0)->replaceAllUsesWith(n->input(0));
    n->destroy();
    return true;
  }
  const c10::IValue none;
  if (is(n, "aten::_scaled_dot_product_flash_attention")) {
    // (query, key, value, dropout_p, is_causal, return_debug_mask, *, scale)
    replace_first(n, "aten::scaled_dot_product_attention",
                  {n->input(0), n->input(1), n->input(2), none, n->input(3), n->input(4),
                   n->input(6), c10::IValue(false)});
    return true;
  }
  if (is(n, "aten::_scaled_dot_product_flash_attention_for_cpu")) {
    // (query, key, value, dropout_p, is_causal, *, attn_mask, scale)
    replace_first(n, "aten::scaled_dot_product_attention",
                  {n->input(0), n->input(1), n->input(2), n->input(5), n->input(3), n->input(4),
                   n->input(6), c10::IValue(false)});
    return true;
  }
  if (is(n, "aten::_scaled_dot_product_efficient_attention") ||
      is(n, "aten::_scaled_dot_product_cudnn_attention")) {
    // (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, [return_debug_mask,]
    //  *, scale)
    const bool cudnn = name == "aten::_scaled_dot_product_cudnn_attention";
    replace_first(n, "aten::scaled_dot_product_attention",
                  {n->input(0), n->input(1), n->input(2), n->input(3), n->input(5), n->input(6),
                   n->input(cudnn ? 8 : 7), c10::IValue(false)});
    return true;
  }
  return false;
}

}  // namespace

bool lower_core_aten(GraphPtr& graph) {
  bool changed = false;
  std::vector<Node*> nodes;
  ir::for_each_node(graph->block(), [&](Node* n) { nodes.push_back(n); });
  for (Node* n : nodes) changed |= rewrite(n);
  return changed;
}

}  // namespace kiln::lowering
