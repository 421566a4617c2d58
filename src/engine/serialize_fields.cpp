// Field visitors: binary writer, validating reader, JSON writer.
#include "engine/serialize_fields.h"

#include <nlohmann/json.hpp>

#include <limits>

#include "util/errors.h"

namespace kiln::engine {
namespace {

// Sanity bound on vector fields: no layer parameter list is longer than this.
constexpr uint64_t kMaxFieldItems = 1 << 20;
// Integer parameters (sizes, pads, strides, axes) lie within +-2^48, as tensor volumes do, so that
// shape arithmetic on them cannot overflow; the extremes stand for "to the end" (slices).
constexpr int64_t kMaxFieldValue = int64_t{1} << 48;

void check_int_field(const char* name, int64_t v) {
  KILN_CHECK(v == std::numeric_limits<int64_t>::max() || v == std::numeric_limits<int64_t>::min() ||
                 (v >= -kMaxFieldValue && v <= kMaxFieldValue),
             CorruptInput, "plan: field ", name, " holds ", v, ", out of range");
}

struct Writer {
  ByteWriter& w;
  template <class T>
  void operator()(const char*, const T& v) {
    if constexpr (std::is_same_v<T, std::string>) {
      w.put_string(v);
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      w.put<uint64_t>(v.size());
      for (const auto& s : v) w.put_string(s);
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                         std::is_same_v<T, std::vector<double>>) {
      w.put<uint64_t>(v.size());
      for (auto x : v) w.put(x);
    } else if constexpr (std::is_same_v<T, bool>) {
      w.put<uint8_t>(v ? 1 : 0);
    } else {
      static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T>, "unsupported field type");
      w.put(v);
    }
  }
};

struct Reader {
  ByteReader& r;
  template <class T>
  void operator()(const char* name, T& v) {
    if constexpr (std::is_same_v<T, std::string>) {
      v = r.get_string(name);
    } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      const uint64_t n = r.get_count(name, 8);
      v.clear();
      for (uint64_t i = 0; i < n; ++i) v.push_back(r.get_string(name));
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                         std::is_same_v<T, std::vector<double>>) {
      const uint64_t n = r.get_count(name, sizeof(typename T::value_type));
      KILN_CHECK(n <= kMaxFieldItems, CorruptInput, "plan: field ", name, " has ", n, " items");
      v.resize(static_cast<size_t>(n));
      for (auto& x : v) {
        x = r.get<typename T::value_type>(name);
        if constexpr (std::is_same_v<T, std::vector<int64_t>>) check_int_field(name, x);
      }
    } else if constexpr (std::is_same_v<T, bool>) {
      const uint8_t b = r.get<uint8_t>(name);
      KILN_CHECK(b <= 1, CorruptInput, "plan: field ", name, " holds ", int(b), ", not a bool");
      v = b != 0;
    } else if constexpr (std::is_enum_v<T>) {
      using U = std::underlying_type_t<T>;
      const U raw = r.get<U>(name);
      KILN_CHECK(raw < 64, CorruptInput, "plan: field ", name, " holds unknown value ", +raw);
      if constexpr (std::is_same_v<T, DataType>) {
        KILN_CHECK(raw < kNumDataTypes, CorruptInput, "plan: field ", name,
                   " holds unknown data type ", +raw);
      } else if constexpr (std::is_same_v<T, UnaryOp>) {
        KILN_CHECK(raw < kNumUnaryOps, CorruptInput, "plan: field ", name,
                   " holds unknown unary op ", +raw);
      } else if constexpr (std::is_same_v<T, BinaryOp>) {
        KILN_CHECK(raw < kNumBinaryOps, CorruptInput, "plan: field ", name,
                   " holds unknown binary op ", +raw);
      } else if constexpr (std::is_same_v<T, ActivationKind>) {
        KILN_CHECK(raw < kNumActivationKinds, CorruptInput, "plan: field ", name,
                   " holds unknown activation ", +raw);
      }
      v = static_cast<T>(raw);
    } else {
      v = r.get<T>(name);
      if constexpr (std::is_same_v<T, int64_t>) check_int_field(name, v);
    }
  }
};

struct JsonWriter {
  nlohmann::json& j;
  template <class T>
  void operator()(const char* name, const T& v) {
    if constexpr (std::is_same_v<T, DataType>) {
      j[name] = dtype_name(v);
    } else if constexpr (std::is_same_v<T, ActivationKind>) {
      j[name] = activation_name(v);
    } else if constexpr (std::is_same_v<T, BinaryOp>) {
      j[name] = binary_op_name(v);
    } else if constexpr (std::is_same_v<T, UnaryOp>) {
      j[name] = unary_op_name(v);
    } else if constexpr (std::is_enum_v<T>) {
      j[name] = static_cast<int>(v);
    } else {
      j[name] = v;
    }
  }
};

template <size_t I = 0>
LayerParams default_params(uint64_t index) {
  if constexpr (I < kNumLayerKinds) {
    if (index == I) return LayerParams(std::in_place_index<I>);
    return default_params<I + 1>(index);
  } else {
    KILN_THROW(CorruptInput, "plan: unknown layer kind ", index);
  }
}

}  // namespace

void write_params(ByteWriter& w, const LayerParams& params) {
  Writer writer{w};
  // fields() is shared by readers and writers, so it takes the struct by non-const reference;
  // the writer only reads.
  std::visit([&](const auto& p) { const_cast<std::decay_t<decltype(p)>&>(p).fields(writer); },
             params);
}

LayerParams read_params(ByteReader& r, uint64_t kind_index) {
  LayerParams params = default_params(kind_index);
  Reader reader{r};
  std::visit([&](auto& p) { p.fields(reader); }, params);
  return params;
}

std::string params_to_json(const LayerParams& params) {
  nlohmann::json j = nlohmann::json::object();
  JsonWriter writer{j};
  std::visit([&](const auto& p) { const_cast<std::decay_t<decltype(p)>&>(p).fields(writer); },
             params);
  return j.dump();
}

}  // namespace kiln::engine
