// Converters of the concat family: cat and stack to concat layers; split, split_with_sizes,
// chunk, unbind, tensor_split and v/h/dsplit to slices. A split's Tensor[] output is no engine
// tensor: the consumers of the list (prim::ListUnpack, __getitem__, cat/stack) compute the pieces
// from the split node itself.
#include <torch/csrc/jit/runtime/operator.h>

#include <algorithm>

#include "conversion/converters/operands.h"
#include "conversion/converters/shuffle_helpers.h"
#include "conversion/dtypes.h"
#include "ir/verifier.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::kDynamic;
using engine::TensorId;
using torch::jit::Node;
using torch::jit::Value;

const std::vector<std::string>& split_keys() {
  static const std::vector<std::string> keys = existing_schemas(
      {"aten::split.Tensor", "aten::split.sizes", "aten::split", "aten::split_with_sizes",
       "aten::unsafe_split.Tensor", "aten::unsafe_split_with_sizes", "aten::chunk",
       "aten::unsafe_chunk", "aten::unbind.int", "aten::tensor_split.sections",
       "aten::tensor_split.indices", "aten::vsplit.int", "aten::vsplit.array", "aten::hsplit.int",
       "aten::hsplit.array", "aten::dsplit.int", "aten::dsplit.array"});
  return keys;
}

// The split family's dim: an argument (split, chunk, unbind, tensor_split) or implied by the
// name (vsplit 0, hsplit 1 or 0 of a 1-d tensor, dsplit 2); nullopt where it is an argument.
std::optional<int64_t> implied_split_dim(const std::string& kind, size_t rank) {
  if (kind == "aten::vsplit") return 0;
  if (kind == "aten::hsplit") return rank == 1 ? 0 : 1;
  if (kind == "aten::dsplit") return 2;
  return std::nullopt;
}

// The inputs a split-like node needs static: its sizes (or sections, or indices) and its dim.
std::vector<size_t> split_static_inputs(const Node* n) {
  const std::string kind = n->kind().toQualString();
  if (kind == "aten::unbind") return {1};
  if (implied_split_dim(kind, 2)) return {1};
  return {1, 2};
}

bool is_split(const Node* n) {
  const auto& keys = split_keys();
  return n->maybeSchema() && std::find(keys.begin(), keys.end(), node_key(n)) != keys.end();
}

bool is_tensor_list(const Value* v) {
  const auto list = v->type()->cast<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::TensorType;
}

