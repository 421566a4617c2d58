// Stable 64-bit hashing (xxHash XXH3) for plan-cache keys and deterministic engine names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

// Incremental hasher; the same sequence of updates gives the same digest on every machine.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  Hasher& update(const void* data, size_t size);
  // Strings are length-prefixed, so ("ab","c") and ("a","bc") hash differently.
  Hasher& update(std::string_view text);
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  Hasher& update(T value) {
    return update(&value, sizeof(value));
  }

  uint64_t digest() const;
  // XXH3-128 of the same updates, as 32 lowercase hex digits: for keys whose collision would
  // serve the wrong result.
  std::string digest128_hex() const;

 private:
  void* state_;  // XXH3_state_t, kept out of this header
};

uint64_t hash_bytes(const void* data, size_t size);

struct Digest128 {
  uint64_t high = 0, low = 0;
  bool operator==(const Digest128& o) const { return high == o.high && low == o.low; }
  bool operator!=(const Digest128& o) const { return !(*this == o); }
};

// XXH3-128 digests of `regions` (data, size) in chunks of `chunk` bytes, on as many threads as the
// machine has cores (at most 16): out[r][k] is the digest of bytes [k * chunk, (k + 1) * chunk) of
// region r (the last chunk shorter; an empty region has none). For keys and checks of hundreds of
// megabytes, which one thread would take tens of milliseconds over.
std::vector<std::vector<Digest128>> chunk_digests(
    const std::vector<std::pair<const void*, size_t>>& regions, size_t chunk);
// 16 lowercase hex digits.
std::string hash_hex(uint64_t digest);

}  // namespace kiln
