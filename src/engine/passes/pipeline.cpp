// The builder's passes in order, each with the reason it stands where it does, and the loop that
// runs them (pass.h).
#include <iostream>

#include "engine/passes/attention_heads.h"
#include "engine/passes/layout.h"
#include "engine/passes/pass.h"
#include "engine/passes/passes.h"
#include "engine/passes/precision.h"
#include "engine/passes/scale_shift.h"
#include "engine/verify.h"
#include "util/errors.h"
#include "util/logging.h"

namespace kiln::engine {

void PassContext::note(std::string line) const {
  KILN_CHECK(!report.passes.empty(), InternalError, "PassContext::note outside a pass");
  report.passes.back().lines.push_back(std::move(line));
}

void run_passes(Network& net, const std::vector<Pass>& passes, const PassContext& ctx,
                std::ostream& dump) {
  for (const Pass& pass : passes) {
    if (pass.enabled && !pass.enabled(ctx)) continue;
    ctx.report.passes.push_back(PassRecord{pass.name, 0, {}});
    int changes = 0;
    try {
      changes = pass.run(net, ctx);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      KILN_THROW(InternalError, "pass `", pass.name, "` failed: ", e.what());
    }
    ctx.report.passes.back().changes = changes;
    KILN_LOG(kDebug, "engine pass ", pass.name, ": ", changes, " rewrites");
    if (ctx.config.verify_passes) verify_network(net, "after pass `" + pass.name + "`");
    if (ctx.config.print_after_all) {
      dump << "// after " << pass.name << " (" << changes << " rewrites)\n" << network_to_text(net);
    }
  }
}

namespace {

// A fusion pass: its lines go to the pass's record.
int fusion(const PassContext& ctx, const std::function<int(std::vector<std::string>& lines)>& run) {
  std::vector<std::string> lines;
  const int n = run(lines);
  for (auto& l : lines) ctx.note(std::move(l));
  return n;
}

// The backend's fused-attention rule with the build's TF32 choice bound: whether f32 attention
// may run on TF32 (the tf32 pass below marks the layers so).
std::function<bool(const Shape&, const Shape&, const Shape&, DataType)> fused_attention_of(
    const PassContext& c) {
  const bool tf32 = c.backend.tf32 && c.config.tf32;
  return [&c, tf32](const Shape& q, const Shape& k, const Shape& v, DataType t) {
    return c.backend.fused_attention(q, k, v, t, tf32);
  };
}

bool squeeze_excitation_on(const PassContext& c) {
  return c.backend.squeeze_excitation &&
         c.config.squeeze_excitation.value_or(c.backend.squeeze_excitation_by_default);
}

std::vector<Pass> make_pipeline() {
  std::vector<Pass> p;
  // First, so that every pass below (precision, layout, folding, fusion) sees a constant-stat
  // batch norm as the elementwise scale and shift it is.
  p.push_back({"scale_shift", nullptr,
               [](Network& n, const PassContext&) { return batch_norm_to_scale_shift(n); }});
  // Before folding, so that the casts of f32 weights fold into low-precision constants. Only
  // backends that compute below f32 (cuda) have precision rules.
  p.push_back({"precision", [](const PassContext& c) { return c.backend.precision != nullptr; },
               [](Network& n, const PassContext& c) {
                 const bool changed = choose_precisions(n, c.config.enabled_precisions,
                                                        c.backend.precision, &c.report.precision);
                 return changed ? c.report.precision.casts_inserted +
                                      c.report.precision.count(c.report.precision.low)
                                : 0;
               }});
  // Masks built from shapes (causal triangles, all-true padding) become constants here, and
  // those that say no more than a flag become it (alone, or and'ed with a padding mask), before
  // the attention passes below, which take unmasked attention more often (the folding of the weight
  // casts the precisions inserted is a side effect; fold_constants below takes what later passes
  // leave).
  p.push_back({"fold_constants_early", nullptr,
               [](Network& n, const PassContext& c) { return fold_constants(n); }});
  // Refittable plans keep the masks that are weights: what this pass makes of a mask depends on
  // its values, which a refit may change (masks folded from fills are the plan's own).
  p.push_back({"attention_masks", nullptr, [](Network& n, const PassContext& c) {
                 return simplify_attention_masks(n, c.refit_weights);
               }});
  // After the early folding (eps, the exponent and the scale are constants by then), before the
  // elementwise fusion, which would take the square, the rsqrt and the multiplies.
  p.push_back(
      {"rms_norms", nullptr, [](Network& n, const PassContext&) { return fuse_rms_norms(n); }});
  // After the precisions (the fused kernel's dtypes) and the early folding (position biases and
  // masks are constants by then, scales scalars), before the attention passes below.
  p.push_back({"written_attention",
               [](const PassContext& c) { return c.backend.fused_attention != nullptr; },
               [](Network& n, const PassContext& c) {
                 return fold_written_attention(n, fused_attention_of(c));
               }});
  // After the precisions: whether the fused kernel takes an attention depends on its dtype.
  p.push_back({"decompose_attention",
               [](const PassContext& c) {
                 return c.backend.decompose_attention && c.config.decompose_attention;
               },
               [](Network& n, const PassContext& c) {
                 return decompose_attention(n, fused_attention_of(c));
               }});
  // After the decomposition, whose matmuls are f32 ones too; f32 attention the fused kernel
  // takes is marked as well (the attention passes above asked with the same choice).
  p.push_back({"tf32", [](const PassContext& c) { return c.backend.tf32 && c.config.tf32; },
               [](Network& n, const PassContext&) { return allow_tf32(n); }});
  // Before the head folding, which then finds the permutes on the attention operands; after the
  // early folding (rotary tables are constants by then).
  p.push_back({"head_permutes",
               [](const PassContext& c) { return c.backend.packed_heads != nullptr; },
               [](Network& n, const PassContext&) { return sink_head_permutes(n); }});
  // Before the head folding, which then finds seq-first transposes next to the head split and
  // merge instead of behind the projections.
  p.push_back({"row_shuffles",
               [](const PassContext& c) { return c.backend.packed_heads != nullptr; },
               [](Network& n, const PassContext& c) {
                 return move_row_shuffles(n, c.backend.packed_heads);
               }});
  // After the precisions and the tf32 marks (the cuda kernel takes packed heads in f16/bf16, and
  // f32 on TF32), before folding and dead-layer removal, which clear the head-split views it
  // leaves behind.
  p.push_back({"attention_heads",
               [](const PassContext& c) { return c.backend.packed_heads != nullptr; },
               [](Network& n, const PassContext& c) {
                 return fold_attention_heads(n, c.backend.packed_heads);
               }});
  // After the attention passes above (which read masks as the model gave them), before the
  // folding (a constant mask's bias folds) and the elementwise fusion (a computed mask's joins the
  // kernel that computes it).
  p.push_back({"attention_mask_biases",
               [](const PassContext& c) {
                 return c.backend.attention_mask_biases && c.config.attention_mask_biases;
               },
               [](Network& n, const PassContext&) { return attention_mask_biases(n); }});
  // After the precisions (the choice depends on them), before folding (weight transposes fold
  // into constants).
  p.push_back({"layout",
               [](const PassContext& c) {
                 return c.config.conv_layout != ConvLayout::kChannelsFirst &&
                        c.backend.channels_last != nullptr;
               },
               [](Network& n, const PassContext& c) {
                 const bool all = c.config.conv_layout == ConvLayout::kChannelsLast;
                 c.report.layout = assign_channels_last(n, [&](const Network& net, const Layer& l) {
                   return all || c.backend.channels_last(net, l, c.config);
                 });
                 return c.report.layout.convolutions;
               }});
  // Every rewrite above may leave layers of constants (casts, transposes of weights).
  p.push_back({"fold_constants", nullptr,
               [](Network& n, const PassContext& c) { return fold_constants(n); }});
  // After folding (a crop of a folded constant is folded instead); the reshapes it makes join
  // the shuffle chains below.
  p.push_back({"identity_layers", nullptr,
               [](Network& n, const PassContext&) { return reshape_identity_layers(n); }});
  // Before the shuffle chains, which compose its shuffle with the views around it.
  p.push_back({"strided_concats", nullptr,
               [](Network& n, const PassContext&) { return shuffle_strided_concats(n); }});
  // After folding and the layout pass, whose transposes meet the model's own shuffles here.
  p.push_back({"shuffle_chains", nullptr,
               [](Network& n, const PassContext&) { return fold_shuffle_chains(n); }});
  // After the shuffle chains (a chain that ends in a transpose is one shuffle by then), before
  // the post-ops, which fuse into the matmuls whatever their operands.
  p.push_back({"matmul_transposes", nullptr,
               [](Network& n, const PassContext&) { return fold_matmul_transposes(n); }});
  // What the passes above left unread (split views, folded constants' inputs) goes before the
  // fusions, which need single consumers.
  p.push_back({"dead_layers", nullptr, [](Network& n, const PassContext& c) {
                 const int removed = remove_dead_layers(n);
                 if (c.report.layout.convolutions > 0) {
                   c.report.layout.transposes = count_layout_transposes(n);
                 }
                 return removed;
               }});
  // After dead_layers (the head-split views no longer read the projections), before the post-ops,
  // which fuse into the merged matmul what followed its parts.
  p.push_back({"attention_projections",
               [](const PassContext& c) { return c.backend.packed_heads != nullptr; },
               [](Network& n, const PassContext& c) {
                 return fusion(c, [&](auto& lines) {
                   return merge_attention_projections(n, c.backend.packed_heads, lines);
                 });
               }});
  // After attention_projections (whose projections a packed attention reads), before the post-ops
  // (which would take a part's activation into its matmul) and the elementwise fusion (whose
  // groups read the parts' columns).
  p.push_back(
      {"elementwise_projections", [](const PassContext& c) { return c.backend.gathered_inputs; },
       [](Network& n, const PassContext& c) {
         return fusion(c, [&](auto& lines) { return merge_elementwise_projections(n, lines); });
       }});
  // After the attention passes (head_permutes reads rotary's slices and concats) and dead_layers
  // (single readers counted on the live layers), before the elementwise fusion, which takes the
  // sign multiply with the multiply after it.
  p.push_back({"concat_slices", nullptr,
               [](Network& n, const PassContext&) { return gather_concat_slices(n); }});
  // Right after concat_slices, whose rolls are gathers that meet the shuffle chains (composed
  // above) here.
  p.push_back({"gather_chains", nullptr, [](Network& n, const PassContext& c) {
                 return fold_gather_chains(n, c.refit_weights, c.backend.element_gathers);
               }});
  // After folding and the shuffle chains (a layer scale after a permute back meets its GEMM by
  // then), before the post-ops (the residual add after the scale then joins the GEMM) and the
  // elementwise fusion (which would take the multiply).
  p.push_back({"scale_into_weights", nullptr, [](Network& n, const PassContext& c) {
                 return fold_scales_into_weights(n, c.refit_weights);
               }});
  // So that an activation behind a reshape meets the GEMM before it in post_ops.
  p.push_back({"activations_before_reshapes", nullptr,
               [](Network& n, const PassContext&) { return activations_before_reshapes(n); }});
  // Bias, activation and residual into the convolutions and matmuls before them.
  p.push_back({"post_ops", nullptr, [](Network& n, const PassContext& c) {
                 return fusion(c, [&](auto& lines) { return fuse_post_ops(n, lines); });
               }});
  // After the post-ops (a full-shape constant after a matmul may be its residual there), before
  // the elementwise fusion (which would take the add).
  p.push_back({"softmax_biases", nullptr,
               [](Network& n, const PassContext&) { return fold_softmax_biases(n); }});
  // After the post-ops (the activations join the 1x1 convolutions), before the elementwise
  // fusion (which would take the multiply).
  p.push_back({"squeeze_excitation", squeeze_excitation_on, [](Network& n, const PassContext& c) {
                 return fusion(c, [&](auto& lines) {
                   return fuse_squeeze_excitation(n, c.backend.squeeze_excitation, lines);
                 });
               }});
  // Right after: the layers it made take the projections after them.
  p.push_back({"excitation_projection",
               [](const PassContext& c) {
                 return squeeze_excitation_on(c) && c.config.excitation_projection &&
                        c.backend.excitation_projection != nullptr;
               },
               [](Network& n, const PassContext& c) {
                 return fusion(c, [&](auto& lines) {
                   return fold_excitation_into_projection(n, c.backend.excitation_projection,
                                                          lines);
                 });
               }});
  // Before the elementwise fusion, which would take the cast.
  p.push_back({"cast_into_shuffle",
               [](const PassContext& c) {
                 return c.backend.casts_into_shuffles && c.config.cast_into_shuffle;
               },
               [](Network& n, const PassContext& c) {
                 return fusion(c, [&](auto& lines) { return fuse_cast_into_shuffle(n, lines); });
               }});
  // After the post-ops, which fused the GELUs it rewrites into the matmuls.
  p.push_back({"gelu_tanh",
               [](const PassContext& c) {
                 return c.backend.gelu_tanh_epilogues && c.config.gelu_tanh_epilogues;
               },
               [](Network& n, const PassContext&) { return gelu_tanh_epilogues(n); }});
  // Every elementwise layer no other fusion took joins its neighbours.
  p.push_back({"fuse_elementwise", nullptr, [](Network& n, const PassContext& c) {
                 return fusion(c, [&](auto& lines) {
                   return fuse_elementwise(n, lines, c.backend.max_fused_inputs,
                                           c.backend.max_fused_ops);
                 });
               }});
  // After the elementwise fusion, whose layers read the gathers (rotary's rotate_half).
  p.push_back({"gathered_inputs", [](const PassContext& c) { return c.backend.gathered_inputs; },
               [](Network& n, const PassContext& c) {
                 return fold_gathers_into_elementwise(n, c.backend.max_fused_inputs);
               }});
  // Last: which layers read a concat's output and write its inputs is known only now.
  p.push_back(
      {"concat_in_place",
       [](const PassContext& c) { return c.backend.placed_concats && c.config.concat_in_place; },
       [](Network& n, const PassContext& c) {
         return fusion(c, [&](auto& lines) {
           return place_concat_inputs(n, c.backend.writes_placed, lines);
         });
       }});
  return p;
}

}  // namespace

const std::vector<Pass>& builder_pipeline() {
  static const std::vector<Pass> pipeline = make_pipeline();
  return pipeline;
}

}  // namespace kiln::engine
