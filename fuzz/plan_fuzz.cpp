// Fuzzes the plan loader (engine::deserialize_plan) and, when a plan loads, running it: a corrupt
// plan must be a CorruptInput error, never a crash.
#include <cstring>
#include <vector>

#include "engine/plan.h"
#include "fuzz_common.h"
#include "util/errors.h"
#include "util/hash.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::vector<uint8_t> bytes(data, data + size);
  // Mutations almost never keep the trailing checksum right; restore it so that the fuzzer gets
  // past it into the fields (inputs with a first byte of 0xff keep theirs, to test the check).
  if (size >= 16 && data[0] != 0xff) {
    const uint64_t h = hash_bytes(bytes.data(), size - 8);
    std::memcpy(bytes.data() + size - 8, &h, 8);
  }
  engine::Plan plan;
  try {
    plan = engine::deserialize_plan(bytes.data(), bytes.size());
  } catch (const CorruptInput& e) {
    fuzz::rejected(e);
    return 0;
  }
  if (plan.target.device != "cpu") return 0;
  std::shared_ptr<const engine::Engine> engine;
  try {
    engine = std::make_shared<const engine::Engine>(std::move(plan.network), plan.target);
  } catch (const Error& e) {
    fuzz::rejected(e);
    return 0;
  }
  fuzz::run_if_small(engine);
  return 0;
}
