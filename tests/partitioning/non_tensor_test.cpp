// Non-tensor values never cross an engine boundary: recomputed inside, or the user falls back.
#include <gtest/gtest.h>

#include "partition_testing.h"

namespace kiln::partitioning {
namespace {

using testing::partition_ir;
using testing::segments_of;
using testing::with_min_block;

const TableCapability kAllButLgamma = TableCapability::all_except({"aten::lgamma"});

const torch::jit::Node* find_node(const PartitionedGraph& p, const std::string& output) {
  for (const torch::jit::Node* n : p.graph->nodes())
    if (n->outputs().size() == 1 && n->output()->debugName() == output) return n;
  ADD_FAILURE() << "no node defines %" << output;
  return nullptr;
}

void expect_engine_boundaries_are_tensors(const PartitionedGraph& p) {
  for (const Segment& s : p.segments) {
    if (s.target != Target::kEngine) continue;
    for (const auto* list : {&s.inputs, &s.outputs})
      for (const torch::jit::Value* v : *list)
        EXPECT_EQ(v->type()->kind(), c10::TypeKind::TensorType)
            << "%" << v->debugName() << " crosses an engine boundary\n"
            << format_segments(p);
  }
}

TEST(PartitionNonTensor, SizeNeededAfterATorchOpIsRecomputedInTheEngine) {
  const char* ir = R"IR(
graph(%x : Tensor):
  %zero : int = prim::Constant[value=0]()
  %m1 : int = prim::Constant[value=-1]()
  %a : Tensor = aten::relu(%x)
  %n : int = aten::size(%a, %zero)
  %l : Tensor = aten::lgamma(%a)
  %shape : int[] = prim::ListConstruct(%n, %m1)
  %v : Tensor = aten::reshape(%l, %shape)
  %b : Tensor = aten::sigmoid(%v)
  return (%b))IR";
  auto p = partition_ir(ir, kAllButLgamma, with_min_block(1));
  EXPECT_EQ(format_segments(p),
            "segment 0 engine: %a=aten::relu %n=aten::size\n"
            "segment 1 torch: %l=aten::lgamma\n"
            "segment 2 engine: %n=aten::size %shape=prim::ListConstruct %v=aten::reshape "
            "%b=aten::sigmoid\n");
  ASSERT_EQ(p.segments.size(), 3u);
  EXPECT_EQ(p.segments[2].copied.size(), 1u);
  ASSERT_EQ(p.segments[2].inputs.size(), 2u);
  EXPECT_EQ(p.segments[2].inputs[0]->debugName(), "a");
  EXPECT_EQ(p.segments[2].inputs[1]->debugName(), "l");
  expect_engine_boundaries_are_tensors(p);
}

TEST(PartitionNonTensor, SizeUsedByATorchOpFallsBackWithItsUsers) {
  const char* ir = R"IR(
graph(%x : Tensor):
  %zero : int = prim::Constant[value=0]()
  %m1 : int = prim::Constant[value=-1]()
  %a : Tensor = aten::relu(%x)
  %n : int = aten::size(%a, %zero)
  %shape : int[] = prim::ListConstruct(%n, %m1)
  %v : Tensor = aten::reshape(%a, %shape)
  %b : Tensor = aten::sigmoid(%v)
  return (%b))IR";
  PartitionSettings settings = with_min_block(1);
  settings.torch_executed_ops = {"aten::reshape"};
  auto p = partition_ir(ir, kAllButLgamma, settings);
  EXPECT_EQ(format_segments(p),
            "segment 0 engine: %a=aten::relu\n"
            "segment 1 torch: %n=aten::size %shape=prim::ListConstruct %v=aten::reshape\n"
            "segment 2 engine: %b=aten::sigmoid\n");
  const Decision& d = p.decisions.at(find_node(p, "n"));
  EXPECT_EQ(d.reason, Reason::kNonTensorBoundary);
  EXPECT_EQ(d.detail, "its output %n (int) is used outside its engine segment");
  EXPECT_EQ(p.decisions.at(find_node(p, "shape")).reason, Reason::kNonTensorBoundary);
  expect_engine_boundaries_are_tensors(p);
}

