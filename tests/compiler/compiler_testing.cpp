#include "compiler/compiler_testing.h"

#include <torch/serialize.h>

#include <fstream>
#include <iterator>

#include "harness/process.h"
#include "kiln_test_paths.h"

namespace kiln::testing {
namespace {

::testing::AssertionResult compare(const torch::jit::IValue& a, const torch::jit::IValue& b,
                                   const std::string& where) {
  if (b.isTensor()) {
    if (!a.isTensor()) return ::testing::AssertionFailure() << where << ": not a tensor";
    const at::Tensor x = a.toTensor(), y = b.toTensor();
    if (x.sizes() != y.sizes()) {
      return ::testing::AssertionFailure()
             << where << ": shape " << x.sizes() << ", expected " << y.sizes();
    }
    if (x.scalar_type() != y.scalar_type()) {
      return ::testing::AssertionFailure()
             << where << ": dtype " << x.scalar_type() << ", expected " << y.scalar_type();
    }
    if (y.numel() == 0) return ::testing::AssertionSuccess();
    const at::Tensor xd = x.to(at::kDouble), yd = y.to(at::kDouble);
    const double diff = (xd - yd).abs().max().item<double>();
    const double scale = yd.abs().max().item<double>();
    if (!(diff <= 1e-4 * scale + 1e-5)) {
      return ::testing::AssertionFailure()
             << where << ": max|a-b| = " << diff << " > 1e-4 * " << scale << " + 1e-5";
    }
    return ::testing::AssertionSuccess();
  }
  if (b.isTuple() || b.isList()) {
    const auto xs = a.isTuple() ? a.toTupleRef().elements().vec() : a.toListRef().vec();
    const auto ys = b.isTuple() ? b.toTupleRef().elements().vec() : b.toListRef().vec();
    if (xs.size() != ys.size()) return ::testing::AssertionFailure() << where << ": size differs";
    for (size_t i = 0; i < ys.size(); ++i) {
      auto r = compare(xs[i], ys[i], where + "[" + std::to_string(i) + "]");
      if (!r) return r;
    }
    return ::testing::AssertionSuccess();
  }
  if (a == b) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << where << ": " << a << " != " << b;
}

}  // namespace

::testing::AssertionResult closer_to_exact(const torch::jit::IValue& actual,
                                           const torch::jit::IValue& fp32,
                                           const torch::jit::IValue& exact,
                                           const std::string& where) {
  if (exact.isTensor()) {
    if (!actual.isTensor() || !fp32.isTensor() ||
        actual.toTensor().sizes() != exact.toTensor().sizes() ||
        fp32.toTensor().sizes() != exact.toTensor().sizes()) {
      return ::testing::AssertionFailure() << where << ": not comparable with the fp64 answer";
    }
    const at::Tensor e = exact.toTensor().to(at::kDouble);
    const double ours = (actual.toTensor().to(at::kDouble) - e).abs().max().item<double>();
    const double torch = (fp32.toTensor().to(at::kDouble) - e).abs().max().item<double>();
    const double scale = e.abs().max().item<double>();
    if (!(ours <= 2 * torch + 1e-6 && ours <= 1e-3 * scale + 1e-5)) {
      return ::testing::AssertionFailure()
             << where << ": max error against fp64 " << ours << ", PyTorch's fp32 " << torch
             << " (max|exact| = " << scale << ")";
    }
    return ::testing::AssertionSuccess();
  }
  if (exact.isTuple() || exact.isList()) {
    const auto list = [](const torch::jit::IValue& v) {
      return v.isTuple() ? v.toTupleRef().elements().vec() : v.toListRef().vec();
    };
    if (!(actual.isTuple() || actual.isList()) || !(fp32.isTuple() || fp32.isList())) {
      return ::testing::AssertionFailure() << where << ": not a tuple or list";
    }
    const auto xs = list(actual), ts = list(fp32), es = list(exact);
    if (xs.size() != es.size() || ts.size() != es.size()) {
      return ::testing::AssertionFailure() << where << ": size differs";
    }
    for (size_t i = 0; i < es.size(); ++i) {
      auto r = closer_to_exact(xs[i], ts[i], es[i], where + "[" + std::to_string(i) + "]");
      if (!r) return r;
    }
    return ::testing::AssertionSuccess();
  }
  return compare(actual, fp32, where);
}

namespace {

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
}

}  // namespace

