// decompose_ops' arrangements (decompose_arrange.cpp) and spectral transforms
// (decompose_spectral.cpp): each op against torch's own, on the graph's shapes and, where the
// rewrite reads sizes at run time, on others.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

namespace kiln::lowering {
namespace {

constexpr const char* kConstants = R"IR(
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %three : int = prim::Constant[value=3]()
  %five : int = prim::Constant[value=5]()
  %m1 : int = prim::Constant[value=-1]()
  %m2 : int = prim::Constant[value=-2]()
  %twof : float = prim::Constant[value=2.]()
  %half : float = prim::Constant[value=0.5]()
  %inf : float = prim::Constant[value=inf]()
  %minf : float = prim::Constant[value=-inf]()
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %fro : str = prim::Constant[value="fro"]()
  %ij : str = prim::Constant[value="ij"]()
  %xy : str = prim::Constant[value="xy"]()
  %d0 : int[] = prim::Constant[value=[0]]()
  %d01 : int[] = prim::Constant[value=[0, 1]]()
  %d20 : int[] = prim::Constant[value=[2, 0]]()
  %d21 : int[] = prim::Constant[value=[-2, -1]]()
  %seven : int = prim::Constant[value=7]()
  %s47 : int[] = prim::Constant[value=[4, 7]]()
  %s349 : int[] = prim::Constant[value=[3, 4, 9]]()
  %s2 : int[] = prim::Constant[value=[2]]()
  %ortho : str = prim::Constant[value="ortho"]()
  %forward : str = prim::Constant[value="forward"]()
  %backward : str = prim::Constant[value="backward"]()
)IR";

// Parses `signature` + constants + `%r : type = call`, decomposes it, checks the op is gone and
// that the outputs match the original graph's on each input set.
void expect_decomposed(const std::string& signature, const std::string& type,
                       const std::string& call,
                       const std::vector<std::vector<torch::jit::IValue>>& inputs,
                       double tol = 1e-5) {
  const std::string op = call.substr(0, call.find('('));
  auto g =
      testing::parse(signature + kConstants + "  %r : " + type + " = " + call + "\n  return (%r)");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g)) << call;
  EXPECT_TRUE(testing::file_check("CHECK-NOT: " + op + "(", *g)) << call << "\n" << *g;
  for (const auto& in : inputs) {
    try {
      EXPECT_TRUE(testing::same_values(*before, *g, in, tol, tol)) << call;
    } catch (const std::exception& e) {
      ADD_FAILURE() << call << ": " << e.what() << "\n" << *g;
    }
  }
}

TEST(DecomposeArrange, GridsAndBlocksMatchTorch) {
  const std::string sig =
      "graph(%a : Float(3), %b : Float(4), %s : Float(), %m : Float(2, 3), "
      "%i : Long(2)):";
  const std::vector<std::vector<torch::jit::IValue>> in = {
      {torch::randn({3}), torch::randn({4}), torch::randn({}), torch::randn({2, 3}),
       torch::tensor({4, 5}, torch::kLong)},
      {torch::randn({1}), torch::randn({5}), torch::randn({}), torch::randn({3, 1}),
       torch::tensor({-1, 7}, torch::kLong)}};
  const std::string lists =
      "\n  %ab : Tensor[] = prim::ListConstruct(%a, %b)\n"
      "  %asb : Tensor[] = prim::ListConstruct(%a, %s, %b)\n"
      "  %mai : Tensor[] = prim::ListConstruct(%m, %a, %s, %i)\n"
      "  %aa : Tensor[] = prim::ListConstruct(%a)";
  for (const char* call : {"aten::meshgrid(%ab)", "aten::meshgrid(%asb, %ij)",
                           "aten::meshgrid(%asb, %xy)", "aten::meshgrid(%aa, %xy)"}) {
    expect_decomposed(sig + lists, "Tensor[]", call, in);
  }
  for (const char* call : {"aten::cartesian_prod(%ab)", "aten::cartesian_prod(%aa)",
                           "aten::block_diag(%mai)", "aten::block_diag(%aa)"}) {
    expect_decomposed(sig + lists, "Tensor", call, in);
  }
}

