// Pass pipeline: order, change reporting, --pass selection, print-after-all, verification.
#include "ir/pass_pipeline.h"

#include <gtest/gtest.h>

#include <sstream>

#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::ir {
namespace {

const char* kGraph = R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::neg(%a)
  return (%b))IR";

// A real rewrite: relu(x) -> x would change values, so this pass swaps neg for a no-change
// copy instead of touching semantics: it renames nothing and reports no change.
bool no_change(std::shared_ptr<torch::jit::Graph>&) {
  return false;
}

// Replaces aten::neg(v) with aten::mul(v, -1): same values, different graph.
bool neg_to_mul(std::shared_ptr<torch::jit::Graph>& g) {
  bool changed = false;
  for (auto it = g->nodes().begin(); it != g->nodes().end();) {
    torch::jit::Node* n = *it++;
    if (n->kind() != torch::jit::aten::neg) continue;
    torch::jit::WithInsertPoint guard(n);
    auto* minus_one = g->insertConstant(-1);
    auto* mul = g->insert(torch::jit::aten::mul, {n->input(0), minus_one});
    n->output()->replaceAllUsesWith(mul);
    n->destroy();
    changed = true;
  }
  return changed;
}

// Breaks the graph: makes relu consume its own output.
bool break_graph(std::shared_ptr<torch::jit::Graph>& g) {
  torch::jit::Node* relu = *g->nodes().begin();
  relu->replaceInput(0, relu->output());
  return true;
}

TEST(PassPipeline, RunsInOrderAndReportsChanges) {
  PassPipeline p;
  p.add("no_change", no_change).add("neg_to_mul", neg_to_mul);
  auto g = testing::parse(kGraph);
  auto before = g->copy();
  EXPECT_EQ(p.run(g), std::vector<std::string>{"neg_to_mul"});
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::neg\nCHECK: aten::mul", *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{3, 4}})));
}

TEST(PassPipeline, PrintAfterAllAndOnly) {
  PassPipeline p;
  p.add("no_change", no_change).add("neg_to_mul", neg_to_mul);
  auto g = testing::parse(kGraph);
  std::ostringstream os;
  PassRunOptions options;
  options.print_after_all = &os;
  options.only = {"neg_to_mul"};
  p.run(g, options);
  EXPECT_EQ(os.str().find("// after no_change"), std::string::npos);
  EXPECT_NE(os.str().find("// after neg_to_mul\ngraph("), std::string::npos) << os.str();
  options.only = {"no_such_pass"};
  EXPECT_THROW(p.run(g, options), InvalidArgument);
}

TEST(PassPipeline, VerificationNamesTheBrokenPass) {
  PassPipeline p;
  p.add("break_graph", break_graph);
  auto g = testing::parse(kGraph);
  try {
    p.run(g);
    FAIL() << "broken graph passed verification";
  } catch (const InternalError& e) {
    EXPECT_NE(e.message().find("after pass `break_graph`"), std::string::npos) << e.message();
  }
}

TEST(PassPipeline, DuplicateNamesAreRejected) {
  PassPipeline p;
  p.add("a", no_change);
  EXPECT_THROW(p.add("a", no_change), InternalError);
}

}  // namespace
}  // namespace kiln::ir
