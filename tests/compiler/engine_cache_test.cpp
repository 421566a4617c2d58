// The engine cache (issue #33): a second compile of an engine loads its plan instead of building
// it, and answers as the first; refittable plans are stored weightless and hit with new weights;
// a corrupt entry is built again with a warning; a full cache drops its least recently used
// entries; two processes compiling into one cache both succeed. Above it, the compiled-module
// cache: the same module compiled the same way again is loaded whole, and anything that decides a
// compile (weights, buffers, code, spec) misses it.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "compiler/compiler_testing.h"
#include "compiler/engine_cache.h"
#include "compiler/module_cache.h"
#include "harness/process.h"
#include "harness/test_models.h"
#include "kiln/kiln.h"
#include "kiln/logging.h"
#include "kiln_test_paths.h"
#include "partitioning/atomic.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// A fresh, empty cache directory for one test, in the test process's own temporary folder (each
// name once per process; not emptied with std::filesystem::remove_all, which the torch wheel's
// libtorch.so breaks for directories with files).
std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(testing::write_temp_file(name + ".marker", "")).parent_path() /
                       ("engine_cache_" + name);
  EXPECT_FALSE(fs::exists(dir)) << dir << " is used twice";
  return dir.string();
}

// The directory's entries of one kind (".kplan": plans, ".kmod": compiled modules), or all.
std::vector<fs::path> entries(const std::string& dir, const std::string& kind = "") {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (kind.empty() || e.path().extension() == kind) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The warnings logged while it lives.
struct Warnings {
  std::vector<std::string> texts;
  Warnings() {
    set_log_sink([this](LogLevel level, const std::string& text) {
      if (level == LogLevel::kWarning) texts.push_back(text);
    });
  }
  ~Warnings() { set_log_sink(nullptr); }
  Warnings(const Warnings&) = delete;
  Warnings& operator=(const Warnings&) = delete;
};

struct Case {
  testing::TestModel model;
  CompileSpec spec;
  at::Tensor x;
};

Case make_case(const std::string& name, const std::string& dir, bool refittable) {
  Case c{testing::load_test_model(name), {}, {}};
  c.model.module.eval();
  const at::Tensor example = c.model.args.at(0).toTensor();
  const bool ids = example.scalar_type() == at::kLong;
  c.spec.inputs = {Input(example.sizes().vec(), ids ? DType::kI64 : DType::kF32)};
  c.spec.refittable = refittable;
  c.spec.engine_cache = true;
  c.spec.engine_cache_dir = dir;
  c.x = ids ? at::randint(0, 100, example.sizes(), at::kLong) : at::randn(example.sizes());
  return c;
}

// The plan field of the report's only engine.
std::string plan_of(const CompileReport& report) {
  std::string plan;
  for (const SegmentReport& s : report.segments) {
    if (s.target == "engine") plan += (plan.empty() ? "" : ",") + s.plan;
  }
  return plan;
}

double diff(const c10::IValue& a, const c10::IValue& b) {
  return (a.toTensor() - b.toTensor()).abs().max().item<double>();
}

torch::jit::Module scaled(const torch::jit::Module& m, double by) {
  torch::jit::Module out = m.clone();
  torch::NoGradGuard no_grad;
  for (const auto& p : out.named_parameters(true)) p.value.mul_(by);
  return out;
}

TEST(EngineCache, RefittablePlansAreStoredWeightlessAndHitWithAnyWeights) {
  const std::string dir = fresh_dir("refittable");
  Case c = make_case("resnet18", dir, /*refittable=*/true);
  torch::NoGradGuard no_grad;
  CompileReport first, second, tuned_report;
  torch::jit::Module a = compile(c.model.module, c.spec, &first);
  EXPECT_EQ(plan_of(first), "cache miss");
  const auto files = entries(dir, ".kplan");
  ASSERT_EQ(files.size(), 1u);
  // Weightless: resnet18's weights are 45 MB, its entry a few kB of layers.
  EXPECT_LT(fs::file_size(files[0]), 1u << 20);
  ASSERT_EQ(entries(dir, ".kmod").size(), 1u);  // and the compiled module, whole

  // The same module again: the compiled module from the cache (below, new weights reach the
  // engine entries).
  torch::jit::Module b = compile(c.model.module, c.spec, &second);
  EXPECT_EQ(plan_of(second), "cache hit");
  EXPECT_GT(second.segments[0].build_saved_ms, 0.0);
  EXPECT_NE(second.summary().find("saved"), std::string::npos) << second.summary();
  EXPECT_EQ(diff(a.forward({c.x}), b.forward({c.x})), 0.0);

  // Other weights hit the same entry, refit on load: as a build of those weights answers.
  torch::jit::Module tuned = scaled(c.model.module, 0.9);
  torch::jit::Module hit = compile(tuned, c.spec, &tuned_report);
  EXPECT_EQ(plan_of(tuned_report), "cache hit");
  CompileSpec uncached = c.spec;
  uncached.engine_cache = false;
  torch::jit::Module built = compile(tuned, uncached);
  EXPECT_EQ(diff(hit.forward({c.x}), built.forward({c.x})), 0.0);
  EXPECT_GT(diff(hit.forward({c.x}), a.forward({c.x})), 1e-3);
  EXPECT_EQ(entries(dir, ".kplan").size(), 1u);

  // Settings that shape a build are in the key.
  CompileSpec other = c.spec;
  other.workspace_size = size_t{1} << 30;
  CompileReport other_report;
  compile(c.model.module, other, &other_report);
  EXPECT_EQ(plan_of(other_report), "cache miss");
  EXPECT_EQ(entries(dir, ".kplan").size(), 2u);
}

TEST(EngineCache, WholePlansHitOnlyWithTheirOwnWeights) {
  const std::string dir = fresh_dir("whole");
  // text_encoder: little weight data, so its plan is worth storing whole.
  Case c = make_case("text_encoder", dir, /*refittable=*/false);
  torch::NoGradGuard no_grad;
  CompileReport first, second, third;
  torch::jit::Module a = compile(c.model.module, c.spec, &first);
  ASSERT_EQ(plan_of(first), "cache miss") << first.summary();
  torch::jit::Module b = compile(c.model.module, c.spec, &second);
  EXPECT_EQ(plan_of(second), "cache hit");
  EXPECT_EQ(diff(a.forward({c.x}), b.forward({c.x})), 0.0);
  torch::jit::Module tuned = scaled(c.model.module, 0.9);
  torch::jit::Module t = compile(tuned, c.spec, &third);
  EXPECT_EQ(plan_of(third), "cache miss");
  EXPECT_TRUE(testing::matches_reference(t.forward({c.x}), tuned.forward({c.x})));
}

TEST(EngineCache, ACorruptEntryIsBuiltAgainWithAWarning) {
  const std::string dir = fresh_dir("corrupt");
  Case c = make_case("resnet18", dir, /*refittable=*/true);
  torch::NoGradGuard no_grad;
  torch::jit::Module a = compile(c.model.module, c.spec);
  const auto files = entries(dir, ".kplan");
  ASSERT_EQ(files.size(), 1u);
  // Other weights each time, so that the compiled-module cache misses and the plan is read.
  double weights = 1;
  auto tuned = [&] { return scaled(c.model.module, weights += 0.01); };
  Warnings warned;
  std::vector<std::string>& warnings = warned.texts;
  for (const std::string how : {"flipped", "truncated", "empty"}) {
    warnings.clear();
    {
      std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (how == "flipped") bytes[bytes.size() / 2] ^= 0x5a;
      if (how == "truncated") bytes.resize(bytes.size() / 2);
      if (how == "empty") bytes.clear();
      f.close();
      std::ofstream(files[0], std::ios::binary | std::ios::trunc) << bytes;
    }
    CompileReport report;
    torch::jit::Module module = tuned();
    torch::jit::Module b = compile(module, c.spec, &report);
    EXPECT_EQ(plan_of(report), "cache miss") << how;
    EXPECT_TRUE(testing::matches_reference(b.forward({c.x}), module.forward({c.x}))) << how;
    ASSERT_EQ(warnings.size(), 1u) << how;
    EXPECT_NE(warnings[0].find("unusable"), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find("building the engine again"), std::string::npos) << warnings[0];
    // The rebuilt entry replaced the corrupt one.
    CompileReport again;
    compile(tuned(), c.spec, &again);
    EXPECT_EQ(plan_of(again), "cache hit") << how;
  }
}

TEST(EngineCache, AFullCacheDropsItsLeastRecentlyUsedEntries) {
  // The size of each model's entries (its plan and its compiled module), from a cache without
  // bound.
  const std::string sizing = fresh_dir("sizing");
  std::map<std::string, uint64_t> size;
  torch::NoGradGuard no_grad;
  for (const std::string name : {"resnet18", "mobilenet_v2", "vit_tiny"}) {
    const auto before = entries(sizing);
    compile(make_case(name, sizing, true).model.module, make_case(name, sizing, true).spec);
    const auto after = entries(sizing);
    ASSERT_EQ(after.size(), before.size() + 2);
    for (const auto& p : after) {
      if (std::find(before.begin(), before.end(), p) == before.end())
        size[name] += fs::file_size(p);
    }
  }
  // Room for resnet18 and either other, not all three.
  const std::string dir = fresh_dir("full");
  const uint64_t bound =
      std::max(size["resnet18"] + size["mobilenet_v2"], size["resnet18"] + size["vit_tiny"]);
  auto run = [&](const std::string& name) {
    Case c = make_case(name, dir, true);
    c.spec.engine_cache_size = bound;
    CompileReport report;
    compile(c.model.module, c.spec, &report);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // distinct use times
    return plan_of(report);
  };
  auto total = [&] {
    uint64_t bytes = 0;
    for (const auto& p : entries(dir)) bytes += fs::file_size(p);
    return bytes;
  };
  EXPECT_EQ(run("resnet18"), "cache miss");
  EXPECT_EQ(run("mobilenet_v2"), "cache miss");
  EXPECT_EQ(run("resnet18"), "cache hit");   // now used after mobilenet_v2
  EXPECT_EQ(run("vit_tiny"), "cache miss");  // mobilenet_v2 goes
  EXPECT_LE(total(), bound);
  EXPECT_EQ(entries(dir, ".kmod").size(), 2u);
  EXPECT_EQ(run("resnet18"), "cache hit");
  EXPECT_EQ(run("vit_tiny"), "cache hit");
  EXPECT_EQ(run("mobilenet_v2"), "cache miss");
  EXPECT_LE(total(), bound);
}

TEST(EngineCache, TwoProcessesCompilingIntoOneCacheBothSucceed) {
  const std::string dir = fresh_dir("concurrent");
  const std::string model = std::string(KILN_TEST_MODELS_DIR) + "/resnet18.ts";
  std::vector<testing::ProcessResult> results(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      results[i] = testing::run_process(
          {KILNC_PATH, model, testing::write_temp_file("cache_" + std::to_string(i) + ".ts", ""),
           "(1,3,64,64)", "--refittable", "--engine-cache-dir", dir});
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("cache "), std::string::npos) << r.out;
  }
  // One whole entry of each kind, no temporary files left, and the next compile hits them.
  const auto files = entries(dir);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(entries(dir, ".kplan").size(), 1u);
  EXPECT_EQ(entries(dir, ".kmod").size(), 1u);
  auto r = testing::run_process({KILNC_PATH, model, testing::write_temp_file("cache_2.ts", ""),
                                 "(1,3,64,64)", "--refittable", "--engine-cache-dir", dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cache hit"), std::string::npos) << r.out;
}

TEST(EngineCache, AnUnwritableDirectoryOnlyWarns) {
  const std::string file = testing::write_temp_file("not_a_dir", "x");
  Case c = make_case("text_encoder", file + "/cache", /*refittable=*/true);
  Warnings warned;
  std::vector<std::string>& warnings = warned.texts;
  torch::NoGradGuard no_grad;
  torch::jit::Module m = compile(c.model.module, c.spec);
  EXPECT_TRUE(testing::matches_reference(m.forward({c.x}), c.model.module.forward({c.x})));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("cannot create"), std::string::npos) << warnings[0];
}

// Phases of a report, "name name ...".
std::string phases_of(const CompileReport& report) {
  std::string out;
  for (const auto& [name, ms] : report.phase_ms) out += (out.empty() ? "" : " ") + name;
  return out;
}

TEST(ModuleCache, TheSameModuleCompiledAgainIsLoadedWhole) {
  const std::string dir = fresh_dir("module");
  Case c = make_case("resnet18", dir, /*refittable=*/false);
  torch::NoGradGuard no_grad;
  CompileReport first, second;
  torch::jit::Module a = compile(c.model.module, c.spec, &first);
  EXPECT_EQ(phases_of(first), "module key lower partition shape analysis convert stitch store");
  ASSERT_EQ(entries(dir, ".kmod").size(), 1u);
  torch::jit::Module b = compile(c.model.module, c.spec, &second);
  EXPECT_EQ(phases_of(second), "module key cached load");
  EXPECT_EQ(plan_of(second), "cache hit");
  EXPECT_GT(second.segments.at(0).build_saved_ms, 0.0);
  EXPECT_EQ(second.engine_ops, first.engine_ops);
  EXPECT_EQ(second.segments.at(0).ops, first.segments.at(0).ops);
  EXPECT_EQ(second.segments.at(0).layers, first.segments.at(0).layers);
  EXPECT_EQ(diff(a.forward({c.x}), b.forward({c.x})), 0.0);
  EXPECT_TRUE(b.hasattr("kiln_spec"));

  // Its engines read their weights from the mapped entry, which outlives the file.
  for (const auto& p : entries(dir)) fs::remove(p);
  EXPECT_EQ(diff(a.forward({c.x}), b.forward({c.x})), 0.0);
  // It saves and loads as any compiled module.
  std::stringstream saved;
  b.save(saved);
  torch::jit::Module loaded = torch::jit::load(saved);
  EXPECT_EQ(diff(a.forward({c.x}), loaded.forward({c.x})), 0.0);
}

TEST(ModuleCache, WhatDecidesACompileIsInTheKey) {
  const std::string dir = fresh_dir("module_key");
  Case c = make_case("resnet18", dir, /*refittable=*/false);
  torch::NoGradGuard no_grad;
  const auto key = [&](const torch::jit::Module& m, const CompileSpec& spec) {
    auto k = compiler::module_cache_key(m, spec);
    EXPECT_TRUE(k.has_value());
    return k.value_or("");
  };
  const std::string base = key(c.model.module, c.spec);
  EXPECT_EQ(key(c.model.module, c.spec), base);
  EXPECT_EQ(key(c.model.module.clone(), c.spec), base);  // same code and values

  // One weight's one element.
  torch::jit::Module weight = c.model.module.clone();
  (*weight.named_parameters(true).begin()).value.view(-1)[7].add_(1e-3);
  EXPECT_NE(key(weight, c.spec), base);
  // A buffer (a batch norm's running mean).
  torch::jit::Module buffer = c.model.module.clone();
  for (const auto& b : buffer.named_buffers(true)) {
    if (b.name.find("running_mean") != std::string::npos) {
      b.value.view(-1)[0].add_(1e-3);
      break;
    }
  }
  EXPECT_NE(key(buffer, c.spec), base);
  // A non-tensor attribute.
  torch::jit::Module training = c.model.module.clone();
  training.train();
  EXPECT_NE(key(training, c.spec), base);
  // The spec: an input shape, a precision, a partitioning setting; not where the cache lives.
  CompileSpec spec = c.spec;
  spec.inputs = {Input({2, 3, 64, 64})};
  EXPECT_NE(key(c.model.module, spec), base);
  spec = c.spec;
  spec.enabled_precisions = {DType::kF32, DType::kF16};
  EXPECT_NE(key(c.model.module, spec), base);
  spec = c.spec;
  spec.min_block_size = 7;
  EXPECT_NE(key(c.model.module, spec), base);
  spec = c.spec;
  spec.engine_cache_dir = dir + "_elsewhere";
  spec.engine_cache_size = 1 << 20;
  EXPECT_EQ(key(c.model.module, spec), base);
  // Other code: another model.
  EXPECT_NE(key(testing::load_test_model("mobilenet_v2").module, c.spec), base);
  // An atomic pattern registered meanwhile.
  register_atomic_subgraph("module_cache_test", {"aten::mul", "aten::add"});
  EXPECT_NE(key(c.model.module, c.spec), base);
  partitioning::unregister_atomic_pattern("module_cache_test");
  EXPECT_EQ(key(c.model.module, c.spec), base);

  // A compiled module holds kiln.Engine objects, which have no key: it compiles without the cache.
  CompileSpec uncached = c.spec;
  uncached.engine_cache = false;
  EXPECT_FALSE(compiler::module_cache_key(compile(c.model.module, uncached), c.spec).has_value());

  // New weights miss and compile; their answer is theirs.
  CompileReport first, tuned_report;
  compile(c.model.module, c.spec, &first);
  torch::jit::Module tuned = scaled(c.model.module, 0.9);
  torch::jit::Module t = compile(tuned, c.spec, &tuned_report);
  EXPECT_EQ(phases_of(tuned_report).find("cached"), std::string::npos);
  EXPECT_TRUE(testing::matches_reference(t.forward({c.x}), tuned.forward({c.x})));
  EXPECT_EQ(entries(dir, ".kmod").size(), 2u);
}

TEST(ModuleCache, ACorruptEntryIsCompiledAgainWithAWarning) {
  const std::string dir = fresh_dir("module_corrupt");
  Case c = make_case("text_encoder", dir, /*refittable=*/false);
  torch::NoGradGuard no_grad;
  torch::jit::Module a = compile(c.model.module, c.spec);
  const auto files = entries(dir, ".kmod");
  ASSERT_EQ(files.size(), 1u);
  Warnings warned;
  std::vector<std::string>& warnings = warned.texts;
  for (const std::string how : {"header", "plan", "truncated", "empty"}) {
    warnings.clear();
    {
      std::ifstream f(files[0], std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      f.close();
      if (how == "header") bytes[40] ^= 0x5a;                // in the key
      if (how == "plan") bytes[bytes.size() - 100] ^= 0x5a;  // in the last plan's weights
      if (how == "truncated") bytes.resize(bytes.size() / 2);
      if (how == "empty") bytes.clear();
      std::ofstream(files[0], std::ios::binary | std::ios::trunc) << bytes;
    }
    CompileReport report;
    torch::jit::Module b = compile(c.model.module, c.spec, &report);
    EXPECT_EQ(phases_of(report).find("cached"), std::string::npos) << how;
    EXPECT_EQ(diff(a.forward({c.x}), b.forward({c.x})), 0.0) << how;
    ASSERT_GE(warnings.size(), 1u) << how;
    EXPECT_NE(warnings[0].find("compiled-module cache"), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find("unusable"), std::string::npos) << warnings[0];
    // The compile stored a whole entry again.
    CompileReport again;
    torch::jit::Module d = compile(c.model.module, c.spec, &again);
    EXPECT_EQ(phases_of(again), "module key cached load") << how;
    EXPECT_EQ(diff(a.forward({c.x}), d.forward({c.x})), 0.0) << how;
  }
}

}  // namespace
}  // namespace kiln
