// The ordered lowering pass list (seed 001); each step says why it is where it is.
#include "lowering/pipeline.h"

#include "lowering/passes.h"

namespace kiln::lowering {

const ir::PassPipeline& lowering_pipeline() {
  static const ir::PassPipeline pipeline = [] {
    ir::PassPipeline p;
    // Drop unused values first so later passes see only live nodes.
    p.add("eliminate_dead_code", eliminate_dead_code);
    // Core ATen of torch.export (run_decompositions) into the forms every pass below matches:
    // batch_norm for the conv fold, layer_norm, max_pool2d, attention; after DCE, so the unused
    // statistics and indices those ops also return are known to be unused.
    p.add("lower_core_aten", lower_core_aten);
    // Fold what freezing made static (training flags, attribute checks) before matching on it.
    p.add("propagate_constants", propagate_constants);
    // Input checks `if cond: raise` go; their conditions are now dead.
    p.add("remove_exceptions", remove_exceptions);
    // Then the checks written as assert ops.
    p.add("eliminate_guards", eliminate_guards);
    // Inference: dropout is the identity (train is a constant False after freezing).
    p.add("remove_dropout", remove_dropout);
    // Inference batch norm into the convolution before it; after remove_dropout and
    // propagate_constants, so its weights and training flag are constants.
    p.add("fold_conv_batch_norm", fold_conv_batch_norm);
    // In-place ops of traced models (relu_, add_) become pure ops the engine can take; after
    // dropout so dropout_ goes first, before the peepholes that match functional forms.
    p.add("remove_mutation", remove_mutation);
    // Writes through views it leaves (masks built by filling slices of zeros) become scatters of
    // the written region, so the engine can take the mask and fold it when its shape is static.
    p.add("functionalize_view_writes", functionalize_view_writes);
    // Traced shape arithmetic (size -> NumToTensor -> mul -> Int) back to ints, so reshape sizes
    // are static metadata for conversion; the orphaned tensor ops go with the final DCE.
    p.add("scalarize_size_arithmetic", scalarize_size_arithmetic);
    // Peephole no-ops, so the fusions below see producers directly (x.t().t(), detach, ...).
    p.add("remove_noops", remove_noops);
    // The engine chooses layouts; PyTorch-visible copies and views stay correct.
    p.add("remove_contiguous", remove_contiguous);
    // Short constant loops become straight code; may expose tuple pairs and linear patterns.
    p.add("unroll_loops", unroll_loops);
    // After unrolling, so construct/unpack pairs that crossed iterations meet.
    p.add("lower_tuples", lower_tuples);
    // The two-branch linear of scripted modules collapses to matmul + add ...
    p.add("fuse_addmm_branches", fuse_addmm_branches);
    // ... which, like addmm and matmul + add from anywhere, becomes aten::linear.
    p.add("fuse_linear", fuse_linear);
    // A shape-preserving flatten before linear is now visible next to it.
    p.add("remove_flatten_before_linear", remove_flatten_before_linear);
    // addmm that did not fuse (no transposed weight) needs no converter of its own.
    p.add("unpack_addmm", unpack_addmm);
    p.add("unpack_log_softmax", unpack_log_softmax);
    // Fused transformer layers (inference fast paths) into the ops they compute: linears,
    // attention, layer norms. Flags and sizes are constants by now; the linears it writes need
    // none of the fusions above, and CSE below merges the constants it inserts.
    p.add("decompose_transformer_fast_paths", decompose_transformer_fast_paths);
    // The tanh GELU written out (GPT-2's gelu_new) is one op, before the composite ops are split.
    p.add("fuse_gelu_tanh", fuse_gelu_tanh);
    // Composite ops into engine ops; may insert casts that the next step inspects.
    p.add("decompose_ops", decompose_ops);
    // Late, per seed 001: earlier rewrites may have made casts redundant.
    p.add("remove_noop_to", remove_noop_to);
    // Rewrites above duplicate constants and subexpressions; merge them.
    p.add("eliminate_common_subexpressions", eliminate_common_subexpressions);
    p.add("pool_constants", pool_constants);
    // Producers orphaned by the rewrites (guard conditions, transposes) go last.
    p.add("eliminate_dead_code_final", eliminate_dead_code);
    return p;
  }();
  return pipeline;
}

}  // namespace kiln::lowering
