// The ATen frontend: torch.export programs (.pt2, both export's default ATen graph and core ATen
// after run_decompositions) compile with the input shapes their export gives, into as few engines
// as the TorchScript path, and match the model at every batch the export allows; bad archives
// are refused with errors that name the problem.
#include <gtest/gtest.h>

#include <algorithm>

#include "compiler/compiler_testing.h"
#include "harness/test_models.h"
#include "kiln/kiln.h"
#include "kiln_test_paths.h"
#include "util/errors.h"
#include "util/logging.h"

namespace kiln {
namespace {

std::string model_path(const std::string& file) {
  return std::string(KILN_TEST_MODELS_DIR) + "/" + file;
}

struct Program {
  std::string name;  // the TorchScript twin NAME.ts is the reference
  std::string form;  // "" (export's default graph) or ".core" (core ATen)
};

void PrintTo(const Program& p, std::ostream* os) {
  *os << p.name << p.form;
}

class ExportedPrograms : public ::testing::TestWithParam<Program> {};

TEST_P(ExportedPrograms, CompileIntoOneEngineAndMatchAtEveryBatch) {
  const Program& p = GetParam();
  const ExportedModule exported = load_exported_program(model_path(p.name + p.form + ".pt2"));
  ASSERT_EQ(exported.inputs.size(), 1u);
  const ExportedInput& in = exported.inputs[0];
  EXPECT_EQ(exported.schema_version.substr(0, 2), "8.");
  // The batch is a symbol of range 1..4 (an example of 2), the other dims static.
  EXPECT_FALSE(in.symbols[0].empty());
  EXPECT_EQ(in.min[0], 1);
  EXPECT_EQ(in.opt[0], 2);
  EXPECT_EQ(in.max[0], 4);
  for (size_t d = 1; d < in.symbols.size(); ++d) {
    EXPECT_TRUE(in.symbols[d].empty());
    EXPECT_EQ(in.min[d], in.max[d]);
  }
  CompileSpec spec;
  spec.inputs = exported.specs();
  CompileReport report;
  torch::jit::Module compiled = compile(exported.module, spec, &report);
  EXPECT_EQ(testing::count_segments(report, "engine"), 1u) << report.summary();
  EXPECT_EQ(report.torch_ops, 0u) << report.summary();

  testing::TestModel reference = testing::load_test_model(p.name);
  reference.module.eval();
  torch::NoGradGuard no_grad;
  for (int64_t batch : {1, 2, 4}) {
    std::vector<int64_t> shape = in.opt;
    shape[0] = batch;
    torch::manual_seed(static_cast<uint64_t>(batch));  // inputs independent of what compile draws
    const at::Tensor x =
        in.dtype == DType::kI64 ? at::randint(0, 100, shape, at::kLong) : at::randn(shape);
    EXPECT_TRUE(testing::matches_model_reference(compiled.forward({x}), reference.module, {x}))
        << p.name << p.form << " at batch " << batch;
  }
  // Outside the export's range: the engine's profile refuses it with the shapes.
  std::vector<int64_t> five = in.opt;
  five[0] = 5;
  EXPECT_ANY_THROW(
      compiled.forward({at::zeros(five, in.dtype == DType::kI64 ? at::kLong : at::kFloat)}));
}

std::vector<Program> programs() {
  std::vector<Program> out;
  for (const char* name :
       {"resnet18", "mobilenet_v2", "zoo_resnet50", "zoo_mobilenet_v3_small", "zoo_efficientnet_b0",
        "zoo_regnet_y_400mf", "zoo_densenet", "zoo_squeezenet1_1", "zoo_shufflenet_v2",
        "zoo_mnasnet", "zoo_googlenet", "zoo_convnext"}) {
    out.push_back({name, ""});
    out.push_back({name, ".core"});  // zoo_convnext's: adaptive_avg_pool2d's as_strided
  }
  // Sizes known only at run time: vit_tiny expands its class token to the batch; core ATen's
  // matmuls expand to [batch * heads, ...]; zoo_swin's mask is built by filling slices.
  for (const char* name : {"vit_tiny", "text_encoder", "zoo_swin"}) {
    out.push_back({name, ""});
    out.push_back({name, ".core"});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, ExportedPrograms, ::testing::ValuesIn(programs()),
                         [](const ::testing::TestParamInfo<Program>& info) {
                           return info.param.name + (info.param.form.empty() ? "" : "_core");
                         });

// A program split between engines and PyTorch (an op forced to PyTorch in every block) needs
// the shapes of what PyTorch computes for the engines after it: the sizes the export recorded for
// those values, in its symbols, give them at min, opt and max, and nothing runs (in C++, where
// libtorch has no meta kernels for most of these ops, this used to run the model on generated
// data). vit_tiny's sizes include products of the batch symbol ([B * 4, ...] in core ATen).
TEST(ExportedProgram, SplitProgramsTakeTheirShapesFromTheExport) {
  const LogLevel saved = log_level();
  std::vector<std::string> lines;
  set_log_level(LogLevel::kDebug);
  set_log_sink([&](LogLevel, const std::string& m) { lines.push_back(m); });
  struct Case {
    std::string name, form, forced;
  };
  for (const Case& c : std::vector<Case>{{"resnet18", "", "aten::max_pool2d"},
                                         {"vit_tiny", "", "aten::gelu"},
                                         {"vit_tiny", ".core", "aten::gelu"}}) {
    SCOPED_TRACE(c.name + c.form);
    const ExportedModule exported = load_exported_program(model_path(c.name + c.form + ".pt2"));
    CompileSpec spec;
    spec.inputs = exported.specs();
    spec.torch_executed_ops = {c.forced};
    CompileReport report;
    lines.clear();
    torch::jit::Module compiled = compile(exported.module, spec, &report);
    EXPECT_GE(testing::count_segments(report, "engine"), 1u) << report.summary();
    EXPECT_GE(report.torch_ops, 1u) << report.summary();
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
      return l.find("the export's recorded sizes; nothing runs") != std::string::npos;
    }));
    testing::TestModel reference = testing::load_test_model(c.name);
    reference.module.eval();
    torch::NoGradGuard no_grad;
    const auto matches = [&](torch::jit::Module& m) {
      for (int64_t batch : {1, 3, 4}) {
        std::vector<int64_t> shape = exported.inputs[0].opt;
        shape[0] = batch;
        const at::Tensor x = at::randn(shape);
        EXPECT_TRUE(testing::matches_model_reference(m.forward({x}), reference.module, {x}))
            << "batch " << batch;
      }
    };
    matches(compiled);
    // Inputs given by hand (no export symbols) may not be what the recorded sizes assume: they
    // are not taken, and shape analysis runs.
    for (Input& in : spec.inputs) in.dim_symbols.clear();
    lines.clear();
    compiled = compile(exported.module, spec, &report);
    EXPECT_FALSE(std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
      return l.find("nothing runs") != std::string::npos;
    }));
    matches(compiled);
  }
  set_log_sink(nullptr);
  set_log_level(saved);
}

