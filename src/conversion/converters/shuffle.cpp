// Converters of the shuffle family (reshape, view, flatten, permute, transpose, squeeze,
// unsqueeze, expand and identities) to engine shuffle/select layers, and the shared helpers.
#include <torch/csrc/jit/runtime/operator.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>

#include "conversion/converters/operands.h"
#include "conversion/converters/shuffle_helpers.h"
#include "conversion/dtypes.h"
#include "ir/verifier.h"
#include "util/errors.h"

namespace kiln::conversion {

using engine::kDynamic;
using engine::Shape;
using engine::TensorId;
using torch::jit::Node;
using torch::jit::Value;

std::vector<std::string> existing_schemas(const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const std::string& key : keys) {
    const size_t dot = key.find('.', key.find("::"));
    const std::string name = key.substr(0, dot);
    const std::string overload = dot == std::string::npos ? "" : key.substr(dot + 1);
    for (const auto& op : torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(name))) {
      if (op->schema().overload_name() == overload) {
        out.push_back(key);
        break;
      }
    }
  }
  return out;
}

std::optional<std::string> not_static_reason(const Value* v) {
  const Node* n = v->node();
  if (n->kind() == torch::jit::prim::Constant) return std::nullopt;
  if (n->kind() == torch::jit::prim::Param) {
    return "%" + v->debugName() + " is a graph input, known only at run time";
  }
  if (!default_registry().find_evaluator(n)) {
    return "%" + v->debugName() + " is computed at run time by `" + ir::node_to_string(n) + "`";
  }
  // Tensor metadata is static even when the tensor's contents are not.
  static const std::vector<std::string> kMetadata = {"aten::size", "aten::dim", "aten::numel",
                                                     "prim::dtype", "prim::device"};
  const bool metadata = std::find(kMetadata.begin(), kMetadata.end(),
                                  std::string(n->kind().toQualString())) != kMetadata.end();
  for (const Value* in : n->inputs()) {
    if (metadata && in->type()->kind() == c10::TypeKind::TensorType) continue;
    if (auto r = not_static_reason(in)) return r;
  }
  return std::nullopt;
}

CapabilityValidator static_inputs(std::vector<size_t> indices) {
  return [indices](const Node* n) -> std::optional<std::string> {
    for (size_t i : indices) {
      if (i >= n->inputs().size()) continue;
      if (auto r = not_static_reason(n->input(i))) {
        return "argument " + std::to_string(i) + " must be known at compile time: " + *r;
      }
    }
    return std::nullopt;
  };
}

std::vector<int64_t> static_ints(ConversionContext& ctx, const Value* v) {
  const c10::IValue& iv = ctx.ivalue(v);
  if (iv.isInt()) return {iv.toInt()};
  KILN_CHECK(iv.isIntList(), Unsupported, "value %", v->debugName(), " is a ", iv.tagKind(),
             ", not a list of ints");
  return iv.toIntVector();
}

int64_t static_int(ConversionContext& ctx, const Value* v) {
  const c10::IValue& iv = ctx.ivalue(v);
  KILN_CHECK(iv.isInt(), Unsupported, "value %", v->debugName(), " is a ", iv.tagKind(),
             ", not an int");
  return iv.toInt();
}

std::optional<engine::DataType> static_dtype(ConversionContext& ctx, const Value* v) {
  if (is_none(v)) return std::nullopt;
  const c10::IValue& iv = ctx.ivalue(v);
  if (iv.isNone()) return std::nullopt;
  KILN_CHECK(iv.isInt(), Unsupported, "dtype %", v->debugName(), " is a ", iv.tagKind());
  return to_engine_dtype(static_cast<at::ScalarType>(iv.toInt()), "dtype %" + v->debugName());
}

int64_t axis_of(int64_t dim, size_t rank, const Node* node) {
  return engine::normalize_axis(dim, rank, std::string(node->kind().toQualString()) + " dim");
}

