// The compiled-module cache (issue #33), above the engine cache: a whole compile stored by what
// decides it (the module's code and its tensor constants, every attribute with parameters and
// buffers by their data, the spec, the device, the atomic patterns partitioning uses, and the
// versions of torch and kiln), so that compiling the same module again loads the compiled module
// instead of lowering, partitioning, converting and building it. New weights miss here and fall to
// the engine cache below (a weightless entry refit with them).
//
// An entry's plans lie outside the module's archive, 64-byte aligned, and a hit maps the file
// instead of reading it: the engines' weights are views of the mapping, so loading copies no
// weights. Entries share the engine cache's directory and its size bound (LRU eviction).
#pragma once

#include <optional>
#include <string>

#include <torch/script.h>

#include "compiler/engine_cache.h"
#include "kiln/kiln.h"

namespace kiln::compiler {

// The key of compiling `module` with `spec`; nullopt when the module holds something that cannot
// be keyed by value (a custom-class object, a quantized or sparse tensor): such a module is
// compiled without this cache.
std::optional<std::string> module_cache_key(const torch::jit::Module& module,
                                            const CompileSpec& spec);

struct CachedCompile {
  torch::jit::Module module;
  // The compile's report as it was when stored; the caller says it came from the cache.
  CompileReport report;
  double compile_ms = 0;  // what the stored compile took
};

// The compiled module stored under `key`, its entry marked as just used; nullopt when there is
// none, or (with a warning, the entry removed) when it cannot be used.
std::optional<CachedCompile> load_compiled(EngineCache& cache, const std::string& key);

// compile()'s first step with the cache: the key of `module` with `spec` (none where the module
// cannot be keyed) and, when an entry has it, the compiled module, `report` then the stored
// compile's with its engines "cache hit" and phases "module key" and "cached load"; on a miss
// `report` gets the "module key" phase.
struct ModuleLookup {
  std::optional<std::string> key;
  std::optional<torch::jit::Module> hit;
};
ModuleLookup look_up_module(EngineCache& cache, const torch::jit::Module& module,
                            const CompileSpec& spec, CompileReport& report);

// Stores `compiled` under `key` (replacing any). Failing to write is a warning, never an error.
void store_compiled(EngineCache& cache, const std::string& key, const torch::jit::Module& compiled,
                    const CompileReport& report, double compile_ms);

// CompileReport::to_json's inverse; CorruptInput naming `where` for anything else.
CompileReport report_from_json(const std::string& text, const std::string& where);

}  // namespace kiln::compiler