TEST(DecomposeArrange, ShiftsRepeatsAndDiagonalWritesMatchTorch) {
  const std::string sig =
      "graph(%x : Float(4, 5, 3), %v : Float(4), %w : Float(5, 3), %s : Float()):";
  const std::vector<std::vector<torch::jit::IValue>> in = {
      {torch::randn({4, 5, 3}), torch::randn({4}), torch::randn({5, 3}), torch::randn({})},
      {torch::randn({6, 5, 5}), torch::randn({5}), torch::randn({5, 5}), torch::randn({})}};
  for (const char* call : {"aten::fft_fftshift(%x, %none)", "aten::fft_ifftshift(%x, %none)",
                           "aten::fft_fftshift(%x, %d20)", "aten::fft_ifftshift(%x, %d0)",
                           "aten::repeat_interleave(%x, %three, %none, %none)",
                           "aten::repeat_interleave(%s, %two, %none, %none)",
                           "aten::diagonal_scatter(%x, %w, %zero, %zero, %two)"}) {
    expect_decomposed(sig, "Tensor", call, in);
  }
  // Diagonals off the main one, of the shapes torch takes (src as long as the diagonal).
  expect_decomposed("graph(%x : Float(4, 6), %a : Float(3), %b : Float(4)):", "Tensor",
                    "aten::diagonal_scatter(%x, %a, %three, %zero, %one)",
                    {{torch::randn({4, 6}), torch::randn({3}), torch::randn({4})}});
  expect_decomposed("graph(%x : Float(6, 4), %a : Float(3), %b : Float(4)):", "Tensor",
                    "aten::diagonal_scatter(%x, %b, %m2, %zero, %one)",
                    {{torch::randn({6, 4}), torch::randn({3}), torch::randn({4})}});
  expect_decomposed("graph(%x : Float(4, 6), %a : Float(3), %b : Float(4)):", "Tensor",
                    "aten::diagonal_scatter(%x, %a, %one, %one, %zero)",
                    {{torch::randn({4, 6}), torch::randn({3}), torch::randn({4})}});
}

TEST(DecomposeArrange, GradientsNormsAndRangesMatchTorch) {
  const std::string sig =
      "graph(%x : Float(5, 6), %v : Float(7), %n : Long(6), %lo : Float(), "
      "%hi : Float()):";
  const std::vector<std::vector<torch::jit::IValue>> in = {
      {torch::randn({5, 6}), torch::randn({7}), torch::randint(-9, 9, {6}, torch::kLong),
       torch::scalar_tensor(-1.5), torch::scalar_tensor(2.25)},
      {torch::randn({3, 4}), torch::randn({3}), torch::randint(-9, 9, {4}, torch::kLong),
       torch::scalar_tensor(3.0), torch::scalar_tensor(-2.0)}};
  for (const char* call :
       {"aten::gradient(%x, %none, %none, %one)", "aten::gradient(%x, %twof, %m1, %two)",
        "aten::gradient(%v, %half, %none, %two)", "aten::gradient(%n, %none, %none, %one)"}) {
    expect_decomposed(sig, "Tensor[]", call, in);
  }
  for (const char* call : {"aten::linalg_norm(%x, %none, %none, %f, %none)",
                           "aten::linalg_norm(%v, %three, %none, %t, %none)",
                           "aten::linalg_norm(%x, %inf, %d0, %f, %none)",
                           "aten::linalg_norm(%x, %inf, %none, %t, %none)",
                           "aten::linalg_norm(%x, %minf, %d01, %f, %none)",
                           "aten::linalg_norm(%x, %fro, %none, %f, %none)",
                           "aten::linalg_matrix_norm(%x, %one, %d21, %t, %none)",
                           "aten::linalg_matrix_norm(%x, %m1, %d21, %f, %none)",
                           "aten::linalg_matrix_norm(%x, %fro, %d21, %f, %none)",
                           "aten::linspace(%lo, %hi, %five, %none, %none, %none, %none)",
                           "aten::linspace(%lo, %hi, %one, %none, %none, %none, %none)",
                           "aten::logspace(%lo, %hi, %five, %twof, %none, %none, %none, %none)"}) {
    expect_decomposed(sig, "Tensor", call, in);
  }
}