TensorId reshape_dims(ConversionContext& ctx, const Node* node, TensorId x,
                      const std::vector<TargetDim>& dims, const std::string& suffix) {
  const Shape in = ctx.desc(x).shape;
  if (in.empty()) {
    // A 0-d tensor only reshapes to all-1 dims. The engine's reshape inference indexes its
    // per-input-dim bookkeeping by output position, which a 0-d input does not survive: a
    // broadcast gives the same result.
    for (const TargetDim& d : dims) {
      KILN_CHECK(d.size == 1 || d.size == kDynamic, ShapeMismatch,
                 "cannot reshape a 0-d tensor to ", dims.size(), " dims with a dim of ", d.size);
    }
    return broadcast_to(ctx, node, x, Shape(dims.size(), 1), suffix);
  }
  std::vector<int64_t> spec;
  bool inferred = false, identity = dims.size() == in.size();
  for (size_t i = 0; i < dims.size(); ++i) {
    const TargetDim& d = dims[i];
    if (d.size != kDynamic) {
      KILN_CHECK(d.size >= 0, InvalidArgument, "reshape to negative dim ", d.size);
      // The engine's 0 copies the input dim, so a zero-size dim is only expressible in place.
      KILN_CHECK(d.size != 0 || (i < in.size() && in[i] == 0), Unsupported,
                 "reshape to a zero-size dim at position ", i);
      spec.push_back(d.size);
      identity = identity && in[i] == d.size;
    } else if (d.from == static_cast<int64_t>(i)) {
      spec.push_back(0);
    } else {
      KILN_CHECK(!inferred, Unsupported, "reshape of ", engine::shape_to_string(in),
                 " needs more than one dim that is only known at run time");
      inferred = true;
      identity = false;
      spec.push_back(-1);
    }
  }
  if (identity) return x;
  engine::ShuffleParams p;
  p.has_reshape = true;
  p.reshape = std::move(spec);
  return ctx.add(node, p, {x}, suffix);
}

TensorId drop_dim(ConversionContext& ctx, const Node* node, TensorId x, int64_t axis,
                  const std::string& suffix) {
  const Shape in = ctx.desc(x).shape;
  std::vector<TargetDim> dims;
  for (size_t j = 0; j < in.size(); ++j) {
    if (static_cast<int64_t>(j) != axis) dims.push_back(copy_dim(in, j));
  }
  return reshape_dims(ctx, node, x, dims, suffix);
}

TensorId insert_dim(ConversionContext& ctx, const Node* node, TensorId x, int64_t axis,
                    const std::string& suffix) {
  const Shape in = ctx.desc(x).shape;
  std::vector<TargetDim> dims;
  for (size_t j = 0; j < in.size(); ++j) dims.push_back(copy_dim(in, j));
  dims.insert(dims.begin() + axis, TargetDim{1, -1});
  return reshape_dims(ctx, node, x, dims, suffix);
}

TensorId broadcast_to(ConversionContext& ctx, const Node* node, TensorId x, const Shape& target,
                      const std::string& suffix) {
  const Shape in = ctx.desc(x).shape;
  KILN_CHECK(target.size() >= in.size(), InvalidArgument, "cannot broadcast ",
             engine::shape_to_string(in), " to fewer dims ", engine::shape_to_string(target));
  bool needed = target.size() != in.size();
  for (size_t i = 0; i < in.size() && !needed; ++i) {
    needed = target[target.size() - in.size() + i] != 1 &&
             target[target.size() - in.size() + i] != in[i];
  }
  if (!needed) return x;
  engine::FillParams fill;
  fill.dtype = engine::DataType::kBool;
  fill.value = 1;
  for (int64_t d : target) fill.shape.push_back(d == kDynamic ? 1 : d);
  const TensorId cond = ctx.add(node, fill, {}, suffix.empty() ? "expand" : suffix + ".expand");
  return ctx.add(node, engine::SelectParams{}, {cond, x, x}, suffix);
}

