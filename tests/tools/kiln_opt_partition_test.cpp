// kiln-opt --partition and --support with the real converter registry: segments, flags, reports.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "harness/ir_testing.h"
#include "harness/process.h"
#include "kiln_test_paths.h"

namespace kiln {
namespace {

std::string read_text(const std::string& path);

// lgamma.ir with aten::conj_physical, which has no converter, in place of aten::lgamma (which now
// has one): the graph whose segments these tests check.
const std::string& unsupported_ir() {
  static const std::string path = [] {
    std::string text = read_text(std::string(KILN_TEST_DATA_DIR) + "/lgamma.ir");
    for (size_t at = text.find("aten::lgamma"); at != std::string::npos;
         at = text.find("aten::lgamma", at)) {
      text.replace(at, 12, "aten::conj_physical");
    }
    return testing::write_temp_file("unsupported.ir", text);
  }();
  return path;
}

testing::ProcessResult kiln_opt(std::vector<std::string> args) {
  args.insert(args.begin(), KILN_OPT_PATH);
  return testing::run_process(args);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The parser numbers values it reads with numeric names (%27, %12) afresh, so the names kiln-opt
// prints for lgamma.ir's list and cat come from the same parser here.
struct LgammaNames {
  std::string list, cat;
};
LgammaNames lgamma_names() {
  auto graph = testing::parse(read_text(unsupported_ir()));
  const torch::jit::Node* cat = graph->outputs()[0]->node();
  return {cat->input(0)->debugName(), cat->output()->debugName()};
}

TEST(KilnOptPartition, LgammaIsSeed000sThreeSegments) {
  auto r = kiln_opt({unsupported_ir(), "--partition", "--min-block-size", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const LgammaNames names = lgamma_names();
  EXPECT_EQ(r.out,
            "segment 0 engine: %add=aten::add %mul=aten::mul %div=aten::div\n"
            "segment 1 torch: %x_lgamma=aten::conj_physical %y_lgamma=aten::conj_physical "
            "%div_lgamma=aten::conj_physical\n"
            "segment 2 engine: %" +
                names.list + "=prim::ListConstruct %" + names.cat + "=aten::cat\n");
  // --lower first changes nothing here: the graph is already lowered.
  auto lowered = kiln_opt({unsupported_ir(), "--lower", "--partition", "--min-block-size", "1"});
  ASSERT_EQ(lowered.exit_code, 0) << lowered.err;
  EXPECT_EQ(count_of(lowered.out, "segment "), 3u) << lowered.out;
}

TEST(KilnOptPartition, DefaultMinBlockSizeSendsTheOneOpCatToTorch) {
  // [ListConstruct, cat] counts one op (list packing is bookkeeping), below the default 3.
  auto r = kiln_opt({unsupported_ir(), "--partition"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const LgammaNames names = lgamma_names();
  EXPECT_EQ(r.out,
            "segment 0 engine: %add=aten::add %mul=aten::mul %div=aten::div\n"
            "segment 1 torch: %x_lgamma=aten::conj_physical %y_lgamma=aten::conj_physical "
            "%div_lgamma=aten::conj_physical %" +
                names.list + "=prim::ListConstruct %" + names.cat + "=aten::cat\n");
}

TEST(KilnOptPartition, LargeMinBlockSizeKeepsEverythingInTorch) {
  auto r = kiln_opt({unsupported_ir(), "--partition", "--min-block-size", "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const LgammaNames names = lgamma_names();
  EXPECT_EQ(r.out,
            "segment 0 torch: %add=aten::add %x_lgamma=aten::conj_physical %mul=aten::mul "
            "%y_lgamma=aten::conj_physical %div=aten::div %div_lgamma=aten::conj_physical %" +
                names.list + "=prim::ListConstruct %" + names.cat + "=aten::cat\n");
}

TEST(KilnOptPartition, TorchExecutedOpMovesTheMulToTorch) {
  auto r = kiln_opt({unsupported_ir(), "--partition", "--min-block-size", "1",
                     "--torch-executed-op", "aten::mul"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const LgammaNames names = lgamma_names();
  EXPECT_EQ(
      r.out,
      "segment 0 engine: %add=aten::add %div=aten::div\n"
      "segment 1 torch: %x_lgamma=aten::conj_physical %mul=aten::mul %y_lgamma=aten::conj_physical "
      "%div_lgamma=aten::conj_physical\n"
      "segment 2 engine: %" +
          names.list + "=prim::ListConstruct %" + names.cat + "=aten::cat\n");
  // An overload name works too, and the flag repeats. With div in PyTorch as well, no torch node
  // reads the add, so it waits in the open engine segment and joins the cat: two segments.
  auto both =
      kiln_opt({unsupported_ir(), "--partition", "--min-block-size", "1", "--torch-executed-op",
                "aten::mul.Tensor", "--torch-executed-op", "aten::div"});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  EXPECT_EQ(
      both.out,
      "segment 0 torch: %x_lgamma=aten::conj_physical %mul=aten::mul %y_lgamma=aten::conj_physical "
      "%div=aten::div %div_lgamma=aten::conj_physical\n"
      "segment 1 engine: %add=aten::add %" +
          names.list + "=prim::ListConstruct %" + names.cat + "=aten::cat\n");
}

TEST(KilnOptPartition, RequireFullCompilationNamesEveryUnsupportedNode) {
  auto r = kiln_opt({unsupported_ir(), "--partition", "--require-full-compilation"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  // One line, naming each of the three lgamma nodes and why.
  EXPECT_EQ(count_of(r.err, "\n"), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("kiln-opt: error: require_full_compilation is set, but 3 node(s) cannot "
                        "run in the engine:",
                        0),
            0u)
      << r.err;
  EXPECT_EQ(count_of(r.err, "[no converter: no converter for aten::conj_physical]"), 3u) << r.err;
  EXPECT_NE(r.err.find("aten::conj_physical(%div)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("aten::mul"), std::string::npos) << r.err;
  // A forced op is not compiled either, and says so.
  auto forced = kiln_opt({unsupported_ir(), "--partition", "--require-full-compilation",
                          "--torch-executed-op", "aten::mul"});
  EXPECT_EQ(forced.exit_code, 2);
  EXPECT_NE(forced.err.find("4 node(s)"), std::string::npos) << forced.err;
  EXPECT_NE(forced.err.find("[forced op: aten::mul.Tensor is in torch_executed_ops]"),
            std::string::npos)
      << forced.err;
}

TEST(KilnOptPartition, GlobalStrategyMergesWhatDependencyAwareKeepsApart) {
  // The second lgamma does not depend on the relu, so the global strategy joins the lgammas.
  const std::string path = testing::write_temp_file("two_lgammas.ir", R"IR(
graph(%x : Tensor, %y : Tensor):
  %t1 : Tensor = aten::conj_physical(%x)
  %e1 : Tensor = aten::relu(%t1)
  %t2 : Tensor = aten::conj_physical(%y)
  return (%e1, %t2)
)IR");
  auto aware = kiln_opt({path, "--partition", "--min-block-size", "1"});
  ASSERT_EQ(aware.exit_code, 0) << aware.err;
  EXPECT_EQ(aware.out,
            "segment 0 torch: %t1=aten::conj_physical\n"
            "segment 1 engine: %e1=aten::relu\n"
            "segment 2 torch: %t2=aten::conj_physical\n");
  auto named =
      kiln_opt({path, "--partition", "--min-block-size", "1", "--strategy", "dependency-aware"});
  EXPECT_EQ(named.out, aware.out);
  auto global = kiln_opt({path, "--partition", "--min-block-size", "1", "--strategy", "global"});
  ASSERT_EQ(global.exit_code, 0) << global.err;
  EXPECT_EQ(global.out,
            "segment 0 torch: %t1=aten::conj_physical %t2=aten::conj_physical\n"
            "segment 1 engine: %e1=aten::relu\n");
}

TEST(KilnOptPartition, SupportReportOfLgamma) {
  auto r = kiln_opt({unsupported_ir(), "--support"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Default min_block_size 3: the one-op [ListConstruct, cat] segment falls back too.
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "3/8 ops supported by the engine");
  EXPECT_NE(r.out.find("\n  aten::conj_physical: 0/3\n    3x no converter: no converter for "
                       "aten::conj_physical\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\n  aten::cat: 0/1\n    1x below min_block_size: its engine segment has "
                       "1 op(s), fewer than min_block_size 3\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\n  aten::add.Tensor: 1/1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  aten::mul.Tensor: 1/1\n"), std::string::npos) << r.out;
  EXPECT_LT(r.out.find("aten::conj_physical"), r.out.find("aten::add.Tensor")) << r.out;

  // With min_block_size 1 only the lgammas stay behind; --partition prints the segments first.
  auto both = kiln_opt({unsupported_ir(), "--partition", "--support", "--min-block-size", "1"});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  EXPECT_EQ(both.out.rfind("segment 0 engine: ", 0), 0u) << both.out;
  EXPECT_NE(both.out.find("\n5/8 ops supported by the engine\n"), std::string::npos) << both.out;
}

TEST(KilnOptPartition, SupportJsonParsesWithTheCounts) {
  const std::string json_path = testing::write_temp_file("lgamma_support.json", "");
  // min_block_size 2 keeps [add, div] in the engine and sends the one-op [list, cat] to torch.
  auto r = kiln_opt({unsupported_ir(), "--support-json", json_path, "--torch-executed-op",
                     "aten::mul", "--min-block-size", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Without --partition or --support, the text report still goes to stdout.
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "2/8 ops supported by the engine");
  const nlohmann::json report = nlohmann::json::parse(read_text(json_path));
  EXPECT_EQ(report["supported"], 2);
  EXPECT_EQ(report["total"], 8);
  EXPECT_EQ(report["ops"].size(), 6u) << report.dump();
  const nlohmann::json& lgamma = report["ops"]["aten::conj_physical"];
  EXPECT_EQ(lgamma["supported"], 0);
  EXPECT_EQ(lgamma["total"], 3);
  EXPECT_EQ(lgamma["reasons"]["no converter: no converter for aten::conj_physical"], 3);
  EXPECT_EQ(report["ops"]["aten::mul.Tensor"]["reasons"]
                  ["forced op: aten::mul.Tensor is in torch_executed_ops"],
            1);
  EXPECT_EQ(report["ops"]["aten::div.Tensor"]["supported"], 1);
  EXPECT_EQ(report["ops"]["prim::ListConstruct"]["supported"], 0);
}

TEST(KilnOptPartition, SavedResnet18IsOneEngineSegment) {
  // --partition lowers a saved module first (freezing inlines its submodules' methods).
  auto r = kiln_opt({std::string(KILN_TEST_MODELS_DIR) + "/resnet18.ts", "--partition"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("segment 0 engine: ", 0), 0u) << r.out;
  EXPECT_EQ(count_of(r.out, "\n"), 1u) << r.out;
  EXPECT_EQ(count_of(r.out, "=aten::_convolution") + count_of(r.out, "=aten::conv2d"), 20u)
      << r.out;
  EXPECT_EQ(count_of(r.out, "=aten::linear"), 1u) << r.out;
  EXPECT_EQ(r.out.find("prim::CallMethod"), std::string::npos) << r.out;

  auto support = kiln_opt({std::string(KILN_TEST_MODELS_DIR) + "/resnet18.ts", "--support"});
  ASSERT_EQ(support.exit_code, 0) << support.err;
  const std::string first = support.out.substr(0, support.out.find(' '));
  const std::string supported = first.substr(0, first.find('/'));
  EXPECT_EQ(supported, first.substr(first.find('/') + 1)) << support.out;
}

TEST(KilnOptPartition, TorchExecutedModuleKeepsResnetBlocksInTorch) {
  const std::string resnet = std::string(KILN_TEST_MODELS_DIR) + "/resnet18.ts";
  auto r = kiln_opt({resnet, "--partition", "--torch-executed-module", "BasicBlock"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The stem and the head stay in the engine; the eight blocks between them run in PyTorch.
  EXPECT_EQ(count_of(r.out, "\n"), 3u) << r.out;
  EXPECT_EQ(r.out.rfind("segment 0 engine: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("=aten::max_pool2d\nsegment 1 torch: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nsegment 2 engine: %"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("=aten::linear\n"), std::string::npos) << r.out;

  auto support = kiln_opt({resnet, "--support", "--torch-executed-module", "BasicBlock"});
  ASSERT_EQ(support.exit_code, 0) << support.err;
  EXPECT_EQ(support.out.substr(0, support.out.find('\n')), "7/69 ops supported by the engine");
  const std::string conv_line = support.out.find("aten::conv2d") != std::string::npos
                                    ? "  aten::conv2d: 1/20\n"
                                    : "  aten::_convolution: 1/20\n";
  EXPECT_NE(support.out.find(conv_line +
                             "    19x forced module: inside a module of torch_executed_modules "
                             "(BasicBlock)\n"),
            std::string::npos)
      << support.out;
}

TEST(KilnOptPartition, BadPartitioningFlagsNameTheFlagAndExit2) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--min-block-size", "0"}, "--min-block-size"},
      {{"--min-block-size", "abc"}, "--min-block-size"},
      {{"--min-block-size", "-2"}, "--min-block-size"},
      {{"--strategy", "greedy"}, "--strategy"},
      {{"--torch-executed-op", "mul"}, "--torch-executed-op"},
      {{"--torch-executed-op", "aten::mull"}, "no operator is named `aten::mull`"},
      {{"--torch-executed-op", "aten::mul.Tensr"}, "`aten::mul` has no overload `Tensr`"},
  };
  for (const auto& [flags, expected] : cases) {
    std::vector<std::string> args = {unsupported_ir(), "--partition"};
    args.insert(args.end(), flags.begin(), flags.end());
    auto r = kiln_opt(args);
    EXPECT_EQ(r.exit_code, 2) << flags[0] << ' ' << flags[1];
    EXPECT_EQ(r.out, "") << flags[0] << ' ' << flags[1];
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace kiln
