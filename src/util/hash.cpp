// xxHash XXH3-64, compiled in header-only mode so no library needs linking.
#include "util/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "util/errors.h"

namespace kiln {

Hasher::Hasher() : state_(XXH3_createState()) {
  KILN_CHECK(state_ != nullptr, InternalError, "XXH3_createState failed");
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

Hasher::~Hasher() {
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

Hasher& Hasher::update(const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
  return *this;
}

Hasher& Hasher::update(std::string_view text) {
  update(static_cast<uint64_t>(text.size()));
  return update(text.data(), text.size());
}

uint64_t Hasher::digest() const {
  return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_));
}

std::string Hasher::digest128_hex() const {
  // The 64- and 128-bit digests share XXH3's streaming state (its resets are the same).
  const XXH128_hash_t d = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return hash_hex(d.high64) + hash_hex(d.low64);
}

uint64_t hash_bytes(const void* data, size_t size) {
  return XXH3_64bits(data, size);
}

std::vector<std::vector<Digest128>> chunk_digests(
    const std::vector<std::pair<const void*, size_t>>& regions, size_t chunk) {
  KILN_CHECK(chunk > 0, InternalError, "chunk_digests: a chunk of 0 bytes");
  std::vector<std::vector<Digest128>> out(regions.size());
  struct Task {
    const uint8_t* data;
    size_t size;
    Digest128* digest;
  };
  std::vector<Task> tasks;
  size_t total = 0;
  for (size_t r = 0; r < regions.size(); ++r) {
    const auto [data, size] = regions[r];
    out[r].resize((size + chunk - 1) / chunk);
    for (size_t k = 0; k < out[r].size(); ++k) {
      const size_t at = k * chunk;
      tasks.push_back(
          {static_cast<const uint8_t*>(data) + at, std::min(chunk, size - at), &out[r][k]});
    }
    total += size;
  }
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < tasks.size(); i = next++) {
      const XXH128_hash_t d = XXH3_128bits(tasks[i].data, tasks[i].size);
      *tasks[i].digest = {d.high64, d.low64};
    }
  };
  // Threads only where there is enough to share: a thread starts in tens of microseconds and
  // digests about a megabyte in a hundred.
  const size_t threads = std::min<size_t>(
      {std::max(1u, std::thread::hardware_concurrency()), 16, tasks.size(), total >> 22});
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return out;
}

std::string hash_hex(uint64_t digest) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

}  // namespace kiln
