// Pooling converters against libtorch: max/avg 1-3-D with stride, padding, dilation, ceil_mode,
// count_include_pad, divisor_override; adaptive pooling; max pooling with its indices.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

std::string list_ir(const std::string& name, const std::vector<int64_t>& v) {
  std::string consts, s = "  %" + name + " : int[] = prim::ListConstruct(";
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string c = name + "_" + std::to_string(i);
    consts += "  %" + c + " : int = prim::Constant[value=" + std::to_string(v[i]) + "]()\n";
    s += (i ? ", %" : "%") + c;
  }
  return consts + s + ")\n";
}

std::string bool_ir(const std::string& name, bool v) {
  return "  %" + name + " : bool = prim::Constant[value=" + (v ? "1" : "0") + "]()\n";
}

std::string max_pool_ir(const std::string& op, const std::vector<int64_t>& k,
                        const std::vector<int64_t>& s, const std::vector<int64_t>& p,
                        const std::vector<int64_t>& d, bool ceil) {
  return "graph(%x : Tensor):\n" + list_ir("k", k) + list_ir("s", s) + list_ir("p", p) +
         list_ir("d", d) + bool_ir("c", ceil) + "  %y : Tensor = " + op +
         "(%x, %k, %s, %p, %d, %c)\n  return (%y)\n";
}

TEST(ConvertPooling, MaxPool2d) {
  torch::manual_seed(0);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 3, 11, 10});
    EXPECT_TRUE(
        matches_torch(max_pool_ir("aten::max_pool2d", {2, 2}, {2, 2}, {0, 0}, {1, 1}, false), {x}));
    EXPECT_TRUE(
        matches_torch(max_pool_ir("aten::max_pool2d", {3, 3}, {2, 2}, {1, 1}, {1, 1}, true), {x}));
    // stride [] means the kernel; a single value repeats.
    EXPECT_TRUE(matches_torch(max_pool_ir("aten::max_pool2d", {3}, {}, {1}, {2}, true), {x}));
    EXPECT_TRUE(
        matches_torch(max_pool_ir("aten::max_pool2d", {3, 2}, {1, 2}, {1, 0}, {2, 1}, false), {x}));
  }
  // Unbatched [C, H, W].
  EXPECT_TRUE(matches_torch(max_pool_ir("aten::max_pool2d", {2, 2}, {2, 2}, {0, 0}, {1, 1}, true),
                            {torch::randn({3, 7, 5})}));
}

TEST(ConvertPooling, MaxPool1dAnd3d) {
  torch::manual_seed(1);
  EXPECT_TRUE(matches_torch(max_pool_ir("aten::max_pool1d", {3}, {2}, {1}, {1}, true),
                            {torch::randn({2, 3, 12})}));
  EXPECT_TRUE(matches_torch(
      max_pool_ir("aten::max_pool3d", {2, 3, 2}, {2, 1, 2}, {1, 1, 0}, {1, 1, 1}, false),
      {torch::randn({2, 2, 5, 6, 7})}));
}

std::string avg_pool_ir(const std::string& op, const std::vector<int64_t>& k,
                        const std::vector<int64_t>& s, const std::vector<int64_t>& p, bool ceil,
                        bool include_pad, bool has_divisor = true) {
  return "graph(%x : Tensor):\n  %none : NoneType = prim::Constant()\n" + list_ir("k", k) +
         list_ir("s", s) + list_ir("p", p) + bool_ir("c", ceil) + bool_ir("i", include_pad) +
         "  %y : Tensor = " + op + "(%x, %k, %s, %p, %c, %i" + (has_divisor ? ", %none" : "") +
         ")\n  return (%y)\n";
}

TEST(ConvertPooling, AvgPoolPaddingModes) {
  torch::manual_seed(2);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 3, 9, 10});
    for (bool ceil : {false, true}) {
      for (bool include_pad : {false, true}) {
        EXPECT_TRUE(matches_torch(
            avg_pool_ir("aten::avg_pool2d", {3, 3}, {2, 2}, {1, 1}, ceil, include_pad), {x}))
            << ceil << include_pad;
      }
    }
    EXPECT_TRUE(
        matches_torch(avg_pool_ir("aten::avg_pool2d", {2, 2}, {}, {0, 0}, false, true), {x}));
  }
  EXPECT_TRUE(matches_torch(avg_pool_ir("aten::avg_pool1d", {4}, {3}, {2}, true, false, false),
                            {torch::randn({2, 3, 13})}));
  EXPECT_TRUE(
      matches_torch(avg_pool_ir("aten::avg_pool3d", {2, 3, 2}, {2, 2, 1}, {1, 1, 0}, true, true),
                    {torch::randn({2, 2, 5, 7, 4})}));
}

std::string adaptive_ir(const std::string& op, const std::vector<int64_t>& size,
                        bool two_outputs = false) {
  if (two_outputs) {
    return "graph(%x : Tensor):\n" + list_ir("o", size) + "  %y : Tensor, %i : Tensor = " + op +
           "(%x, %o)\n  return (%y)\n";
  }
  return "graph(%x : Tensor):\n" + list_ir("o", size) + "  %y : Tensor = " + op +
         "(%x, %o)\n  return (%y)\n";
}