TensorId run_time_int(ConversionContext& ctx, const Node* node, const Value* v, int depth) {
  if (auto iv = ctx.try_ivalue(v); iv && iv->isInt()) {
    return ctx.constant(at::tensor({iv->toInt()}, at::kLong), "size");
  }
  const Node* p = v->node();
  KILN_CHECK(depth < 32, Unsupported, "size %", v->debugName(),
             " is an expression more than 32 operations deep");
  if (p->kind() == c10::aten::size && p->inputs().size() == 2) {
    const TensorId t = ctx.tensor(p->input(0));
    const size_t rank = ctx.desc(t).shape.size();
    const int64_t axis = axis_of(static_int(ctx, p->input(1)), rank, p);
    const TensorId shape = ctx.add(node, engine::ShapeParams{}, {t}, "shape");
    engine::SliceParams dim;
    dim.axes = {0};
    dim.starts = {axis};
    dim.ends = {axis + 1};
    return ctx.add(node, dim, {shape}, "size");
  }
  static const std::map<std::string, engine::BinaryOp> kArithmetic = {
      {"aten::mul", engine::BinaryOp::kMul},
      {"aten::add", engine::BinaryOp::kAdd},
      {"aten::sub", engine::BinaryOp::kSub},
      {"aten::floordiv", engine::BinaryOp::kFloorDiv}};
  const auto op = kArithmetic.find(p->kind().toQualString());
  if (op != kArithmetic.end() && p->inputs().size() == 2 &&
      p->input(0)->type()->kind() == c10::TypeKind::IntType &&
      p->input(1)->type()->kind() == c10::TypeKind::IntType) {
    const TensorId a = run_time_int(ctx, node, p->input(0), depth + 1);
    const TensorId b = run_time_int(ctx, node, p->input(1), depth + 1);
    return ctx.add(node, engine::ElementwiseParams{op->second}, {a, b}, "size");
  }
  KILN_THROW(Unsupported, "size %", v->debugName(), " is computed by `", ir::node_to_string(p),
             "`; kiln computes run-time sizes from tensor sizes with +, -, * and //");
}

TensorId run_time_range(ConversionContext& ctx, const Node* node, int64_t start, TensorId stop,
                        int64_t step, engine::DataType dtype) {
  const auto i64 = [&](int64_t v) { return ctx.constant(at::tensor({v}, at::kLong), "range"); };
  const auto binary = [&](engine::BinaryOp op, TensorId a, TensorId b) {
    return ctx.add(node, engine::ElementwiseParams{op}, {a, b}, "length");
  };
  // max(ceil((stop - start) / step), 0), for step > 0.
  TensorId length = binary(engine::BinaryOp::kSub, stop, i64(start - (step - 1)));
  length = binary(engine::BinaryOp::kFloorDiv, length, i64(step));
  length = binary(engine::BinaryOp::kMax, length, i64(0));
  engine::FillParams range;
  range.mode = engine::FillMode::kRange;
  range.dtype = dtype;
  range.shape = {kDynamic};
  range.start = static_cast<double>(start);
  range.delta = static_cast<double>(step);
  return ctx.add(node, range, {length}, "range");
}

