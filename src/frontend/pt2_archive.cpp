// The .pt2 archive's records, JSON unions and enums, and weights from storage bytes.
#include "frontend/pt2_archive.h"

#include <cstring>

namespace kiln::frontend::pt2 {

// A JSON field that must exist, with the path in the error.
const json& field(const json& j, const char* key, const std::string& where) {
  KILN_CHECK(j.is_object() && j.contains(key), CorruptInput, where, ": missing field `", key, "`");
  return j.at(key);
}

// The single member of one of the schema's unions ({"as_int": 3}): its tag and value.
std::pair<std::string, const json*> union_member(const json& j, const std::string& where) {
  KILN_CHECK(j.is_object() && j.size() == 1, CorruptInput, where,
             ": expected one tagged value, got ", j.dump().substr(0, 200));
  return {j.begin().key(), &j.begin().value()};
}

// torch/_export/serde/schema.py's ScalarType numbering (not c10's).
c10::ScalarType scalar_type(int64_t v, const std::string& where) {
  switch (v) {
    case 1:
      return c10::ScalarType::Byte;
    case 2:
      return c10::ScalarType::Char;
    case 3:
      return c10::ScalarType::Short;
    case 4:
      return c10::ScalarType::Int;
    case 5:
      return c10::ScalarType::Long;
    case 6:
      return c10::ScalarType::Half;
    case 7:
      return c10::ScalarType::Float;
    case 8:
      return c10::ScalarType::Double;
    case 9:
      return c10::ScalarType::ComplexHalf;
    case 10:
      return c10::ScalarType::ComplexFloat;
    case 11:
      return c10::ScalarType::ComplexDouble;
    case 12:
      return c10::ScalarType::Bool;
    case 13:
      return c10::ScalarType::BFloat16;
    case 28:
      return c10::ScalarType::UInt16;
    case 29:
      return c10::ScalarType::Float8_e4m3fn;
    case 30:
      return c10::ScalarType::Float8_e5m2;
    case 31:
      return c10::ScalarType::Float8_e4m3fnuz;
    case 32:
      return c10::ScalarType::Float8_e5m2fnuz;
    default:
      break;
  }
  KILN_THROW(CorruptInput, where, ": unknown scalar type ", v);
}

c10::MemoryFormat memory_format(int64_t v, const std::string& where) {
  switch (v) {
    case 1:
      return c10::MemoryFormat::Contiguous;
    case 2:
      return c10::MemoryFormat::ChannelsLast;
    case 3:
      return c10::MemoryFormat::ChannelsLast3d;
    case 4:
      return c10::MemoryFormat::Preserve;
    default:
      break;
  }
  KILN_THROW(CorruptInput, where, ": unknown memory format ", v);
}

// An int of a tensor meta ({"as_int": n}); symbolic sizes are not allowed where this is used.
int64_t static_int(const json& j, const std::string& where) {
  auto [tag, v] = union_member(j, where);
  KILN_CHECK(tag == "as_int" && v->is_number_integer(), Unsupported, where,
             ": a symbolic size where kiln needs a static one (", j.dump().substr(0, 120), ")");
  return v->get<int64_t>();
}

std::string expr_str(const json& j) {
  if (!j.is_object() || !j.contains("as_expr") || !j.at("as_expr").is_object()) return "";
  const json& e = j.at("as_expr");
  return e.contains("expr_str") && e.at("expr_str").is_string()
             ? e.at("expr_str").get<std::string>()
             : "";
}

// The name of a plain symbol ("Symbol('s77', positive=True, integer=True)" -> "s77"), or "".
std::string plain_symbol(const std::string& expr) {
  const std::string head = "Symbol('";
  if (expr.compare(0, head.size(), head) != 0) return "";
  const size_t end = expr.find('\'', head.size());
  if (end == std::string::npos || expr.find('(', head.size()) != std::string::npos) return "";
  return expr.substr(head.size(), end - head.size());
}

// A weight or constant from its raw storage bytes and tensor meta.
at::Tensor tensor_from_storage(const std::string& bytes, const json& meta,
                               const std::string& where) {
  const c10::ScalarType dtype = scalar_type(field(meta, "dtype", where).get<int64_t>(), where);
  std::vector<int64_t> sizes, strides;
  for (const json& s : field(meta, "sizes", where)) sizes.push_back(static_int(s, where));
  for (const json& s : field(meta, "strides", where)) strides.push_back(static_int(s, where));
  KILN_CHECK(sizes.size() == strides.size(), CorruptInput, where, ": ", sizes.size(), " sizes but ",
             strides.size(), " strides");
  const int64_t offset = meta.contains("storage_offset")
                             ? static_int(meta.at("storage_offset"), where + ".storage_offset")
                             : 0;
  if (meta.contains("layout")) {
    KILN_CHECK(meta.at("layout").get<int64_t>() == 7, Unsupported, where,
               ": a tensor of a layout other than strided (", meta.at("layout").get<int64_t>(),
               ")");
  }
  const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t span = 0;  // elements the view reaches, past the offset
  bool empty = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    KILN_CHECK(sizes[d] >= 0 && strides[d] >= 0, CorruptInput, where, ": negative size or stride");
    empty |= sizes[d] == 0;
  }
  auto options = at::TensorOptions().dtype(dtype);
  if (empty) return at::empty(sizes, options);
  // The bytes the view reaches; sizes from a corrupt file must not overflow the arithmetic.
  bool overflow = offset < 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    int64_t reach = 0;
    overflow |= __builtin_mul_overflow(sizes[d] - 1, strides[d], &reach);
    overflow |= __builtin_add_overflow(span, reach, &span);
  }
  int64_t needed = 0;
  overflow |= __builtin_add_overflow(offset, span, &needed);
  overflow |= __builtin_add_overflow(needed, int64_t{1}, &needed);
  overflow |= __builtin_mul_overflow(needed, item, &needed);
  KILN_CHECK(!overflow, CorruptInput, where, ": sizes, strides and offset past 2^63 bytes");
  KILN_CHECK(static_cast<int64_t>(bytes.size()) >= needed, CorruptInput, where, ": ", bytes.size(),
             " bytes of storage, the tensor reaches ", needed);
  at::Tensor storage = at::empty({static_cast<int64_t>(bytes.size()) / item}, options);
  std::memcpy(storage.data_ptr(), bytes.data(), static_cast<size_t>(storage.numel() * item));
  return storage.as_strided(sizes, strides, offset).clone(at::MemoryFormat::Contiguous);
}

// Weights (or constants): name -> tensor, from a config record and the files it names.
std::map<std::string, at::Tensor> read_payload(const Archive& ar, const std::string& config,
                                               const std::string& folder) {
  std::map<std::string, at::Tensor> out;
  if (!ar.has(config)) return out;
  const json j = ar.parse(config);
  for (const auto& [name, meta] : field(j, "config", config).items()) {
    const std::string where = config + ": `" + name + "`";
    KILN_CHECK(!meta.value("use_pickle", false), Unsupported, where,
               ": a tensor subclass (stored pickled), which kiln does not read");
    const std::string file = folder + field(meta, "path_name", where).get<std::string>();
    out[name] = tensor_from_storage(ar.text(file), field(meta, "tensor_meta", where), where);
  }
  return out;
}

}  // namespace kiln::frontend::pt2
