// decompose_ops' tensor algebra and losses (decompose_linalg.cpp, decompose_losses.cpp), the
// indexing and special functions of decompose_math.cpp added with them, and the rewrites of
// several outputs: each op against torch's own, on the graph's shapes and, where the rewrite
// reads sizes at run time, on others.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

// The constants every call below may name.
constexpr const char* kConstants = R"IR(
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %three : int = prim::Constant[value=3]()
  %four : int = prim::Constant[value=4]()
  %m1 : int = prim::Constant[value=-1]()
  %m2 : int = prim::Constant[value=-2]()
  %m100 : int = prim::Constant[value=-100]()
  %half : float = prim::Constant[value=0.5]()
  %onef : float = prim::Constant[value=1.]()
  %twof : float = prim::Constant[value=2.]()
  %threef : float = prim::Constant[value=3.]()
  %zerof : float = prim::Constant[value=0.]()
  %eps : float = prim::Constant[value=1e-06]()
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %d12 : int[] = prim::Constant[value=[1, 2]]()
  %d02 : int[] = prim::Constant[value=[0, 2]]()
  %d0 : int[] = prim::Constant[value=[0]]()
  %d1 : int[] = prim::Constant[value=[1]]()
  %s45 : int[] = prim::Constant[value=[4, 5]]()
  %s5 : int[] = prim::Constant[value=[5]]()
  %s15 : int[] = prim::Constant[value=[1, 5]]()
  %d01 : int[] = prim::Constant[value=[0, 1]]()
  %d10 : int[] = prim::Constant[value=[1, 0]]()
  %empty : int[] = prim::ListConstruct()
  %six : int = prim::Constant[value=6]()
  %q : float = prim::Constant[value=0.3]()
  %linear : str = prim::Constant[value="linear"]()
  %lower : str = prim::Constant[value="lower"]()
  %higher : str = prim::Constant[value="higher"]()
  %midpoint : str = prim::Constant[value="midpoint"]()
  %nearest : str = prim::Constant[value="nearest"]()
)IR";

// Parses `signature` + constants + `%r = call`, decomposes it, checks the op is gone and that
// the outputs match the original graph's on `inputs` (and on `others`, when given).
void expect_decomposed(const std::string& signature, const std::string& call,
                       const std::vector<torch::jit::IValue>& inputs,
                       const std::vector<torch::jit::IValue>& others = {}, double rtol = 1e-5,
                       double atol = 1e-5) {
  const std::string op = call.substr(0, call.find('('));
  auto g = testing::parse(signature + kConstants + "  %r : Tensor = " + call + "\n  return (%r)");
  propagate_constants(g);  // the empty list construct, as lowering leaves it
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g)) << call;
  EXPECT_TRUE(testing::file_check("CHECK-NOT: " + op + "(", *g)) << call;
  try {
    EXPECT_TRUE(testing::same_values(*before, *g, inputs, rtol, atol)) << call;
    if (!others.empty()) {
      EXPECT_TRUE(testing::same_values(*before, *g, others, rtol, atol)) << call;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << call << ": " << e.what() << "\n" << *g;
  }
}

TEST(DecomposeLinalg, DiagonalsMatchTorch) {
  const std::string sig =
      "graph(%a : Float(4, 5), %c : Float(3, 4, 5), %v : Float(5), %i : Long(3, 3)):";
  const std::vector<torch::jit::IValue> in = {torch::randn({4, 5}), torch::randn({3, 4, 5}),
                                              torch::randn({5}),
                                              torch::randint(-9, 9, {3, 3}, torch::kLong)};
  // The same ranks, other sizes: the rewrites read them at run time.
  const std::vector<torch::jit::IValue> other = {torch::randn({6, 2}), torch::randn({2, 5, 3}),
                                                 torch::randn({3}),
                                                 torch::randint(-9, 9, {2, 4}, torch::kLong)};
  for (const char* call :
       {"aten::diagonal(%a, %one, %zero, %one)", "aten::diagonal(%a, %m2, %one, %zero)",
        "aten::diagonal(%c, %m1, %two, %zero)", "aten::linalg_diagonal(%c, %zero, %m2, %m1)",
        "aten::diagonal(%i, %zero, %zero, %one)", "aten::diag(%v, %two)", "aten::diag(%v, %m1)",
        "aten::diag(%a, %m1)", "aten::diag(%i, %one)", "aten::diag_embed(%a, %one, %m1, %m2)",
        "aten::diag_embed(%a, %zero, %m2, %m1)", "aten::diagflat(%a, %one)"}) {
    expect_decomposed(sig, call, in, other);
  }
}

