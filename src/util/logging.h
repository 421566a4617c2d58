// Internal logging macros: KILN_LOG(kInfo, "built ", n, " layers").
#pragma once

#include "kiln/logging.h"
#include "util/errors.h"

namespace kiln::detail {
void emit_log(LogLevel level, const std::string& message);
}

#define KILN_LOG(level, ...)                                                                  \
  do {                                                                                        \
    if (::kiln::LogLevel::level <= ::kiln::log_level())                                       \
      ::kiln::detail::emit_log(::kiln::LogLevel::level, ::kiln::detail::concat(__VA_ARGS__)); \
  } while (0)
