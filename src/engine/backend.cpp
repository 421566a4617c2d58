// What both backends share: host allocation, host-computed values as bytes, and the choice of
// backend for a target.
#include "engine/backend.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "engine/runtime.h"
#include "engine/scalar_math.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

// Physical memory of this machine; 0 where the system does not say.
size_t physical_memory_bytes() {
  static const size_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  }();
  return bytes;
}

}  // namespace

std::shared_ptr<uint8_t> allocate_host(size_t bytes) {
  // Where the kernel overcommits, malloc grants more than the machine has and the process is
  // killed when the pages are touched; a request past physical memory fails here instead.
  const size_t physical = physical_memory_bytes();
  KILN_CHECK(physical == 0 || bytes <= physical, DeviceError, "out of host memory allocating ",
             bytes, " bytes (the machine has ", physical, ")");
  const size_t size = std::max<size_t>((bytes + 63) / 64 * 64, 64);
  void* p = std::aligned_alloc(64, size);
  KILN_CHECK(p != nullptr, DeviceError, "out of host memory allocating ", bytes, " bytes");
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

std::shared_ptr<EngineBackend> create_engine_backend(const Network& net,
                                                     const EngineTarget& target) {
  if (target.device == "cuda") return cuda::create_engine_backend(net, target);
  KILN_CHECK(target.device == "cpu", InvalidArgument, "engine target `", target.device,
             "` is not cpu or cuda");
  return cpu::create_engine_backend(net);
}

}  // namespace kiln::engine
