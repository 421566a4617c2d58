// aten::einsum against libtorch: products with batch, contracted and free labels, implicit
// outputs, "..." broadcasting, sums of one operand, three operands, size-1 broadcasting, and the
// validator's reasons for what it refuses.
#include "conversion/converter_testing.h"
#include "conversion/registry.h"
#include "harness/ir_testing.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using testing::matches_torch;

std::string einsum_ir(const std::string& equation, size_t operands) {
  std::string args, list;
  for (size_t i = 0; i < operands; ++i) {
    args += (i ? ", " : "") + std::string("%x") + std::to_string(i) + " : Tensor";
    list += (i ? ", " : "") + std::string("%x") + std::to_string(i);
  }
  return "graph(" + args + "):\n  %eq : str = prim::Constant[value=\"" + equation +
         "\"]()\n  %none : NoneType = prim::Constant()\n  %l : Tensor[] = prim::ListConstruct(" +
         list + ")\n  %y : Tensor = aten::einsum(%eq, %l, %none)\n  return (%y)\n";
}

struct Case {
  std::string equation;
  std::vector<std::vector<int64_t>> shapes;
};

TEST(ConvertEinsum, MatchesTorchOnEveryKindOfLabel) {
  torch::manual_seed(0);
  const std::vector<Case> cases = {
      // maxvit's attention: batch B G H, free I / J, contracted D; then the weighted sum.
      {"B G H I D, B G H J D -> B G H I J", {{2, 3, 2, 5, 4}, {2, 3, 2, 6, 4}}},
      {"B G H I J, B G H J D -> B G H I D", {{2, 3, 2, 5, 6}, {2, 3, 2, 6, 4}}},
      {"ij,jk->ik", {{3, 4}, {4, 5}}},
      {"ij,jk", {{3, 4}, {4, 5}}},      // implicit output: i, k
      {"ij,kj->ki", {{3, 4}, {5, 4}}},  // transposed operand and output
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"i,i->", {{7}, {7}}},                              // dot product
      {"i,j->ij", {{3}, {4}}},                            // outer product
      {"ij->ji", {{3, 4}}},                               // permute
      {"ij->j", {{3, 4}}},                                // sum of one operand
      {"ijk->", {{2, 3, 4}}},                             // sum of everything
      {"ij,ij->ij", {{3, 4}, {3, 4}}},                    // elementwise product
      {"bn,anm,bm->ba", {{2, 3}, {5, 3, 4}, {2, 4}}},     // bilinear, three operands
      {"abcd,cdef->abef", {{2, 3, 4, 5}, {4, 5, 2, 3}}},  // groups of two labels
      {"ab,cd->", {{2, 3}, {4, 5}}},                      // labels summed in each operand alone
      {"...ij,...jk->...ik", {{2, 3, 3, 4}, {3, 4, 5}}},  // "..." broadcast (2,3) vs (3)
      {"...ij,jk", {{2, 3, 4}, {4, 5}}},                  // implicit output with "..."
      {"bij,bjk->bik", {{1, 3, 4}, {2, 4, 5}}},           // batch label broadcast from 1
      {"ij,jk->ik", {{3, 1}, {4, 5}}},                    // contracted label of size 1 on one side
  };
  for (const Case& c : cases) {
    std::vector<at::Tensor> inputs;
    for (const auto& s : c.shapes) inputs.push_back(torch::randn(s));
    EXPECT_TRUE(matches_torch(einsum_ir(c.equation, inputs.size()), inputs)) << c.equation;
  }
}

// Integer operands of one dtype multiply in the engine, wrapping around as torch's products do.
TEST(ConvertEinsum, IntegerProductsMatchTorch) {
  torch::manual_seed(1);
  const int64_t limit = int64_t{1} << 62;
  for (const Case& c : std::vector<Case>{{"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
                                         {"ij,j->i", {{3, 4}, {4}}},
                                         {"ij->j", {{3, 4}}}}) {
    std::vector<at::Tensor> inputs;
    for (const auto& s : c.shapes) inputs.push_back(torch::randint(-limit, limit, s, torch::kLong));
    const auto got = testing::run_converted(einsum_ir(c.equation, inputs.size()), inputs);
    std::vector<at::Tensor> ops(inputs.begin(), inputs.end());
    EXPECT_TRUE(at::equal(got.at(0), at::einsum(c.equation, ops))) << c.equation;
  }
}

TEST(ConvertEinsum, ValidatorNamesWhatItRefuses) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"ii,j->i", "repeats within one operand"},  {"ij,jk->iz", "is in no operand"},
      {"ij,jk->ii", "output label 'i' repeats"},  {"ij,j1->i", "not a letter"},
      {"ij->i", "1 operand terms for 2 tensors"},
  };
  for (const auto& [eq, why] : refused) {
    auto g = kiln::testing::parse(einsum_ir(eq, 2));
    const Support s = default_registry().supports(g->outputs()[0]->node());
    EXPECT_FALSE(s.supported) << eq;
    EXPECT_NE(s.reason.find(why), std::string::npos) << eq << ": " << s.reason;
  }
  // Ranks that do not fit the equation fail conversion with the counts.
  try {
    testing::run_converted(einsum_ir("ij,jk->ik", 2),
                           {torch::randn({3, 4, 1}), torch::randn({4, 5})});
    ADD_FAILURE() << "a rank-3 operand for two labels converted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("operand 0 has 3 dims for 2 labels"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::conversion
