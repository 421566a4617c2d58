// decompose_ops: var/std, type_as, square, hardtanh, relu6, glu, decompose_math's identities and
// the
// `_copy` views become engine ops; native ops stay.
#include <gtest/gtest.h>

#include "harness/ir_testing.h"
#include "lowering/passes.h"

#include <cmath>
#include <limits>

namespace kiln::lowering {
namespace {

TEST(DecomposeOps, DecomposesVarianceAndStd) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %dims : int[] = prim::Constant[value=[1, 2]]()
  %last : int[] = prim::Constant[value=[-1]]()
  %v : Tensor = aten::var(%x, %dims, %t, %t)
  %s : Tensor = aten::std(%x, %last, %f, %f)
  %w : Tensor = aten::var(%x, %f)
  %u : Tensor = aten::std(%x, %t)
  return (%v, %s, %w, %u))IR");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: aten::var\nCHECK-NOT: aten::std\nCHECK: aten::mean\nCHECK: aten::sqrt", *g));
  EXPECT_TRUE(
      testing::same_values(*before, *g, testing::random_inputs({{2, 3, 4, 5}}), 1e-5, 1e-5));
}

TEST(DecomposeOps, RewritesCompositeActivationsAndCasts) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %y : Tensor):
  %lo : float = prim::Constant[value=-0.5]()
  %hi : float = prim::Constant[value=0.5]()
  %d : int = prim::Constant[value=7]()
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %yd : Tensor = aten::to(%y, %d, %f, %f, %none)
  %a : Tensor = aten::hardtanh(%x, %lo, %hi)
  %b : Tensor = aten::relu6(%x)
  %c : Tensor = aten::square(%x)
  %e : Tensor = aten::type_as(%c, %yd)
  return (%a, %b, %e))IR");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: aten::hardtanh\nCHECK: aten::clamp\nCHECK: aten::clamp\nCHECK: aten::mul"
      "\nCHECK: aten::to(%",
      *g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::relu6\nCHECK-NOT: aten::type_as", *g));
  auto in = testing::random_inputs({{3, 4}, {3, 4}});
  in[0] = in[0].toTensor() * 8;
  EXPECT_TRUE(testing::same_values(*before, *g, in));
}

TEST(DecomposeOps, GluIsHalfTimesTheSigmoidOfTheOther) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %one : int = prim::Constant[value=1]()
  %last : int = prim::Constant[value=-1]()
  %a : Tensor = aten::glu(%x, %one)
  %b : Tensor = aten::glu(%x, %last)
  return (%a, %b))IR");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK-NOT: aten::glu\nCHECK: aten::chunk\nCHECK: prim::ListUnpack\nCHECK: aten::sigmoid"
      "\nCHECK: aten::mul",
      *g));
  EXPECT_TRUE(testing::same_values(*before, *g, testing::random_inputs({{2, 6, 4}})));
}

// Ops of activations and special functions whose dtype and rank the graph knows: each against
// torch's own op, zeros and NaN in the inputs.
TEST(DecomposeOps, TypedActivationsAndSpecialFunctionsMatchTorch) {
  auto g = testing::parse(R"IR(
graph(%x : Float(2, 3, 4), %y : Float(2, 3, 4), %w : Float(3)):
  %half : float = prim::Constant[value=0.5]()
  %two : float = prim::Constant[value=2.]()
  %a : Tensor = aten::special_entr(%x)
  %b : Tensor = aten::special_xlog1py(%x, %y)
  %c : Tensor = aten::sinc(%x)
  %d : Tensor = aten::threshold(%x, %half, %two)
  %e : Tensor = aten::hardshrink(%x, %half)
  %f : Tensor = aten::softshrink(%x, %half)
  %p : Tensor = aten::prelu(%x, %w)
  %t : Tensor = aten::sgn(%x)
  %u : Tensor = aten::ravel(%x)
  %v : Tensor = aten::positive(%x)
  return (%a, %b, %c, %d, %e, %f, %p, %t, %u, %v))IR");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  for (const char* op : {"special_entr", "special_xlog1py", "sinc", "threshold", "hardshrink",
                         "softshrink", "prelu", "sgn", "ravel", "positive"}) {
    EXPECT_TRUE(testing::file_check(std::string("CHECK-NOT: aten::") + op + "(", *g)) << op;
  }
  auto in = testing::random_inputs({{2, 3, 4}, {2, 3, 4}, {3}});
  at::Tensor x = in[0].toTensor(), y = in[1].toTensor();
  x.index_put_({0, 0, 0}, 0.0);
  x.index_put_({0, 0, 1}, std::numeric_limits<float>::quiet_NaN());
  x.index_put_({1, 1, 1}, 0.0);
  y.index_put_({1, 1, 1}, std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(testing::same_values(*before, *g, in, 2e-3, 1e-5));
}

