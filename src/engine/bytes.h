// Little-endian byte writer and a bounds-checked reader for the plan format.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "util/errors.h"

namespace kiln::engine {

class ByteWriter {
 public:
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T> || std::is_enum_v<T>>>
  void put(T v) {
    const size_t n = bytes_.size();
    bytes_.resize(n + sizeof(T));
    std::memcpy(bytes_.data() + n, &v, sizeof(T));
  }
  void put_bytes(const void* data, size_t size) {
    const size_t n = bytes_.size();
    bytes_.resize(n + size);
    if (size) std::memcpy(bytes_.data() + n, data, size);
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    put_bytes(s.data(), s.size());
  }
  void align(size_t alignment) {
    bytes_.resize((bytes_.size() + alignment - 1) / alignment * alignment, 0);
  }
  size_t size() const { return bytes_.size(); }
  void reserve(size_t n) { bytes_.reserve(n); }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Every read checks bounds; a failure names the format (`format`: "plan", ...), `what` (the field
// being read) and the offset.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, const char* format = "plan")
      : data_(data), size_(size), format_(format) {}
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const uint8_t* get_bytes(size_t size, const char* what) {
    need(size, what);
    const uint8_t* p = data_ + pos_;
    pos_ += size;
    return p;
  }
  std::string get_string(const char* what) {
    const uint64_t n = get<uint64_t>(what);
    const uint8_t* p = get_bytes(static_cast<size_t>(n), what);
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
  }
  // A count of items, each at least `min_item_bytes` long: rejects counts the data cannot hold.
  uint64_t get_count(const char* what, size_t min_item_bytes) {
    const uint64_t n = get<uint64_t>(what);
    KILN_CHECK(min_item_bytes == 0 || n <= remaining() / min_item_bytes, CorruptInput, format_,
               ": ", what, " count ", n, " at offset ", pos_ - 8, " exceeds the remaining ",
               remaining(), " bytes");
    return n;
  }
  void align(size_t alignment) {
    const size_t next = (pos_ + alignment - 1) / alignment * alignment;
    KILN_CHECK(next <= size_, CorruptInput, format_, ": truncated at offset ", pos_,
               " (alignment)");
    pos_ = next;
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

 private:
  void need(size_t n, const char* what) {
    KILN_CHECK(n <= size_ - pos_, CorruptInput, format_, ": truncated reading ", what,
               " at offset ", pos_, " (need ", n, " bytes, ", size_ - pos_, " left)");
  }
  const uint8_t* data_;
  size_t size_;
  const char* format_;
  size_t pos_ = 0;
};

}  // namespace kiln::engine