namespace {

void identity(ConversionContext& ctx, const Node* n) {
  ctx.set_tensor(n->output(), ctx.tensor(n->input(0)));
}

// One element of a reshape's size list that is not known at compile time (it depends on a
// dynamic dim): the input's own dim k when it is `x.size(k)`, else a dim the others determine.
TargetDim run_time_dim(const Node* reshape, const torch::jit::Value* element) {
  const Node* p = element->node();
  if (p->kind() == c10::aten::size && p->inputs().size() == 2 && p->input(0) == reshape->input(0)) {
    if (auto k = torch::jit::toIValue(p->input(1)); k && k->isInt()) {
      const int64_t rank = static_cast<int64_t>(
          reshape->input(0)->type()->cast<c10::TensorType>()->dim().value_or(-1));
      const int64_t axis = k->toInt() < 0 && rank > 0 ? k->toInt() + rank : k->toInt();
      return TargetDim{kDynamic, axis};
    }
  }
  return TargetDim{kDynamic, -1};
}

// A size list with entries known only at run time (`list`, a prim::ListConstruct) as an i64
// shape tensor. `static_entry(i, the entry's static value or nullopt)` gives the value to put
// there, or nullopt for the entry's run-time int; consecutive static values become one constant.
TensorId run_time_sizes(
    ConversionContext& ctx, const Node* node, const Value* list,
    const std::function<std::optional<int64_t>(size_t, std::optional<int64_t>)>& static_entry) {
  std::vector<TensorId> pieces;
  std::vector<int64_t> run;  // static entries not yet emitted
  const auto flush = [&] {
    if (run.empty()) return;
    pieces.push_back(ctx.constant(at::tensor(run, at::kLong), "sizes"));
    run.clear();
  };
  const auto& items = list->node()->inputs();
  for (size_t i = 0; i < items.size(); ++i) {
    std::optional<int64_t> known;
    if (auto iv = ctx.try_ivalue(items[i]); iv && iv->isInt()) known = iv->toInt();
    if (auto value = static_entry(i, known)) {
      run.push_back(*value);
    } else {
      flush();
      pieces.push_back(run_time_int(ctx, node, items[i]));
    }
  }
  flush();
  if (pieces.size() == 1) return pieces[0];
  return ctx.add(node, engine::ConcatParams{0, false}, pieces, "sizes");
}

// Whether `v` is a size list some of whose entries are only known at run time.
bool has_run_time_sizes(ConversionContext& ctx, const Value* v) {
  if (ctx.try_ivalue(v) || v->node()->kind() != c10::prim::ListConstruct) return false;
  for (const Value* e : v->node()->inputs()) {
    auto iv = ctx.try_ivalue(e);
    if (!iv || !iv->isInt()) return true;
  }
  return false;
}

// reshape/view: torch's -1 becomes the engine's inferred dim. With dynamic input dims the size
// list mixes static ints and run-time sizes (x.size(0), x.size(0) * heads): those become copied
// or inferred dims; reshape_dims refuses a target with two dims only known at run time.
void convert_reshape(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  std::vector<TargetDim> dims;
  auto add_static = [&](int64_t d) {
    KILN_CHECK(d >= -1, InvalidArgument, "bad reshape dim ", d);
    dims.push_back(d == -1 ? TargetDim{kDynamic, -1} : TargetDim{d, -1});
  };
  const Node* list = n->input(1)->node();
  if (!ctx.try_ivalue(n->input(1)) && list->kind() == c10::prim::ListConstruct) {
    for (const torch::jit::Value* e : list->inputs()) {
      auto iv = ctx.try_ivalue(e);
      if (iv && iv->isInt()) {
        add_static(iv->toInt());
      } else {
        dims.push_back(run_time_dim(n, e));
      }
    }
  } else {
    for (int64_t d : static_ints(ctx, n->input(1))) add_static(d);
  }
  size_t run_time = 0;  // dims neither static nor copied from the same position
  for (size_t i = 0; i < dims.size(); ++i) {
    run_time += dims[i].size == kDynamic && dims[i].from != static_cast<int64_t>(i);
  }
  if (run_time <= 1) {
    ctx.set_tensor(n->output(), reshape_dims(ctx, n, x, dims));
    return;
  }
  // Several sizes known only at run time (a dynamic batch and sequence): the target as a shape
  // tensor, with the static dims kept for the layers after it. The engine reads a 0 in a shape
  // tensor as "copy", so a literal 0 (an empty dim) is refused.
  engine::ShuffleParams p;
  p.has_reshape = true;
  for (size_t i = 0; i < dims.size(); ++i) {
    KILN_CHECK(dims[i].size != 0, Unsupported, "reshape to a zero-size dim at position ", i,
               " with sizes only known at run time");
    p.reshape.push_back(dims[i].size);
  }
  const TensorId target = run_time_sizes(
      ctx, n, n->input(1),
      [](size_t, std::optional<int64_t> known) { return known; });  // -1 stays: inferred
  ctx.set_tensor(n->output(), ctx.add(n, p, {x, target}));
}

// A reshape to another tensor's shape: static shapes directly, dynamic ones through the shape
// of `other` as a shape tensor.
void convert_reshape_as(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0)), other = ctx.tensor(n->input(1));
  const Shape target = ctx.desc(other).shape;
  if (engine::is_static(target)) {
    std::vector<TargetDim> dims;
    for (int64_t d : target) dims.push_back({d, -1});
    ctx.set_tensor(n->output(), reshape_dims(ctx, n, x, dims));
    return;
  }
  const TensorId shape = ctx.add(n, engine::ShapeParams{}, {other}, "shape");
  engine::ShuffleParams p;
  p.has_reshape = true;
  p.reshape = target;  // its static dims stay known while building
  ctx.set_tensor(n->output(), ctx.add(n, p, {x, shape}));
}