TEST(DecomposeLinalg, ProductsAndShufflesMatchTorch) {
  const std::string sig =
      "graph(%a : Float(4, 5), %c : Float(3, 4, 5), %w : Float(2, 3, 5), %x1 : Float(4, 3), "
      "%bw : Float(6, 3, 5), %bb : Float(6), %ps : Float(2, 8, 2, 3), %pu : Float(2, 4, 6)):";
  const std::vector<torch::jit::IValue> in = testing::random_inputs(
      {{4, 5}, {3, 4, 5}, {2, 3, 5}, {4, 3}, {6, 3, 5}, {6}, {2, 8, 2, 3}, {2, 4, 6}});
  const std::vector<torch::jit::IValue> other = testing::random_inputs(
      {{2, 5}, {3, 2, 5}, {4, 3, 5}, {2, 3}, {2, 3, 5}, {2}, {1, 12, 3, 1}, {3, 2, 4}});
  for (const char* call :
       {"aten::kron(%a, %c)", "aten::kron(%c, %a)", "aten::tensordot(%c, %w, %d02, %d12)",
        "aten::bilinear(%x1, %a, %bw, %bb)", "aten::bilinear(%x1, %a, %bw, %none)",
        "aten::linalg_vecdot(%a, %a, %m1)", "aten::pixel_shuffle(%ps, %two)",
        "aten::pixel_unshuffle(%pu, %two)", "aten::channel_shuffle(%ps, %four)"}) {
    expect_decomposed(sig, call, in, other);
  }
}

TEST(DecomposeLinalg, DistancesNormsAndIntegralsMatchTorch) {
  const std::string sig =
      "graph(%a : Float(4, 5), %b : Float(4, 5), %c : Float(3, 4, 5), %d : Float(3, 6, 5), "
      "%x : Float(5)):";
  auto in = testing::random_inputs({{4, 5}, {4, 5}, {3, 4, 5}, {3, 6, 5}, {5}});
  at::Tensor a = in[0].toTensor();
  a[1] = 1e-9;  // a row of norm below eps: cosine_similarity clamps it
  at::Tensor b = in[1].toTensor();
  b[2][3] = a[2][3].item<float>();  // a zero difference: the 0-norm counts the others
  in[4] = at::cumsum(at::rand({5}) + 0.1, 0);
  for (const char* call :
       {"aten::cosine_similarity(%a, %b, %one, %eps)", "aten::cosine_similarity(%c, %a, %m1, %eps)",
        "aten::pairwise_distance(%a, %b, %twof, %eps, %f)",
        "aten::pairwise_distance(%a, %b, %onef, %eps, %t)", "aten::dist(%a, %b, %zerof)",
        "aten::dist(%a, %b, %threef)", "aten::cdist(%c, %d, %twof, %none)",
        "aten::cdist(%c, %d, %zerof, %none)", "aten::cdist(%c, %d, %onef, %none)",
        "aten::renorm(%c, %twof, %one, %half)", "aten::renorm(%a, %onef, %zero, %threef)",
        "aten::trapezoid(%a, %x, %m1)", "aten::trapezoid(%a, %b, %zero)",
        "aten::trapz(%c, %half, %one)", "aten::cumulative_trapezoid(%a, %b, %one)",
        "aten::cumulative_trapezoid(%c, %x, %two)"}) {
    expect_decomposed(sig, call, in, {}, 1e-5, 1e-5);
  }
}

