// Fuzzes kiln-opt's input path for IR text: ir::parse_graph (torch's IR parser, kiln's error
// locating, the verifier). Malformed text must be one CorruptInput error, never a crash.
#include <string>

#include "ir/graph_io.h"
#include "util/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (kiln::ir::looks_like_saved_module(text)) return 0;  // the zip path is libtorch's own
  try {
    auto graph = kiln::ir::parse_graph(text, "fuzz.ir");
    if (!graph) __builtin_trap();
  } catch (const kiln::Error&) {
  }
  return 0;
}
