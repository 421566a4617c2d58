// Environment switches that keep an optimization out, for measuring what it gives
// (bench/NOTES.md): NAME=off.
#pragma once

#include <cstdlib>
#include <cstring>

namespace kiln {

inline bool switched_off(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && std::strcmp(env, "off") == 0;
}

}  // namespace kiln