// Sorting statistics (NaN sorts last: median's NaN, nanmedian's middle of the numbers),
// windows (unfold) and covariances.
TEST(DecomposeLinalg, StatisticsAndWindowsMatchTorch) {
  const std::string sig =
      "graph(%a : Float(4, 5), %n : Float(4, 5), %v : Float(7), %i : Long(6), %z : Float()):";
  auto in = testing::random_inputs({{4, 5}, {4, 5}, {7}});
  at::Tensor n = in[1].toTensor();
  n[0][1] = std::numeric_limits<float>::quiet_NaN();
  n[2][3] = std::numeric_limits<float>::quiet_NaN();
  in.push_back(torch::randint(-5, 5, {6}, torch::kLong));
  in.push_back(at::scalar_tensor(1.5f));
  const std::vector<torch::jit::IValue> other = {
      torch::randn({3, 8}), torch::randn({2, 3}), torch::randn({4}),
      torch::randint(-5, 5, {3}, torch::kLong), at::scalar_tensor(-2.f)};
  for (const char* call :
       {"aten::msort(%a)", "aten::msort(%i)", "aten::median(%a)", "aten::median(%n)",
        "aten::median(%i)", "aten::median(%z)", "aten::nanmedian(%n)", "aten::nanmedian(%v)",
        "aten::unfold(%a, %one, %two, %one)", "aten::unfold(%a, %zero, %two, %three)",
        "aten::unfold(%v, %zero, %three, %two)", "aten::unfold(%z, %zero, %one, %one)",
        "aten::cov(%a, %one, %none, %none)", "aten::cov(%v, %zero, %none, %none)",
        "aten::corrcoef(%a)", "aten::corrcoef(%v)"}) {
    expect_decomposed(sig, call, in, other);
  }
  // Quantiles in each interpolation (NaN rows: quantile's NaN, nanquantile's numbers), along a
  // dim, kept or not, and of everything; row 0 of %n has a NaN, row 1 none.
  for (const char* call :
       {"aten::quantile(%a, %q, %one, %f, %linear)", "aten::quantile(%n, %q, %one, %t, %linear)",
        "aten::quantile(%a, %half, %none, %f, %lower)",
        "aten::quantile(%a, %q, %zero, %f, %higher)",
        "aten::quantile(%v, %q, %zero, %t, %midpoint)",
        "aten::quantile(%a, %q, %none, %t, %nearest)", "aten::quantile(%z, %q, %none, %f, %linear)",
        "aten::nanquantile(%n, %q, %one, %f, %linear)",
        "aten::nanquantile(%n, %half, %none, %f, %nearest)",
        "aten::nanquantile(%n, %q, %zero, %t, %midpoint)"}) {
    expect_decomposed(sig, call, in, other);
  }
}

// Powers n >= 0 of (batches of) square matrices: the identity, the matrix, products by squaring.
TEST(DecomposeLinalg, MatrixPowersMatchTorch) {
  const std::string sig = "graph(%a : Float(2, 4, 4)):\n  %five : int = prim::Constant[value=5]()";
  const std::vector<torch::jit::IValue> in = {torch::randn({2, 4, 4}) * 0.5};
  const std::vector<torch::jit::IValue> other = {torch::randn({3, 2, 2}) * 0.5};
  for (const char* call :
       {"aten::linalg_matrix_power(%a, %zero)", "aten::linalg_matrix_power(%a, %one)",
        "aten::linalg_matrix_power(%a, %three)", "aten::linalg_matrix_power(%a, %five)"}) {
    expect_decomposed(sig, call, in, other);
  }
}

