// xxHash XXH3-64, compiled in header-only mode so no library needs linking.
#include "util/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>

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

std::string hash_hex(uint64_t digest) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(digest));
  return buf;
}

}  // namespace kiln
