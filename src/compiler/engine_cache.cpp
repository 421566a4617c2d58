// The engine cache's directory of entries (engine_cache.h). An entry file: "KILNCACH", format
// version (u32), the key (u64 length, bytes), the build time (f64), the plan (u64 length, bytes),
// little-endian as the machine writes it; the plan carries its own checksum.
#include "compiler/engine_cache.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <system_error>

#include "engine/plan.h"
#include "util/hash.h"
#include "util/logging.h"

#ifndef KILN_VERSION
#define KILN_VERSION "unknown"
#endif

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'A', 'C', 'H'};
constexpr uint32_t kEntryVersion = 1;
constexpr const char* kSuffix = ".kplan";

template <typename T>
void append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// Reads a T at `at`, advancing; false when the bytes run out.
template <typename T>
bool get(const std::string& in, size_t& at, T& value) {
  if (in.size() - at < sizeof(T)) return false;
  std::memcpy(&value, in.data() + at, sizeof(T));
  at += sizeof(T);
  return true;
}

// Empty when `bytes` is a whole entry of `key`; otherwise what is wrong with it.
std::string parse(const std::string& bytes, const std::string& key, CacheEntry& entry) {
  size_t at = 0;
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return "not an engine cache entry";
  }
  at = sizeof(kMagic);
  uint32_t version = 0;
  uint64_t key_size = 0, plan_size = 0;
  if (!get(bytes, at, version)) return "truncated";
  if (version != kEntryVersion) return "entry format " + std::to_string(version);
  if (!get(bytes, at, key_size) || bytes.size() - at < key_size) return "truncated";
  if (bytes.compare(at, key_size, key) != 0) return "another key under the same hash";
  at += key_size;
  if (!get(bytes, at, entry.build_ms) || !get(bytes, at, plan_size)) return "truncated";
  if (bytes.size() - at != plan_size) return "truncated or padded plan";
  entry.plan.assign(bytes.begin() + static_cast<std::ptrdiff_t>(at), bytes.end());
  return "";
}

}  // namespace

const char* kiln_version() {
  return KILN_VERSION;
}

std::string engine_cache_key(const engine::Network& network, const engine::BuilderConfig& config) {
  std::string k = std::string("kiln ") + kiln_version() + "; plan format " +
                  std::to_string(engine::kPlanFormatVersion) + "; network " +
                  engine::network_key(network) + "; device " + config.device + "; precisions";
  for (engine::DataType d : config.enabled_precisions)
    k += std::string(" ") + engine::dtype_name(d);
  k += "; workspace " + std::to_string(config.workspace_bytes) + "; timing " +
       std::to_string(config.timing_iterations) + "; refittable " +
       std::to_string(config.refittable) + "; conv_layout " +
       std::to_string(static_cast<int>(config.conv_layout)) + "; tf32 " +
       std::to_string(config.tf32) + "; gelu_tanh " + std::to_string(config.gelu_tanh_epilogues) +
       "; squeeze_excitation " +
       std::to_string(config.squeeze_excitation ? int(*config.squeeze_excitation) : -1) +
       "; excitation_projection " + std::to_string(config.excitation_projection) +
       "; cast_into_shuffle " + std::to_string(config.cast_into_shuffle) + "; switches";
  for (const std::string& s : config.switches) k += " " + s;
  if (!config.refittable) {  // the plan holds weights folded from these
    Hasher h;
    for (const std::string& name : engine::constant_slots(network)) {
      const engine::Weights& w = network.weight(name);
      h.update(static_cast<int>(w.dtype));
      for (int64_t d : w.shape) h.update(d);
      if (w.data) h.update(w.data->data(), w.data->size());
    }
    k += "; weights " + hash_hex(h.digest());
  }
  return k;
}

