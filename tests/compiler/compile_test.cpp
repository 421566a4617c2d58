// kiln::compile on the test models that need fallback, the standalone-engine entry points, and
// the errors users see: wrong inputs at run time, unsupported ops under require_full_compilation,
// bad specs, and loading a compiled module without the runtime library.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "compiler/compiler_testing.h"
#include "compiler/spec_json.h"
#include "harness/process.h"
#include "harness/test_models.h"
#include "kiln_test_paths.h"
#include "runtime/engine_class.h"
#include "util/errors.h"

namespace kiln {
namespace {

using testing::error_of;

CompileSpec spec_for(const std::vector<at::Tensor>& examples) {
  CompileSpec spec;
  for (const at::Tensor& t : examples) {
    spec.inputs.push_back(
        Input(t.sizes().vec(), t.scalar_type() == at::kLong ? DType::kI64 : DType::kF32));
  }
  return spec;
}

TEST(Compile, LgammaFallsBackAroundTheUnsupportedOps) {
  testing::TestModel m = testing::load_test_model("lgamma");
  const at::Tensor x = m.args[0].toTensor(), y = m.args[1].toTensor();
  CompileSpec spec = spec_for({x, y});
  spec.min_block_size = 1;
  CompileReport report;
  torch::jit::Module compiled = compile(m.module, spec, &report);
  // Seed 000: add/mul/div in one engine, the lgammas in PyTorch, the cat in another engine.
  ASSERT_EQ(report.segments.size(), 3u) << report.summary();
  EXPECT_EQ(report.segments[0].target, "engine");
  EXPECT_EQ(report.segments[1].target, "torch");
  EXPECT_EQ(report.segments[1].ops, std::vector<std::string>(3, "aten::lgamma"));
  EXPECT_EQ(report.segments[2].target, "engine");
  EXPECT_NE(report.segments[1].fallback_reason.find("no converter"), std::string::npos);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(testing::matches_reference(compiled.forward({x, y}), m.expected));
  const at::Tensor a = at::rand({2, 3}) + 0.5, b = at::rand({2, 3}) + 0.5;
  const auto expected = m.module.forward({a, b});
  EXPECT_TRUE(testing::matches_reference(
      testing::run_in_fresh_cpp_process(compiled, {a, b}, "lgamma"), expected));
  EXPECT_TRUE(testing::matches_reference(
      testing::run_in_fresh_python_process(compiled, {a, b}, "lgamma"), expected));
}

TEST(Compile, BackendSupportMapSendsEachOpToItsBackendOrPyTorch) {
  testing::TestModel m = testing::load_test_model("lgamma");
  const at::Tensor x = m.args[0].toTensor(), y = m.args[1].toTensor();
  CompileSpec spec = spec_for({x, y});
  spec.min_block_size = 1;
  spec.backend_priority = {"cpu"};
  spec.backend_support_map = {{"cpu", {"aten::add", "aten::cat"}}};
  CompileReport report;
  torch::jit::Module compiled = compile(m.module, spec, &report);
  // mul, div (not listed) and the lgammas (no converter) in PyTorch; add joins the cat's engine.
  ASSERT_EQ(report.segments.size(), 2u) << report.summary();
  EXPECT_EQ(report.segments[0].target, "torch");
  EXPECT_EQ(report.segments[0].device, "cpu");
  EXPECT_EQ(report.segments[0].fallback_reason, "no converter x3, not in backend_support_map x2");
  EXPECT_EQ(report.segments[1].target, "engine");
  EXPECT_EQ(report.segments[1].device, "cpu");
  EXPECT_EQ(report.segments[1].ops,
            (std::vector<std::string>{"aten::add", "prim::ListConstruct", "aten::cat"}));
  bool named = false;
  for (const std::string& f : report.fallback) {
    named = named || f == "aten::mul.Tensor: not in backend_support_map (no backend of "
                          "backend_priority (cpu) lists aten::mul.Tensor in backend_support_map)";
  }
  EXPECT_TRUE(named) << report.to_json();
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(testing::matches_reference(compiled.forward({x, y}), m.expected));
}

TEST(Compile, BadBackendsNameWhatIsWrong) {
  testing::TestModel m = testing::load_test_model("lgamma");
  CompileSpec spec = spec_for({m.args[0].toTensor(), m.args[1].toTensor()});
  spec.backend_priority = {"tpu"};
  std::string err = error_of([&] { compile(m.module, spec); });
  EXPECT_NE(err.find("backend_priority: unknown backend `tpu` (kiln's engines are `cuda` and "
                     "`cpu`"),
            std::string::npos)
      << err;
  spec.backend_priority = {"cpu", "cpu"};
  err = error_of([&] { compile(m.module, spec); });
  EXPECT_NE(err.find("`cpu` is listed twice"), std::string::npos) << err;
  spec.backend_priority = {"cpu"};
  spec.backend_support_map = {{"cuda", {"aten::add"}}};
  err = error_of([&] { compile(m.module, spec); });
  EXPECT_NE(err.find("backend_support_map: backend `cuda` is not in backend_priority"),
            std::string::npos)
      << err;
  spec.backend_support_map = {{"cpu", {"add"}}};
  err = error_of([&] { compile(m.module, spec); });
  EXPECT_NE(err.find("`add` of backend `cpu` is not an op name like aten::add"), std::string::npos)
      << err;
  spec.backend_support_map = {{"cpu", {}}};
  err = error_of([&] { compile(m.module, spec); });
  EXPECT_NE(err.find("backend `cpu` lists no op"), std::string::npos) << err;
  if (!runtime::cuda_supported()) {
    spec.backend_support_map.clear();
    spec.backend_priority = {"cuda", "cpu"};
    err = error_of([&] { compile(m.module, spec); });
    EXPECT_NE(err.find("compile: device cuda:0 needs kiln's CUDA backend"), std::string::npos)
        << err;
  }
}

TEST(Compile, ControlFlowKeepsTheBranchAndLoopInPyTorch) {
  testing::TestModel m = testing::load_test_model("control_flow");
  const at::Tensor x = m.args[0].toTensor();
  CompileReport report;
  torch::jit::Module compiled = compile(m.module, spec_for({x}), &report);
  EXPECT_GE(testing::count_segments(report, "engine"), 1u) << report.summary();
  EXPECT_GE(testing::count_segments(report, "torch"), 1u) << report.summary();
  torch::NoGradGuard no_grad;
  // Inputs that take each branch of `if y.mean() > 0.1`.
  for (double shift : {-3.0, 3.0}) {
    const at::Tensor input = at::randn(x.sizes()) + shift;
    EXPECT_TRUE(testing::matches_reference(compiled.forward({input}), m.module.forward({input})))
        << "shift " << shift;
  }
  const at::Tensor input = at::randn(x.sizes());
  const auto expected = m.module.forward({input});
  EXPECT_TRUE(testing::matches_reference(
      testing::run_in_fresh_cpp_process(compiled, {input}, "control_flow"), expected));
  EXPECT_TRUE(testing::matches_reference(
      testing::run_in_fresh_python_process(compiled, {input}, "control_flow"), expected));
}

// Input dims that share a symbol (Input::dim_symbols, as export's specs give them) must be equal
// at every call: the compiled module raises naming both dims and the symbol, and runs when they
// agree; a spec without symbols checks nothing of the kind; the symbols travel in the spec.
TEST(Compile, DimsSharingASymbolMustAgree) {
  torch::jit::Module m("M");
  m.define(R"(
def forward(self, x, y, z):
    return x + torch.sum(y), torch.sum(z, 1)
)");
  CompileSpec spec;
  spec.inputs = {Input({1, 4}, {2, 4}, {8, 4}), Input({1, 3}, {2, 3}, {8, 3}),
                 Input({1, 5}, {2, 5}, {8, 5})};
  torch::jit::Module unguarded = compile(m, spec);
  for (Input& in : spec.inputs) in.dim_symbols = {"s0", ""};
  torch::jit::Module compiled = compile(m, spec);
  const auto call = [](torch::jit::Module& c, int64_t bx, int64_t by, int64_t bz) {
    return c.forward({at::randn({bx, 4}), at::randn({by, 3}), at::randn({bz, 5})});
  };
  const at::Tensor x = at::randn({3, 4}), y = at::randn({3, 3}), z = at::randn({3, 5});
  // (nothing in the model relates the batches: without the symbols, a mismatch runs)
  const auto got = compiled.forward({x, y, z}).toTuple(), want = m.forward({x, y, z}).toTuple();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(
        at::allclose(got->elements()[i].toTensor(), want->elements()[i].toTensor(), 1e-5, 1e-5));
  }
  const std::string y_off = testing::error_of([&] { call(compiled, 3, 2, 3); });
  EXPECT_NE(y_off.find("dim 0 of input `y` must equal dim 0 of input `x` (both are the export's "
                       "size `s0`)"),
            std::string::npos)
      << y_off;
  const std::string z_off = testing::error_of([&] { call(compiled, 3, 3, 4); });
  EXPECT_NE(z_off.find("dim 0 of input `z` must equal dim 0 of input `x`"), std::string::npos)
      << z_off;
  EXPECT_EQ(testing::error_of([&] { call(unguarded, 3, 2, 3); }), "(no error)");
  const CompileSpec back = compiler::spec_from_json(compiler::spec_to_json(spec), "test");
  EXPECT_EQ(back.inputs.at(2).dim_symbols, (std::vector<std::string>{"s0", ""}));
}

// A node its converter accepts and then fails on (an integer average pooling: the validator sees
// no dtypes) runs in PyTorch after a second partition, with the reason in the report; the rest
// still runs in engines. With require_full_compilation it is the error it was.
TEST(Compile, ANodeWhoseConversionFailsRunsInPyTorch) {
  torch::jit::Module m("M");
  m.define(R"(
def forward(self, x):
    a = torch.relu(x) + 1
    b = torch.avg_pool1d(a, [2])
    return torch.neg(b) * 2
)");
  CompileSpec spec;
  spec.inputs = {Input({2, 3, 4}, DType::kI64)};
  spec.min_block_size = 1;
  CompileReport report;
  torch::jit::Module compiled = compile(m, spec, &report);
  EXPECT_EQ(testing::count_segments(report, "engine"), 2u) << report.summary();
  bool named = false;
  for (const std::string& f : report.fallback) {
    named |= f.rfind("aten::avg_pool1d: conversion failed (", 0) == 0 &&
             f.find("pooling of a") != std::string::npos;
  }
  EXPECT_TRUE(named) << report.summary();
  const at::Tensor x = at::randint(-5, 5, {2, 3, 4}, at::kLong);
  EXPECT_TRUE(at::equal(compiled.forward({x}).toTensor(), m.forward({x}).toTensor()));
  spec.require_full_compilation = true;
  EXPECT_NE(error_of([&] { compile(m, spec); }).find("pooling of a"), std::string::npos);
}

// An engine segment that fails on shape analysis's generated inputs (indices computed from an
// integer input, out of range for positive integers and for zeros, in range for the model's real
// inputs) runs in PyTorch instead, with the reason in the report. Shape analysis runs: the engine
// reads values PyTorch computes (the sigmoid), and a run on meta tensors cannot say the size of
// nonzero's result, so the graph runs on generated data. Without the nonzero, the run on meta
// tensors knows every shape and nothing fails; without the sigmoid in PyTorch too, one engine over
// the graph's own inputs takes its shapes from the spec and nothing runs at all.
TEST(Compile, AnEngineSegmentThatFailsOnGeneratedInputsRunsInPyTorch) {
  const auto module = [](const std::string& scale) {
    torch::jit::Module m("M");
    m.register_parameter("w", at::randn({10, 4}), false);
    m.define(R"(
def forward(self, ids, x):
    rows = torch.gather(self.w, 0, (ids * 3 + 10).unsqueeze(1).expand(4, 4))
    return torch.tanh(rows) + torch.sigmoid(x) + )" +
             scale + "\n");
    return m;
  };
  const at::Tensor ids = at::tensor({-3, -1, -2, -3}, at::kLong), x = at::randn({4, 4});
  CompileSpec spec;
  spec.inputs = {Input({4}, DType::kI64), Input({4, 4})};
  spec.min_block_size = 1;
  CompileReport report;
  const auto names_gather = [&] {
    for (const std::string& f : report.fallback) {
      if (f.rfind("aten::gather: failed on generated inputs (shape analysis: segment", 0) == 0) {
        return true;
      }
    }
    return false;
  };
  torch::jit::Module m = module("torch.nonzero(x).size(0)");
  spec.torch_executed_ops = {"aten::sigmoid"};
  torch::jit::Module compiled = compile(m, spec, &report);
  EXPECT_TRUE(names_gather()) << report.summary();
  EXPECT_GE(testing::count_segments(report, "engine"), 1u) << report.summary();
  EXPECT_TRUE(testing::matches_reference(compiled.forward({ids, x}), m.forward({ids, x})));
  // Sizes without data: the gather stays in an engine.
  m = module("2.0");
  for (const auto& forced :
       {std::vector<std::string>{"aten::sigmoid"}, std::vector<std::string>{}}) {
    spec.torch_executed_ops = forced;
    compiled = compile(m, spec, &report);
    EXPECT_FALSE(names_gather()) << report.summary();
    EXPECT_EQ(report.torch_ops, forced.size()) << report.summary();
    EXPECT_TRUE(testing::matches_reference(compiled.forward({ids, x}), m.forward({ids, x})));
  }
}