// tril/triu, repeat_interleave, trace, nansum and nanmean (a column all NaN: nanmean's NaN).
TEST(DecomposeOps, TriangularMasksAndRepeatInterleaveReadSizesAtRunTime) {
  auto g = testing::parse(R"IR(
graph(%x : Float(2, 5, 7), %i : Long(3, 4)):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %minus : int = prim::Constant[value=-2]()
  %three : int = prim::Constant[value=3]()
  %none : NoneType = prim::Constant()
  %a : Tensor = aten::tril(%x, %zero)
  %b : Tensor = aten::triu(%x, %one)
  %c : Tensor = aten::tril(%i, %minus)
  %d : Tensor = aten::repeat_interleave(%x, %three, %one, %none)
  %e : Tensor = aten::repeat_interleave(%i, %three, %minus, %none)
  %f : bool = prim::Constant[value=0]()
  %t : bool = prim::Constant[value=1]()
  %dims : int[] = prim::Constant[value=[1]]()
  %m : Float(5, 7) = aten::select(%x, %zero, %zero)
  %g : Tensor = aten::trace(%m)
  %h : Tensor = aten::trace(%i)
  %j : Tensor = aten::nansum(%x, %dims, %t, %none)
  %k : Tensor = aten::nanmean(%x, %dims, %f, %none)
  %l : Tensor = aten::nansum(%i, %none, %f, %none)
  return (%a, %b, %c, %d, %e, %g, %h, %j, %k, %l))IR");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::tril(\nCHECK-NOT: aten::triu(", *g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::repeat_interleave(", *g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::trace(\nCHECK-NOT: aten::nansum(", *g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::nanmean(", *g));
  auto in = testing::random_inputs({{2, 5, 7}});
  at::Tensor x = in[0].toTensor();
  x.index_put_({0, 1, 2}, std::numeric_limits<float>::quiet_NaN());
  x.index_put_({1, 2, 3}, std::numeric_limits<float>::quiet_NaN());
  for (int64_t r = 0; r < 5; ++r) x.index_put_({1, r, 6}, std::numeric_limits<float>::quiet_NaN());
  in.push_back(torch::randint(-9, 9, {3, 4}, torch::kLong));
  EXPECT_TRUE(testing::same_values(*before, *g, in));
  // Other sizes than the graph's types: the masks and repeats follow the inputs.
  EXPECT_TRUE(
      testing::same_values(*before, *g, {torch::randn({1, 3, 2}), torch::randint(0, 5, {4, 6})}));
}

// Each identity against torch's own op on the same inputs, infinities and NaN included where
// the op defines them.
TEST(DecomposeOps, MathIdentitiesMatchTorch) {
  const std::vector<std::string> unary = {"aten::acosh(%p1)",
                                          "aten::asinh(%x)",
                                          "aten::atanh(%u)",
                                          "aten::erfc(%x)",
                                          "aten::exp2(%x)",
                                          "aten::log10(%p)",
                                          "aten::deg2rad(%x)",
                                          "aten::rad2deg(%x)",
                                          "aten::frac(%x)",
                                          "aten::isnan(%s)",
                                          "aten::isinf(%s)",
                                          "aten::isposinf(%s)",
                                          "aten::isneginf(%s)",
                                          "aten::isfinite(%s)",
                                          "aten::log_sigmoid(%x)",
                                          "aten::mT(%x)",
                                          "aten::logit(%u, %eps)",
                                          "aten::celu(%x, %two)",
                                          "aten::atan2(%x, %y)",
                                          "aten::atan2(%s, %o)",
                                          "aten::hypot(%x, %y)",
                                          "aten::fmod(%x, %two)",
                                          "aten::fmax(%s, %y)",
                                          "aten::fmin(%s, %y)",
                                          "aten::logaddexp(%x, %y)",
                                          "aten::logaddexp2(%s, %s)",
                                          "aten::xlogy(%o, %s)",
                                          "aten::clamp_min(%x, %y)",
                                          "aten::clamp_max(%x, %y)",
                                          "aten::clamp(%x, %none_t, %y)",
                                          "aten::addcmul(%x, %y, %z, %two)",
                                          "aten::addcdiv(%x, %y, %p1, %two)",
                                          "aten::lerp(%x, %y, %half)",
                                          "aten::lerp(%x, %y, %u)",
                                          "aten::logsumexp(%x, %last, %f)",
                                          "aten::logsumexp(%s, %last, %t)",
                                          "aten::mv(%x, %v)",
                                          "aten::dot(%v, %v)",
                                          "aten::outer(%v, %w)",
                                          "aten::addmv(%w, %x, %v, %two, %half)",
                                          "aten::addr(%x, %w, %v, %zero, %two)",
                                          "aten::broadcast_to(%v, %size)",
                                          "aten::mse_loss(%x, %y, %one)",
                                          "aten::l1_loss(%x, %y, %one)",
                                          "aten::huber_loss(%x, %y, %one, %half)",
                                          "aten::smooth_l1_loss(%x, %y, %one, %half)",
                                          "aten::smooth_l1_loss(%x, %y, %one, %zero)"};
  for (const std::string& call : unary) {
    const std::string name = call.substr(0, call.find('('));
    auto g = testing::parse(R"IR(
graph(%x : Tensor, %y : Tensor, %z : Tensor, %s : Tensor, %v : Tensor, %w : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : float = prim::Constant[value=2.]()
  %half : float = prim::Constant[value=0.5]()
  %zero : float = prim::Constant[value=0.]()
  %eps : float = prim::Constant[value=0.001]()
  %t : bool = prim::Constant[value=1]()
  %f : bool = prim::Constant[value=0]()
  %none_t : NoneType = prim::Constant()
  %last : int[] = prim::Constant[value=[-1]]()
  %size : int[] = prim::Constant[value=[3, 4]]()
  %a : Tensor = aten::abs(%x)
  %p : Tensor = aten::add(%a, %one, %one)
  %p1 : Tensor = aten::add(%a, %one, %one)
  %u : Tensor = aten::mul(%z, %half)
  %o : Tensor = aten::mul(%s, %zero)
  %r : Tensor = )IR" + call +
                            R"IR(
  return (%r))IR");
    auto before = g->copy();
    EXPECT_TRUE(decompose_ops(g)) << call;
    EXPECT_TRUE(testing::file_check("CHECK-NOT: " + name + "(", *g)) << call;
    auto in = testing::random_inputs({{3, 4}, {3, 4}, {3, 4}, {3, 4}, {4}, {3}});
    in[2] = at::rand({3, 4}) * 1.8 - 0.9;     // z in (-0.9, 0.9): atanh, logit
    at::Tensor s = in[0].toTensor().clone();  // x with zeros, infinities and NaN
    s[0][0] = std::numeric_limits<float>::infinity();
    s[0][1] = -std::numeric_limits<float>::infinity();
    s[1][0] = std::nan("");
    s[1][1] = 0;
    in[3] = s;
    in[5] = in[5].toTensor().slice(0, 0, 3);
    EXPECT_TRUE(testing::same_values(*before, *g, in, 1e-5, 1e-5)) << call;
  }
}

// Integers: mv and dot as mul and sum stay exact; fmod by a constant; isfinite is all true.
TEST(DecomposeOps, IntegerIdentitiesStayExact) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %v : Tensor):
  %three : int = prim::Constant[value=3]()
  %a : Tensor = aten::mv(%x, %v)
  %b : Tensor = aten::dot(%v, %v)
  %c : Tensor = aten::fmod(%x, %three)
  %d : Tensor = aten::isfinite(%x)
  return (%a, %b, %c, %d))IR");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::mv\nCHECK-NOT: aten::fmod", *g));
  const std::vector<c10::IValue> in = {at::randint(-50, 50, {3, 4}, at::kLong),
                                       at::randint(-50, 50, {4}, at::kLong)};
  EXPECT_TRUE(testing::same_values(*before, *g, in, 0, 0));
}