EngineCache::EngineCache(std::string dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {}

std::string EngineCache::default_dir() {
  if (const char* d = std::getenv("KILN_ENGINE_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    return (fs::path(x) / "kiln" / "engines").string();
  }
  const char* home = std::getenv("HOME");
  return (fs::path(home && *home ? home : "/tmp") / ".cache" / "kiln" / "engines").string();
}

std::string EngineCache::path_of(const std::string& key, const std::string& suffix) const {
  const uint64_t a = hash_bytes(key.data(), key.size());
  Hasher h;
  h.update(std::string_view("kiln engine cache")).update(std::string_view(key));
  return (fs::path(dir_) / (hash_hex(a) + hash_hex(h.digest()) + suffix)).string();
}

void EngineCache::touch(const std::string& path) {
  std::error_code ec;  // LRU by modification time; a read-only cache still hits
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);
}

std::optional<CacheEntry> EngineCache::get(const std::string& key) {
  const std::string path = path_of(key);
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return std::nullopt;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CacheEntry entry;
  const std::string problem = parse(bytes, key, entry);
  if (!problem.empty()) {
    KILN_LOG(kWarning, "engine cache: ", path, " is unusable (", problem,
             "); building the engine again");
    std::error_code ec;
    fs::remove(path, ec);
    return std::nullopt;
  }
  touch(path);
  return entry;
}

void EngineCache::put(const std::string& key, const std::vector<uint8_t>& plan, double build_ms) {
  std::string header(kMagic, sizeof(kMagic));
  append(header, kEntryVersion);
  append(header, static_cast<uint64_t>(key.size()));
  header += key;
  append(header, build_ms);
  append(header, static_cast<uint64_t>(plan.size()));
  write(path_of(key), {{header.data(), header.size()}, {plan.data(), plan.size()}});
}

bool EngineCache::write(const std::string& path,
                        const std::vector<std::pair<const void*, size_t>>& parts) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    if (!warned_) {  // once for a compile, not once per entry
      KILN_LOG(kWarning, "engine cache: cannot create ", dir_, " (", ec.message(),
               "); nothing is cached");
    }
    warned_ = true;
    return false;
  }
  // A name no other writer uses, in the same directory, so that the rename is atomic.
  std::random_device rd;
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" +
                          std::to_string((static_cast<uint64_t>(rd()) << 32) | rd());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    for (const auto& [data, size] : parts) {
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    out.close();
    if (!out.good()) {
      KILN_LOG(kWarning, "engine cache: cannot write ", tmp, "; nothing is cached");
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    KILN_LOG(kWarning, "engine cache: cannot move ", tmp, " to ", path, " (", ec.message(), ")");
    fs::remove(tmp, ec);
    return false;
  }
  evict(path);
  return true;
}

void EngineCache::evict(const std::string& keep) {
  struct File {
    fs::path path;
    uint64_t size;
    fs::file_time_type used;
  };
  std::vector<File> files;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    std::error_code fe;
    if (!e.is_regular_file(fe)) continue;
    if (e.path().extension() != kSuffix && e.path().extension() != ".kmod") continue;
    const uint64_t size = e.file_size(fe);
    if (fe) continue;  // removed by another process meanwhile
    const auto used = e.last_write_time(fe);
    if (fe) continue;
    files.push_back({e.path(), size, used});
    total += size;
  }
  if (total <= max_bytes_) return;
  std::sort(files.begin(), files.end(),
            [](const File& a, const File& b) { return a.used < b.used; });
  for (const File& f : files) {
    if (total <= max_bytes_) break;
    if (f.path == fs::path(keep)) continue;  // the entry just written stays
    std::error_code re;
    if (fs::remove(f.path, re)) {
      KILN_LOG(kInfo, "engine cache: evicted ", f.path.string(), " (", f.size, " bytes)");
    }
    total -= f.size;
  }
  if (total > max_bytes_) {
    KILN_LOG(kWarning, "engine cache: ", keep, " alone is over the cache's bound of ", max_bytes_,
             " bytes");
  }
}

}  // namespace kiln::compiler