// Indexed writes: repeated indices add up (index_add, put with accumulate, scatter_reduce),
// negative ones count from the end (index_fill, put), untouched elements keep x (or, for
// scatter_reduce without self, the elements no update reaches).
TEST(DecomposeScatter, IndexedWritesMatchTorch) {
  const std::string sig =
      "graph(%x : Float(4, 5), %src : Float(4, 3), %idx : Long(3), %rep : Long(3), %neg : Long(2), "
      "%m : Bool(4, 1), %flat : Long(4), %sidx : Long(2, 5), %s2 : Float(2, 5), %z : Float(), "
      "%zi : Long(1), %zs : Float(), %v4 : Float(4), %sm : Bool(5)):\n  %sum : str = "
      "prim::Constant[value=\"sum\"]()\n"
      "  %mean : str = prim::Constant[value=\"mean\"]()";
  std::vector<torch::jit::IValue> in = {
      torch::randn({4, 5}),
      torch::randn({4, 3}),
      at::tensor({4, 0, 2}, at::kLong),
      at::tensor({1, 3, 1}, at::kLong),
      at::tensor({-1, 1}, at::kLong),
      at::tensor({1, 0, 1, 1}).to(at::kBool).reshape({4, 1}),
      at::tensor({-20, 3, 3, 7}, at::kLong),
      at::tensor({0, 1, 2, 3, 0, 0, 3, 2, 3, 1}, at::kLong).reshape({2, 5}),
      torch::randn({2, 5}),
      at::scalar_tensor(1.5f),
      at::tensor({0}, at::kLong),
      at::scalar_tensor(-4.f),
      torch::randn({4}),
      at::tensor({1, 1, 0, 1, 1}).to(at::kBool)};  // broadcast over the rows of %s2
  for (const char* call :
       {"aten::index_add(%x, %one, %idx, %src, %twof)",
        "aten::index_add(%x, %one, %rep, %src, %onef)", "aten::index_copy(%x, %m1, %idx, %src)",
        "aten::index_fill(%x, %zero, %neg, %half)", "aten::index_fill(%x, %one, %idx, %z)",
        "aten::index_add(%z, %zero, %zi, %zs, %onef)", "aten::index_copy(%z, %zero, %zi, %zs)",
        "aten::put(%x, %flat, %v4, %f)", "aten::put(%x, %flat, %v4, %t)",
        "aten::masked_scatter(%s2, %sm, %x)",
        "aten::scatter_reduce(%x, %zero, %sidx, %s2, %sum, %t)",
        "aten::scatter_reduce(%x, %zero, %sidx, %s2, %sum, %f)",
        "aten::scatter_reduce(%x, %zero, %sidx, %s2, %mean, %t)",
        "aten::scatter_reduce(%x, %zero, %sidx, %s2, %mean, %f)"}) {
    expect_decomposed(sig, call, in);
  }
}

// embedding_bag as embedding rows reduced by bag: offsets with an empty bag in the middle and at
// the end, include_last_offset, sum/mean/max, padding_idx (a bag of only padding gives 0),
// per-sample weights, _embedding_bag's -1 for no padding. A used backward output keeps
// the op whole.
TEST(DecomposeScatter, EmbeddingBagMatchesTorch) {
  const std::string sig =
      "graph(%w : Float(10, 4), %i : Long(7), %o : Long(4), %ol : Long(5), %oe : Long(3), "
      "%p : Float(7), %pad : Long(7)):\n";
  const std::vector<torch::jit::IValue> in = {
      torch::randn({10, 4}),
      at::tensor({1, 2, 4, 5, 4, 3, 2}, at::kLong),
      at::tensor({0, 2, 2, 5}, at::kLong),
      at::tensor({0, 2, 2, 5, 7}, at::kLong),
      at::tensor({0, 7, 7}, at::kLong),
      torch::randn({7}),
      at::tensor({1, 2, 2, 2, 2, 3, 9}, at::kLong)};  // bag 2 of %o only padding (2)
  std::vector<std::string> calls;
  for (const char* mode : {"%zero", "%one", "%two"}) {
    for (const char* pad : {"%none", "%two"}) {
      const std::string tail = std::string(mode) + ", %f, %none, %f, " + pad + ")";
      calls.push_back("aten::embedding_bag(%w, %i, %o, %f, " + tail);
      calls.push_back("aten::embedding_bag(%w, %i, %oe, %f, " + tail);
      calls.push_back("aten::embedding_bag(%w, %pad, %o, %f, " + tail);
      calls.push_back("aten::embedding_bag(%w, %i, %ol, %f, " + std::string(mode) +
                      ", %f, %none, %t, " + pad + ")");
    }
  }
  calls.push_back("aten::embedding_bag(%w, %i, %o, %f, %zero, %f, %p, %f, %four)");
  calls.push_back("aten::embedding_bag(%w, %pad, %ol, %f, %zero, %f, %p, %t, %two)");
  calls.push_back("aten::embedding_bag(%w, %i, %o, %f, %one, %f, %none, %f)");
  calls.push_back("aten::_embedding_bag(%w, %i, %o, %f, %two, %f, %none, %f, %m1)");
  for (const std::string& call : calls) {
    SCOPED_TRACE(call);
    auto g = testing::parse(sig + kConstants +
                            "  %r : Tensor, %a : Tensor, %b : Tensor, "
                            "%c : Tensor = " +
                            call + "\n  return (%r)");
    auto before = g->copy();
    EXPECT_TRUE(decompose_ops(g));
    EXPECT_TRUE(testing::file_check("CHECK-NOT: embedding_bag(", *g));
    try {
      EXPECT_TRUE(testing::same_values(*before, *g, in, 1e-5, 1e-5));
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << "\n" << *g;
    }
  }
  // The bags' sizes (an output of the backward's) used: left whole.
  auto used = testing::parse(sig + kConstants +
                             "  %r : Tensor, %a : Tensor, %b : Tensor, %c : Tensor = "
                             "aten::embedding_bag(%w, %i, %o, %f, %zero, %f, %none, %f, %none)\n"
                             "  return (%r, %b)");
  decompose_ops(used);
  EXPECT_TRUE(testing::file_check("CHECK: embedding_bag(", *used));
}

