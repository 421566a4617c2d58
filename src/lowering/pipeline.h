// The lowering pipeline: the ordered pass list that turns a TorchScript graph into kiln's form.
#pragma once

#include "ir/pass_pipeline.h"

namespace kiln::lowering {

const ir::PassPipeline& lowering_pipeline();

}  // namespace kiln::lowering
