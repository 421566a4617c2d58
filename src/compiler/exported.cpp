// The public face of the ATen frontend: load_exported_program and the input specs an export's
// shapes and range constraints give.
#include "frontend/exported_program.h"
#include "kiln/kiln.h"
#include "util/errors.h"

namespace kiln {
namespace {

DType dtype_of(c10::ScalarType t, const std::string& input) {
  switch (t) {
    case c10::ScalarType::Float:
      return DType::kF32;
    case c10::ScalarType::Half:
      return DType::kF16;
    case c10::ScalarType::BFloat16:
      return DType::kBF16;
    case c10::ScalarType::Long:
      return DType::kI64;
    case c10::ScalarType::Int:
      return DType::kI32;
    case c10::ScalarType::Char:
      return DType::kI8;
    case c10::ScalarType::Byte:
      return DType::kU8;
    case c10::ScalarType::Bool:
      return DType::kBool;
    default:
      break;
  }
  KILN_THROW(Unsupported, "input `", input, "` is ", c10::toString(t),
             "; kiln's engine inputs are f32, f16, bf16, i64, i32, i8, u8 or bool");
}

}  // namespace

Input ExportedInput::spec() const {
  for (size_t d = 0; d < max.size(); ++d) {
    KILN_CHECK(max[d] >= 0 && opt[d] >= 0, InvalidArgument, "input `", name, "` dim ", d,
               " (symbol ", symbols[d], ") has ",
               max[d] < 0 ? "no upper bound in the export's range constraints" : "no example size",
               ": give its shapes (export with torch.export.Dim(..., max=N), or an input spec)");
  }
  Input in(min, opt, max, dtype);
  in.dim_symbols = symbols;
  return in;
}

std::vector<Input> ExportedModule::specs() const {
  std::vector<Input> out;
  for (const ExportedInput& in : inputs) out.push_back(in.spec());
  return out;
}

namespace {

ExportedModule public_module(const frontend::ExportedProgram& program) {
  ExportedModule out;
  out.module = program.module;
  out.torch_version = program.torch_version;
  out.schema_version = program.schema_version;
  for (const frontend::InputInfo& info : program.inputs) {
    ExportedInput in;
    in.name = info.name;
    in.dtype = dtype_of(info.dtype, info.name);
    for (const frontend::DimRange& d : info.dims) {
      in.min.push_back(d.min);
      in.opt.push_back(d.opt);
      in.max.push_back(d.max);
      in.symbols.push_back(d.symbol);
    }
    out.inputs.push_back(std::move(in));
  }
  return out;
}

}  // namespace

ExportedModule load_exported_program(const std::string& path) {
  return public_module(frontend::load_exported_program(path));
}

ExportedModule load_exported_program_bytes(const std::string& bytes, const std::string& name) {
  return public_module(frontend::load_exported_program_bytes(bytes, name));
}

bool is_exported_program(const std::string& path) {
  return frontend::is_exported_program(path);
}

}  // namespace kiln
