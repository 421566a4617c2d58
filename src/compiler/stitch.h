// Stitching: the partitioned graph back into one TorchScript module, each engine segment
// replaced by a call of kiln::execute_engine on an Engine attribute.
#pragma once

#include <torch/script.h>

#include <map>
#include <string>

#include "kiln/kiln.h"
#include "partitioning/segment.h"
#include "runtime/engine_class.h"

namespace kiln::compiler {

// A string attribute of every compiled module; see stitch().
inline constexpr const char* kRuntimeHintAttribute = "requires_libkiln_runtime_so";
inline constexpr const char* kRuntimeHint =
    "load libkiln_runtime.so before loading this module: link it (C++) or call "
    "torch.ops.load_library('.../libkiln_runtime.so') (Python)";

// The engine of each engine segment (nested If branches included), keyed by segment address.
using SegmentEngines =
    std::map<const partitioning::Segment*, c10::intrusive_ptr<runtime::EngineHolder>>;

// A new module whose forward is `partitioned.graph` with engine segments replaced by engine calls
// and torch segments kept as they are. Graph input 0 must be `self`; the new module holds the
// engines as attributes named after them. `name` becomes the module's type name. The outputs of
// an engine on another device than `device` ("cpu", "cuda:N": where the PyTorch segments run)
// are moved to it, and so are its inputs to the engine's; the CPU devices PyTorch ops are given
// (`torch.arange(n, device=...)`, made the CPU by lowering) become `device`.
torch::jit::Module stitch(const partitioning::PartitionedGraph& partitioned,
                          const SegmentEngines& engines, const std::string& name,
                          const std::string& device = "cpu");

// Checks at the top of `graph` (inputs: self, then one tensor per entry of `inputs`) that input
// dims sharing a symbol (Input::dim_symbols: export's tied dims, e.g. token ids and their
// attention mask of one sequence length) are equal, raising a RuntimeError that names both dims
// and the symbol when they are not: what export's own guards do, so that a call the model was
// not made for is an error, never a result computed at mismatched sizes. No-op without ties.
void insert_tied_dim_guards(torch::jit::Graph& graph, const std::vector<Input>& inputs);

}  // namespace kiln::compiler
