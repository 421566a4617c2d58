// The typed errors every kiln layer throws; each message names the node, value, file or field.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

enum class ErrorKind {
  kInvalidArgument,  // the caller passed something malformed (a flag, a spec, an argument)
  kUnsupported,      // well-formed, but kiln cannot do it (an op, a dtype, a layout)
  kCorruptInput,     // a file or buffer that fails validation (plans, modules, IR text)
  kShapeMismatch,    // shapes or dtypes that do not fit what was declared
  kDevice,           // device errors: missing device, CUDA failures, out of memory
  kInternal,         // a broken invariant inside kiln: a bug
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message);
  ErrorKind kind() const { return kind_; }
  // The message without the "<kind>: " prefix that what() carries.
  const std::string& message() const { return message_; }

 private:
  ErrorKind kind_;
  std::string message_;
};

#define KILN_DEFINE_ERROR(Name, Kind)                                   \
  class Name : public Error {                                           \
   public:                                                              \
    explicit Name(const std::string& message) : Error(Kind, message) {} \
  };
KILN_DEFINE_ERROR(InvalidArgument, ErrorKind::kInvalidArgument)
KILN_DEFINE_ERROR(Unsupported, ErrorKind::kUnsupported)
KILN_DEFINE_ERROR(CorruptInput, ErrorKind::kCorruptInput)
KILN_DEFINE_ERROR(ShapeMismatch, ErrorKind::kShapeMismatch)
KILN_DEFINE_ERROR(DeviceError, ErrorKind::kDevice)
KILN_DEFINE_ERROR(InternalError, ErrorKind::kInternal)
#undef KILN_DEFINE_ERROR

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace kiln

// KILN_CHECK(cond, ErrorType, parts...): throws ErrorType with the parts streamed together.
#define KILN_CHECK(cond, ErrorType, ...)                                       \
  do {                                                                         \
    if (!(cond)) throw ::kiln::ErrorType(::kiln::detail::concat(__VA_ARGS__)); \
  } while (0)

#define KILN_THROW(ErrorType, ...) throw ::kiln::ErrorType(::kiln::detail::concat(__VA_ARGS__))