// scatter_reduce and index_reduce in every reduction, with and without self: floats with NaN
// and ties, integers (mean rounds down, amax/amin start from the dtype's extremes without self).
// prod/amax/amin with self stay scatter_reduce (the engine's scatter layer); without self they
// first write the identity where updates land.
TEST(DecomposeScatter, ReductionsMatchTorch) {
  std::string sig =
      "graph(%x : Float(4, 5), %s : Float(2, 5), %i : Long(2, 5), %xi : Long(4, 5), "
      "%si : Long(2, 5), %rep : Long(3), %src : Float(4, 3), %srci : Long(4, 3)):\n";
  for (const char* how : {"sum", "prod", "mean", "amax", "amin"}) {
    sig += std::string("  %") + how + " : str = prim::Constant[value=\"" + how + "\"]()\n";
  }
  auto x = torch::randn({4, 5});
  x[1][2] = NAN;
  auto s = torch::randn({2, 5});
  s[0][3] = NAN;
  s[1][4] = s[0][4].item<float>();  // a tie at one position
  const std::vector<torch::jit::IValue> in = {
      x,
      s,
      at::tensor({0, 1, 2, 3, 0, 0, 3, 2, 3, 0}, at::kLong).reshape({2, 5}),
      torch::randint(-7, 7, {4, 5}, torch::kLong),
      torch::randint(-7, 7, {2, 5}, torch::kLong),
      at::tensor({1, 3, 1}, at::kLong),
      torch::randn({4, 3}),
      torch::randint(-7, 7, {4, 3}, torch::kLong)};
  for (const char* how : {"sum", "prod", "mean", "amax", "amin"}) {
    for (const char* self : {"%t", "%f"}) {
      const std::string h = std::string("%") + how + ", " + self + ")";
      const bool stays =
          std::string(self) == "%t" && std::string(how) != "sum" && std::string(how) != "mean";
      for (const std::string& call : {"aten::scatter_reduce(%x, %zero, %i, %s, " + h,
                                      "aten::scatter_reduce(%xi, %m2, %i, %si, " + h,
                                      "aten::index_reduce(%x, %one, %rep, %src, " + h,
                                      "aten::index_reduce(%xi, %m1, %rep, %srci, " + h}) {
        if (call.rfind("aten::index_reduce", 0) == 0 && std::string(how) == "sum") continue;
        const bool scatter = call.rfind("aten::scatter_reduce", 0) == 0;
        if (!scatter || std::string(how) == "sum" || std::string(how) == "mean") {
          expect_decomposed(sig, call, in);
          continue;
        }
        // prod/amax/amin stay scatter_reduce with self (the converter's); without self, after a
        // scatter of the identity.
        auto g = testing::parse(sig + kConstants + "  %r : Tensor = " + call + "\n  return (%r)");
        auto before = g->copy();
        EXPECT_EQ(decompose_ops(g), !stays) << call;
        EXPECT_TRUE(testing::file_check(
            std::string(stays ? "" : "CHECK: aten::scatter(\n") + "CHECK: aten::scatter_reduce(",
            *g))
            << call;
        EXPECT_TRUE(testing::same_values(*before, *g, in, 0, 0)) << call;
      }
    }
  }
}