// The pieces a split-like node produces, as slices of its input.
std::vector<TensorId> split_pieces(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const engine::Shape shape = ctx.desc(x).shape;
  const std::string kind = n->kind().toQualString();
  const bool unbind = kind == "aten::unbind";
  const auto implied = implied_split_dim(kind, shape.size());
  KILN_CHECK(!implied || static_cast<int64_t>(shape.size()) > *implied, InvalidArgument, kind,
             " needs a tensor of at least ", *implied + 1, " dims, got ",
             engine::shape_to_string(shape));
  const int64_t axis =
      implied ? *implied : axis_of(static_int(ctx, n->input(unbind ? 1 : 2)), shape.size(), n);
  const int64_t size = shape[static_cast<size_t>(axis)];
  KILN_CHECK(size != kDynamic, Unsupported, "splitting dim ", axis, " of ",
             engine::shape_to_string(shape),
             ", which is dynamic: the number of pieces and their "
             "sizes must be known at compile time");
  std::vector<int64_t> sizes;
  const c10::IValue* arg = unbind ? nullptr : &ctx.ivalue(n->input(1));
  const bool sections = kind == "aten::tensor_split" || implied;  // torch.tensor_split's rules
  if (unbind) {
    sizes.assign(static_cast<size_t>(size), 1);
  } else if (sections && arg->isIntList()) {
    // Split before each index (clamped to [previous, size]), as tensor_split.
    int64_t start = 0;
    for (int64_t index : arg->toIntVector()) {
      if (index < 0) index += size;
      const int64_t end = std::min(std::max(index, start), size);
      sizes.push_back(end - start);
      start = end;
    }
    sizes.push_back(size - start);
  } else if (sections) {
    // n sections: the first size % n one element longer; v/h/dsplit want them equal.
    const int64_t count = arg->toInt();
    KILN_CHECK(count > 0, InvalidArgument, kind, ": the number of sections must be positive, got ",
               count);
    KILN_CHECK(!implied || size % count == 0, InvalidArgument, kind, ": dim ", axis, " of size ",
               size, " does not split into ", count, " equal sections");
    for (int64_t i = 0; i < count; ++i) sizes.push_back(size / count + (i < size % count));
  } else if (arg->isIntList()) {
    sizes = arg->toIntVector();
  } else {
    int64_t step = arg->toInt();
    if (kind == "aten::chunk" || kind == "aten::unsafe_chunk") {
      KILN_CHECK(step > 0, InvalidArgument, "chunk count ", step, " must be positive");
      step = (size + step - 1) / step;  // torch: chunks of ceil(size / chunks)
    }
    KILN_CHECK(step > 0 || size == 0, InvalidArgument, "split size ", step, " must be positive");
    for (int64_t off = 0; off < size; off += step) sizes.push_back(std::min(step, size - off));
    if (sizes.empty()) sizes.push_back(0);
  }
  std::vector<TensorId> pieces;
  int64_t off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    engine::SliceParams p{{axis}, {off}, {off + sizes[i]}, {1}};
    off += sizes[i];
    TensorId piece = ctx.add(n, p, {x}, std::to_string(i));
    if (unbind) piece = drop_dim(ctx, n, piece, axis, std::to_string(i) + ".squeeze");
    pieces.push_back(piece);
  }
  KILN_CHECK(off == size, InvalidArgument, "split sizes add up to ", off, ", dim ", axis, " is ",
             size);
  return pieces;
}

// The tensors of a Tensor[] value: a list construct, a split-like node, or a static list.
std::vector<TensorId> tensors_of_list(ConversionContext& ctx, const Value* list) {
  if (is_split(list->node())) return split_pieces(ctx, list->node());
  return ctx.tensor_list(list);
}

// Why a Tensor[] value cannot be taken apart by a converter, or nullopt.
std::optional<std::string> list_reason(const Value* list) {
  const Node* p = list->node();
  if (p->kind() == torch::jit::prim::ListConstruct || p->kind() == torch::jit::prim::Constant) {
    return std::nullopt;
  }
  if (is_split(p)) return static_inputs(split_static_inputs(p))(p);
  return "the list of tensors %" + list->debugName() + " comes from `" + ir::node_to_string(p) +
         "`, which has no converter";
}

// Split-like nodes are evaluated (when their input is a static tensor) rather than converted:
// their output is a list, and their consumers convert the pieces.
std::optional<c10::IValue> evaluate_split(ConversionContext& ctx, const Node* n) {
  torch::jit::Stack stack;
  for (const Value* in : n->inputs()) {
    auto v = ctx.try_ivalue(in);
    if (!v) return std::nullopt;
    stack.push_back(*v);
  }
  torch::jit::Operation op = n->getOperation();
  op(stack);
  return stack.at(0);
}

// Unpacks a list: static lists through the evaluator, Tensor[] lists into their tensors.
void convert_list_unpack(ConversionContext& ctx, const Node* n) {
  if (n->outputs().empty() || ctx.try_ivalue(n->output(0))) return;
  if (!is_tensor_list(n->input(0))) {
    ctx.ivalue(n->input(0));  // throws Unsupported naming the non-static list
    return;
  }
  const std::vector<TensorId> items = tensors_of_list(ctx, n->input(0));
  KILN_CHECK(items.size() == n->outputs().size(), InvalidArgument, "unpacking ", items.size(),
             " tensors into ", n->outputs().size(), " outputs");
  for (size_t i = 0; i < items.size(); ++i) ctx.set_tensor(n->output(i), items[i]);
}

