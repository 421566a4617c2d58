// Shared by the fuzz targets: running a loaded engine on small deterministic inputs.
#include "fuzz_common.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "util/errors.h"

namespace kiln::fuzz {

namespace {

void fill_ones(engine::HostTensor& t) {
  const int64_t n = t.numel();
  uint8_t* p = static_cast<uint8_t*>(t.data());
  const size_t width = engine::dtype_size(t.dtype());
  engine::HostTensor one = engine::HostTensor(t.dtype(), {});
  switch (t.dtype()) {
    case engine::DataType::kF32:
      *one.as<float>() = 1.f;
      break;
    case engine::DataType::kF16:
      *one.as<uint16_t>() = 0x3c00;
      break;
    case engine::DataType::kBF16:
      *one.as<uint16_t>() = 0x3f80;
      break;
    case engine::DataType::kI64:
      *one.as<int64_t>() = 1;
      break;
    case engine::DataType::kI32:
      *one.as<int32_t>() = 1;
      break;
    default:
      *one.as<uint8_t>() = 1;
      break;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(p + i * width, one.data(), width);
}

}  // namespace

void rejected(const Error& e) {
  static const bool verbose = std::getenv("KILN_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "kiln rejected it: %s\n", e.what());
}

bool make_small_inputs(const engine::Engine& engine, std::vector<engine::HostTensor>& inputs) {
  int64_t total = 0;
  for (size_t i = 0; i < engine.num_inputs(); ++i) {
    const auto id = engine.network().inputs()[i];
    const engine::Shape& shape = engine.network().profile(id).min;
    for (int64_t d : shape) {
      if (d < 0 || d > kMaxRunElements) return false;
    }
    const int64_t n = engine::volume(shape);
    if (n > kMaxRunElements || (total += n) > kMaxRunElements) return false;
    inputs.emplace_back(engine.input(i).dtype, shape);
    fill_ones(inputs.back());
  }
  return true;
}

void run_if_small(const std::shared_ptr<const engine::Engine>& engine) {
  std::vector<engine::HostTensor> inputs;
  if (!make_small_inputs(*engine, inputs)) return;
  try {
    engine::ExecutionContext ctx(engine);
    for (size_t i = 0; i < inputs.size(); ++i) ctx.set_input_shape(i, inputs[i].shape());
    for (size_t i = 0; i < engine->num_outputs(); ++i) {
      const engine::Shape& s = ctx.output_shape(i);
      for (int64_t d : s) {
        if (d < 0 || d > kMaxRunElements) return;
      }
      if (engine::volume(s) > kMaxRunElements) return;
    }
    if (ctx.activation_bytes() > kMaxRunBytes) return;
    const auto outputs = ctx.run(inputs);
    if (outputs.size() != engine->num_outputs()) __builtin_trap();
  } catch (const Error& e) {
    rejected(e);
  }
}

}  // namespace kiln::fuzz
