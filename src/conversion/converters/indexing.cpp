// Converters of indexing ops: slice, select, narrow to slice layers; roll to slices and a concat;
// slice_scatter and select_scatter to slices and a concat (a scatter for strided slices);
// index_select, embedding, gather and single-tensor advanced indexing to gather layers; scatter to
// scatter layers.
#include <algorithm>

#include "conversion/converters/operands.h"
#include "conversion/converters/shuffle_helpers.h"
#include "util/errors.h"

namespace kiln::conversion {
namespace {

using engine::kDynamic;
using engine::kSliceEnd;
using engine::TensorId;
using torch::jit::Node;
using torch::jit::Value;

TensorId slice(ConversionContext& ctx, const Node* n, TensorId x, int64_t axis, int64_t start,
               int64_t end, int64_t step, const std::string& suffix = "") {
  return ctx.add(n, engine::SliceParams{{axis}, {start}, {end}, {step}}, {x}, suffix);
}

// x[start:end:step] along `axis` where `end` is only known at run time (`position_ids[:, :L]`,
// L = ids.size(1)): a gather of the indices start, start + step, ... below min(end, dim), a range
// fill whose length the engine computes from shapes on the host.
TensorId slice_to_run_time_end(ConversionContext& ctx, const Node* n, TensorId x, int64_t axis,
                               int64_t start, const Value* end, int64_t step) {
  const int64_t dim = ctx.desc(x).shape[static_cast<size_t>(axis)];
  if (start < 0) {
    KILN_CHECK(dim != kDynamic, Unsupported, "slice with a negative start on dynamic dim ", axis,
               " to an end only known at run time");
    start = std::max<int64_t>(start + dim, 0);
  }
  TensorId size;
  if (dim != kDynamic) {
    size = ctx.constant(at::tensor({dim}, at::kLong), "dim");
  } else {
    const TensorId shape = ctx.add(n, engine::ShapeParams{}, {x}, "shape");
    size = ctx.add(n, engine::SliceParams{{0}, {axis}, {axis + 1}, {1}}, {shape}, "dim");
  }
  // Run-time sizes are never negative, so only the dim clamps the end.
  const TensorId stop = ctx.add(n, engine::ElementwiseParams{engine::BinaryOp::kMin},
                                {run_time_int(ctx, n, end), size}, "stop");
  const TensorId indices = run_time_range(ctx, n, start, stop, step, engine::DataType::kI64);
  engine::GatherParams gather;
  gather.axis = axis;
  return ctx.add(n, gather, {x, indices});
}

void convert_slice(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const size_t rank = ctx.desc(x).shape.size();
  const int64_t axis = axis_of(static_int(ctx, n->input(1)), rank, n);
  const int64_t start = is_none(n->input(2)) ? 0 : static_int(ctx, n->input(2));
  if (!is_none(n->input(3)) && !ctx.try_ivalue(n->input(3))) {
    const int64_t step = static_int(ctx, n->input(4));
    KILN_CHECK(step > 0, InvalidArgument, "slice step ", step, " must be positive");
    ctx.set_tensor(n->output(), slice_to_run_time_end(ctx, n, x, axis, start, n->input(3), step));
    return;
  }
  const int64_t end = is_none(n->input(3)) ? kSliceEnd : static_int(ctx, n->input(3));
  const int64_t step = static_int(ctx, n->input(4));
  KILN_CHECK(step > 0, InvalidArgument, "slice step ", step, " must be positive");
  ctx.set_tensor(n->output(), slice(ctx, n, x, axis, start, end, step));
}

// One index along `axis`, dropping the axis. A negative index counts from the end.
void convert_select(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const engine::Shape shape = ctx.desc(x).shape;
  const int64_t axis = axis_of(static_int(ctx, n->input(1)), shape.size(), n);
  const int64_t index = static_int(ctx, n->input(2));
  const int64_t size = shape[static_cast<size_t>(axis)];
  KILN_CHECK(size == kDynamic || (index >= -size && index < size), InvalidArgument, "index ", index,
             " out of range for dim ", axis, " of size ", size);
  const int64_t end = index == -1 ? kSliceEnd : index + 1;
  const TensorId s = slice(ctx, n, x, axis, index, end, 1, "slice");
  ctx.set_tensor(n->output(), drop_dim(ctx, n, s, axis));
}

void convert_narrow(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const engine::Shape shape = ctx.desc(x).shape;
  const int64_t axis = axis_of(static_int(ctx, n->input(1)), shape.size(), n);
  int64_t start = static_int(ctx, n->input(2));
  const int64_t length = static_int(ctx, n->input(3));
  const int64_t size = shape[static_cast<size_t>(axis)];
  if (start < 0) {
    KILN_CHECK(size != kDynamic, Unsupported, "narrow with a negative start on dynamic dim ", axis);
    start += size;
  }
  KILN_CHECK(start >= 0 && length >= 0 && (size == kDynamic || start + length <= size),
             InvalidArgument, "narrow(", start, ", ", length, ") out of range for dim ", axis,
             " of size ", size);
  ctx.set_tensor(n->output(), slice(ctx, n, x, axis, start, start + length, 1));
}

// roll(x, shifts, dims): along each dim in turn, the last `shift` elements (mod the dim's size)
// come first: a concat of two slices. No dims: x is rolled flat and keeps its shape.
void convert_roll(ConversionContext& ctx, const Node* n) {
  TensorId x = ctx.tensor(n->input(0));
  const engine::Shape shape = ctx.desc(x).shape;
  const std::vector<int64_t> shifts = static_ints(ctx, n->input(1));
  std::vector<int64_t> dims = static_ints(ctx, n->input(2));
  const bool flat = dims.empty();
  KILN_CHECK(flat ? shifts.size() == 1 : shifts.size() == dims.size(), InvalidArgument,
             "roll: ", shifts.size(), " shifts for ", dims.size(), " dims");
  if (flat) {
    KILN_CHECK(engine::is_static(shape), Unsupported, "roll without dims of a dynamic shape ",
               engine::shape_to_string(shape));
    engine::ShuffleParams p;
    p.has_reshape = true;
    p.reshape = {engine::volume(shape)};
    x = ctx.add(n, p, {x}, "flatten");
    dims = {0};
  }
  for (size_t k = 0; k < dims.size(); ++k) {
    const engine::Shape& s = ctx.desc(x).shape;
    const int64_t axis = axis_of(dims[k], s.size(), n);
    const int64_t size = s[static_cast<size_t>(axis)];
    KILN_CHECK(size != kDynamic, Unsupported, "roll along dynamic dim ", axis);
    if (size == 0) continue;
    const int64_t shift = ((shifts[k] % size) + size) % size;
    if (shift == 0) continue;
    const std::string tag = std::to_string(k);
    const TensorId tail = slice(ctx, n, x, axis, size - shift, kSliceEnd, 1, "tail" + tag);
    const TensorId head = slice(ctx, n, x, axis, 0, size - shift, 1, "head" + tag);
    x = ctx.add(n, engine::ConcatParams{axis, false}, {tail, head}, "cat" + tag);
  }
  if (flat) {
    engine::ShuffleParams p;
    p.has_reshape = true;
    p.reshape = shape;
    x = ctx.add(n, p, {x}, "unflatten");
  }
  ctx.set_tensor(n->output(), x);
}

// `src` written over x[start:end:step] along `axis` (slice_scatter; select_scatter passes src with
// the axis put back and end = start + 1). A unit step is the concat of what is left of x before
// and after the region around src; other steps scatter src by a constant index.
TensorId scatter_slice(ConversionContext& ctx, const Node* n, TensorId x, TensorId src,
                       int64_t axis, int64_t start, int64_t end, int64_t step) {
  const engine::Shape shape = ctx.desc(x).shape;
  const engine::Shape& src_shape = ctx.desc(src).shape;
  KILN_CHECK(step > 0, InvalidArgument, "slice step ", step, " must be positive");
  KILN_CHECK(src_shape.size() == shape.size(), InvalidArgument, "scatter of a rank-",
             src_shape.size(), " source into a rank-", shape.size(), " tensor");
  const int64_t size = shape[static_cast<size_t>(axis)];
  if (size == kDynamic) {
    KILN_CHECK(start >= 0 && end == kSliceEnd && step == 1, Unsupported,
               "scatter into dynamic dim ", axis, " needs a start >= 0, no end and step 1");
  } else {
    // Python slicing: negative bounds count from the end, then both clamp to [0, size].
    if (start < 0) start += size;
    if (end != kSliceEnd && end < 0) end += size;
    start = std::clamp<int64_t>(start, 0, size);
    end = std::clamp<int64_t>(end == kSliceEnd ? size : end, start, size);
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t want = static_cast<int64_t>(d) != axis ? shape[d]
                         : size == kDynamic              ? kDynamic
                                                         : (end - start + step - 1) / step;
    KILN_CHECK(want == kDynamic || src_shape[d] == kDynamic || src_shape[d] == want,
               InvalidArgument, "scatter source of shape ", engine::shape_to_string(src_shape),
               " does not fit the region (", want, " along dim ", d, ") of ",
               engine::shape_to_string(shape));
  }
  src = ctx.cast(n, src, ctx.desc(x).dtype);
  if (step == 1) {
    std::vector<TensorId> parts;
    if (start > 0) parts.push_back(slice(ctx, n, x, axis, 0, start, 1, "before"));
    parts.push_back(src);
    if (size != kDynamic && end < size) {
      parts.push_back(slice(ctx, n, x, axis, end, kSliceEnd, 1, "after"));
    }
    return parts.size() == 1 ? src : ctx.add(n, engine::ConcatParams{axis, false}, parts, "cat");
  }
  KILN_CHECK(engine::is_static(src_shape), Unsupported, "strided scatter of dynamic shape ",
             engine::shape_to_string(src_shape));
  std::vector<int64_t> view(shape.size(), 1);
  view[static_cast<size_t>(axis)] = src_shape[static_cast<size_t>(axis)];
  const at::Tensor index =
      (at::arange(src_shape[static_cast<size_t>(axis)], at::kLong) * step + start)
          .view(view)
          .expand(src_shape)
          .contiguous();
  const TensorId idx = ctx.constant(index, n->output()->debugName() + ":index");
  return ctx.add(n, engine::ScatterParams{axis, engine::ScatterReduce::kNone}, {x, idx, src});
}

// slice_scatter(self, src, dim, start, end, step): self with self[start:end:step] along dim = src.
void convert_slice_scatter(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const int64_t axis = axis_of(static_int(ctx, n->input(2)), ctx.desc(x).shape.size(), n);
  const int64_t start = is_none(n->input(3)) ? 0 : static_int(ctx, n->input(3));
  const int64_t end = is_none(n->input(4)) ? kSliceEnd : static_int(ctx, n->input(4));
  ctx.set_tensor(n->output(), scatter_slice(ctx, n, x, ctx.tensor(n->input(1)), axis, start, end,
                                            static_int(ctx, n->input(5))));
}

// select_scatter(self, src, dim, index): self with self.select(dim, index) = src.
void convert_select_scatter(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const engine::Shape shape = ctx.desc(x).shape;
  const int64_t axis = axis_of(static_int(ctx, n->input(2)), shape.size(), n);
  int64_t index = static_int(ctx, n->input(3));
  const int64_t size = shape[static_cast<size_t>(axis)];
  KILN_CHECK(size != kDynamic || index >= 0, Unsupported, "select_scatter at index ", index,
             " of dynamic dim ", axis);
  KILN_CHECK(size == kDynamic || (index >= -size && index < size), InvalidArgument, "index ", index,
             " out of range for dim ", axis, " of size ", size);
  if (index < 0) index += size;
  const TensorId src = insert_dim(ctx, n, ctx.tensor(n->input(1)), axis, "src");
  ctx.set_tensor(n->output(), scatter_slice(ctx, n, x, src, axis, index, index + 1, 1));
}

// Index tensors must be integers for gathers; bool masks give data-dependent shapes.
TensorId integer_index(ConversionContext& ctx, const Node* n, const Value* v) {
  const TensorId idx = ctx.tensor(v);
  const engine::DataType dt = ctx.desc(idx).dtype;
  KILN_CHECK(dt != engine::DataType::kBool && dt != engine::DataType::kU8, Unsupported,
             "boolean mask indexing: the output shape depends on the mask's values");
  KILN_CHECK(engine::is_integer(dt), InvalidArgument, "index tensor of dtype ",
             engine::dtype_name(dt));
  return dt == engine::DataType::kI64 || dt == engine::DataType::kI32
             ? idx
             : ctx.cast(n, idx, engine::DataType::kI64);
}

void convert_index_select(ConversionContext& ctx, const Node* n) {
  TensorId x = ctx.tensor(n->input(0));
  const bool scalar = ctx.desc(x).shape.empty();  // torch takes dim 0 of a 0-d tensor as [1]
  if (scalar) x = insert_dim(ctx, n, x, 0, "x");
  const int64_t axis = axis_of(static_int(ctx, n->input(1)), ctx.desc(x).shape.size(), n);
  TensorId idx = integer_index(ctx, n, n->input(2));
  if (scalar) {  // one index, and a 0-d result
    const TensorId picked =
        ctx.add(n, engine::GatherParams{engine::GatherMode::kDefault, 0}, {x, idx}, "pick");
    ctx.set_tensor(n->output(), reshape_dims(ctx, n, picked, {}));
    return;
  }
  // A 0-d index keeps the dim (size 1) in index_select, unlike a default gather.
  if (ctx.desc(idx).shape.empty()) idx = insert_dim(ctx, n, idx, 0, "index");
  ctx.set_tensor(n->output(),
                 ctx.add(n, engine::GatherParams{engine::GatherMode::kDefault, axis}, {x, idx}));
}

void convert_embedding(ConversionContext& ctx, const Node* n) {
  const TensorId w = ctx.tensor(n->input(0));
  const TensorId idx = integer_index(ctx, n, n->input(1));
  ctx.set_tensor(n->output(),
                 ctx.add(n, engine::GatherParams{engine::GatherMode::kDefault, 0}, {w, idx}));
}

void convert_gather(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const int64_t axis = axis_of(static_int(ctx, n->input(1)), ctx.desc(x).shape.size(), n);
  const TensorId idx = integer_index(ctx, n, n->input(2));
  ctx.set_tensor(n->output(),
                 ctx.add(n, engine::GatherParams{engine::GatherMode::kElements, axis}, {x, idx}));
}

// x[..., i0, i1, ..., ik, ...] with adjacent index tensors (the others None): their broadcast
// linear index into x's dims a..a+k flattened into one, gathered along it. The result's dims
// are x's before a, the indices' broadcast shape, then x's after the last indexed dim (torch's
// rule for adjacent indices). Negative indices count from the end of their dim.
std::optional<std::string> index_capable(const Node* n) {
  const Node* list = n->input(1)->node();
  if (list->kind() != torch::jit::prim::ListConstruct) {
    return std::string("the index list must be a list construct");
  }
  size_t tensors = 0, runs = 0;
  bool previous = false;
  for (const Value* v : list->inputs()) {
    const bool tensor = !is_none(v);
    tensors += tensor;
    runs += tensor && !previous;
    previous = tensor;
  }
  if (tensors == 0) return std::string("an index list without index tensors");
  if (runs > 1) {
    return std::string(
        "index tensors separated by a full slice (torch moves their dims to the "
        "front; kiln takes adjacent index tensors)");
  }
  return std::nullopt;
}

// diff(x, n, dim, prepend, append): x[1:] - x[:-1] along dim (x[1:] != x[:-1] for bools), n
// times, after prepend and append are concatenated to x along dim (n = 0: x itself).
void convert_diff(ConversionContext& ctx, const Node* n) {
  TensorId x = ctx.tensor(n->input(0));
  const engine::DataType dtype = ctx.desc(x).dtype;
  const size_t rank = ctx.desc(x).shape.size();
  KILN_CHECK(rank > 0, InvalidArgument, "diff of a 0-d tensor");
  const int64_t order = static_int(ctx, n->input(1));
  KILN_CHECK(order >= 0, InvalidArgument, "diff order ", order, " must be non-negative");
  const int64_t axis = axis_of(static_int(ctx, n->input(2)), rank, n);
  if (order == 0) {  // torch returns the input, without prepend or append
    ctx.set_tensor(n->output(), x);
    return;
  }
  std::vector<TensorId> parts;
  for (const Value* v : {n->input(3), n->input(0), n->input(4)}) {
    if (is_none(v)) continue;
    const TensorId t = ctx.cast(n, ctx.tensor(v), dtype);
    KILN_CHECK(ctx.desc(t).shape.size() == rank, InvalidArgument, "diff: prepend/append of rank ",
               ctx.desc(t).shape.size(), " for an input of rank ", rank);
    parts.push_back(t);
  }
  if (parts.size() > 1) x = ctx.add(n, engine::ConcatParams{axis, false}, parts, "joined");
  const engine::BinaryOp op =
      dtype == engine::DataType::kBool ? engine::BinaryOp::kXor : engine::BinaryOp::kSub;
  for (int64_t k = 0; k < order; ++k) {
    const TensorId hi = slice(ctx, n, x, axis, 1, kSliceEnd, 1, "hi");
    const TensorId lo = slice(ctx, n, x, axis, 0, -1, 1, "lo");
    x = ctx.add(n, engine::ElementwiseParams{op}, {hi, lo}, k + 1 == order ? "" : "step");
  }
  ctx.set_tensor(n->output(), x);
}

// Dim `axis` of x as a 0-d i64 tensor: a constant, or read from x's shape while shapes resolve.
TensorId dim_size(ConversionContext& ctx, const Node* n, TensorId x, int64_t axis) {
  const int64_t d = ctx.desc(x).shape[static_cast<size_t>(axis)];
  if (d != kDynamic) return ctx.constant(at::scalar_tensor(d, at::kLong), "dim");
  const TensorId shape = ctx.add(n, engine::ShapeParams{}, {x}, "shape");
  const TensorId one =
      ctx.add(n, engine::SliceParams{{0}, {axis}, {axis + 1}, {1}}, {shape}, "dim");
  return drop_dim(ctx, n, one, 0, "dim");
}

// The positions where a bool (or uint8) mask over k dims of x is true, as k index tensors (the
// columns of its nonzero indices, [count] each): torch's x[mask]. The count is data-dependent:
// the engine plans for every position and sizes what follows once the layer has run.
std::vector<TensorId> mask_indices(ConversionContext& ctx, const Node* n, TensorId mask,
                                   const engine::Shape& x_shape, int64_t first_dim) {
  const engine::Shape m = ctx.desc(mask).shape;
  KILN_CHECK(ctx.settings().output_allocator, Unsupported,
             "indexing with a mask: the output shape depends on the mask's values, and the "
             "target backend has no output allocator for data-dependent shapes");
  KILN_CHECK(first_dim + static_cast<int64_t>(m.size()) <= static_cast<int64_t>(x_shape.size()),
             InvalidArgument, "a mask of shape ", engine::shape_to_string(m), " at dim ", first_dim,
             " indexes past the rank of ", engine::shape_to_string(x_shape));
  for (size_t j = 0; j < m.size(); ++j) {
    const int64_t want = x_shape[static_cast<size_t>(first_dim) + j];
    KILN_CHECK(m[j] == engine::kDynamic || want == engine::kDynamic || m[j] == want, ShapeMismatch,
               "the shape of the mask ", engine::shape_to_string(m), " at index ", j,
               " does not match the shape of the indexed tensor ", engine::shape_to_string(x_shape),
               " at index ", first_dim + j);
  }
  const std::vector<TensorId> nz = ctx.add_layer(n, engine::NonZeroParams{}, {mask}, "nonzero");
  std::vector<TensorId> columns;
  for (size_t j = 0; j < m.size(); ++j) {
    engine::SliceParams col;
    col.axes = {1}, col.starts = {static_cast<int64_t>(j)},
    col.ends = {static_cast<int64_t>(j) + 1}, col.steps = {1};
    const TensorId c = ctx.add(n, col, {nz[0]}, "column");
    columns.push_back(reshape_dims(ctx, n, c, {{engine::kDynamic, 0}}, "column"));
  }
  return columns;
}

void convert_index(ConversionContext& ctx, const Node* n) {
  TensorId x = ctx.tensor(n->input(0));
  const engine::Shape shape = ctx.desc(x).shape;
  const Node* list = n->input(1)->node();
  int64_t axis = 0;
  while (is_none(list->input(static_cast<size_t>(axis)))) ++axis;
  // The index tensors, a dim of x each (a mask over k dims gives k).
  std::vector<TensorId> indices;
  for (size_t i = static_cast<size_t>(axis); i < list->inputs().size() && !is_none(list->input(i));
       ++i) {
    const TensorId v = ctx.tensor(list->input(i));
    const engine::DataType dt = ctx.desc(v).dtype;
    if (dt == engine::DataType::kBool || dt == engine::DataType::kU8) {
      const auto cols = mask_indices(ctx, n, v, shape, axis + static_cast<int64_t>(indices.size()));
      indices.insert(indices.end(), cols.begin(), cols.end());
    } else {
      indices.push_back(integer_index(ctx, n, list->input(i)));
    }
  }
  const int64_t count = static_cast<int64_t>(indices.size());
  KILN_CHECK(axis + count <= static_cast<int64_t>(shape.size()), InvalidArgument,
             "too many indices for a tensor of rank ", shape.size());
  if (count == 0) {  // a mask of rank 0: x[True] is x with a dim of 1 (of 0 for False) in front
    KILN_THROW(Unsupported, "indexing with a 0-d mask");
  }
  if (count == 1) {
    ctx.set_tensor(n->output(), ctx.add(n, engine::GatherParams{engine::GatherMode::kDefault, axis},
                                        {x, indices[0]}));
    return;
  }
  const auto binary = [&](engine::BinaryOp op, TensorId a, TensorId b) {
    return ctx.add(n, engine::ElementwiseParams{op}, {a, b}, "linear");
  };
  const TensorId zero = ctx.constant(at::scalar_tensor(0, at::kLong), "zero");
  TensorId linear = -1;
  for (int64_t j = 0; j < count; ++j) {
    TensorId idx = ctx.cast(n, indices[static_cast<size_t>(j)], engine::DataType::kI64);
    const TensorId size = dim_size(ctx, n, x, axis + j);
    const TensorId negative = binary(engine::BinaryOp::kLt, idx, zero);
    idx = ctx.add(n, engine::SelectParams{},
                  {negative, binary(engine::BinaryOp::kAdd, idx, size), idx}, "index");
    linear =
        j == 0 ? idx
               : binary(engine::BinaryOp::kAdd, binary(engine::BinaryOp::kMul, linear, size), idx);
  }
  // x with the indexed dims as one: the others copied in place.
  std::vector<TargetDim> dims;
  for (int64_t d = 0; d < axis; ++d) dims.push_back(copy_dim(shape, static_cast<size_t>(d)));
  TargetDim merged{1, -1};
  for (int64_t d = axis; d < axis + count; ++d) {
    const int64_t s = shape[static_cast<size_t>(d)];
    merged.size = merged.size == kDynamic || s == kDynamic ? kDynamic : merged.size * s;
  }
  dims.push_back(merged);
  for (size_t d = static_cast<size_t>(axis + count); d < shape.size(); ++d) {
    dims.push_back({shape[d], -1});
  }
  x = reshape_dims(ctx, n, x, dims, "flat");
  ctx.set_tensor(n->output(),
                 ctx.add(n, engine::GatherParams{engine::GatherMode::kDefault, axis}, {x, linear}));
}

// nonzero(x) and argwhere(x): the indices of x's nonzero elements, [count, rank], count
// data-dependent.
void convert_nonzero(ConversionContext& ctx, const Node* n) {
  ctx.set_tensor(n->output(),
                 ctx.add_layer(n, engine::NonZeroParams{}, {ctx.tensor(n->input(0))})[0]);
}

// masked_select(x, mask): x's elements where mask is true, x and mask broadcast together, as a
// vector (row-major): the broadcast x flattened, gathered at the broadcast mask's nonzeros.
void convert_masked_select(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  TensorId mask = ctx.tensor(n->input(1));
  if (ctx.desc(mask).dtype != engine::DataType::kBool) {
    mask = ctx.cast(n, mask, engine::DataType::kBool);
  }
  // x broadcast with the mask (a select whose branches are both x), the mask with x (and'ed
  // with trues of that shape).
  const TensorId xb = ctx.add(n, engine::SelectParams{}, {mask, x, x}, "x");
  const TensorId shape = ctx.add(n, engine::ShapeParams{}, {xb}, "shape");
  engine::FillParams trues;
  trues.dtype = engine::DataType::kBool;
  trues.value = 1;
  const TensorId all = ctx.add(n, trues, {shape}, "all");
  const TensorId mb =
      ctx.add(n, engine::ElementwiseParams{engine::BinaryOp::kAnd}, {all, mask}, "mask");
  const TensorId flat_x = reshape_dims(ctx, n, xb, {{engine::kDynamic, -1}}, "flat");
  const TensorId flat_mask = reshape_dims(ctx, n, mb, {{engine::kDynamic, -1}}, "flat_mask");
  const auto rows = mask_indices(ctx, n, flat_mask, ctx.desc(flat_x).shape, 0);
  ctx.set_tensor(n->output(), ctx.add(n, engine::GatherParams{engine::GatherMode::kDefault, 0},
                                      {flat_x, rows[0]}));
}

// scatter(self, dim, index, src|value) and scatter_add: updates of a scalar value are the value
// broadcast to the index's shape (a select whose branches are both the value).
ConvertFn scatter(engine::ScatterReduce reduce) {
  return [reduce](ConversionContext& ctx, const Node* n) {
    const TensorId x = ctx.tensor(n->input(0));
    const engine::DataType dt = ctx.desc(x).dtype;
    const int64_t axis = axis_of(static_int(ctx, n->input(1)), ctx.desc(x).shape.size(), n);
    const TensorId idx = integer_index(ctx, n, n->input(2));
    TensorId upd;
    if (n->input(3)->type()->kind() == c10::TypeKind::TensorType) {
      upd = ctx.cast(n, ctx.tensor(n->input(3)), dt);
    } else {
      const TensorId v = ctx.tensor(n->input(3), dt);
      const TensorId cond = ctx.cast(n, idx, engine::DataType::kBool);
      upd = ctx.add(n, engine::SelectParams{}, {cond, v, v}, "value");
    }
    ctx.set_tensor(n->output(), ctx.add(n, engine::ScatterParams{axis, reduce}, {x, idx, upd}));
  };
}

// scatter_reduce.two(self, dim, index, src, reduce, include_self=True): sum, prod, amax and amin
// are the scatter layer's reductions. The lowering (decompose_scatter) writes include_self=False
// and mean in these terms.
std::optional<engine::ScatterReduce> scatter_reduction(const std::string& reduce) {
  if (reduce == "sum") return engine::ScatterReduce::kAdd;
  if (reduce == "prod") return engine::ScatterReduce::kMul;
  if (reduce == "amax") return engine::ScatterReduce::kMax;
  if (reduce == "amin") return engine::ScatterReduce::kMin;
  return std::nullopt;
}

std::optional<std::string> scatter_reduce_capable(const Node* n) {
  if (auto r = static_inputs({1, 4, 5})(n)) return r;
  const std::string reduce = torch::jit::toIValue(n->input(4))->toStringRef();
  if (!scatter_reduction(reduce)) {
    return "reduce \"" + reduce + "\" (the engine scatters sum, prod, amax and amin)";
  }
  if (!torch::jit::toIValue(n->input(5))->toBool()) return std::string("include_self=False");
  return std::nullopt;
}

void convert_scatter_reduce(ConversionContext& ctx, const Node* n) {
  const TensorId x = ctx.tensor(n->input(0));
  const int64_t axis = axis_of(static_int(ctx, n->input(1)), ctx.desc(x).shape.size(), n);
  const TensorId idx = integer_index(ctx, n, n->input(2));
  const TensorId upd = ctx.cast(n, ctx.tensor(n->input(3)), ctx.desc(x).dtype);
  const auto reduce = scatter_reduction(ctx.ivalue(n->input(4)).toStringRef());
  ctx.set_tensor(n->output(), ctx.add(n, engine::ScatterParams{axis, *reduce}, {x, idx, upd}));
}

}  // namespace

void register_indexing_converters(Registry& r) {
  // Slices and gathers resolve their bounds against run-time dims; roll, strided scatters and
  // negative starts on dynamic dims refuse.
  r.add_converter(
      with_dynamic_shapes({{"aten::slice.Tensor"}, convert_slice, static_inputs({1, 2, 3, 4}), 0}));
  r.add_converter(
      with_dynamic_shapes({{"aten::select.int"}, convert_select, static_inputs({1, 2}), 0}));
  r.add_converter(
      with_dynamic_shapes({{"aten::narrow"}, convert_narrow, static_inputs({1, 2, 3}), 0}));
  r.add_converter(with_dynamic_shapes({{"aten::roll"}, convert_roll, static_inputs({1, 2}), 0}));
  r.add_converter(
      with_dynamic_shapes({existing_schemas({"aten::diff"}), convert_diff, static_inputs({1, 2})}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::slice_scatter"}, convert_slice_scatter, static_inputs({2, 3, 4, 5}), 0}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::select_scatter"}, convert_select_scatter, static_inputs({2, 3}), 0}));
  r.add_converter(
      with_dynamic_shapes({{"aten::index_select"}, convert_index_select, static_inputs({1}), 0}));
  r.add_converter(with_dynamic_shapes({{"aten::embedding"}, convert_embedding, {}, 0}));
  r.add_converter(with_dynamic_shapes({{"aten::gather"}, convert_gather, static_inputs({1}), 0}));
  r.add_converter(with_dynamic_shapes(
      {existing_schemas({"aten::index.Tensor", "aten::index.Tensor_hacked_twin"}), convert_index,
       index_capable}));
  r.add_converter(with_dynamic_shapes({{"aten::nonzero", "aten::argwhere"},
                                       convert_nonzero,
                                       {},
                                       0,
                                       /*requires_output_allocator=*/true}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::masked_select"}, convert_masked_select, {}, 0, /*requires_output_allocator=*/true}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::scatter.src"}, scatter(engine::ScatterReduce::kNone), static_inputs({1}), 0}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::scatter.value"}, scatter(engine::ScatterReduce::kNone), static_inputs({1, 3}), 0}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::scatter_add"}, scatter(engine::ScatterReduce::kAdd), static_inputs({1}), 0}));
  r.add_converter(with_dynamic_shapes(
      {{"aten::scatter_reduce.two"}, convert_scatter_reduce, scatter_reduce_capable, 0}));
}

}  // namespace kiln::conversion
