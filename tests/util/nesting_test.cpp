// check_nesting_depth: the bound on bracket nesting that keeps torch's parsers off the stack's end.
#include "util/nesting.h"

#include <gtest/gtest.h>

#include <string>

#include "util/errors.h"

namespace kiln {
namespace {

std::string error_of(const std::string& text, size_t max_depth) {
  try {
    check_nesting_depth(text, "bad.ir", max_depth);
  } catch (const CorruptInput& e) {
    return e.message();
  }
  return "";
}

TEST(Nesting, DeepBracketsAreACorruptInputNamingLineAndColumn) {
  EXPECT_EQ(error_of("graph(%x : (((Tensor)))):", 4), "");
  EXPECT_EQ(error_of("graph(%x : ((((Tensor))))):", 4),
            "bad.ir:1:15: brackets nest deeper than 4 levels");
  EXPECT_EQ(error_of("graph():\n  %a : int[] = prim::Constant[value=[[[1]]]]()", 3),
            "bad.ir:2:39: brackets nest deeper than 3 levels");
  // The fuzzer's input: 10,000 `(` overflowed the stack in torch's type parser.
  EXPECT_NE(error_of("graph(%x : " + std::string(10000, '('), kMaxNestingDepth).find("bad.ir:1:"),
            std::string::npos);
}

TEST(Nesting, StringsAndClosedBracketsDoNotCount) {
  EXPECT_EQ(error_of(R"(prim::Constant[value="((((\"((((("]())", 2), "");
  EXPECT_EQ(error_of("'(((('(())", 2), "");
  EXPECT_EQ(error_of("()()()()[][]{}{}", 1), "");
  EXPECT_EQ(error_of(")))))(((", 3), "");  // unbalanced: the parser reports it
}

}  // namespace
}  // namespace kiln
