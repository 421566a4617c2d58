// Typed errors: kind names and the "<kind>: message" form of what().
#include "util/errors.h"

namespace kiln {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kUnsupported:
      return "unsupported";
    case ErrorKind::kCorruptInput:
      return "corrupt input";
    case ErrorKind::kShapeMismatch:
      return "shape mismatch";
    case ErrorKind::kDevice:
      return "device error";
    case ErrorKind::kInternal:
      return "internal error";
  }
  return "error";
}

Error::Error(ErrorKind kind, const std::string& message)
    : std::runtime_error(std::string(error_kind_name(kind)) + ": " + message),
      kind_(kind),
      message_(message) {}

}  // namespace kiln