void convert_flatten(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const Shape in = ctx.desc(x).shape;
  if (in.empty()) {  // torch flattens a 0-d tensor to [1]
    ctx.set_tensor(n->output(), reshape_dims(ctx, n, x, {TargetDim{1, -1}}));
    return;
  }
  const int64_t start = axis_of(static_int(ctx, n->input(1)), in.size(), n);
  const int64_t end = axis_of(static_int(ctx, n->input(2)), in.size(), n);
  KILN_CHECK(start <= end, InvalidArgument, "flatten start_dim ", start, " > end_dim ", end);
  std::vector<TargetDim> dims;
  for (int64_t j = 0; j < start; ++j) dims.push_back(copy_dim(in, static_cast<size_t>(j)));
  TargetDim group{1, -1};
  for (int64_t j = start; j <= end; ++j) {
    const int64_t d = in[static_cast<size_t>(j)];
    group.size = group.size == kDynamic || d == kDynamic ? kDynamic : group.size * d;
  }
  if (start == end) group.from = start;
  dims.push_back(group);
  for (size_t j = static_cast<size_t>(end) + 1; j < in.size(); ++j) dims.push_back(copy_dim(in, j));
  ctx.set_tensor(n->output(), reshape_dims(ctx, n, x, dims));
}

void convert_unflatten(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const Shape in = ctx.desc(x).shape;
  const int64_t dim = axis_of(static_int(ctx, n->input(1)), in.size(), n);
  std::vector<TargetDim> dims;
  for (int64_t j = 0; j < dim; ++j) dims.push_back(copy_dim(in, static_cast<size_t>(j)));
  for (int64_t s : static_ints(ctx, n->input(2))) {
    dims.push_back(s == -1 ? TargetDim{kDynamic, -1} : TargetDim{s, -1});
  }
  for (size_t j = static_cast<size_t>(dim) + 1; j < in.size(); ++j) dims.push_back(copy_dim(in, j));
  ctx.set_tensor(n->output(), reshape_dims(ctx, n, x, dims));
}

void permute_to(ConversionContext& ctx, const Node* n, TensorId x, std::vector<int64_t> perm) {
  std::vector<int64_t> iota(perm.size());
  std::iota(iota.begin(), iota.end(), 0);
  if (perm == iota) {
    ctx.set_tensor(n->output(), x);
    return;
  }
  engine::ShuffleParams p;
  p.first_perm = std::move(perm);
  ctx.set_tensor(n->output(), ctx.add(n, p, {x}));
}

void convert_permute(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const size_t rank = ctx.desc(x).shape.size();
  std::vector<int64_t> perm;
  for (int64_t d : static_ints(ctx, n->input(1))) perm.push_back(axis_of(d, rank, n));
  KILN_CHECK(perm.size() == rank, InvalidArgument, "permute of ", perm.size(), " dims for rank ",
             rank);
  permute_to(ctx, n, x, perm);
}

void convert_transpose(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const size_t rank = ctx.desc(x).shape.size();
  if (rank == 0) return identity(ctx, n);
  std::vector<int64_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(axis_of(static_int(ctx, n->input(1)), rank, n))],
            perm[static_cast<size_t>(axis_of(static_int(ctx, n->input(2)), rank, n))]);
  permute_to(ctx, n, x, perm);
}