TEST(PartitionNonTensor, NonTensorGraphInputMakesItsUsersFallBack) {
  const char* ir = R"IR(
graph(%x : Tensor, %n : int):
  %a : Tensor = aten::relu(%x)
  %s : int[] = prim::ListConstruct(%n)
  %v : Tensor = aten::reshape(%a, %s)
  %b : Tensor = aten::sigmoid(%v)
  return (%b))IR";
  auto p = partition_ir(ir, kAllButLgamma, with_min_block(1));
  EXPECT_EQ(format_segments(p),
            "segment 0 engine: %a=aten::relu\n"
            "segment 1 torch: %s=prim::ListConstruct %v=aten::reshape\n"
            "segment 2 engine: %b=aten::sigmoid\n");
  const Decision& d = p.decisions.at(find_node(p, "s"));
  EXPECT_EQ(d.reason, Reason::kNonTensorBoundary);
  EXPECT_EQ(d.detail,
            "reads %n (int), which the engine cannot compute: %n (int) is an input of the graph or "
            "block");
  EXPECT_EQ(p.decisions.at(find_node(p, "v")).detail,
            "reads %s (int[]), which the engine cannot compute: %n (int) is an input of the graph "
            "or block");
  expect_engine_boundaries_are_tensors(p);
}

TEST(PartitionNonTensor, TupleReturnedByTheGraphIsPackedInTorch) {
  const char* ir = R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::sigmoid(%a)
  %t : (Tensor, Tensor) = prim::TupleConstruct(%a, %b)
  return (%t))IR";
  auto p = partition_ir(ir, kAllButLgamma, with_min_block(1));
  EXPECT_EQ(format_segments(p),
            "segment 0 engine: %a=aten::relu %b=aten::sigmoid\n"
            "segment 1 torch: %t=prim::TupleConstruct\n");
  EXPECT_EQ(p.segments[0].outputs.size(), 2u);
  expect_engine_boundaries_are_tensors(p);
}

TEST(PartitionNonTensor, TensorListFromTorchIsRebuiltInsideTheEngine) {
  // The list also feeds a torch op, so it is built in PyTorch; the engine rebuilds it from the
  // tensors rather than take a list.
  const char* ir = R"IR(
graph(%x : Tensor):
  %zero : int = prim::Constant[value=0]()
  %l : Tensor = aten::lgamma(%x)
  %l2 : Tensor = aten::lgamma(%l)
  %list : Tensor[] = prim::ListConstruct(%l, %l2)
  %s : Tensor = aten::stack(%list, %zero)
  %c : Tensor = aten::cat(%list, %zero)
  %r : Tensor = aten::relu(%c)
  return (%r, %s))IR";
  PartitionSettings settings = with_min_block(1);
  settings.torch_executed_ops = {"aten::stack"};
  auto p = partition_ir(ir, kAllButLgamma, settings);
  EXPECT_EQ(format_segments(p),
            "segment 0 torch: %l=aten::lgamma %l2=aten::lgamma %list=prim::ListConstruct "
            "%s=aten::stack\n"
            "segment 1 engine: %list=prim::ListConstruct %c=aten::cat %r=aten::relu\n");
  ASSERT_EQ(p.segments.size(), 2u);
  ASSERT_EQ(p.segments[1].inputs.size(), 2u);
  EXPECT_EQ(p.segments[1].inputs[0]->debugName(), "l");
  EXPECT_EQ(p.segments[1].inputs[1]->debugName(), "l2");
  EXPECT_EQ(p.decisions.at(find_node(p, "list")).reason, Reason::kNonTensorBoundary);
  expect_engine_boundaries_are_tensors(p);
}

}  // namespace
}  // namespace kiln::partitioning
