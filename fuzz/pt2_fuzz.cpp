// Fuzzes the ATen frontend's reader (frontend::load_exported_program_bytes) with the model.json of
// a .pt2 archive: the input is that record's text, put into an archive with one 2x2 f32 weight
// `w` (the seeds' parameter). The zip layer is libtorch's (not instrumented); what is fuzzed is
// kiln's reading of the program: JSON shapes, unions, signatures, schema matching, weights.
// A bad program must be one kiln error, never a crash.
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <string>

#include "frontend/exported_program.h"
#include "util/errors.h"

namespace {

const char* kWeights = R"({"config": {"w": {"path_name": "weight_0", "is_param": true,
  "use_pickle": false, "tensor_meta": {"dtype": 7, "sizes": [{"as_int": 2}, {"as_int": 2}],
  "requires_grad": true, "device": {"type": "cpu", "index": null},
  "strides": [{"as_int": 2}, {"as_int": 1}], "storage_offset": {"as_int": 0}, "layout": 7}}}})";

std::string archive(const std::string& model_json) {
  std::string bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  auto put = [&](const std::string& name, const std::string& payload) {
    writer.writeRecord(name, payload.data(), payload.size());
  };
  const float w[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  put("archive_format", "pt2");
  put("archive_version", "0");
  put("models/model.json", model_json);
  put("data/weights/model_weights_config.json", kWeights);
  put("data/weights/weight_0", std::string(reinterpret_cast<const char*>(w), sizeof(w)));
  writer.writeEndOfFile();
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    kiln::frontend::load_exported_program_bytes(archive(text), "fuzz.pt2");
  } catch (const kiln::Error&) {
  }
  return 0;
}
