// Converter test helpers.
#include "conversion/converter_testing.h"

#include <cstring>

#include "conversion/dtypes.h"
#include "engine/builder.h"
#include "harness/ir_testing.h"

namespace kiln::conversion::testing {

engine::HostTensor to_host(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  engine::HostTensor h(to_engine_dtype(c.scalar_type(), "test input"), c.sizes().vec());
  if (h.nbytes()) std::memcpy(h.data(), c.data_ptr(), h.nbytes());
  return h;
}

at::Tensor to_torch(const engine::HostTensor& t) {
  at::Tensor out = at::empty(t.shape(), at::TensorOptions().dtype(to_scalar_type(t.dtype())));
  if (t.nbytes()) std::memcpy(out.data_ptr(), t.data(), t.nbytes());
  return out;
}

std::vector<at::Tensor> run_converted(const std::string& ir,
                                      const std::vector<at::Tensor>& inputs) {
  auto graph = kiln::testing::parse(ir);
  std::vector<InputSpec> specs;
  std::vector<engine::HostTensor> host;
  for (const auto& t : inputs) {
    specs.push_back(InputSpec::fixed(to_engine_dtype(t.scalar_type(), "input"), t.sizes().vec()));
    host.push_back(to_host(t));
  }
  ConvertedSegment seg = convert_graph(*graph, specs);
  engine::Plan plan = engine::build(seg.network, engine::BuilderConfig{});
  engine::ExecutionContext ctx(std::make_shared<const engine::Engine>(plan.network));
  std::vector<at::Tensor> outs;
  for (const auto& h : ctx.run(host)) outs.push_back(to_torch(h));
  return outs;
}

namespace {

ConvertedSegment convert_dynamic_batch(const std::string& ir, const at::Tensor& x) {
  auto g = kiln::testing::parse(ir);
  engine::Shape min = x.sizes().vec(), max = min;
  min[0] = 1;
  max[0] = 16;
  const InputSpec spec{to_engine_dtype(x.scalar_type(), "input"), min, x.sizes().vec(), max};
  return convert_graph(*g, {spec});
}

}  // namespace

at::Tensor run_dynamic_batch(const std::string& ir, const at::Tensor& x) {
  ConvertedSegment seg = convert_dynamic_batch(ir, x);
  engine::Plan plan = engine::build(seg.network, engine::BuilderConfig{});
  engine::ExecutionContext ctx(std::make_shared<const engine::Engine>(plan.network));
  return to_torch(ctx.run({to_host(x)}).at(0));
}

engine::Shape built_shape(const std::string& ir, const at::Tensor& x) {
  ConvertedSegment seg = convert_dynamic_batch(ir, x);
  return seg.network.tensor(seg.network.outputs().at(0)).shape;
}

::testing::AssertionResult matches_torch(const std::string& ir,
                                         const std::vector<at::Tensor>& inputs, double rtol,
                                         double atol) {
  auto graph = kiln::testing::parse(ir);
  std::vector<torch::jit::IValue> args(inputs.begin(), inputs.end());
  const auto expected = kiln::testing::run_graph(*graph, args);
  std::vector<at::Tensor> actual;
  try {
    actual = run_converted(ir, inputs);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "conversion failed: " << e.what();
  }
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << actual.size() << " outputs, torch gives " << expected.size();
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    const at::Tensor& b = expected[i].toTensor();
    const at::Tensor& a = actual[i];
    if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) {
      return ::testing::AssertionFailure()
             << "output " << i << ": got " << a.scalar_type() << a.sizes() << ", torch gives "
             << b.scalar_type() << b.sizes();
    }
    if (b.numel() == 0) continue;
    const at::Tensor ad = a.to(at::kDouble), bd = b.to(at::kDouble);
    if (!at::equal(ad.isnan(), bd.isnan())) {
      return ::testing::AssertionFailure() << "output " << i << ": NaNs at different places";
    }
    // Infinities must match exactly; NaNs are compared by position above.
    const at::Tensor finite = bd.isfinite();
    if (!at::equal(ad.isinf(), bd.isinf()) ||
        !at::equal(ad.masked_select(bd.isinf()), bd.masked_select(bd.isinf()))) {
      return ::testing::AssertionFailure() << "output " << i << ": infinities differ";
    }
    const at::Tensor fa = ad.masked_select(finite), fb = bd.masked_select(finite);
    if (fb.numel() == 0) continue;
    const double err = (fa - fb).abs().max().item<double>();
    const double bound = rtol * fb.abs().max().item<double>() + atol;
    if (!(err <= bound)) {
      return ::testing::AssertionFailure()
             << "output " << i << ": max|a-b| = " << err << " > " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::conversion::testing