TEST(DecomposeLosses, MatchTorchInEveryReduction) {
  const std::string sig =
      "graph(%x : Float(4, 3), %y : Float(4, 3), %p : Float(4, 3), %sign : Float(4), "
      "%v : Float(4), %cls : Long(4), %w : Float(3), %logits : Float(3), %valid : Long(4), "
      "%c0 : Long()):";
  auto in = testing::random_inputs({{4, 3}, {4, 3}, {4, 3}, {4}, {4}});
  in[2] = at::rand({4, 3}) * 0.98 + 0.01;                // probabilities
  in[3] = at::tensor({1.f, -1.f, 1.f, -1.f});            // labels of +-1
  in.push_back(at::tensor({0, 2, -100, 1}, at::kLong));  // one ignored
  in.push_back(at::rand({3}) + 0.5);                     // class weights
  in.push_back(at::randn({3}));                          // one sample's logits
  in.push_back(at::tensor({0, 2, 1, 1}, at::kLong));     // classes, none ignored
  in.push_back(at::scalar_tensor(2, at::kLong));         // one sample's class
  const std::vector<std::string> losses = {
      "aten::binary_cross_entropy(%p, %p, %none, R)",
      "aten::binary_cross_entropy(%p, %p, %w, R)",
      "aten::binary_cross_entropy_with_logits(%x, %p, %none, %none, R)",
      "aten::binary_cross_entropy_with_logits(%x, %p, %w, %w, R)",
      "aten::soft_margin_loss(%x, %y, R)",
      "aten::margin_ranking_loss(%v, %sign, %sign, %half, R)",
      "aten::hinge_embedding_loss(%v, %sign, %twof, R)",
      "aten::kl_div(%x, %p, R, %f)",
      "aten::kl_div(%x, %y, R, %t)",
      "aten::poisson_nll_loss(%x, %p, %t, %f, %eps, R)",
      "aten::poisson_nll_loss(%p, %y, %f, %t, %eps, R)",
      "aten::cosine_embedding_loss(%x, %y, %sign, %half, R)",
      "aten::triplet_margin_loss(%x, %y, %p, %onef, %twof, %eps, %t, R)",
      "aten::nll_loss_nd(%x, %cls, %w, R, %m100)",
      "aten::nll_loss_nd(%x, %cls, %none, R, %m100)",
      "aten::cross_entropy_loss(%x, %cls, %w, R, %m100, %zerof)",
      "aten::cross_entropy_loss(%x, %p, %w, R, %m100, %zerof)",
      "aten::cross_entropy_loss(%logits, %c0, %none, R, %m100, %zerof)",
      "aten::multi_margin_loss(%x, %valid, %one, %onef, %w, R)",
      "aten::multi_margin_loss(%x, %valid, %two, %half, %none, R)",
      "aten::mse_loss(%x, %y, R)",
      "aten::huber_loss(%x, %y, R, %half)"};
  for (const std::string& loss : losses) {
    for (const char* reduction : {"%zero", "%one", "%two"}) {
      std::string call = loss;
      call.replace(call.find('R'), 1, reduction);
      expect_decomposed(sig, call, in, {}, 1e-5, 1e-5);
    }
  }
}