// aten::t: transposes 2-d tensors, leaves 0-d and 1-d ones.
void convert_t(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  if (ctx.desc(x).shape.size() < 2) return identity(ctx, n);
  permute_to(ctx, n, x, {1, 0});
}

// squeeze with no dims squeezes every size-1 dim; with dims, only those that are 1. A dynamic
// dim might be 1 at run time, which would change the output rank: that is not convertible.
void convert_squeeze(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const Shape in = ctx.desc(x).shape;
  std::vector<bool> candidate(in.size(), n->inputs().size() == 1);
  if (n->inputs().size() > 1 && !in.empty()) {
    for (int64_t d : static_ints(ctx, n->input(1))) {
      candidate[static_cast<size_t>(axis_of(d, in.size(), n))] = true;
    }
  }
  std::vector<TargetDim> dims;
  for (size_t j = 0; j < in.size(); ++j) {
    KILN_CHECK(!candidate[j] || in[j] != kDynamic, Unsupported, "squeeze of dim ", j, " of ",
               engine::shape_to_string(in), ", which is dynamic (it might be 1 at run time)");
    if (!(candidate[j] && in[j] == 1)) dims.push_back(copy_dim(in, j));
  }
  ctx.set_tensor(n->output(), reshape_dims(ctx, n, x, dims));
}

void convert_unsqueeze(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const size_t rank = ctx.desc(x).shape.size();
  const int64_t axis = axis_of(static_int(ctx, n->input(1)), rank + 1, n);
  ctx.set_tensor(n->output(), insert_dim(ctx, n, x, axis));
}

// expand to sizes some of which are only known at run time (`cls_token.expand(x.size(0), -1,
// -1)`): a select whose condition is a fill of the target shape, from a shape tensor, broadcasts
// x to it (both branches are x). Where x's dim is static and not 1, torch requires the size to
// be that dim, so the result keeps it.
void convert_expand_run_time(ConversionContext& ctx, const Node* n) {
  TensorId x = ctx.tensor(n->input(0));
  const Shape in = ctx.desc(x).shape;
  const auto& items = n->input(1)->node()->inputs();
  KILN_CHECK(items.size() >= in.size(), InvalidArgument, "expand to ", items.size(),
             " dims from rank ", in.size());
  const size_t lead = items.size() - in.size();
  if (lead > 0) {
    std::vector<TargetDim> dims(lead, TargetDim{1, -1});
    for (size_t j = 0; j < in.size(); ++j) dims.push_back(copy_dim(in, j));
    x = reshape_dims(ctx, n, x, dims, "rank");
  }
  const Shape xs = ctx.desc(x).shape;
  Shape target(items.size(), kDynamic);  // what is known of the result while building
  for (size_t i = 0; i < items.size(); ++i) {
    auto iv = ctx.try_ivalue(items[i]);
    if (iv && iv->isInt()) {
      const int64_t d = iv->toInt();
      KILN_CHECK(d >= 0 || (d == -1 && i >= lead), InvalidArgument, "expand size ", d, " at dim ",
                 i);
      target[i] = d == -1 ? xs[i] : d;
    } else if (xs[i] != kDynamic && xs[i] != 1) {
      target[i] = xs[i];
    }
  }
  if (engine::is_static(target)) {
    ctx.set_tensor(n->output(), broadcast_to(ctx, n, x, target));
    return;
  }
  const TensorId sizes = run_time_sizes(
      ctx, n, n->input(1), [&](size_t i, std::optional<int64_t> known) -> std::optional<int64_t> {
        if (target[i] != kDynamic) return target[i];
        if (known) return 1;  // -1 of a dim of x known only at run time: the select broadcasts it
        return std::nullopt;
      });
  engine::FillParams fill;  // the condition, of the result's shape; its values do not matter
  fill.dtype = engine::DataType::kBool;
  fill.value = 1;
  fill.shape = target;
  const TensorId cond = ctx.add(n, fill, {sizes}, "expand");
  ctx.set_tensor(n->output(), ctx.add(n, engine::SelectParams{}, {cond, x, x}));
}