TEST(ExportedProgram, BadArchivesNameTheProblem) {
  struct Bad {
    std::string file;
    ErrorKind kind;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {"bad_truncated.pt2", ErrorKind::kCorruptInput, "not a readable .pt2 archive"},
      {"bad_format.pt2", ErrorKind::kUnsupported, "archive format `pt3`"},
      {"bad_schema.pt2", ErrorKind::kUnsupported, "export schema version 99."},
      {"bad_op.pt2", ErrorKind::kUnsupported, "`aten::kiln_no_such_op` is not an operator"},
      {"bad_weights.pt2", ErrorKind::kCorruptInput, "`conv1.weight`: 8 bytes of storage"},
      {"bad_mutation.pt2", ErrorKind::kUnsupported, "writes buffer `calls` in place"},
      {"bad_autocast.pt2", ErrorKind::kUnsupported, "an autocast region"},
      {"bad_wrapper.pt2", ErrorKind::kCorruptInput, "1 inputs for 0 operands"},
      {"bad_as_strided.pt2", ErrorKind::kUnsupported,
       "as_strided to a result that is not contiguous (dim 1)"},
      {"no_such_file.pt2", ErrorKind::kInvalidArgument, "cannot be opened"},
  };
  for (const Bad& b : bad) {
    try {
      load_exported_program(model_path(b.file));
      ADD_FAILURE() << b.file << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), b.kind) << b.file << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(b.says), std::string::npos)
          << b.file << ": " << e.what();
    }
  }
  // The wrapper's program itself (a torch.no_grad() block) loads: its subgraph is inlined.
  EXPECT_NO_THROW(load_exported_program(model_path("grad_block.pt2")));
  EXPECT_TRUE(is_exported_program(model_path("resnet18.pt2")));
  EXPECT_FALSE(is_exported_program(model_path("resnet18.ts")));
  EXPECT_FALSE(is_exported_program(model_path("bad_truncated.pt2")));
}

}  // namespace
}  // namespace kiln
