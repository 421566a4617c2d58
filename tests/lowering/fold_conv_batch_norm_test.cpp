// fold_conv_batch_norm: inference batch norm after a frozen convolution disappears into the
// convolution's weights and bias, in traced (_convolution) and scripted (conv2d) form; batch
// norms it cannot fold, and graphs with module-fallback marks, stay as they are.
#include <gtest/gtest.h>
#include <torch/csrc/jit/passes/freeze_module.h>

#include "harness/ir_testing.h"
#include "lowering/lower.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

// conv (3 -> 8 channels) then batch norm with non-trivial statistics, frozen.
GraphPtr frozen(const std::string& forward) {
  torch::jit::Module m("M");
  m.register_parameter("w", torch::randn({8, 3, 3, 3}), false);
  m.register_parameter("b", torch::randn({8}), false);
  m.register_parameter("gamma", torch::rand({8}) + 0.5, false);
  m.register_parameter("beta", torch::randn({8}), false);
  m.register_buffer("mean", torch::randn({8}));
  m.register_buffer("var", torch::rand({8}) + 0.1);
  m.define(forward);
  m.eval();
  auto frozen = torch::jit::freeze_module(m);
  auto g = frozen.get_method("forward").graph()->copy();
  g->eraseInput(0);  // self: freezing made every weight a constant
  return g;
}

const char* kScripted = R"(
def forward(self, x):
    y = torch.conv2d(x, self.w, self.b, [1, 1], [1, 1])
    z = torch.batch_norm(y, self.gamma, self.beta, self.mean, self.var, False, 0.1, 1e-5, True)
    return torch.relu(z)
)";

const char* kTraced = R"(
def forward(self, x):
    y = torch._convolution(x, self.w, self.b, [2, 2], [0, 0], [1, 1], False, [0, 0], 1,
                           False, False, True, True)
    return torch.batch_norm(y, self.gamma, self.beta, self.mean, self.var, False, 0.1, 1e-3, True)
)";

TEST(FoldConvBatchNorm, FoldsScriptedConvWithAndWithoutBias) {
  for (bool bias : {true, false}) {
    std::string src = kScripted;
    if (!bias) src.replace(src.find("self.b"), 6, "None");
    auto g = frozen(src);
    auto before = g->copy();
    EXPECT_TRUE(fold_conv_batch_norm(g));
    EXPECT_TRUE(
        testing::file_check("CHECK: aten::conv2d\nCHECK-NOT: batch_norm\nCHECK: aten::relu", *g));
    EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({2, 3, 10, 10})}, 1e-4, 1e-5));
  }
}

TEST(FoldConvBatchNorm, FoldsTracedConvolution) {
  auto g = frozen(kTraced);
  auto before = g->copy();
  EXPECT_TRUE(fold_conv_batch_norm(g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: batch_norm", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({1, 3, 9, 9})}, 1e-4, 1e-5));
}

TEST(FoldConvBatchNorm, KeepsABatchNormWhoseConvolutionHasOtherUses) {
  auto g = frozen(R"(
def forward(self, x):
    y = torch.conv2d(x, self.w, self.b)
    z = torch.batch_norm(y, self.gamma, self.beta, self.mean, self.var, False, 0.1, 1e-5, True)
    return z + y
)");
  EXPECT_FALSE(fold_conv_batch_norm(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::batch_norm", *g));
}

TEST(FoldConvBatchNorm, LeavesGraphsWithModuleFallbackMarksAlone) {
  auto g = frozen(kScripted);
  for (torch::jit::Node* n : g->nodes()) {
    if (n->kind() == c10::aten::conv2d) n->i_(torch_executed_attr(), 1);
  }
  EXPECT_FALSE(fold_conv_batch_norm(g));
  EXPECT_TRUE(testing::file_check("CHECK: aten::batch_norm", *g));
}

}  // namespace
}  // namespace kiln::lowering
