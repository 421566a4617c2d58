// Fuzzes kilnc's spellings: input specs ("(1,3,224,224)@f32", "[(min);(opt);(max)]"), devices
// and dtypes. Malformed text must be an InvalidArgument error, never a crash.
#include <string>

#include "kiln/kiln.h"
#include "util/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    kiln::parse_input_spec(text);
  } catch (const kiln::Error&) {
  }
  try {
    kiln::parse_device(text);
  } catch (const kiln::Error&) {
  }
  try {
    kiln::parse_dtype(text);
  } catch (const kiln::Error&) {
  }
  return 0;
}
