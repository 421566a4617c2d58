// Resource partitioning on resnet50 (issue #34): budgets that make 2, 3 and 4 engines, with the
// outputs unchanged and no atomic pattern split across two of them.
#include <gtest/gtest.h>

#include <map>

#include "compiler/capability.h"
#include "compiler/compiler_testing.h"
#include "harness/test_models.h"
#include "lowering/lower.h"
#include "partitioning/atomic.h"
#include "partitioning/partitioning.h"

namespace kiln {
namespace {

size_t engines_of(const partitioning::PartitionedGraph& p) {
  size_t n = 0;
  for (const auto& s : p.segments) n += s.target == partitioning::Target::kEngine;
  return n;
}

// Every atomic pattern among the engine segments' nodes lies in one segment.
void expect_no_pattern_split(const partitioning::PartitionedGraph& p) {
  std::vector<torch::jit::Node*> nodes;
  std::map<const torch::jit::Node*, size_t> segment_of;
  for (size_t i = 0; i < p.segments.size(); ++i) {
    const auto& s = p.segments[i];
    if (s.target != partitioning::Target::kEngine) continue;
    for (torch::jit::Node* n : s.nodes) {
      if (s.copied.count(n)) continue;
      nodes.push_back(n);
      segment_of[n] = i;
    }
  }
  const auto groups = partitioning::atomic_groups(nodes, partitioning::atomic_patterns());
  std::map<size_t, size_t> group_segment;
  for (const auto& [n, g] : groups) {
    auto [it, fresh] = group_segment.emplace(g, segment_of.at(n));
    EXPECT_EQ(it->second, segment_of.at(n)) << "pattern split at " << n->kind().toQualString();
  }
  EXPECT_GT(group_segment.size(), 10u);  // resnet50 has a conv -> relu in every block
}

TEST(ResourcePartitioning, Resnet50InTwoThreeAndFourPiecesAnswersTheSame) {
  testing::TestModel m = testing::load_test_model("zoo_resnet50");
  const at::Tensor x = m.args[0].toTensor();
  CompileSpec spec;
  spec.inputs = {Input(x.sizes().vec(), DType::kF32)};
  // The graph compile() partitions: the spec's dtype, rank and static sizes.
  lowering::LoweringOptions options;
  options.input_types = {std::make_pair(c10::ScalarType::Float, x.dim())};
  options.input_sizes = {std::vector<std::optional<int64_t>>(x.sizes().begin(), x.sizes().end())};
  auto graph = lowering::lower_module(m.module, options);
  compiler::RegistryCapability capability;
  partitioning::PartitionSettings settings;
  ASSERT_EQ(engines_of(partitioning::partition(graph, capability, settings)), 1u);
  // The largest weight budget (per engine) that gives k pieces, from a sweep.
  std::map<size_t, uint64_t> budget_for;
  for (uint64_t mib = 120; mib >= 4; --mib) {
    settings.max_engine_weight_bytes = mib << 20;
    const auto p = partitioning::partition(graph, capability, settings);
    const size_t k = engines_of(p);
    if (k > 4) break;
    if (k >= 2 && k <= 4 && !budget_for.count(k)) {
      budget_for[k] = settings.max_engine_weight_bytes;
      expect_no_pattern_split(p);
    }
  }
  ASSERT_EQ(budget_for.size(), 3u) << "no budget gives 2, 3 and 4 pieces";
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);  // f32 resnet50: inputs whose differences sit well inside 1e-4
  const at::Tensor input = at::randn(x.sizes());
  const at::Tensor expected = m.module.forward({input}).toTensor();
  for (const auto& [k, weight_bytes] : budget_for) {
    spec.enable_resource_partitioning = true;
    spec.cpu_memory_budget =
        static_cast<uint64_t>(static_cast<double>(weight_bytes) * kBuildMemoryMultiplier);
    CompileReport report;
    torch::jit::Module compiled = compile(m.module, spec, &report);
    EXPECT_EQ(testing::count_segments(report, "engine"), k) << report.summary();
    EXPECT_EQ(testing::count_segments(report, "torch"), 0u) << report.summary();
    const at::Tensor y = compiled.forward({input}).toTensor();
    EXPECT_TRUE(at::allclose(y, expected, 1e-4, 1e-4))
        << k << " pieces: max diff " << (y - expected).abs().max().item<double>();
  }
}

}  // namespace
}  // namespace kiln
