// decompose_transformer_fast_paths: the fused encoder layer and multi-head attention of torch's
// inference fast path become linear / attention / layer_norm / activation ops that compute the
// same values (relu and gelu, norm first or last, batch 1 and more, attention weights); masks,
// unknown flags and nested-tensor graphs stay as they are.
#include <gtest/gtest.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/operator.h>

#include "harness/ir_testing.h"
#include "harness/test_models.h"
#include "ir/graph_utils.h"
#include "lowering/lower.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

using torch::jit::IValue;

constexpr int64_t kEmbed = 16, kHeads = 4, kFeedForward = 24;

bool has_sdpa() {
  return !torch::jit::getAllOperatorsFor(
              c10::Symbol::fromQualString("aten::scaled_dot_product_attention"))
              .empty();
}

size_t count_kind(torch::jit::Graph& graph, const char* kind) {
  size_t n = 0;
  ir::for_each_node(graph.block(), [&](torch::jit::Node* node) {
    n += std::string(node->kind().toQualString()) == kind;
  });
  return n;
}

// Every output within 1e-4 * max|expected| + 1e-5 of the fused op's.
::testing::AssertionResult same_outputs(const torch::jit::Graph& before,
                                        const torch::jit::Graph& after,
                                        const std::vector<IValue>& inputs) {
  const auto expected = testing::run_graph(before, inputs);
  const auto actual = testing::run_graph(after, inputs);
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure()
           << actual.size() << " outputs, expected " << expected.size();
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const at::Tensor b = expected[i].toTensor(), a = actual[i].toTensor();
    if (a.sizes() != b.sizes()) {
      return ::testing::AssertionFailure()
             << "output " << i << " has shape " << a.sizes() << ", expected " << b.sizes();
    }
    const double diff = (a - b).abs().max().item<double>();
    const double bound = 1e-4 * b.abs().max().item<double>() + 1e-5;
    if (!(diff <= bound)) {
      return ::testing::AssertionFailure()
             << "output " << i << " differs by " << diff << " (bound " << bound << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Weights scaled like nn.Linear's initialization, so activations stay of order one.
at::Tensor weight(int64_t out, int64_t in) {
  return torch::randn({out, in}) / std::sqrt(static_cast<double>(in));
}

// ---- aten::_transformer_encoder_layer_fwd ----

std::string encoder_layer_ir(bool gelu, bool norm_first, double eps) {
  return R"IR(
graph(%x : Tensor, %qkv_w : Tensor, %qkv_b : Tensor, %proj_w : Tensor, %proj_b : Tensor,
      %n1_w : Tensor, %n1_b : Tensor, %n2_w : Tensor, %n2_b : Tensor,
      %f1_w : Tensor, %f1_b : Tensor, %f2_w : Tensor, %f2_b : Tensor):
  %E : int = prim::Constant[value=16]()
  %H : int = prim::Constant[value=4]()
  %gelu : bool = prim::Constant[value=)IR" +
         std::to_string(gelu) + R"IR(]()
  %norm_first : bool = prim::Constant[value=)IR" +
         std::to_string(norm_first) + R"IR(]()
  %eps : float = prim::Constant[value=)IR" +
         std::to_string(eps) + R"IR(]()
  %none : NoneType = prim::Constant()
  %y : Tensor = aten::_transformer_encoder_layer_fwd(%x, %E, %H, %qkv_w, %qkv_b, %proj_w, %proj_b, %gelu, %norm_first, %eps, %n1_w, %n1_b, %n2_w, %n2_b, %f1_w, %f1_b, %f2_w, %f2_b, %none, %none)
  return (%y))IR";
}

std::vector<IValue> encoder_layer_inputs(int64_t batch, int64_t seq) {
  torch::manual_seed(batch);
  return {torch::randn({batch, seq, kEmbed}), weight(3 * kEmbed, kEmbed),
          torch::randn({3 * kEmbed}) * 0.1,   weight(kEmbed, kEmbed),
          torch::randn({kEmbed}) * 0.1,       torch::rand({kEmbed}) + 0.5,
          torch::randn({kEmbed}) * 0.1,       torch::rand({kEmbed}) + 0.5,
          torch::randn({kEmbed}) * 0.1,       weight(kFeedForward, kEmbed),
          torch::randn({kFeedForward}) * 0.1, weight(kEmbed, kFeedForward),
          torch::randn({kEmbed}) * 0.1};
}

struct EncoderCase {
  bool gelu;
  bool norm_first;
  int64_t batch;
};

void PrintTo(const EncoderCase& c, std::ostream* os) {
  *os << (c.gelu ? "gelu" : "relu") << (c.norm_first ? "_norm_first" : "_norm_last") << "_batch"
      << c.batch;
}

class EncoderLayer : public ::testing::TestWithParam<EncoderCase> {};

TEST_P(EncoderLayer, BecomesLinearAttentionAndLayerNormWithTheSameValues) {
  const EncoderCase c = GetParam();
  // A large eps, so that using another one shows in the values.
  auto g = testing::parse(encoder_layer_ir(c.gelu, c.norm_first, 0.25));
  auto before = g->copy();
  EXPECT_TRUE(decompose_transformer_fast_paths(g));
  EXPECT_EQ(count_kind(*g, "aten::_transformer_encoder_layer_fwd"), 0u) << *g;
  EXPECT_EQ(count_kind(*g, "aten::linear"), 4u) << *g;  // qkv, out_proj, two feed-forward
  EXPECT_EQ(count_kind(*g, "aten::layer_norm"), 2u) << *g;
  EXPECT_EQ(count_kind(*g, "aten::gelu"), c.gelu ? 1u : 0u) << *g;
  EXPECT_EQ(count_kind(*g, "aten::relu"), c.gelu ? 0u : 1u) << *g;
  // Norm first: layer norm 1 before the qkv projection; else after the residual add.
  EXPECT_TRUE(testing::file_check(c.norm_first ? "CHECK-NOT: aten::linear\nCHECK: aten::layer_norm"
                                               : "CHECK-NOT: aten::layer_norm\nCHECK: aten::linear",
                                  *g));
  EXPECT_TRUE(testing::file_check(
      has_sdpa() ? "CHECK: aten::scaled_dot_product_attention"
                 : "CHECK: aten::matmul\nCHECK: aten::softmax\nCHECK: aten::matmul",
      *g));
  EXPECT_TRUE(same_outputs(*before, *g, encoder_layer_inputs(c.batch, 7)));
}

INSTANTIATE_TEST_SUITE_P(ActivationNormAndBatch, EncoderLayer,
                         ::testing::Values(EncoderCase{false, false, 1},
                                           EncoderCase{false, false, 3},
                                           EncoderCase{false, true, 1}, EncoderCase{false, true, 3},
                                           EncoderCase{true, false, 1}, EncoderCase{true, false, 3},
                                           EncoderCase{true, true, 1}, EncoderCase{true, true, 3}),
                         [](const ::testing::TestParamInfo<EncoderCase>& info) {
                           std::ostringstream os;
                           PrintTo(info.param, &os);
                           return os.str();
                         });

TEST(DecomposeTransformerFastPaths, EncoderLayerUsesItsEps) {
  for (double eps : {1e-5, 0.5}) {
    auto g = testing::parse(encoder_layer_ir(true, false, eps));
    auto before = g->copy();
    EXPECT_TRUE(decompose_transformer_fast_paths(g));
    EXPECT_TRUE(same_outputs(*before, *g, encoder_layer_inputs(2, 5))) << "eps " << eps;
  }
}

// ---- aten::_native_multi_head_attention ----

// `query`, `key`, `value` name graph inputs %q, %k, %v; returns the outputs named in `outputs`.
std::string attention_ir(const std::string& query, const std::string& key, const std::string& value,
                         bool need_weights, bool average, const std::string& outputs) {
  return R"IR(
graph(%q : Tensor, %k : Tensor, %v : Tensor, %qkv_w : Tensor, %qkv_b : Tensor,
      %proj_w : Tensor, %proj_b : Tensor):
  %E : int = prim::Constant[value=16]()
  %H : int = prim::Constant[value=4]()
  %need : bool = prim::Constant[value=)IR" +
         std::to_string(need_weights) + R"IR(]()
  %average : bool = prim::Constant[value=)IR" +
         std::to_string(average) + R"IR(]()
  %none : NoneType = prim::Constant()
  %out : Tensor, %weights : Tensor = aten::_native_multi_head_attention(%)IR" +
         query + ", %" + key + ", %" + value +
         R"IR(, %E, %H, %qkv_w, %qkv_b, %proj_w, %proj_b, %none, %need, %average, %none)
  return ()IR" +
         outputs + ")";
}

std::vector<IValue> attention_inputs(int64_t batch, int64_t seq) {
  torch::manual_seed(batch + 10);
  return {torch::randn({batch, seq, kEmbed}), torch::randn({batch, seq, kEmbed}),
          torch::randn({batch, seq, kEmbed}), weight(3 * kEmbed, kEmbed),
          torch::randn({3 * kEmbed}) * 0.1,   weight(kEmbed, kEmbed),
          torch::randn({kEmbed}) * 0.1};
}

TEST(DecomposeTransformerFastPaths, SelfAttentionWithoutWeights) {
  for (int64_t batch : {1, 3}) {
    auto g = testing::parse(attention_ir("q", "q", "q", false, true, "%out"));
    auto before = g->copy();
    EXPECT_TRUE(decompose_transformer_fast_paths(g));
    EXPECT_EQ(count_kind(*g, "aten::_native_multi_head_attention"), 0u) << *g;
    // One packed projection for q, k and v, and the output projection.
    EXPECT_EQ(count_kind(*g, "aten::linear"), 2u) << *g;
    EXPECT_TRUE(testing::file_check(
        has_sdpa() ? "CHECK: aten::scaled_dot_product_attention" : "CHECK: aten::softmax", *g));
    EXPECT_TRUE(same_outputs(*before, *g, attention_inputs(batch, 9))) << "batch " << batch;
  }
}

TEST(DecomposeTransformerFastPaths, SelfAttentionWithAveragedAndPerHeadWeights) {
  for (bool average : {true, false}) {
    for (int64_t batch : {1, 2}) {
      auto g = testing::parse(attention_ir("q", "q", "q", true, average, "%out, %weights"));
      auto before = g->copy();
      EXPECT_TRUE(decompose_transformer_fast_paths(g));
      EXPECT_EQ(count_kind(*g, "aten::_native_multi_head_attention"), 0u) << *g;
      EXPECT_EQ(count_kind(*g, "aten::softmax"), 1u) << *g;
      EXPECT_EQ(count_kind(*g, "aten::mean"), average ? 1u : 0u) << *g;
      EXPECT_TRUE(same_outputs(*before, *g, attention_inputs(batch, 6)))
          << "average " << average << ", batch " << batch;
    }
  }
}

TEST(DecomposeTransformerFastPaths, WeightsAskedForButUnusedAreNotComputed) {
  auto g = testing::parse(attention_ir("q", "q", "q", true, true, "%out"));
  auto before = g->copy();
  EXPECT_TRUE(decompose_transformer_fast_paths(g));
  EXPECT_EQ(count_kind(*g, "aten::mean"), 0u) << *g;
  EXPECT_TRUE(same_outputs(*before, *g, attention_inputs(2, 5)));
}

TEST(DecomposeTransformerFastPaths, CrossAttentionProjectsEachInputWithItsRows) {
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"k", "v"}, {"k", "k"}}) {
    auto g = testing::parse(attention_ir("q", key, value, true, true, "%out, %weights"));
    auto before = g->copy();
    EXPECT_TRUE(decompose_transformer_fast_paths(g));
    EXPECT_EQ(count_kind(*g, "aten::_native_multi_head_attention"), 0u) << *g;
    EXPECT_EQ(count_kind(*g, "aten::linear"), 4u) << *g;
    EXPECT_TRUE(same_outputs(*before, *g, attention_inputs(2, 5))) << key << ", " << value;
  }
}

