// The ATen frontend: a serialized ExportedProgram (`torch.export.save`, a .pt2 archive) read in
// C++ into the compiler IR: a module whose `forward` graph holds the program's aten:: nodes, with
// its parameters, buffers and tensor constants as graph constants (what freezing makes of a
// TorchScript module), and its user inputs as arguments.
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::frontend {

// The archive versions this reader takes: torch 2.11's `torch.export.save` writes format "pt2",
// archive version "0" and graph schema 8.x (torch/_export/serde/schema.py SCHEMA_VERSION).
constexpr int kSchemaMajor = 8;

// One dim of a user input: static (min == opt == max) or a symbol of the export's range
// constraints, with the example's size (the "hint") as opt.
struct DimRange {
  int64_t min = 0, opt = 0, max = 0;
  std::string symbol;  // empty for a static dim
};

struct InputInfo {
  std::string name;
  std::vector<DimRange> dims;
  c10::ScalarType dtype = c10::ScalarType::Float;
};

struct ExportedProgram {
  torch::jit::Module module;      // forward(self, *user_inputs)
  std::vector<InputInfo> inputs;  // one per user input, in order
  std::string torch_version;      // of the torch that saved it
  std::string schema_version;     // "8.17"
};

// Reads `path`. Bad input is an error naming what is wrong: not a zip archive or truncated
// (CorruptInput), another format or schema version (Unsupported, naming the version), an op this
// libtorch does not know or whose arguments do not fit its schema (Unsupported, naming the node),
// a graph that still mutates its inputs or buffers (Unsupported), weights missing or of the wrong
// size (CorruptInput).
ExportedProgram load_exported_program(const std::string& path);
// The same from the archive's bytes (`name` is used in messages).
ExportedProgram load_exported_program_bytes(const std::string& bytes, const std::string& name);

// Whether `path` looks like a .pt2 archive (a zip whose records include `archive_format`), so that
// tools can take either a TorchScript module or an ExportedProgram.
bool is_exported_program(const std::string& path);

}  // namespace kiln::frontend