::testing::AssertionResult matches_reference(const torch::jit::IValue& actual,
                                             const torch::jit::IValue& expected) {
  return compare(actual, expected, "output");
}

::testing::AssertionResult matches_model_reference(const torch::jit::IValue& actual,
                                                   const torch::jit::Module& module,
                                                   const std::vector<torch::jit::IValue>& inputs) {
  torch::jit::Module m = module;
  const torch::jit::IValue fp32 = m.forward(inputs);
  ::testing::AssertionResult plain = compare(actual, fp32, "output");
  if (plain) return plain;
  torch::jit::IValue exact;
  try {
    torch::jit::Module m64 = module.clone();
    m64.to(at::kDouble);
    std::vector<torch::jit::IValue> in64;
    for (const auto& v : inputs) {
      const bool floating = v.isTensor() && at::isFloatingType(v.toTensor().scalar_type());
      in64.push_back(floating ? torch::jit::IValue(v.toTensor().to(at::kDouble)) : v);
    }
    exact = m64.forward(in64);
  } catch (const std::exception& e) {
    return plain << " (no fp64 answer to weigh it against: " << e.what() << ")";
  }
  ::testing::AssertionResult weighed = closer_to_exact(actual, fp32, exact, "output");
  if (weighed) return weighed;
  return weighed << "; against PyTorch's fp32 answer, " << plain.message();
}

size_t count_segments(const CompileReport& report, const std::string& target) {
  size_t n = 0;
  for (const auto& s : report.segments) n += s.target == target;
  return n;
}

torch::jit::IValue run_in_fresh_cpp_process(torch::jit::Module& module,
                                            const std::vector<torch::jit::IValue>& inputs,
                                            const std::string& tag) {
  const std::string model = write_temp_file(tag + ".ts", "");
  const std::string in = write_temp_file(tag + ".in.pt", "");
  const std::string out = write_temp_file(tag + ".out.pt", "");
  module.save(model);
  write_bytes(in, torch::pickle_save(c10::ivalue::Tuple::create(inputs)));
  auto r = run_process({KILN_RUN_MODULE_PATH, model, in, out});
  if (r.exit_code != 0) throw std::runtime_error("kiln_run_module failed: " + r.err);
  return torch::pickle_load(read_bytes(out));
}

torch::jit::IValue run_in_fresh_python_process(torch::jit::Module& module,
                                               const std::vector<torch::jit::IValue>& inputs,
                                               const std::string& tag) {
  const std::string model = write_temp_file(tag + ".py.ts", "");
  const std::string in = write_temp_file(tag + ".py.in.pt", "");
  const std::string out = write_temp_file(tag + ".py.out.pt", "");
  module.save(model);
  write_bytes(in, torch::pickle_save(c10::ivalue::Tuple::create(inputs)));
  const std::string script = write_temp_file(tag + ".run.py",
                                             "import sys, torch\n"
                                             "torch.ops.load_library(sys.argv[1])\n"
                                             "m = torch.jit.load(sys.argv[2])\n"
                                             "inputs = torch.load(sys.argv[3])\n"
                                             "with torch.no_grad():\n"
                                             "    torch.save(m(*inputs), sys.argv[4])\n");
  auto r = run_process({KILN_PYTHON_PATH, script, KILN_RUNTIME_LIB_PATH, model, in, out});
  if (r.exit_code != 0) throw std::runtime_error("python failed: " + r.err);
  return torch::pickle_load(read_bytes(out));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

torch::jit::Module with_new_weights(const torch::jit::Module& m, uint64_t seed) {
  torch::jit::Module out = m.clone();
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  auto perturb = [](const std::string& name, at::Tensor t) {
    if (!t.is_floating_point() || t.numel() == 0) return;
    t.mul_(at::rand_like(t) * 0.4 + 0.8);
    if (name.find("running_var") == std::string::npos) t.add_(0.001 * at::randn_like(t));
  };
  for (const auto& p : out.named_parameters(/*recurse=*/true)) perturb(p.name, p.value);
  for (const auto& b : out.named_buffers(/*recurse=*/true)) perturb(b.name, b.value);
  return out;
}

}  // namespace kiln::testing