// ---- what stays ----

TEST(DecomposeTransformerFastPaths, LeavesMasksUnknownFlagsAndUndefinedWeightsAlone) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %mask : Tensor, %gelu : bool, %w : Tensor, %b : Tensor):
  %E : int = prim::Constant[value=16]()
  %H : int = prim::Constant[value=4]()
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %eps : float = prim::Constant[value=1.0000000000000001e-05]()
  %none : NoneType = prim::Constant()
  %masked : Tensor = aten::_transformer_encoder_layer_fwd(%x, %E, %H, %w, %b, %w, %b, %t, %f, %eps, %b, %b, %b, %b, %w, %b, %w, %b, %mask, %one)
  %flag : Tensor = aten::_transformer_encoder_layer_fwd(%x, %E, %H, %w, %b, %w, %b, %gelu, %f, %eps, %b, %b, %b, %b, %w, %b, %w, %b, %none, %none)
  %a : Tensor, %a_w : Tensor = aten::_native_multi_head_attention(%x, %x, %x, %E, %H, %w, %b, %w, %b, %mask, %f, %t, %one)
  %c : Tensor, %c_w : Tensor = aten::_native_multi_head_attention(%x, %x, %x, %E, %H, %w, %b, %w, %b, %none, %f, %t, %none)
  return (%masked, %flag, %a, %c, %c_w))IR");
  EXPECT_FALSE(decompose_transformer_fast_paths(g));
  EXPECT_EQ(count_kind(*g, "aten::_transformer_encoder_layer_fwd"), 2u) << *g;
  EXPECT_EQ(count_kind(*g, "aten::_native_multi_head_attention"), 2u) << *g;
}