// Shifts of int64 and int32 by tensors (negative and past the width included) and by numbers; lerp
// by a number and by a tensor of weights on both sides of 0.5.
TEST(DecomposeOps, ShiftsAndLerpMatchTorch) {
  auto g = testing::parse(R"IR(
graph(%a : Long(8), %s : Long(8), %i : Int(8), %j : Int(8)):
  %three : int = prim::Constant[value=3]()
  %big : int = prim::Constant[value=70]()
  %b : Tensor = aten::bitwise_left_shift(%a, %s)
  %c : Tensor = aten::bitwise_right_shift(%a, %s)
  %d : Tensor = aten::__lshift__(%i, %j)
  %e : Tensor = aten::__rshift__(%i, %j)
  %f : Tensor = aten::__lshift__(%a, %three)
  %h : Tensor = aten::__rshift__(%a, %big)
  return (%b, %c, %d, %e, %f, %h))IR");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: shift\nCHECK-NOT: aten::__", *g)) << *g;
  const auto a = torch::tensor(std::vector<int64_t>{5, -7, INT64_MAX, INT64_MIN, 1, -1, 12345, 3});
  const auto s = torch::tensor(std::vector<int64_t>{0, 3, 1, 63, 64, -2, 62, 40});
  const auto j = torch::tensor({0, 3, 31, 32, 5, -1, 30, 7}, torch::kInt);
  EXPECT_TRUE(testing::same_values(*before, *g, {a, s, a.to(torch::kInt), j}, 0, 0));

  auto l = testing::parse(R"IR(
graph(%x : Float(8), %y : Float(8), %w : Float(8)):
  %q : float = prim::Constant[value=0.75]()
  %a : Tensor = aten::lerp(%x, %y, %q)
  %b : Tensor = aten::lerp(%x, %y, %w)
  return (%a, %b))IR");
  auto lerp = l->copy();
  EXPECT_TRUE(decompose_ops(l));
  EXPECT_TRUE(testing::file_check("CHECK-NOT: aten::lerp", *l));
  EXPECT_TRUE(testing::same_values(
      *lerp, *l, {torch::randn({8}) * 1e3, torch::randn({8}), torch::rand({8}) * 2 - 0.5}, 1e-6,
      1e-6));
}