TEST(DecomposeMath, IndexingAndSpecialFunctionsMatchTorch) {
  const std::string sig =
      "graph(%a : Float(4, 5), %b : Float(4, 5), %s : Float(4, 5), %i : Long(4, 5), "
      "%k : Long(1, 5), %bounds : Float(4), %z : Float()):";
  auto in = testing::random_inputs({{4, 5}, {4, 5}});
  at::Tensor s = in[0].toTensor().clone();  // NaN, infinities, -0 and 0
  s[0][0] = std::numeric_limits<float>::quiet_NaN();
  s[0][1] = std::numeric_limits<float>::infinity();
  s[0][2] = -std::numeric_limits<float>::infinity();
  s[1][0] = -0.0f;
  s[1][1] = 0.0f;
  s[2] = -std::numeric_limits<float>::infinity();  // a row all -inf: _safe_softmax's zeros
  in.push_back(s);
  in.push_back(torch::randint(-20, 20, {4, 5}, torch::kLong));  // take: negative indices too
  in.push_back(torch::randint(0, 4, {1, 5}, torch::kLong));     // take_along_dim broadcasts
  in.push_back(at::tensor({-1.f, 0.f, 0.5f, 2.f}));
  in.push_back(at::scalar_tensor(0.25f));
  const std::vector<torch::jit::IValue> other = {torch::randn({2, 3}),
                                                 torch::randn({2, 3}),
                                                 torch::randn({2, 3}),
                                                 torch::randint(-6, 6, {2, 3}, torch::kLong),
                                                 torch::randint(0, 2, {1, 3}, torch::kLong),
                                                 at::tensor({0.f, 1.f}),
                                                 at::scalar_tensor(-3.f)};
  for (const char* call : {"aten::real(%a)",
                           "aten::isreal(%s)",
                           "aten::angle(%s)",
                           "aten::angle(%i)",
                           "aten::ldexp(%a, %b)",
                           "aten::isin(%s, %a, %f, %f)",
                           "aten::isin(%i, %k, %f, %t)",
                           "aten::bucketize(%s, %bounds, %f, %f)",
                           "aten::bucketize(%a, %bounds, %t, %t)",
                           "aten::_safe_softmax(%s, %one, %none)",
                           "aten::_softmax_backward_data(%a, %b, %m1, %six)",
                           "aten::take(%a, %i)",
                           "aten::take_along_dim(%a, %k, %zero)",
                           "aten::take_along_dim(%a, %k, %none)",
                           "aten::sum_to_size(%a, %s15)",
                           "aten::sum_to_size(%z, %empty)",
                           "aten::tile(%a, %d12)",
                           "aten::tile(%z, %d12)",
                           "aten::rot90(%a, %one, %d01)",
                           "aten::rot90(%a, %two, %d01)",
                           "aten::rot90(%a, %m1, %d10)",
                           "aten::logsumexp(%z, %empty, %f)"}) {
    // take's indices (of the flattened tensor) and sum_to_size's size are for the graph's
    // sizes only.
    const bool sized = std::string(call).find("take(") == std::string::npos &&
                       std::string(call).find("sum_to_size(%a") == std::string::npos;
    expect_decomposed(sig, call, in, sized ? other : std::vector<torch::jit::IValue>{});
  }
}

TEST(DecomposeOps, OpsOfSeveralOutputsBecomeTheirParts) {
  auto g = testing::parse(std::string(R"IR(
graph(%x : Float(3, 4, 5), %w : Float(5), %b : Float(5)):)IR") +
                          kConstants + R"IR(
  %v1 : Tensor, %m1o : Tensor = aten::var_mean(%x, %d12, %one, %t)
  %s1 : Tensor, %m2o : Tensor = aten::std_mean(%x, %t)
  %v2 : Tensor, %m3o : Tensor = aten::var_mean(%x, %d0, %zero, %f)
  %lo : Tensor, %hi : Tensor = aten::aminmax(%x, %one, %f)
  %lo2 : Tensor, %hi2 : Tensor = aten::aminmax(%x, %none, %f)
  %ln : Tensor, %mean : Tensor, %rstd : Tensor = aten::native_layer_norm(%x, %s5, %w, %b, %eps)
  %kv : Tensor, %ki : Tensor = aten::kthvalue(%x, %two, %one, %f)
  %kv2 : Tensor, %ki2 : Tensor = aten::kthvalue(%x, %four, %m1, %t)
  return (%v1, %m1o, %s1, %m2o, %v2, %m3o, %lo, %hi, %lo2, %hi2, %ln, %mean, %rstd, %kv, %ki, %kv2, %ki2))IR");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  for (const char* op : {"var_mean", "std_mean", "aminmax", "native_layer_norm", "kthvalue"}) {
    EXPECT_TRUE(testing::file_check(std::string("CHECK-NOT: aten::") + op + "(", *g)) << op;
  }
  auto in = testing::random_inputs({{3, 4, 5}, {5}, {5}});
  in[0].toTensor()[1][2][3] = std::numeric_limits<float>::quiet_NaN();  // min and max keep NaN
  EXPECT_TRUE(testing::same_values(*before, *g, in, 1e-5, 1e-5));
}

}  // namespace
}  // namespace kiln::lowering
