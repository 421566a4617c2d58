// Test helpers: IR parsing, FileCheck, interpreter runs and value comparison.
#include "harness/ir_testing.h"

#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <sstream>

#include "ir/graph_io.h"
#include "ir/graph_utils.h"
#include "util/errors.h"

namespace kiln::testing {

GraphPtr parse(const std::string& ir) {
  try {
    return ir::parse_graph(ir, "<test ir>");
  } catch (const Error& e) {
    ADD_FAILURE() << "IR did not parse: " << e.what() << "\n" << ir;
    return std::make_shared<torch::jit::Graph>();
  }
}

::testing::AssertionResult file_check(const std::string& checks, const torch::jit::Graph& graph) {
  // torch's FileCheck reads directives written "# CHECK: ..."; tests write "CHECK: ...".
  std::istringstream in(checks);
  std::string directives;
  for (std::string line; std::getline(in, line);) {
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    directives += (line.compare(start, 5, "CHECK") == 0 ? "# " : "") + line.substr(start) + "\n";
  }
  try {
    torch::jit::testing::FileCheck().run(directives, graph);
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    std::ostringstream os;
    os << graph;
    return ::testing::AssertionFailure() << "FileCheck failed:\n"
                                         << e.what() << "\ngraph:\n"
                                         << os.str();
  }
}

std::vector<torch::jit::IValue> random_inputs(const std::vector<std::vector<int64_t>>& shapes,
                                              uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::jit::IValue> inputs;
  for (const auto& shape : shapes) inputs.emplace_back(torch::randn(shape));
  return inputs;
}

std::vector<torch::jit::IValue> run_graph(const torch::jit::Graph& graph,
                                          const std::vector<torch::jit::IValue>& inputs) {
  torch::jit::Code code(ir::copy_graph(graph), "kiln_test");
  torch::jit::InterpreterState state(code);
  torch::jit::Stack stack(inputs.begin(), inputs.end());
  state.run(stack);
  return std::vector<torch::jit::IValue>(stack.begin(), stack.end());
}

namespace {

::testing::AssertionResult compare(const torch::jit::IValue& a, const torch::jit::IValue& b,
                                   double rtol, double atol, const std::string& where) {
  if (a.isTensor() && b.isTensor()) {
    const at::Tensor& x = a.toTensor();
    const at::Tensor& y = b.toTensor();
    if (x.sizes() != y.sizes() || x.scalar_type() != y.scalar_type()) {
      return ::testing::AssertionFailure() << where << ": got " << x.scalar_type() << x.sizes()
                                           << ", expected " << y.scalar_type() << y.sizes();
    }
    if (x.numel() == 0) return ::testing::AssertionSuccess();
    if (!x.is_floating_point()) {
      if (at::equal(x, y)) return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure() << where << ": integer/bool tensors differ";
    }
    const at::Tensor xd = x.to(at::kDouble), yd = y.to(at::kDouble);
    // Equal values (infinities included) and NaN where the expected value is NaN are close.
    const at::Tensor same = xd.eq(yd).logical_or(xd.isnan().logical_and(yd.isnan()));
    const at::Tensor excess =
        ((xd - yd).abs() - (atol + rtol * yd.abs())).masked_fill(same, 0).nan_to_num(1.0);
    if (excess.max().item<double>() <= 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << where << ": max |a-b| = " << (xd - yd).abs().max().item<double>() << " exceeds atol "
           << atol << " + rtol " << rtol << " * |b| (max |b| = " << yd.abs().max().item<double>()
           << ")";
  }
  if ((a.isTuple() && b.isTuple()) || (a.isList() && b.isList())) {
    const auto xs = a.isTuple() ? a.toTupleRef().elements().vec() : a.toListRef().vec();
    const auto ys = b.isTuple() ? b.toTupleRef().elements().vec() : b.toListRef().vec();
    if (xs.size() != ys.size()) {
      return ::testing::AssertionFailure()
             << where << ": " << xs.size() << " elements, expected " << ys.size();
    }
    for (size_t i = 0; i < xs.size(); ++i) {
      auto r = compare(xs[i], ys[i], rtol, atol, where + "[" + std::to_string(i) + "]");
      if (!r) return r;
    }
    return ::testing::AssertionSuccess();
  }
  if (a == b) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << where << ": " << a << " != " << b;
}

}  // namespace

::testing::AssertionResult all_close(const torch::jit::IValue& actual,
                                     const torch::jit::IValue& expected, double rtol, double atol) {
  return compare(actual, expected, rtol, atol, "value");
}

::testing::AssertionResult same_values(const torch::jit::Graph& before,
                                       const torch::jit::Graph& after,
                                       const std::vector<torch::jit::IValue>& inputs, double rtol,
                                       double atol) {
  const auto expected = run_graph(before, inputs);
  const auto actual = run_graph(after, inputs);
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure()
           << "graph after gives " << actual.size() << " outputs, before gave " << expected.size();
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    auto r = compare(actual[i], expected[i], rtol, atol, "output " + std::to_string(i));
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::testing