TEST(DecomposeTransformerFastPaths, LeavesGraphsWithNestedTensorsAlone) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %keep : Tensor, %w : Tensor, %b : Tensor):
  %E : int = prim::Constant[value=16]()
  %H : int = prim::Constant[value=4]()
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %zero : float = prim::Constant[value=0.]()
  %eps : float = prim::Constant[value=1.0000000000000001e-05]()
  %none : NoneType = prim::Constant()
  %nested : Tensor = aten::_nested_tensor_from_mask(%x, %keep, %f)
  %y : Tensor = aten::_transformer_encoder_layer_fwd(%nested, %E, %H, %w, %b, %w, %b, %t, %f, %eps, %b, %b, %b, %b, %w, %b, %w, %b, %none, %none)
  %z : Tensor = aten::to_padded_tensor(%y, %zero, %none)
  return (%z))IR");
  EXPECT_FALSE(decompose_transformer_fast_paths(g));
  EXPECT_EQ(count_kind(*g, "aten::_transformer_encoder_layer_fwd"), 1u) << *g;
}

// ---- blocks, marks, models ----

TEST(DecomposeTransformerFastPaths, RewritesInsideBlocksAndKeepsFallbackMarks) {
  auto g = testing::parse(R"IR(
graph(%q : Tensor, %k : Tensor, %v : Tensor, %qkv_w : Tensor, %qkv_b : Tensor,
      %proj_w : Tensor, %proj_b : Tensor):
  %E : int = prim::Constant[value=16]()
  %H : int = prim::Constant[value=4]()
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %cond : bool = aten::is_grad_enabled()
  %y : Tensor = prim::If(%cond)
    block0():
      -> (%q)
    block1():
      %out : Tensor, %weights : Tensor = aten::_native_multi_head_attention(%q, %q, %q, %E, %H, %qkv_w, %qkv_b, %proj_w, %proj_b, %none, %f, %t, %none)
      -> (%out)
  return (%y))IR");
  ir::for_each_node(g->block(), [](torch::jit::Node* n) {
    if (n->kind().toQualString() == std::string("aten::_native_multi_head_attention")) {
      n->i_(torch_executed_attr(), 1);
    }
  });
  auto before = g->copy();
  EXPECT_TRUE(decompose_transformer_fast_paths(g));
  EXPECT_EQ(count_kind(*g, "aten::_native_multi_head_attention"), 0u) << *g;
  size_t unmarked = 0, marked = 0;
  ir::for_each_node(g->block(), [&](torch::jit::Node* n) {
    if (n->owningBlock() == g->block() || n->kind() == c10::prim::Constant) return;
    (is_torch_executed(n) ? marked : unmarked) += 1;
  });
  EXPECT_GT(marked, 5u);
  EXPECT_EQ(unmarked, 0u) << *g;
  torch::NoGradGuard no_grad;  // takes the branch with the attention
  EXPECT_TRUE(same_outputs(*before, *g, attention_inputs(2, 5)));
}