std::optional<std::string> list_unpack_capable(const Node* n) {
  if (!is_tensor_list(n->input(0))) return std::nullopt;
  return list_reason(n->input(0));
}

void convert_getitem(ConversionContext& ctx, const Node* n) {
  if (ctx.try_ivalue(n->output())) return;
  if (!is_tensor_list(n->input(0))) {
    ctx.ivalue(n->input(0));
    ctx.ivalue(n->input(1));
    return;
  }
  const std::vector<TensorId> items = tensors_of_list(ctx, n->input(0));
  int64_t i = static_int(ctx, n->input(1));
  if (i < 0) i += static_cast<int64_t>(items.size());
  KILN_CHECK(i >= 0 && i < static_cast<int64_t>(items.size()), InvalidArgument, "index ",
             static_int(ctx, n->input(1)), " out of range for ", items.size(), " tensors");
  ctx.set_tensor(n->output(), items[static_cast<size_t>(i)]);
}

std::optional<std::string> getitem_capable(const Node* n) {
  if (!is_tensor_list(n->input(0))) return std::nullopt;
  if (auto r = static_inputs({1})(n)) return r;
  return list_reason(n->input(0));
}

// cat/stack promote their inputs to one dtype, as torch does.
std::vector<TensorId> promoted(ConversionContext& ctx, const Node* n, std::vector<TensorId> xs) {
  KILN_CHECK(!xs.empty(), InvalidArgument, "expected a non-empty list of tensors");
  engine::DataType dtype = ctx.desc(xs[0]).dtype;
  for (TensorId x : xs) dtype = promote(dtype, ctx.desc(x).dtype);
  for (TensorId& x : xs) x = ctx.cast(n, x, dtype);
  return xs;
}

void convert_cat(ConversionContext& ctx, const Node* n) {
  std::vector<TensorId> all = promoted(ctx, n, tensors_of_list(ctx, n->input(0)));
  // torch still skips 1-d empty tensors in cat, whatever the other inputs' rank.
  std::vector<TensorId> xs;
  for (TensorId x : all) {
    if (ctx.desc(x).shape != engine::Shape{0}) xs.push_back(x);
  }
  if (xs.empty()) xs.push_back(all[0]);
  const size_t rank = ctx.desc(xs[0]).shape.size();
  const int64_t axis = axis_of(static_int(ctx, n->input(1)), rank, n);
  if (xs.size() == 1) {
    ctx.set_tensor(n->output(), xs[0]);
    return;
  }
  ctx.set_tensor(n->output(), ctx.add(n, engine::ConcatParams{axis, false}, xs));
}

void convert_stack(ConversionContext& ctx, const Node* n) {
  const std::vector<TensorId> xs = promoted(ctx, n, tensors_of_list(ctx, n->input(0)));
  const size_t rank = ctx.desc(xs[0]).shape.size();
  const int64_t axis = axis_of(static_int(ctx, n->input(1)), rank + 1, n);
  ctx.set_tensor(n->output(), ctx.add(n, engine::ConcatParams{axis, true}, xs));
}

std::optional<std::string> cat_capable(const Node* n) {
  if (auto r = static_inputs({1})(n)) return r;
  return list_reason(n->input(0));
}

}  // namespace

void register_concat_converters(Registry& r) {
  // Concats take dynamic dims; splits refuse a dynamic split dim.
  r.add_converter(
      with_dynamic_shapes({existing_schemas({"aten::cat", "aten::concat", "aten::concatenate"}),
                           convert_cat, cat_capable, 0}));
  r.add_converter(with_dynamic_shapes({{"aten::stack"}, convert_stack, cat_capable, 0}));
  r.add_evaluator({split_keys(), evaluate_split});
  r.add_converter(
      with_dynamic_shapes({{"prim::ListUnpack"}, convert_list_unpack, list_unpack_capable, 1}));
  r.add_converter(
      with_dynamic_shapes({{"aten::__getitem__.t"}, convert_getitem, getitem_capable, 1}));
}

}  // namespace kiln::conversion
