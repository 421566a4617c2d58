// Sizes as torch.export records them: sympy's srepr expressions evaluated at given symbol values,
// and nothing (not a guess) for what the evaluator does not know.
#include "ir/export_sizes.h"

#include <gtest/gtest.h>

namespace kiln::ir {
namespace {

const char* kS0 = "Symbol('s0', positive=True, integer=True)";
const char* kS1 = "Symbol('s77', positive=True, integer=True)";

std::string call(const std::string& f, const std::string& a, const std::string& b) {
  return f + "(" + a + ", " + b + ")";
}

TEST(ExportSizes, EvaluatesSreprExpressions) {
  const std::map<std::string, int64_t> at = {{"s0", 7}, {"s77", 3}};
  EXPECT_EQ(evaluate_size("12", at), 12);
  EXPECT_EQ(evaluate_size(kS0, at), 7);
  EXPECT_EQ(evaluate_size(call("Mul", "Integer(4)", kS1), at), 12);
  EXPECT_EQ(evaluate_size("Add(" + std::string(kS0) + ", Integer(-1), " + kS1 + ")", at), 9);
  EXPECT_EQ(evaluate_size(call("FloorDiv", call("Add", kS0, "Integer(-1)"), "Integer(4)"), at), 1);
  EXPECT_EQ(evaluate_size(call("FloorDiv", "Integer(-7)", "Integer(2)"), at), -4);
  EXPECT_EQ(evaluate_size(call("CeilDiv", kS0, "Integer(2)"), at), 4);
  EXPECT_EQ(evaluate_size(call("Mod", "Integer(-7)", "Integer(3)"), at), 2);
  EXPECT_EQ(evaluate_size(call("Max", "Integer(1)", kS1), at), 3);
  EXPECT_EQ(evaluate_size(call("Min", "Integer(1)", kS1), at), 1);
  EXPECT_EQ(evaluate_size(call("Pow", kS1, "Integer(2)"), at), 9);
}

TEST(ExportSizes, UnknownsAreNothing) {
  const std::map<std::string, int64_t> at = {{"s0", 7}};
  EXPECT_FALSE(evaluate_size(kS1, at));                                  // no value
  EXPECT_FALSE(evaluate_size("Symbol('u0', integer=True)", at));         // data-dependent
  EXPECT_FALSE(evaluate_size(call("FloorDiv", kS0, "Integer(0)"), at));  // by zero
  EXPECT_FALSE(evaluate_size(call("TrueDiv", kS0, "Integer(2)"), at));   // not a size
  EXPECT_FALSE(evaluate_size("Rational(1, 2)", at));
  EXPECT_FALSE(evaluate_size("Mul(Integer(2), ", at));  // truncated
  EXPECT_FALSE(evaluate_size("Integer(2) trailing", at));
  EXPECT_FALSE(evaluate_size("", at));
  EXPECT_FALSE(evaluate_size("99999999999999999999", at));
  // Files are not trusted: overflow and nesting without end are nothing too, not a crash.
  EXPECT_FALSE(evaluate_size(call("Mul", "Integer(4611686018427387904)", "Integer(4)"), at));
  EXPECT_FALSE(evaluate_size(call("Pow", "Integer(10)", "Integer(30)"), at));
  EXPECT_FALSE(evaluate_size(call("FloorDiv", "Integer(-9223372036854775807)", "Integer(0)"), at));
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "Add(";
  deep += "Integer(1)" + std::string(100000, ')');
  EXPECT_FALSE(evaluate_size(deep, at));
  EXPECT_EQ(evaluate_size("Add(Add(Add(Integer(1))))", at), 1);
}

TEST(ExportSizes, RecordedOnTheNodeThatMakesTheValue) {
  torch::jit::Graph g;
  torch::jit::Value* x = g.addInput("x");
  torch::jit::Node* n = g.insertNode(g.create(c10::Symbol::fromQualString("aten::relu"), {x}, 1));
  EXPECT_FALSE(export_sizes(n->output()));
  set_export_sizes(n, 0, {{kS0, "8"}, c10::ScalarType::Half});
  const auto got = export_sizes(n->output());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->sizes, (std::vector<std::string>{kS0, "8"}));
  EXPECT_EQ(got->dtype, c10::ScalarType::Half);
  // A clone of the node (what segment graphs and copies make) keeps them.
  torch::jit::Node* copy = g.insertNode(g.createClone(n, [](torch::jit::Value* v) { return v; }));
  EXPECT_TRUE(export_sizes(copy->output()));
  // A compiled module's graph keeps none of them; other attributes stay.
  copy->i_(c10::Symbol::attr("other"), 1);
  clear_export_sizes(g.block());
  EXPECT_FALSE(export_sizes(n->output()));
  EXPECT_FALSE(export_sizes(copy->output()));
  EXPECT_TRUE(copy->hasAttribute(c10::Symbol::attr("other")));
}

}  // namespace
}  // namespace kiln::ir