TEST(ConvertPooling, AdaptivePooling) {
  torch::manual_seed(3);
  for (int64_t batch : {1, 4}) {
    const auto x = torch::randn({batch, 3, 10, 7});
    EXPECT_TRUE(matches_torch(adaptive_ir("aten::adaptive_avg_pool2d", {1, 1}), {x}));
    EXPECT_TRUE(matches_torch(adaptive_ir("aten::adaptive_avg_pool2d", {3, 4}), {x}));
    EXPECT_TRUE(matches_torch(adaptive_ir("aten::adaptive_max_pool2d", {3, 2}, true), {x}));
  }
  EXPECT_TRUE(
      matches_torch(adaptive_ir("aten::adaptive_avg_pool1d", {5}), {torch::randn({2, 3, 12})}));
  EXPECT_TRUE(matches_torch(adaptive_ir("aten::adaptive_avg_pool3d", {2, 3, 1}),
                            {torch::randn({2, 2, 5, 7, 4})}));
}

std::string with_indices_ir(const std::string& op, const std::vector<int64_t>& k,
                            const std::vector<int64_t>& s, const std::vector<int64_t>& p,
                            const std::vector<int64_t>& d, bool ceil) {
  return "graph(%x : Tensor):\n" + list_ir("k", k) + list_ir("s", s) + list_ir("p", p) +
         list_ir("d", d) + bool_ir("c", ceil) + "  %y : Tensor, %i : Tensor = " + op +
         "(%x, %k, %s, %p, %d, %c)\n  return (%y, %i)\n";
}

TEST(ConvertPooling, MaxPoolWithIndicesGathersItsWindows) {
  torch::manual_seed(4);
  // Ties (small integers as floats), -inf everywhere in some windows, NaN twice in a window:
  // torch's index is the first of equals, the first inside the input, the last NaN.
  auto x = torch::randint(-2, 3, {2, 3, 7, 6}).to(torch::kFloat);
  x.index_put_({0, 0}, -std::numeric_limits<float>::infinity());
  x.index_put_({1, 2, 0, 0}, NAN);
  x.index_put_({1, 2, 1, 1}, NAN);
  for (bool ceil : {false, true}) {
    EXPECT_TRUE(matches_torch(
        with_indices_ir("aten::max_pool2d_with_indices", {3, 3}, {2, 2}, {1, 1}, {1, 1}, ceil),
        {x}));
  }
  EXPECT_TRUE(matches_torch(
      with_indices_ir("aten::max_pool2d_with_indices", {2, 3}, {1, 2}, {1, 0}, {2, 1}, false),
      {torch::randn({3, 9, 8})}));
  EXPECT_TRUE(
      matches_torch(with_indices_ir("aten::max_pool1d_with_indices", {3}, {2}, {1}, {1}, true),
                    {torch::randint(-3, 3, {2, 3, 12}, torch::kLong)}));
  EXPECT_TRUE(matches_torch(with_indices_ir("aten::max_pool3d_with_indices", {2, 3, 2}, {2, 1, 2},
                                            {1, 1, 0}, {1, 1, 1}, true),
                            {torch::randn({2, 2, 5, 6, 7})}));
  for (const auto& [op, out] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"aten::adaptive_max_pool2d", {3, 4}},
           {"aten::adaptive_max_pool1d", {5}},
           {"aten::adaptive_max_pool3d", {2, 3, 3}}}) {
    const auto input = out.size() == 1   ? torch::randn({2, 3, 12})
                       : out.size() == 2 ? x
                                         : torch::randn({2, 2, 5, 7, 4});
    EXPECT_TRUE(matches_torch("graph(%x : Tensor):\n" + list_ir("o", out) +
                                  "  %y : Tensor, %i : Tensor = " + op +
                                  "(%x, %o)\n  return (%y, %i)\n",
                              {input}))
        << op;
  }
}

TEST(ConvertPooling, AvgPoolDivisorOverride) {
  torch::manual_seed(5);
  const auto x = torch::randn({2, 3, 9, 8});
  for (bool ceil : {false, true}) {
    for (bool include_pad : {false, true}) {
      // Stride 1: ceil_mode adds no partial window, so every window is whole.
      EXPECT_TRUE(matches_torch("graph(%x : Tensor):\n  %two : int = prim::Constant[value=2]()\n" +
                                    list_ir("k", {3, 2}) + list_ir("s", {1, 1}) +
                                    list_ir("p", {1, 1}) + bool_ir("c", ceil) +
                                    bool_ir("i", include_pad) +
                                    "  %y : Tensor = aten::avg_pool2d(%x, %k, %s, %p, %c, %i, "
                                    "%two)\n  return (%y)\n",
                                {x}));
    }
  }
}

}  // namespace
}  // namespace kiln::conversion
