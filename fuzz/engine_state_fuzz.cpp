// Fuzzes the kiln.Engine state that a compiled module carries (EngineHolder::from_state, what
// torch.jit.load calls through __setstate__) and, when it loads, executing it.
//
// Input layout (seeds from make_corpus): flags byte, then NUL-terminated device, name, input
// names and output names, then the plan bytes (checksum restored, as in plan_fuzz). Flags: bit 0
// stores a wrong ABI version, bit 1 a plan tensor of the wrong dtype, bit 2 a 2-D plan tensor.
#include <ATen/ATen.h>

#include <cstring>
#include <string>

#include "fuzz_common.h"
#include "runtime/engine_class.h"
#include "util/errors.h"
#include "util/hash.h"

namespace {

std::string take_cstring(const uint8_t*& p, const uint8_t* end) {
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(p, 0, end - p));
  const uint8_t* stop = nul ? nul : end;
  std::string s(reinterpret_cast<const char*>(p), stop - p);
  p = nul ? nul + 1 : end;
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  const uint8_t* p = data + 1;
  const uint8_t* end = data + size;
  const std::string device = take_cstring(p, end);
  const std::string name = take_cstring(p, end);
  const std::string inputs = take_cstring(p, end);
  const std::string outputs = take_cstring(p, end);
  std::vector<uint8_t> bytes(p, end);
  if (bytes.size() >= 16) {
    const uint64_t h = hash_bytes(bytes.data(), bytes.size() - 8);
    std::memcpy(bytes.data() + bytes.size() - 8, &h, 8);
  }
  const int64_t n = static_cast<int64_t>(bytes.size());
  at::Tensor plan =
      (flags & 4) && n % 2 == 0 ? at::empty({2, n / 2}, at::kByte) : at::empty({n}, at::kByte);
  if (n > 0) std::memcpy(plan.data_ptr(), bytes.data(), bytes.size());
  if (flags & 2) plan = plan.to(at::kChar);
  const int64_t abi =
      (flags & 1) ? runtime::kEngineAbiVersion + 1 + flags : runtime::kEngineAbiVersion;

  c10::intrusive_ptr<runtime::EngineHolder> holder;
  try {
    holder = runtime::EngineHolder::from_state({abi, name, device, plan, inputs, outputs});
  } catch (const Error& e) {
    fuzz::rejected(e);
    return 0;
  }
  // Bound the work as plan_fuzz does: a scratch context (not owning the engine) resolves the
  // shapes first, then the holder runs the same inputs the way execute_engine would.
  const std::shared_ptr<const engine::Engine> view(std::shared_ptr<void>(), &holder->engine());
  std::vector<engine::HostTensor> host;
  if (!fuzz::make_small_inputs(*view, host)) return 0;
  static const at::ScalarType kTypes[] = {at::kFloat, at::kHalf, at::kBFloat16, at::kLong,
                                          at::kInt,   at::kChar, at::kByte,     at::kBool};
  std::vector<at::Tensor> args;
  try {
    engine::ExecutionContext ctx(view);
    for (size_t i = 0; i < host.size(); ++i) {
      ctx.set_input_shape(i, host[i].shape());
      args.push_back(at::ones(host[i].shape(), kTypes[static_cast<int>(host[i].dtype())]));
    }
    for (size_t i = 0; i < view->num_outputs(); ++i) {
      for (int64_t d : ctx.output_shape(i)) {
        if (d < 0 || d > fuzz::kMaxRunElements) return 0;
      }
      if (engine::volume(ctx.output_shape(i)) > fuzz::kMaxRunElements) return 0;
    }
    if (ctx.activation_bytes() > fuzz::kMaxRunBytes) return 0;
    const auto outputs = holder->execute(args);
    if (outputs.size() != view->num_outputs()) __builtin_trap();
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
