// Every difference between libtorch 1.13 (Debian) and 2.x (GPU machines) lives here.
#pragma once

#include <torch/script.h>
#include <torch/version.h>

#define KILN_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||               \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace kiln::ir::compat {

inline std::string torch_version() {
  return TORCH_VERSION;
}

// Graph::copy() is non-const in 1.13 and const in 2.x; copying never mutates the source.
inline std::shared_ptr<torch::jit::Graph> copy_graph(const torch::jit::Graph& graph) {
  return const_cast<torch::jit::Graph&>(graph).copy();
}

// The message of a c10::Error without the C++ backtrace that 1.13 and 2.x append differently.
inline std::string error_message(const c10::Error& e) {
  return e.msg();
}

}  // namespace kiln::ir::compat
