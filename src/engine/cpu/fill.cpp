// CPU kernels of the fill family: shape and fill. Constants need no kernel: the runtime points
// their outputs at the weights.
#include <cmath>
#include <cstring>

#include "engine/cpu/convert.h"

namespace kiln::engine::cpu {
namespace {

void shape_kernel(KernelArgs& args) {
  const Shape& s = args.inputs[0].shape;
  int64_t* out = args.outputs[0].as<int64_t>();
  for (size_t d = 0; d < s.size(); ++d) out[d] = s[d];
}

void fill_kernel(KernelArgs& args) {
  const auto& p = std::get<FillParams>(args.layer.params);
  const TensorView& out = args.outputs[0];
  const int64_t n = out.numel();
  if (p.mode == FillMode::kConstant) {
    if (n == 0) return;
    store_as<double>(out.dtype, out.data, 0, p.value);
    const size_t es = dtype_size(out.dtype);
    uint8_t* dst = static_cast<uint8_t*>(out.data);
#pragma omp parallel for if (n > 256 * 1024)
    for (int64_t i = 1; i < n; ++i) std::memcpy(dst + static_cast<size_t>(i) * es, dst, es);
    return;
  }
  // Integer ranges with integral start and step stay exact beyond 2^53. Shape inference has
  // checked that start, delta and the last value fit the dtype (and so int64); the sum is taken
  // unsigned so that rounding in that check cannot make it undefined.
  constexpr double k2to63 = 9223372036854775808.0;
  const bool exact_int = is_integer(out.dtype) && std::trunc(p.start) == p.start &&
                         std::trunc(p.delta) == p.delta && std::abs(p.start) < k2to63 &&
                         std::abs(p.delta) < k2to63;
  const uint64_t start = exact_int ? static_cast<uint64_t>(static_cast<int64_t>(p.start)) : 0;
  const uint64_t delta = exact_int ? static_cast<uint64_t>(static_cast<int64_t>(p.delta)) : 0;
#pragma omp parallel for if (n > 256 * 1024)
  for (int64_t i = 0; i < n; ++i) {
    if (exact_int) {
      const uint64_t v = start + static_cast<uint64_t>(i) * delta;
      store_as<int64_t>(out.dtype, out.data, i, static_cast<int64_t>(v));
    } else {
      store_as<double>(out.dtype, out.data, i, p.start + static_cast<double>(i) * p.delta);
    }
  }
}

}  // namespace

void register_fill(KernelTable& t) {
  t.set<ShapeParams>(shape_kernel);
  t.set<FillParams>(fill_kernel);
}

}  // namespace kiln::engine::cpu