// expand: -1 keeps a dim; new leading dims must be given. Reshaped to the target rank first
// (leading 1s), then broadcast.
void convert_expand(ConversionContext& ctx, const Node* n) {
  if (has_run_time_sizes(ctx, n->input(1))) return convert_expand_run_time(ctx, n);
  TensorId x = ctx.tensor(n->input(0));
  const Shape in = ctx.desc(x).shape;
  const std::vector<int64_t> sizes = static_ints(ctx, n->input(1));
  KILN_CHECK(sizes.size() >= in.size(), InvalidArgument, "expand to ", sizes.size(),
             " dims from rank ", in.size());
  const size_t lead = sizes.size() - in.size();
  Shape target(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    KILN_CHECK(sizes[i] >= 0 || (sizes[i] == -1 && i >= lead), InvalidArgument, "expand size ",
               sizes[i], " at dim ", i);
    target[i] = sizes[i] == -1 ? 1 : sizes[i];  // 1: keep the input's dim
  }
  if (lead > 0) {
    std::vector<TargetDim> dims(lead, TargetDim{1, -1});
    for (size_t j = 0; j < in.size(); ++j) dims.push_back(copy_dim(in, j));
    x = reshape_dims(ctx, n, x, dims, "rank");
  }
  ctx.set_tensor(n->output(), broadcast_to(ctx, n, x, target));
}

// repeat(x, reps): x tiled reps[i] times along each dim, more reps than dims adding leading ones.
// Lowering writes it as reshape, expand and reshape where it knows x's rank (decompose_math); this
// takes the rest (a rank that lowering could not see: nn.MultiheadAttention's functional form),
// with x's static shape known here: [s...] as [1, s0, 1, s1, ...], broadcast to
// [r0, s0, r1, s1, ...], as [r0 * s0, r1 * s1, ...] (dims repeated once without their 1). A dim
// known only at run time it refuses.
void convert_repeat(ConversionContext& ctx, const Node* n) {
  TensorId x = ctx.tensor(n->input(0));
  const Shape in = ctx.desc(x).shape;
  KILN_CHECK(engine::is_static(in), Unsupported, "repeat of ", engine::shape_to_string(in),
             ": a dim known only at run time");
  const std::vector<int64_t> reps = static_ints(ctx, n->input(1));
  KILN_CHECK(reps.size() >= in.size(), InvalidArgument, "repeat: ", reps.size(),
             " repeat counts for a tensor of rank ", in.size(), " (one a dim at least)");
  KILN_CHECK(engine::volume(in) > 0, Unsupported, "repeat of an empty tensor ",
             engine::shape_to_string(in));
  const size_t lead = reps.size() - in.size();
  std::vector<TargetDim> split, merged;
  Shape wide;
  for (size_t i = 0; i < reps.size(); ++i) {
    KILN_CHECK(reps[i] >= 0, InvalidArgument, "repeat: count ", reps[i], " at dim ", i);
    KILN_CHECK(reps[i] > 0, Unsupported, "repeat: a count of 0 at dim ", i, " (an empty result)");
    const int64_t size = i < lead ? 1 : in[i - lead];
    if (reps[i] != 1) {  // (a dim repeated once needs no broadcast dim: fewer dims to index)
      split.push_back(TargetDim{1, -1});
      wide.push_back(reps[i]);
    }
    split.push_back(TargetDim{size, -1});
    wide.push_back(size);
    merged.push_back(TargetDim{reps[i] * size, -1});
  }
  x = reshape_dims(ctx, n, x, split, "split");
  x = broadcast_to(ctx, n, x, wide, "tile");
  ctx.set_tensor(n->output(), reshape_dims(ctx, n, x, merged, "merge"));
}

