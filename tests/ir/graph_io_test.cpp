// Reading IR text and saved modules; malformed text gives one line with the position.
#include "ir/graph_io.h"

#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "harness/process.h"
#include "kiln_test_paths.h"
#include "util/errors.h"

namespace kiln::ir {
namespace {

std::string parse_error(const std::string& text) {
  try {
    parse_graph(text, "bad.ir");
  } catch (const CorruptInput& e) {
    return e.message();
  }
  return "(no error)";
}

TEST(GraphIO, ParsesAndPrintsTheLgammaGraph) {
  auto graph = load_graph_file(std::string(KILN_TEST_DATA_DIR) + "/lgamma.ir").graph;
  EXPECT_TRUE(testing::file_check(R"(
    CHECK: graph(%x : Tensor,
    CHECK-NEXT: %y : Tensor):
    CHECK: aten::add
    CHECK: aten::lgamma
    CHECK: aten::mul
    CHECK: aten::lgamma
    CHECK: aten::div
    CHECK: aten::lgamma
    CHECK: prim::ListConstruct
    CHECK: aten::cat
    CHECK: return)",
                                  *graph));
}

TEST(GraphIO, MalformedTextNamesLineAndColumn) {
  const std::string text =
      "graph(%x : Tensor):\n"
      "  %1 : int = prim::Constant[value=1]()\n"
      "  %2 : Tensor = aten::add(%x, %x %1)\n"
      "  return (%2)\n";
  EXPECT_EQ(parse_error(text), "bad.ir:3:34: expected ) but found '%'");
}

TEST(GraphIO, UndefinedValueNamesItsPosition) {
  const std::string text =
      "graph(%x : Tensor):\n"
      "  %2 : Tensor = aten::add(%x, %z, %x)\n"
      "  return (%2)\n";
  const std::string msg = parse_error(text);
  EXPECT_NE(msg.find("bad.ir:2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'z'"), std::string::npos) << msg;
}

TEST(GraphIO, UnknownTypeAndTruncatedText) {
  // torch 2.x appends a list of valid types to the message.
  EXPECT_EQ(parse_error("graph(%x : Floop):\n  return (%x)\n")
                .rfind("bad.ir:1:12: unknown type specifier", 0),
            0u);
  const std::string msg =
      parse_error("graph(%x : Tensor):\n  %2 : Tensor = aten::relu(%x)\n  return (%2\n");
  EXPECT_NE(msg.find("bad.ir:3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ends too early"), std::string::npos) << msg;
}

TEST(GraphIO, ParsedGraphIsVerified) {
  const std::string msg = parse_error(
      "graph(%x : Tensor):\n  %c : int = prim::Constant[value=1]()\n"
      "  %2 : Tensor = aten::add(%x, %c)\n  return (%2)\n");
  EXPECT_NE(msg.find("aten::add(%x, %c)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("match no schema"), std::string::npos) << msg;
  EXPECT_NE(parse_error("graph(%x : Tensor):\n  %2 : Tensor = aten::nosuchop(%x)\n  return (%2)\n")
                .find("no operator has this name"),
            std::string::npos);
}

TEST(GraphIO, EmptyAndBinaryGarbage) {
  EXPECT_NE(parse_error("").find("bad.ir"), std::string::npos);
  EXPECT_NE(parse_error(std::string("\x01\x02\xff graph", 9)).find("bad.ir"), std::string::npos);
}

TEST(GraphIO, MissingFileAndCorruptModule) {
  EXPECT_THROW(load_graph_file("/nonexistent/model.ts"), InvalidArgument);
  // Zip magic followed by garbage: looks like a saved module but is not one.
  const std::string path =
      testing::write_temp_file("corrupt.ts", std::string("PK\x03\x04", 4) + "garbage");
  try {
    load_graph_file(path);
    FAIL() << "corrupt module loaded";
  } catch (const CorruptInput& e) {
    EXPECT_NE(e.message().find("not a loadable TorchScript module"), std::string::npos);
  }
}

TEST(GraphIO, LoadsASavedModule) {
  auto loaded = load_graph_file(std::string(KILN_TEST_MODELS_DIR) + "/lgamma.ts");
  ASSERT_TRUE(loaded.module.has_value());
  EXPECT_TRUE(testing::file_check("CHECK: aten::lgamma\nCHECK: aten::cat", *loaded.graph));
}

}  // namespace
}  // namespace kiln::ir
