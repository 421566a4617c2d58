// The persistent engine cache (seed 003, issue #33): built plans on disk, keyed by what decides a
// build (the converted network's structure, the builder's settings, the device, kiln's version,
// and the weights themselves unless the plan is refittable), so that compiling the same
// architecture again loads the plan instead of building it. Refittable plans are stored without
// the weights refit writes (weightless), and a hit refits them with the current weights; other
// plans are stored whole and hit only with the same weights.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/builder.h"

namespace kiln::compiler {

// kiln's version as the cache keys it: the release and, for a development build, the commit.
const char* kiln_version();

// The key of the plan `config` would build from `network`: the network's structure
// (engine::network_key), every builder setting, the plan format and kiln's version, and unless
// the plan is refittable the weights' data too.
std::string engine_cache_key(const engine::Network& network, const engine::BuilderConfig& config);

struct CacheEntry {
  std::vector<uint8_t> plan;  // a serialized plan (weightless where it was stored so)
  double build_ms = 0;        // what building it took, for the time a hit saves
};

// One directory of entries, one file each, named by a 128-bit hash of the key. Entries are
// written to a temporary file and renamed into place, so that processes sharing the directory
// never see a partial entry and two writers of one key both succeed; the least recently used
// entries go once the directory holds more than `max_bytes`.
class EngineCache {
 public:
  EngineCache(std::string dir, uint64_t max_bytes);

  // $KILN_ENGINE_CACHE_DIR, else $XDG_CACHE_HOME/kiln/engines, else $HOME/.cache/kiln/engines.
  static std::string default_dir();

  const std::string& dir() const { return dir_; }
  // The entry stored under `key`, marked as just used; nullopt when there is none. An entry that
  // cannot be read back (truncated, overwritten, another key under the same hash) is removed
  // with a warning and is a miss.
  std::optional<CacheEntry> get(const std::string& key);
  // Stores the entry under `key` (replacing any), then evicts least recently used entries while
  // the directory holds more than max_bytes. Failing to write is a warning, never an error: the
  // compile that built the plan goes on without the cache.
  void put(const std::string& key, const std::vector<uint8_t>& plan, double build_ms);

  // The file an entry of `key` lives in; `suffix` names the kind of entry (".kplan": a plan,
  // ".kmod": a compiled module, module_cache.h).
  std::string path_of(const std::string& key, const std::string& suffix = ".kplan") const;

  // Writes `parts` one after another into `path` through a temporary file renamed into place,
  // then evicts least recently used entries of every kind past the bound, never `path`. False,
  // with a warning naming what failed, when nothing could be written.
  bool write(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts);
  // Marks the entry at `path` as just used.
  static void touch(const std::string& path);

 private:
  void evict(const std::string& keep);

  std::string dir_;
  uint64_t max_bytes_;
  bool warned_ = false;  // that the directory cannot be created
};

}  // namespace kiln::compiler
