// The builder's head-folding pass. A transformer's attention reads q, k and v as head splits of
// projections ([B, L, 3 * H * E] -> reshape [B, L, 3, H, E] -> permute -> slices ->
// [B, H, L, E]) and its result is merged back (permute [B, L, H, E] -> reshape [B, L, H * E]).
// Those shuffles and slices are views: when each operand is, in effect, column ranges of a
// [B, rows, width] tensor and the result goes into a [B, L, H * E] tensor, the attention layer
// takes them packed (AttentionParams::heads) and the views disappear from the plan. Keys and
// values whose heads are repeated for grouped-query attention (transformers' repeat_kv, kiln's
// lowering of enable_gqa) are read from the unrepeated heads (AttentionParams::kv_heads). Row
// shuffles move across the projections to meet the head split and merge (move_row_shuffles).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/network.h"
#include "engine/passes/views.h"

namespace kiln::engine {

class NetworkIndex;

// Whether the attention takes the packed params with these q/k/v sources (and mask) and output.
using PackedHeads =
    std::function<bool(const AttentionParams&, const std::vector<TensorDesc>&, const TensorDesc&)>;

// Rewrites every attention over [B, H, L, E] operands (H and E static; B, L and S may be dynamic:
// the views are traced with them as symbols) whose operands and result are such views, where
// `accept(packed params, q/k/v sources[, the mask], output)` holds (a mask stays as it is). Leaves
// the split views behind for the builder's dead-layer removal; the merge views are removed. Returns
// the number of attention layers rewritten.
int fold_attention_heads(Network& net, const PackedHeads& accept);

// Shuffles that move whole rows (permute and regroup leading dims, the last dim kept) cross the
// row-wise matmuls (a 2-d b, no residual) between them and an attention: down, below the matmul,
// where its result goes on only to attention operands; up, above it, where its input comes from
// an attention's result alone. nn.MultiheadAttention's seq-first transposes, as torch.export
// writes them, then meet the head split and merge, which attention_heads folds (for `accept`). The
// moves are kept only where they pay: where the folding then leaves fewer elements to shuffle than
// without them (swin's window partitions, which no head split takes, stay on the narrow rows before
// the qkv projection, next to the roll they compose with).
int move_row_shuffles(Network& net, const PackedHeads& accept);

// The projections of a packed-head attention: where its distinct operands are each
// matmul(x, constant w [, constant bias]) of one x, read by nothing else, they become one matmul
// with the weights (and biases, zeros for a part without) side by side, and the attention reads
// its operands' columns of that (BERT's query, key and value Linears: one GEMM instead of three,
// as GPT-2 writes it). Where `accept` holds for the rewritten attention (as for
// fold_attention_heads). Records a line per merge in `fusions`; returns the number of merges.
int merge_attention_projections(Network& net, const PackedHeads& accept,
                                std::vector<std::string>& fusions);

// Key or value heads repeated for grouped-query attention: `id` ([B, H, S, E]) is head h / group
// of `source` ([B, Hkv, S, E]), as transformers' repeat_kv writes it (unsqueeze to [B, Hkv, 1, S,
// E], a broadcast to [B, Hkv, group, S, E] (a select of the tensor with itself), reshape) or
// kiln's lowering of enable_gqa (a gather of the heads by the constant indices h / group).
// `index` is over `layers`, a working copy of net's layers.
struct RepeatedHeads {
  TensorId source;
  int64_t group;  // H / Hkv
};
std::optional<RepeatedHeads> repeated_heads(const Network& net, const std::vector<Layer>& layers,
                                            const NetworkIndex& index, TensorId id);

}  // namespace kiln::engine