// The test models traced in inference mode: lowering leaves no fused op and the same outputs.
class FastPathModel : public ::testing::TestWithParam<std::string> {};

TEST_P(FastPathModel, LowersWithoutFusedOpsAndWithTheSameOutputs) {
  testing::TestModel m = testing::load_test_model(GetParam());
  {
    auto traced = m.module.get_method("forward").graph()->copy();
    torch::jit::Inline(*traced);
    EXPECT_GT(count_kind(*traced, "aten::_transformer_encoder_layer_fwd") +
                  count_kind(*traced, "aten::_native_multi_head_attention"),
              0u)
        << "the model was expected to trace to the fast path";
  }
  auto graph = lower_module(m.module);
  EXPECT_EQ(count_kind(*graph, "aten::_transformer_encoder_layer_fwd"), 0u) << *graph;
  EXPECT_EQ(count_kind(*graph, "aten::_native_multi_head_attention"), 0u) << *graph;
  std::vector<IValue> inputs{m.module._ivalue()};
  inputs.insert(inputs.end(), m.args.begin(), m.args.end());
  torch::NoGradGuard no_grad;
  auto outputs = testing::run_graph(*graph, inputs);
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_TRUE(testing::all_close(outputs[0], m.expected, 1e-4, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Models, FastPathModel,
                         ::testing::Values("transformer_fast_path", "vit_tiny_fast_path"));

}  // namespace
}  // namespace kiln::lowering
