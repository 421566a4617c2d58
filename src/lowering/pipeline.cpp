// The ordered lowering pass list (seed 001); each step says why it is where it is.
#include "lowering/pipeline.h"

#include "lowering/passes.h"

namespace kiln::lowering {

const ir::PassPipeline& lowering_pipeline() {
  static const ir::PassPipeline pipeline = [] {
    ir::PassPipeline p;
    // Drop unused values first so later passes see only live nodes.
    p.add("eliminate_dead_code", eliminate_dead_code);
    return p;
  }();
  return pipeline;
}

}  // namespace kiln::lowering