// A size known only at run time (the dynamic batch) as a number in tensor arithmetic, and a flip
// whose index reads it: one engine, right at every batch.
TEST(Compile, RunTimeSizesAsNumbersInTensorArithmetic) {
  torch::jit::Module m("M");
  m.define(R"(
def forward(self, a):
    return torch.flip(a, [0]) * a.size(0) - a.size(0) // 2
)");
  CompileSpec spec;
  spec.inputs = {Input({1, 4}, {3, 4}, {6, 4})};
  spec.min_block_size = 1;
  CompileReport report;
  torch::jit::Module compiled = compile(m, spec, &report);
  EXPECT_EQ(report.torch_ops, 0u) << report.summary();
  for (int64_t batch : {1, 4, 6}) {
    const at::Tensor a = at::randn({batch, 4});
    EXPECT_TRUE(at::equal(compiled.forward({a}).toTensor(), m.forward({a}).toTensor())) << batch;
  }
}

// Non-tensor values known at compile time (seed 002): a convolution whose groups is the channel
// count of an argument the spec fixes, and a reshape by arithmetic on it, join the engine; with a
// dynamic batch the channel dim is still fixed, and the batch stays a run-time size.
TEST(Compile, SizesTheSpecFixesAreConstantsForTheOpsThatReadThem) {
  torch::jit::Module m("M");
  m.register_parameter("w", at::randn({8, 1, 3, 3}), false);
  m.define(R"(
def forward(self, x):
    g = x.size(1)
    y = torch.conv2d(x, self.w, None, [1, 1], [1, 1], [1, 1], g).relu()
    return y.reshape([x.size(0), g // 2, -1]) * x.dim()
)");
  for (const Input& in :
       {Input({2, 8, 10, 10}), Input({1, 8, 10, 10}, {2, 8, 10, 10}, {4, 8, 10, 10})}) {
    CompileSpec spec;
    spec.inputs = {in};
    CompileReport report;
    torch::jit::Module compiled = compile(m, spec, &report);
    EXPECT_EQ(report.torch_ops, 0u) << report.summary();
    EXPECT_EQ(testing::count_segments(report, "engine"), 1u) << report.summary();
    for (int64_t batch : {in.min_shape[0], in.max_shape[0]}) {
      const at::Tensor x = at::randn({batch, 8, 10, 10});
      EXPECT_TRUE(testing::matches_reference(compiled.forward({x}), m.forward({x}))) << batch;
    }
  }
}

TEST(Compile, WrongInputsAtRunTimeNameExpectedAndActual) {
  testing::TestModel m = testing::load_test_model("resnet18");
  torch::jit::Module compiled = compile(m.module, spec_for({m.args[0].toTensor()}));
  std::string err = error_of([&] { compiled.forward({at::randn({2, 3, 64, 64})}); });
  EXPECT_NE(err.find("execute_engine `engine_0_"), std::string::npos) << err;
  EXPECT_NE(err.find("[2, 3, 64, 64]"), std::string::npos) << err;
  EXPECT_NE(err.find("[1, 3, 64, 64]"), std::string::npos) << err;
  err = error_of([&] { compiled.forward({at::randn({1, 3, 64, 64}, at::kDouble)}); });
  EXPECT_NE(err.find("expected dtype Float, got Double"), std::string::npos) << err;
}

TEST(Compile, RequireFullCompilationListsEveryUnsupportedNode) {
  testing::TestModel m = testing::load_test_model("lgamma");
  CompileSpec spec = spec_for({m.args[0].toTensor(), m.args[1].toTensor()});
  spec.require_full_compilation = true;
  try {
    compile(m.module, spec);
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    const std::string what = e.what();
    size_t count = 0;
    for (size_t p = what.find("aten::lgamma"); p != std::string::npos;
         p = what.find("aten::lgamma", p + 1)) {
      ++count;
    }
    EXPECT_EQ(count, 6u) << what;  // each of the 3 nodes: its text and its reason
  }
}

TEST(Compile, BadSpecsNameWhatIsWrong) {
  testing::TestModel m = testing::load_test_model("resnet18");
  CompileSpec spec;
  std::string err = error_of([&] { compile(m.module, spec); });
  EXPECT_NE(err.find("forward takes 1 argument but the spec gives 0 inputs"), std::string::npos)
      << err;
  spec.inputs = {Input({1, 3, 64, 64}, {1, 3, 64, 64}, {1, 3, 32, 64})};
  err = error_of([&] { compile(m.module, spec); });
  EXPECT_NE(err.find("input 0 dimension 2 needs 0 <= min <= opt <= max"), std::string::npos) << err;
  testing::TestModel tl = testing::load_test_model("tuple_list");
  spec.inputs = {Input({2, 8}), Input({3})};
  err = error_of([&] { compile(tl.module, spec); });
  EXPECT_NE(err.find("kiln compiles modules whose arguments are tensors"), std::string::npos)
      << err;
}

TEST(Compile, MissingRuntimeLibraryNamesIt) {
  testing::TestModel m = testing::load_test_model("resnet18");
  torch::jit::Module compiled = compile(m.module, spec_for({m.args[0].toTensor()}));
  const std::string path = testing::write_temp_file("no_runtime.ts", "");
  compiled.save(path);
  const std::string script =
      testing::write_temp_file("no_runtime.py", "import sys, torch\ntorch.jit.load(sys.argv[1])\n");
  auto r = testing::run_process({KILN_PYTHON_PATH, script, path});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("requires_libkiln_runtime_so"), std::string::npos) << r.err;
}

TEST(Compile, SupportCheckAndStandaloneEngine) {
  testing::TestModel r18 = testing::load_test_model("resnet18");
  std::string report;
  EXPECT_TRUE(check_method_op_support(r18.module, "forward", &report)) << report;
  testing::TestModel lg = testing::load_test_model("lgamma");
  EXPECT_FALSE(check_method_op_support(lg.module, "forward", &report));
  EXPECT_NE(report.find("aten::lgamma"), std::string::npos) << report;

  const at::Tensor x = r18.args[0].toTensor();
  const std::vector<uint8_t> plan = convert_method_to_engine(r18.module, "forward", spec_for({x}));
  torch::jit::Module embedded = embed_engine_in_new_module(plan);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(testing::matches_reference(embedded.forward({x}), r18.module.forward({x})));
  const std::string err =
      testing::error_of([&] { embed_engine_in_new_module(plan, parse_device("cuda:0")); });
  EXPECT_NE(err.find("its plan targets cpu, so it cannot run on cuda:0"), std::string::npos) << err;
  EXPECT_THROW(convert_method_to_engine(lg.module, "forward",
                                        spec_for({lg.args[0].toTensor(), lg.args[1].toTensor()})),
               Unsupported);
}

TEST(Compile, OpCoverageFollowsTheSpecsSettings) {
  // The seed-000 graph: lgamma x3 has no converter; add, mul and cat do.
  testing::TestModel lg = testing::load_test_model("lgamma");
  CompileSpec spec;
  auto ops = nlohmann::json::parse(op_coverage_json(lg.module, spec))["ops"];
  EXPECT_EQ(ops["aten::lgamma"]["supported"], 0) << ops.dump();
  EXPECT_EQ(ops["aten::lgamma"]["total"], 3) << ops.dump();
  EXPECT_EQ(ops["aten::add.Tensor"]["supported"], 1) << ops.dump();
  // A forced op and a backend whose map leaves an op out count as not taken, and min_block_size
  // does not apply (the add alone would be below 3).
  spec.torch_executed_ops = {"aten::mul"};
  spec.backend_priority = {"cpu"};
  spec.backend_support_map = {{"cpu", {"aten::add", "aten::lgamma"}}};
  ops = nlohmann::json::parse(op_coverage_json(lg.module, spec))["ops"];
  EXPECT_EQ(ops["aten::mul.Tensor"]["supported"], 0) << ops.dump();
  EXPECT_EQ(ops["aten::cat"]["supported"], 0) << ops.dump();
  EXPECT_EQ(ops["aten::add.Tensor"]["supported"], 1) << ops.dump();
  spec.backend_priority = {"cpu", "inductor"};
  const std::string err = testing::error_of([&] { op_coverage_json(lg.module, spec); });
  EXPECT_NE(err.find("`inductor` is a backend of the Python package"), std::string::npos) << err;
}

TEST(InputSpec, ParsesShapesRangesDtypesAndDevices) {
  Input in = parse_input_spec("(1,3,224,224)");
  EXPECT_EQ(in.opt_shape, (std::vector<int64_t>{1, 3, 224, 224}));
  EXPECT_TRUE(in.is_static());
  EXPECT_EQ(in.dtype, DType::kF32);
  in = parse_input_spec("[(1,3,64,64);(4,3,64,64);(8,3,64,64)]@f16");
  EXPECT_EQ(in.min_shape[0], 1);
  EXPECT_EQ(in.opt_shape[0], 4);
  EXPECT_EQ(in.max_shape[0], 8);
  EXPECT_EQ(in.dtype, DType::kF16);
  EXPECT_EQ(parse_input_spec("( 2 , 16 )@i64").dtype, DType::kI64);
  EXPECT_EQ(parse_input_spec("(1,3,8,8)@f32%channels_last").format, TensorFormat::kChannelsLast);
  EXPECT_TRUE(parse_input_spec("()").opt_shape.empty());
  EXPECT_EQ(parse_device("cuda:1").index, 1);
  EXPECT_EQ(parse_device("cpu").kind, Device::Kind::kCpu);
  for (const char* bad : {"1,3", "(1,x)", "(1,-3)", "[(1);(2)]", "[(2);(1);(3)]", "(1)@f64",
                          "[(1,2);(1);(1,2)]", "(1)@f32%nchwc", "(99999999999999999999)"}) {
    EXPECT_THROW(parse_input_spec(bad), InvalidArgument) << bad;
  }
  for (const char* bad : {"gpu0", "cuda:", "cuda:x", "cuda:1234"}) {
    EXPECT_THROW(parse_device(bad), InvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace kiln
