// The .pt2 archive (torch.export.save) at the level of its records: the zip, its JSON, the
// schema's tagged unions and enums, and weights from their raw storage bytes. exported_program.cpp
// builds the compiler IR from what these read.
#pragma once

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "util/errors.h"

namespace kiln::frontend::pt2 {

using json = nlohmann::json;

// The archive: records by their name under the archive's top folder.
class Archive {
 public:
  // From a file (read as needed) or, with `bytes`, from memory.
  Archive(std::string name, const std::string* bytes) : name_(std::move(name)) {
    try {
      if (bytes) {
        in_ = std::make_unique<std::istringstream>(*bytes);
        reader_ = std::make_unique<caffe2::serialize::PyTorchStreamReader>(in_.get());
      } else {
        reader_ = std::make_unique<caffe2::serialize::PyTorchStreamReader>(name_);
      }
    } catch (const c10::Error& e) {
      KILN_THROW(CorruptInput, name_, ": not a readable .pt2 archive (", first_line(e.msg()), ")");
    }
  }

  bool has(const std::string& record) const { return reader_->hasRecord(record); }

  std::string text(const std::string& record) const {
    KILN_CHECK(has(record), CorruptInput, name_, ": the archive has no record `", record, "`");
    try {
      auto [data, size] = reader_->getRecord(record);
      return std::string(static_cast<const char*>(data.get()), size);
    } catch (const c10::Error& e) {
      KILN_THROW(CorruptInput, name_, ": record `", record, "` cannot be read (",
                 first_line(e.msg()), ")");
    }
  }

  json parse(const std::string& record) const {
    try {
      return json::parse(text(record));
    } catch (const json::exception& e) {
      KILN_THROW(CorruptInput, name_, ": record `", record, "` is not valid JSON (", e.what(), ")");
    }
  }

  std::vector<std::string> records() const { return reader_->getAllRecords(); }
  const std::string& name() const { return name_; }

  // The first non-empty line of a message.
  static std::string first_line(const std::string& s) {
    const size_t start = s.find_first_not_of(" \n");
    if (start == std::string::npos) return "";
    return s.substr(start, s.find('\n', start) - start);
  }

 private:
  std::string name_;
  std::unique_ptr<std::istringstream> in_;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader_;
};

// A JSON field that must exist, with the path in the error.
const json& field(const json& j, const char* key, const std::string& where);

// The single member of one of the schema's unions ({"as_int": 3}): its tag and value.
std::pair<std::string, const json*> union_member(const json& j, const std::string& where);

// torch/_export/serde/schema.py's ScalarType numbering (not c10's).
c10::ScalarType scalar_type(int64_t v, const std::string& where);
c10::MemoryFormat memory_format(int64_t v, const std::string& where);

// An int of a tensor meta ({"as_int": n}); symbolic sizes are not allowed where this is used.
int64_t static_int(const json& j, const std::string& where);

// The expression of a symbolic size or SymInt ({"as_expr": {"expr_str": ...}}), "" otherwise.
std::string expr_str(const json& j);

// The name of a plain symbol ("Symbol('s77', positive=True, integer=True)" -> "s77"), or "".
std::string plain_symbol(const std::string& expr);

// A weight or constant from its raw storage bytes and tensor meta.
at::Tensor tensor_from_storage(const std::string& bytes, const json& meta,
                               const std::string& where);

// Weights (or constants): name -> tensor, from a config record and the files it names.
std::map<std::string, at::Tensor> read_payload(const Archive& ar, const std::string& config,
                                               const std::string& folder);

}  // namespace kiln::frontend::pt2