// The inverse real FFTs and the Hermitian ones of real tensors (f32 and int64), with their
// default lengths (read at run time: the second input set has other sizes), lengths that trim or
// pad the spectrum, and each norm.
TEST(DecomposeSpectral, InverseRealAndHermitianFftsMatchTorch) {
  const std::string sig = "graph(%x : Float(3, 5, 6), %n : Long(4, 5)):";
  const std::vector<std::vector<torch::jit::IValue>> in = {
      {torch::randn({3, 5, 6}), torch::randint(-9, 9, {4, 5}, torch::kLong)},
      {torch::randn({2, 4, 9}), torch::randint(-9, 9, {3, 2}, torch::kLong)}};
  for (const std::string op : {"aten::fft_irfft", "aten::fft_hfft"}) {
    for (const std::string args :
         {"(%x, %none, %m1, %none)", "(%x, %seven, %one, %ortho)", "(%x, %two, %zero, %forward)",
          "(%n, %none, %zero, %backward)"}) {
      expect_decomposed(sig, "Tensor", op + args, in, 1e-4);
    }
  }
  for (const std::string op : {"aten::fft_irfft2", "aten::fft_hfft2"}) {
    for (const std::string args :
         {"(%x, %none, %d21, %none)", "(%x, %s47, %d20, %ortho)", "(%n, %none, %d21, %forward)"}) {
      expect_decomposed(sig, "Tensor", op + args, in, 1e-4);
    }
  }
  for (const std::string op : {"aten::fft_irfftn", "aten::fft_hfftn"}) {
    for (const std::string args : {"(%x, %none, %none, %none)", "(%x, %s349, %none, %forward)",
                                   "(%x, %s2, %d0, %ortho)", "(%n, %none, %none, %none)"}) {
      expect_decomposed(sig, "Tensor", op + args, in, 1e-4);
    }
  }
}

// nearest-exact resizes by output size (mapped by in / out) and by scale factors (mapped by their
// inverse), up and down; histograms over a given range and over the data's own (one value
// included: its range widened by 1); combinations of one.
TEST(DecomposeArrange, NearestExactHistogramsAndCombinationsMatchTorch) {
  const std::string sig =
      "graph(%x : Float(2, 3, 5), %y : Float(1, 2, 4, 6), %v : Float(9), %c : Float(7)):\n"
      "  %o1 : int[] = prim::Constant[value=[8]]()\n"
      "  %o2 : int[] = prim::Constant[value=[3, 13]]()\n"
      "  %f1 : float[] = prim::Constant[value=[1.7]]()\n"
      "  %f2 : float[] = prim::Constant[value=[0.6, 2.5]]()\n"
      "  %sh : float = prim::Constant[value=0.75]()\n"
      "  %bins : int = prim::Constant[value=4]()\n"
      "  %lo : float = prim::Constant[value=-1.]()\n"
      "  %hi : float = prim::Constant[value=1.5]()";
  const auto x = torch::randn({2, 3, 5}), y = torch::randn({1, 2, 4, 6});
  const std::vector<std::vector<torch::jit::IValue>> in = {
      {x, y, torch::randn({9}), torch::randn({7})},
      {x, y, torch::full({9}, 2.f), torch::randn({3})}};
  for (const char* call :
       {"aten::_upsample_nearest_exact1d(%x, %o1, %none)",
        "aten::_upsample_nearest_exact1d(%x, %o1, %sh)",
        "aten::_upsample_nearest_exact2d(%y, %o2, %none, %none)",
        "aten::_upsample_nearest_exact1d(%x, %none, %f1)",
        "aten::_upsample_nearest_exact2d(%y, %none, %f2)", "aten::histc(%v, %bins, %lo, %hi)",
        "aten::histc(%v, %bins, %zero, %zero)", "aten::combinations(%c, %one, %f)",
        "aten::combinations(%c, %one, %t)"}) {
    expect_decomposed(sig, "Tensor", call, in);
  }
}