// Ops that torch computes in f32 when all their tensors are integers (a float result) take their
// float rewrites on the inputs cast; threshold and isclose of integers have their own.
TEST(DecomposeOps, IntegerInputsOfFloatOpsComputeInFloat) {
  auto g = testing::parse(R"IR(
graph(%i : Long(3, 4), %j : Long(3, 4), %k : Long(3, 4), %t : Long(3)):
  %one : int = prim::Constant[value=1]()
  %m1 : int = prim::Constant[value=-1]()
  %zero_f : float = prim::Constant[value=0.]()
  %one_f : float = prim::Constant[value=1.]()
  %two_f : float = prim::Constant[value=2.]()
  %lo : float = prim::Constant[value=1.5]()
  %hi : float = prim::Constant[value=2.5]()
  %eps : float = prim::Constant[value=1e-06]()
  %t_ : bool = prim::Constant[value=1]()
  %f_ : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %a : Tensor = aten::special_entr(%i)
  %b : Tensor = aten::special_xlog1py(%i, %j)
  %c : Tensor = aten::trapezoid(%i, %j, %m1)
  %d : Tensor = aten::cumulative_trapezoid(%i, %j, %m1)
  %e : Tensor = aten::cov(%i, %one, %none, %none)
  %f : Tensor = aten::corrcoef(%i)
  %g : Tensor = aten::pairwise_distance(%i, %j, %two_f, %eps, %f_)
  %h : Tensor = aten::poisson_nll_loss(%i, %j, %t_, %f_, %eps, %one)
  %l : Tensor = aten::margin_ranking_loss(%i, %j, %k, %one_f, %one)
  %m : Tensor = aten::cosine_embedding_loss(%i, %j, %t, %zero_f, %one)
  %n : Tensor = aten::triplet_margin_loss(%i, %j, %k, %one_f, %two_f, %eps, %f_, %one)
  %o : Tensor = aten::threshold(%i, %lo, %hi)
  %p : Tensor = aten::isclose(%i, %j, %lo, %one_f, %f_)
  return (%a, %b, %c, %d, %e, %f, %g, %h, %l, %m, %n, %o, %p))IR");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  for (const char* op :
       {"special_entr", "special_xlog1py", "trapezoid", "cumulative_trapezoid", "cov", "corrcoef",
        "pairwise_distance", "poisson_nll_loss", "margin_ranking_loss", "cosine_embedding_loss",
        "triplet_margin_loss", "threshold", "isclose"}) {
    EXPECT_TRUE(testing::file_check(std::string("CHECK-NOT: aten::") + op + "(", *g)) << op;
  }
  const std::vector<c10::IValue> in = {
      at::randint(-4, 5, {3, 4}, at::kLong), at::randint(-4, 5, {3, 4}, at::kLong),
      at::randint(0, 2, {3, 4}, at::kLong) * 2 - 1, at::randint(0, 2, {3}, at::kLong) * 2 - 1};
  EXPECT_TRUE(testing::same_values(*before, *g, in, 1e-5, 1e-5));
}

