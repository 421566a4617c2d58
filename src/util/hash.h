// Stable 64-bit hashing (xxHash XXH3) for plan-cache keys and deterministic engine names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

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
// 16 lowercase hex digits.
std::string hash_hex(uint64_t digest);

}  // namespace kiln