TEST(DecomposeArrange, MaxUnpoolWritesEachValueAtItsIndex) {
  // Values and indices of a max pool (planes with and without a batch dim).
  const auto x2 = torch::randn({2, 3, 6, 8});
  const auto [v2, i2] = at::max_pool2d_with_indices(x2, {2, 2}, {2, 2});
  expect_decomposed(
      "graph(%v : Float(2, 3, 3, 4), %i : Long(2, 3, 3, 4)):\n"
      "  %os : int[] = prim::Constant[value=[6, 8]]()",
      "Tensor", "aten::max_unpool2d(%v, %i, %os)", {{v2, i2}});
  const auto x3 = torch::randn({3, 4, 4, 5});
  const auto [v3, i3] = at::max_pool3d_with_indices(x3, {2, 2, 2}, {2, 2, 2});
  expect_decomposed(
      "graph(%v : Float(3, 2, 2, 2), %i : Long(3, 2, 2, 2)):\n"
      "  %os : int[] = prim::Constant[value=[4, 4, 5]]()\n"
      "  %k : int[] = prim::Constant[value=[2, 2, 2]]()\n"
      "  %p : int[] = prim::Constant[value=[0, 0, 0]]()",
      "Tensor", "aten::max_unpool3d(%v, %i, %os, %k, %p)", {{v3, i3}});
  // max_unpool1d as F.max_unpool1d traces it: 2-d unpooling of unsqueezed planes (whose rank
  // comes from the unsqueeze) to a size list built in the graph.
  const auto x1 = torch::randn({2, 3, 7});
  const auto [v1, i1] = at::max_pool1d_with_indices(x1, {2}, {2});
  expect_decomposed(
      "graph(%v : Float(2, 3, 3), %i : Long(2, 3, 3)):\n"
      "  %last : int = prim::Constant[value=-1]()\n"
      "  %seven : int = prim::Constant[value=7]()\n"
      "  %unit : int = prim::Constant[value=1]()\n"
      "  %vu : Tensor = aten::unsqueeze(%v, %last)\n"
      "  %iu : Tensor = aten::unsqueeze(%i, %last)\n"
      "  %os : int[] = prim::ListConstruct(%seven, %unit)",
      "Tensor", "aten::max_unpool2d(%vu, %iu, %os)", {{v1, i1}});
}

TEST(DecomposeArrange, AnIndexListFoldedToAConstantIsAListAgain) {
  auto g = testing::parse(R"IR(
graph(%x : Float(5, 4)):
  %il : int[] = prim::Constant[value=[1, 3]]()
  %none : NoneType = prim::Constant()
  %f : bool = prim::Constant[value=0]()
  %i : Tensor = aten::tensor(%il, %none, %none, %f)
  %l : Tensor?[] = prim::ListConstruct(%none, %i)
  %r : Tensor = aten::index(%x, %l)
  return (%r))IR");
  propagate_constants(g);
  ASSERT_TRUE(testing::file_check("CHECK-NOT: prim::ListConstruct", *g)) << *g;
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  EXPECT_TRUE(testing::file_check("CHECK: prim::ListConstruct\nCHECK: aten::index", *g)) << *g;
  EXPECT_TRUE(testing::same_values(*before, *g, {torch::randn({5, 4})}));
}

}  // namespace
}  // namespace kiln::lowering