// Rewrites that need the input's rank or dtype (flip, repeat, movedim, T, atleast_nd,
// round.decimals, nan_to_num, isclose, inner, fmod, heaviside): sizes are read at run
// time, so the values match at shapes other than any example's. Untyped inputs are left alone.
TEST(DecomposeOps, RankAndDtypeRewritesReadSizesAtRunTime) {
  const std::vector<std::string> calls = {"aten::flip(%x, %d01)",
                                          "aten::fliplr(%x)",
                                          "aten::flipud(%x)",
                                          "aten::repeat(%x, %reps)",
                                          "aten::repeat(%v, %reps)",
                                          "aten::movedim(%x, %zero_i, %one)",
                                          "aten::numpy_T(%x)",
                                          "aten::atleast_3d(%v)",
                                          "aten::round(%x, %three)",
                                          "aten::round(%x, %minus1)",
                                          "aten::nan_to_num(%s, %none, %none, %none)",
                                          "aten::isclose(%x, %y, %rtol, %atol, %f)",
                                          "aten::inner(%x, %w)",
                                          "aten::fmod(%x, %y)",
                                          "aten::heaviside(%s, %y)",
                                          "aten::count_nonzero(%s, %zero_i)",
                                          "aten::linalg_cross(%c, %c2, %one)"};
  for (const std::string& call : calls) {
    const std::string name = call.substr(0, call.find('('));
    auto g = testing::parse(R"IR(
graph(%x : Float(*, *), %y : Float(*, *), %s : Float(*, *), %v : Float(*), %w : Float(*, *),
      %c : Float(*, *), %c2 : Float(*, *)):
  %d01 : int[] = prim::Constant[value=[0, 1]]()
  %reps : int[] = prim::Constant[value=[2, 1, 3]]()
  %zero_i : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %three : int = prim::Constant[value=3]()
  %minus1 : int = prim::Constant[value=-1]()
  %rtol : float = prim::Constant[value=0.1]()
  %atol : float = prim::Constant[value=0.01]()
  %f : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %r : Tensor = )IR" + call +
                            R"IR(
  return (%r))IR");
    auto before = g->copy();
    EXPECT_TRUE(decompose_ops(g)) << call;
    // round.decimals becomes the plain round of a scaled value.
    if (name != "aten::round") {
      EXPECT_TRUE(testing::file_check("CHECK-NOT: " + name + "(", *g)) << call;
    }
    for (const int64_t rows : {3, 5}) {
      auto in = testing::random_inputs(
          {{rows, 4}, {rows, 4}, {rows, 4}, {4}, {2, 4}, {rows, 3}, {rows, 3}});
      at::Tensor s = in[2].toTensor();  // zeros, -0, infinities and NaN
      s[0][0] = std::numeric_limits<float>::infinity();
      s[0][1] = -std::numeric_limits<float>::infinity();
      s[1][0] = std::nan("");
      s[1][1] = 0;
      s[2][0] = -0.0;
      in[1].toTensor()[0][3] = in[0].toTensor()[0][3].item<float>() * 1.05f;  // close, not equal
      EXPECT_TRUE(testing::same_values(*before, *g, in, 1e-5, 1e-5)) << call << " rows " << rows;
    }
  }
  // Without a rank, nothing to go by.
  auto untyped = testing::parse(R"IR(
graph(%x : Tensor):
  %reps : int[] = prim::Constant[value=[2, 3]]()
  %r : Tensor = aten::repeat(%x, %reps)
  return (%r))IR");
  EXPECT_FALSE(decompose_ops(untyped));
}

// broadcast_tensors taken apart: each tensor expanded as the shape they broadcast to.
TEST(DecomposeOps, BroadcastTensorsBecomeExpands) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %v : Tensor, %s : Tensor):
  %l : Tensor[] = prim::ListConstruct(%x, %v, %s)
  %b : Tensor[] = aten::broadcast_tensors(%l)
  %p : Tensor, %q : Tensor, %r : Tensor = prim::ListUnpack(%b)
  return (%p, %q, %r))IR");
  auto before = g->copy();
  EXPECT_TRUE(decompose_ops(g));
  EXPECT_TRUE(
      testing::file_check("CHECK-NOT: aten::broadcast_tensors\nCHECK: aten::expand_as", *g));
  const std::vector<c10::IValue> in = {at::randn({3, 1}), at::randn({4}), at::randn({})};
  EXPECT_TRUE(testing::same_values(*before, *g, in, 0, 0));
}