// Counts known while compiling, none of them 0 (an empty result, which the engine's reshapes do
// not express: left to PyTorch). Counts that are constants are read here; others are checked
// when converting.
std::optional<std::string> repeat_capable(const Node* n) {
  if (auto reason = static_inputs({1})(n)) return reason;
  const Value* counts = n->input(1);
  std::vector<const Value*> items{counts};
  if (counts->node()->kind() == torch::jit::prim::ListConstruct) {
    items.assign(counts->node()->inputs().begin(), counts->node()->inputs().end());
  }
  for (const Value* item : items) {
    const auto iv = torch::jit::toIValue(item);
    if (!iv) continue;
    const std::vector<int64_t> values =
        iv->isIntList()
            ? iv->toIntVector()
            : (iv->isInt() ? std::vector<int64_t>{iv->toInt()} : std::vector<int64_t>{});
    if (std::find(values.begin(), values.end(), 0) != values.end()) {
      return std::string("a repeat count of 0 (an empty result) stays in PyTorch");
    }
  }
  return std::nullopt;
}

// expand_as: a select whose condition has `other`'s shape broadcasts x to it, also when that
// shape is dynamic. The condition's values do not matter: both branches are x.
void convert_expand_as(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0)), other = ctx.tensor(n->input(1));
  if (ctx.desc(x).shape == ctx.desc(other).shape && engine::is_static(ctx.desc(x).shape)) {
    return identity(ctx, n);
  }
  const TensorId cond = ctx.cast(n, other, engine::DataType::kBool);
  ctx.set_tensor(n->output(), ctx.add(n, engine::SelectParams{}, {cond, x, x}));
}

// A number as a 0-d tensor (how traces use x.size(0) in tensor arithmetic): a static number is
// left to the evaluator; a size known only at run time is computed from the shapes.
void convert_num_to_tensor(ConversionContext& ctx, const Node* n) {
  if (ctx.try_ivalue(n->input(0))) return;
  KILN_CHECK(n->input(0)->type()->kind() == c10::TypeKind::IntType, Unsupported, "%",
             n->input(0)->debugName(), " is a number known only at run time and not an int");
  ctx.set_tensor(n->output(), drop_dim(ctx, n, run_time_int(ctx, n, n->input(0)), 0));
}

}  // namespace

void register_shuffle_converters(Registry& r) {
  // Reshapes copy or infer dynamic dims (several through a shape tensor) and refuse what they
  // cannot express; squeeze refuses a dynamic dim that might be 1.
  r.add_converter(
      with_dynamic_shapes({{"prim::NumToTensor.Scalar"}, convert_num_to_tensor, {}, 0}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::reshape", "aten::view"}, convert_reshape, static_inputs({1}), 0}));
  r.add_converter(
      with_dynamic_shapes({{"aten::view_as", "aten::reshape_as"}, convert_reshape_as, {}, 0}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::flatten.using_ints"}, convert_flatten, static_inputs({1, 2}), 0}));
  r.add_converter(with_dynamic_shapes(
      {existing_schemas({"aten::unflatten.int"}), convert_unflatten, static_inputs({1, 2})}));
  r.add_converter(with_dynamic_shapes({{"aten::permute"}, convert_permute, static_inputs({1}), 0}));
  r.add_converter(with_dynamic_shapes({existing_schemas({"aten::transpose.int", "aten::swapaxes"}),
                                       convert_transpose, static_inputs({1, 2}), 0}));
  r.add_converter(with_dynamic_shapes({{"aten::t"}, convert_t, {}, 0}));
  r.add_converter(with_dynamic_shapes(
      {existing_schemas({"aten::squeeze", "aten::squeeze.dim", "aten::squeeze.dims"}),
       convert_squeeze, static_inputs({1}), 0}));
  r.add_converter(
      with_dynamic_shapes({{"aten::unsqueeze"}, convert_unsqueeze, static_inputs({1}), 0}));
  r.add_converter(with_dynamic_shapes({{"aten::expand"}, convert_expand, static_inputs({1}), 0}));
  r.add_converter(with_dynamic_shapes({{"aten::expand_as"}, convert_expand_as, {}, 0}));
  r.add_converter(with_dynamic_shapes({{"aten::repeat"}, convert_repeat, repeat_capable, 0}));
  r.add_converter(
      with_dynamic_shapes({{"aten::contiguous", "aten::clone", "aten::detach"}, identity, {}, 0}));
}

}  // namespace kiln::conversion
