// The runtime: an engine inside a TorchScript module runs, saves, loads (C++ and Python), and
// rejects bad inputs and corrupt state with clear errors.
#include <gtest/gtest.h>

#include "engine/builder.h"
#include "engine/plan.h"
#include "harness/process.h"
#include "kiln_test_paths.h"
#include "runtime/engine_class.h"
#include "util/errors.h"

namespace kiln::runtime {
namespace {

using namespace engine;

// y = relu(x) * 2 with a dynamic batch.
std::vector<uint8_t> plan_bytes() {
  Network net;
  auto x = net.add_input("x", DataType::kF32, {kDynamic, 3}, Profile{{1, 3}, {2, 3}, {8, 3}});
  auto r = net.add("relu", ActivationParams{ActivationKind::kRelu}, {x});
  auto two = net.add_constant("two", Weights::from_floats({}, {2.f}));
  net.mark_output(net.add("y", ElementwiseParams{BinaryOp::kMul}, {r, two}), "y");
  return serialize_plan(build(net, BuilderConfig{}));
}

// forward(x) = kiln::execute_engine([x], self.engine)[0], built as a graph the way stitching
// builds it (TorchScript source cannot name torch.ops from C++).
torch::jit::Module module_with_engine() {
  using namespace torch::jit;
  Module m("__torch__.KilnTestModule");
  auto holder = c10::make_intrusive<EngineHolder>("segment0", plan_bytes());
  m.register_attribute("engine", c10::getCustomClassType<c10::intrusive_ptr<EngineHolder>>(),
                       c10::IValue(holder));
  auto g = std::make_shared<Graph>();
  Value* self = g->addInput("self")->setType(m.type());
  Value* x = g->addInput("x")->setType(c10::TensorType::get());
  Value* engine = g->insertGetAttr(self, "engine");
  Value* list = g->insertNode(g->createList(c10::TensorType::get(), {x}))->output();
  Node* call = g->insertNode(
      g->create(c10::Symbol::fromQualString("kiln::execute_engine"), {list, engine}, 1));
  call->output()->setType(c10::ListType::ofTensors());
  Value* first = g->insert(aten::__getitem__, {call->output(), g->insertConstant(0)});
  g->registerOutput(first);
  auto fn = m._ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*m.type()->name(), "forward"), g);
  m.type()->addMethod(fn);
  return m;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Runtime, ModuleRunsSavesAndLoadsInCpp) {
  auto m = module_with_engine();
  const auto x = torch::randn({4, 3});
  EXPECT_TRUE(m.forward({x}).toTensor().equal(x.relu() * 2));
  const std::string path = testing::write_temp_file("engine_module.ts", "");
  m.save(path);
  auto loaded = torch::jit::load(path);
  EXPECT_TRUE(loaded.forward({x}).toTensor().equal(x.relu() * 2));
  const auto y = torch::randn({8, 3});
  EXPECT_TRUE(loaded.forward({y}).toTensor().equal(y.relu() * 2));
}

TEST(Runtime, LoadsAndRunsInAFreshPythonProcess) {
  auto m = module_with_engine();
  const std::string path = testing::write_temp_file("engine_module_py.ts", "");
  m.save(path);
  const std::string script =
      testing::write_temp_file("run.py",
                               "import sys, torch\n"
                               "torch.ops.load_library(sys.argv[1])\n"
                               "m = torch.jit.load(sys.argv[2])\n"
                               "x = torch.randn(5, 3)\n"
                               "assert torch.equal(m(x), torch.relu(x) * 2), 'values differ'\n"
                               "print('python ok', m.engine.name())\n");
  auto r = testing::run_process({KILN_PYTHON_PATH, script, KILN_RUNTIME_LIB_PATH, path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "python ok segment0\n");
}

TEST(Runtime, WrongInputsNameExpectedAndActual) {
  auto m = module_with_engine();
  std::string err = error_of([&] { m.forward({torch::randn({4, 5})}); });
  EXPECT_NE(err.find("execute_engine `segment0`: input `x`: shape [4, 5] is outside the profile"),
            std::string::npos)
      << err;
  err = error_of([&] { m.forward({torch::randn({4, 3}).to(torch::kHalf)}); });
  EXPECT_NE(err.find("input `x` expected dtype Float, got Half"), std::string::npos) << err;
  err = error_of([&] { m.forward({torch::randn({9, 3})}); });
  EXPECT_NE(err.find("outside the profile"), std::string::npos) << err;
}

TEST(Runtime, CorruptOrForeignStateIsRejected) {
  auto holder = c10::make_intrusive<EngineHolder>("segment0", plan_bytes());
  auto state = holder->state();
  EXPECT_NO_THROW(EngineHolder::from_state(state));
  auto other_abi = state;
  std::get<0>(other_abi) = kEngineAbiVersion + 1;
  std::string err = error_of([&] { EngineHolder::from_state(other_abi); });
  EXPECT_NE(err.find("ABI version 2, this runtime reads 1"), std::string::npos) << err;
  auto corrupt = state;
  std::get<3>(corrupt) = std::get<3>(state).clone();
  std::get<3>(corrupt)[std::get<3>(state).numel() / 2] += 1;
  err = error_of([&] { EngineHolder::from_state(corrupt); });
  EXPECT_NE(err.find("kiln.Engine `segment0`: plan: checksum mismatch"), std::string::npos) << err;
  auto elsewhere = state;  // a cpu plan whose state claims a GPU
  std::get<2>(elsewhere) = "cuda:0";
  err = error_of([&] { EngineHolder::from_state(elsewhere); });
  EXPECT_NE(err.find("kiln.Engine `segment0`: state says device cuda:0: "), std::string::npos)
      << err;
  EXPECT_NE(err.find("its plan targets cpu, so it cannot run on cuda:0"), std::string::npos) << err;
  EXPECT_THROW(EngineHolder::from_state(elsewhere), CorruptInput);
  auto renamed = state;
  std::get<4>(renamed) = "not_x";
  EXPECT_THROW(EngineHolder::from_state(renamed), CorruptInput);
}

}  // namespace
}  // namespace kiln::runtime