// A `_copy` of a view becomes the view, unless something writes the copy in place or views it.
TEST(DecomposeOps, CopiesOfViewsBecomeViewsUnlessWritten) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor):
  %size : int[] = prim::Constant[value=[4, 3]]()
  %wide : int[] = prim::Constant[value=[2, 3, 4]]()
  %dims : int[] = prim::Constant[value=[1, 0]]()
  %one : int = prim::Constant[value=1]()
  %a : Tensor = aten::view_copy(%x, %size)
  %b : Tensor = aten::permute_copy(%x, %dims)
  %f : bool = prim::Constant[value=0]()
  %c : Tensor = aten::expand_copy(%x, %wide, %f)
  %d : Tensor = aten::view_copy(%x, %size)
  %e : Tensor = aten::add_(%d, %one, %one)
  %h : Tensor = aten::view_copy(%x, %size)
  %i : Tensor = aten::t(%h)
  %j : Tensor = aten::add_(%i, %one, %one)
  return (%a, %b, %c, %e, %j, %x))IR");
  EXPECT_TRUE(decompose_ops(g));
  // %d is written in place and %h through a view of it: both stay copies.
  EXPECT_TRUE(testing::file_check(
      "CHECK: aten::view(\nCHECK: aten::permute(\nCHECK: aten::expand(\nCHECK: aten::view_copy("
      "\nCHECK: aten::view_copy(",
      *g));
}

TEST(DecomposeOps, KeepsNativeOpsAndUnknownArguments) {
  auto g = testing::parse(R"IR(
graph(%x : Tensor, %dims : int[]):
  %t : bool = prim::Constant[value=1]()
  %a : Tensor = aten::hardswish(%x)
  %b : Tensor = aten::silu(%a)
  %c : Tensor = aten::hardsigmoid(%b)
  %d : Tensor = aten::rsqrt(%c)
  %v : Tensor = aten::var(%d, %dims, %t, %t)
  return (%v))IR");
  EXPECT_FALSE(decompose_ops(g));
  EXPECT_TRUE(testing::file_check(
      "CHECK: aten::hardswish\nCHECK: aten::silu\nCHECK: aten::hardsigmoid\nCHECK: aten::rsqrt"
      "\nCHECK: aten::var",
      *g));
}

// Grouped-query attention (enable_gqa, torch 2.5+): each key/value head serves Hq / Hkv query
// heads; the rewrite repeats them so the attention layer sees as many as the query has, plain,
// causal and masked, for 2 key/value heads and for 1 (multi-query), with no shapes known.
TEST(DecomposeOps, GroupedQueryAttentionRepeatsKeyAndValueHeads) {
  for (int64_t kv : {2, 1}) {
    for (const std::string form : {"plain", "causal", "mask"}) {
      SCOPED_TRACE(form + " " + std::to_string(kv));
      auto g = testing::parse(
          std::string("graph(%q : Tensor, %k : Tensor, %v : Tensor, %m : Tensor):\n"
                      "  %none : NoneType = prim::Constant()\n"
                      "  %drop : float = prim::Constant[value=0.]()\n") +
          "  %causal : bool = prim::Constant[value=" + (form == "causal" ? "1" : "0") +
          "]()\n"
          "  %gqa : bool = prim::Constant[value=1]()\n"
          "  %y : Tensor = aten::scaled_dot_product_attention(%q, %k, %v, " +
          (form == "mask" ? "%m" : "%none") +
          ", %drop, %causal, %none, %gqa)\n"
          "  return (%y)");
      auto before = g->copy();
      EXPECT_TRUE(decompose_ops(g));
      EXPECT_TRUE(
          testing::file_check("CHECK: aten::index_select\nCHECK: aten::index_select\n"
                              "CHECK: aten::scaled_dot_product_attention",
                              *g));
      torch::manual_seed(kv);
      auto keep = torch::rand({2, 1, 5, 7}) > 0.3;
      keep.select(3, 0).fill_(true);
      const std::vector<c10::IValue> in = {torch::randn({2, 4, 5, 8}), torch::randn({2, kv, 7, 8}),
                                           torch::randn({2, kv, 7, 6}), keep};
      EXPECT_TRUE(testing::same_values(*before, *g, in, 1e-5, 1e-5));
    }
  }
}

}  // namespace
}  // namespace kiln::lowering
