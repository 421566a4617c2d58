// The spellings of dtypes, input specs and devices shared by kilnc, the report and the API.
#include <cctype>

#include "kiln/kiln.h"
#include "util/errors.h"

namespace kiln {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// "(1,3,224,224)" -> {1,3,224,224}; "()" is a 0-d shape.
std::vector<int64_t> parse_shape(const std::string& text, const std::string& whole) {
  const std::string t = trim(text);
  KILN_CHECK(t.size() >= 2 && t.front() == '(' && t.back() == ')', InvalidArgument, "input spec `",
             whole, "`: expected a shape like (1,3,224,224), got `", t, "`");
  std::vector<int64_t> shape;
  const std::string body = trim(t.substr(1, t.size() - 2));
  if (body.empty()) return shape;
  size_t pos = 0;
  while (pos <= body.size()) {
    size_t comma = body.find(',', pos);
    if (comma == std::string::npos) comma = body.size();
    const std::string dim = trim(body.substr(pos, comma - pos));
    KILN_CHECK(!dim.empty() && dim.size() <= 12 &&
                   std::all_of(dim.begin(), dim.end(),
                               [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }),
               InvalidArgument, "input spec `", whole, "`: dimension `", dim,
               "` is not a non-negative integer");
    shape.push_back(std::stoll(dim));
    pos = comma + 1;
  }
  return shape;
}

}  // namespace

std::string Device::str() const {
  return kind == Kind::kCpu ? "cpu" : "cuda:" + std::to_string(index);
}

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kLower:
      return "lower";
    case Phase::kPartition:
      return "partition";
    case Phase::kShapeAnalysis:
      return "shape analysis";
    case Phase::kConvert:
      return "convert";
    case Phase::kBuild:
      return "build";
    case Phase::kStitch:
      return "stitch";
  }
  return "?";
}

DType parse_dtype(const std::string& text) {
  static const std::pair<const char*, DType> names[] = {
      {"f32", DType::kF32},   {"float32", DType::kF32},   {"float", DType::kF32},
      {"f16", DType::kF16},   {"float16", DType::kF16},   {"half", DType::kF16},
      {"bf16", DType::kBF16}, {"bfloat16", DType::kBF16}, {"i64", DType::kI64},
      {"int64", DType::kI64}, {"long", DType::kI64},      {"i32", DType::kI32},
      {"int32", DType::kI32}, {"int", DType::kI32},       {"i8", DType::kI8},
      {"int8", DType::kI8},   {"u8", DType::kU8},         {"uint8", DType::kU8},
      {"bool", DType::kBool}};
  for (const auto& [name, dtype] : names) {
    if (text == name) return dtype;
  }
  KILN_THROW(InvalidArgument, "unknown dtype `", text,
             "` (expected f32, f16, bf16, i64, i32, i8, u8 or bool)");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI64:
      return "i64";
    case DType::kI32:
      return "i32";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
    case DType::kBool:
      return "bool";
  }
  return "?";
}

Input parse_input_spec(const std::string& text) {
  KILN_CHECK(text.size() < 4096, InvalidArgument, "input spec is too long (", text.size(),
             " characters)");
  std::string shapes = trim(text);
  Input input;
  const size_t at = shapes.rfind('@');
  if (at != std::string::npos) {
    const std::string fmt = trim(shapes.substr(at + 1));
    shapes = trim(shapes.substr(0, at));
    // "@f16" or "@f16%contiguous" / "@f16%channels_last".
    const size_t pct = fmt.find('%');
    try {
      input.dtype = parse_dtype(fmt.substr(0, pct));
    } catch (const InvalidArgument& e) {
      KILN_THROW(InvalidArgument, "input spec `", text, "`: ", e.message());
    }
    if (pct != std::string::npos) {
      const std::string format = fmt.substr(pct + 1);
      if (format == "contiguous" || format == "nchw") {
        input.format = TensorFormat::kContiguous;
      } else if (format == "channels_last" || format == "nhwc") {
        input.format = TensorFormat::kChannelsLast;
      } else {
        KILN_THROW(InvalidArgument, "input spec `", text, "`: unknown format `", format,
                   "` (expected contiguous or channels_last)");
      }
    }
  }
  if (!shapes.empty() && shapes.front() == '[') {
    KILN_CHECK(shapes.back() == ']', InvalidArgument, "input spec `", text,
               "`: a range must be written [(min);(opt);(max)]");
    const std::string body = shapes.substr(1, shapes.size() - 2);
    std::vector<std::string> parts;
    size_t pos = 0;
    while (true) {
      const size_t semi = body.find(';', pos);
      parts.push_back(body.substr(pos, semi == std::string::npos ? std::string::npos : semi - pos));
      if (semi == std::string::npos) break;
      pos = semi + 1;
    }
    KILN_CHECK(parts.size() == 3, InvalidArgument, "input spec `", text,
               "`: a range needs three shapes [(min);(opt);(max)], got ", parts.size());
    input.min_shape = parse_shape(parts[0], text);
    input.opt_shape = parse_shape(parts[1], text);
    input.max_shape = parse_shape(parts[2], text);
    KILN_CHECK(input.min_shape.size() == input.opt_shape.size() &&
                   input.opt_shape.size() == input.max_shape.size(),
               InvalidArgument, "input spec `", text, "`: min, opt and max have different ranks");
    for (size_t d = 0; d < input.min_shape.size(); ++d) {
      KILN_CHECK(
          input.min_shape[d] <= input.opt_shape[d] && input.opt_shape[d] <= input.max_shape[d],
          InvalidArgument, "input spec `", text, "`: dimension ", d, " needs min <= opt <= max");
    }
  } else {
    input.min_shape = input.opt_shape = input.max_shape = parse_shape(shapes, text);
  }
  return input;
}

Device parse_device(const std::string& text) {
  Device device;
  if (text == "cpu") return device;
  if (text == "cuda" || text == "gpu") {
    device.kind = Device::Kind::kCuda;
    return device;
  }
  const std::string prefix = "cuda:";
  if (text.rfind(prefix, 0) == 0) {
    const std::string idx = text.substr(prefix.size());
    KILN_CHECK(!idx.empty() && idx.size() <= 3 &&
                   std::all_of(idx.begin(), idx.end(),
                               [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }),
               InvalidArgument, "device `", text, "`: the index must be a number, as in cuda:0");
    device.kind = Device::Kind::kCuda;
    device.index = std::stoi(idx);
    return device;
  }
  KILN_THROW(InvalidArgument, "unknown device `", text, "` (expected cpu, cuda or cuda:N)");
}

}  // namespace kiln
