// decompose_ops' arrangements (issue #35's coverage): tensors laid out from others (meshgrid,
// cartesian_prod, block_diag, linspace/logspace of tensor ends), moved (fftshift, ifftshift),
// repeated (repeat_interleave of the flattened tensor), split at a constant tensor's indices,
// written into (diagonal_scatter, max_unpool), differentiated (gradient), measured (linalg_norm,
// linalg_matrix_norm), and the index lists constant propagation folded into one constant given
// back as a list. Sizes are read at run time (aten::size), so the rewrites hold for any shape of
// the inputs' ranks.
#include <algorithm>
#include <cmath>
#include <limits>

#include "lowering/passes/decompose_math.h"
#include "lowering/passes/rewrite_builder.h"
#include "lowering/rewrite_utils.h"

namespace kiln::lowering {
namespace {

using torch::jit::Node;
using torch::jit::Value;

// The dims an optional int or int[] argument names, normalized; all of them for None; nullopt
// when it is not a constant or names a dim out of range or twice.
std::optional<std::vector<int64_t>> dims_argument(const Value* v, int64_t rank) {
  auto c = constant_value(v);
  if (!c) return std::nullopt;
  std::vector<int64_t> given;
  if (c->isNone()) {
    for (int64_t d = 0; d < rank; ++d) given.push_back(d);
    return given;
  }
  if (c->isInt()) {
    given = {c->toInt()};
  } else if (c->isIntList()) {
    given = c->toIntVector();
  } else {
    return std::nullopt;
  }
  std::vector<int64_t> dims;
  for (int64_t d : given) {
    auto nd = normalized_dim(d, rank);
    if (!nd || std::find(dims.begin(), dims.end(), *nd) != dims.end()) return std::nullopt;
    dims.push_back(*nd);
  }
  return dims;
}

// The tensors of a list built in the graph (prim::ListConstruct), each of a known rank.
std::optional<std::vector<Value*>> listed_tensors(Value* list) {
  if (list->node()->kind() != c10::prim::ListConstruct) return std::nullopt;
  std::vector<Value*> items(list->node()->inputs().begin(), list->node()->inputs().end());
  for (Value* v : items) {
    if (!known_rank(v)) return std::nullopt;
  }
  return items;
}

// The dtype torch's type promotion gives tensors of these dtypes; nullopt when one is unknown.
std::optional<c10::ScalarType> promoted_dtype(const std::vector<Value*>& tensors) {
  std::optional<c10::ScalarType> type;
  for (Value* v : tensors) {
    auto t = known_dtype(v);
    if (!t) return std::nullopt;
    type = type ? c10::promoteTypes(*type, *t) : *t;
  }
  return type;
}

Value* tensor_list(GraphPtr& graph, const std::vector<Value*>& tensors) {
  return graph->insertNode(graph->createList(c10::TensorType::get(), tensors))->output();
}

// meshgrid with ij indexing of 0-d or 1-d tensors: tensor i along dim i of the grid, the grid
// of all their lengths.
std::vector<Value*> grids(RewriteBuilder& b, const std::vector<Value*>& tensors) {
  const int64_t k = static_cast<int64_t>(tensors.size());
  std::vector<Value*> sizes;
  for (Value* t : tensors) sizes.push_back(b("aten::numel", {t}));
  std::vector<Value*> out;
  for (int64_t i = 0; i < k; ++i) {
    std::vector<int64_t> shape(static_cast<size_t>(k), 1);
    shape[static_cast<size_t>(i)] = -1;
    Value* along = b("aten::reshape", {tensors[static_cast<size_t>(i)], shape});
    out.push_back(b("aten::expand", {along, b.list(sizes)}));
  }
  return out;
}

// linspace's values in the float dtype `type`: start + i * step over the first half, end -
// (steps - 1 - i) * step over the second, as torch computes them (so both ends are exact).
Value* linear_steps(RewriteBuilder& b, Value* start, Value* end, int64_t steps,
                    c10::ScalarType type) {
  const auto as_type = [&](Value* v) {
    return b.cast(b("aten::reshape", {v, std::vector<int64_t>{}}), type);
  };
  start = as_type(start);
  end = as_type(end);
  Value* i = b.cast(b("aten::arange", {steps}), type);
  if (steps == 1) return b("aten::add", {b("aten::mul", {i, 0}), start});
  Value* step = b("aten::div", {b("aten::sub", {end, start}), static_cast<double>(steps - 1)});
  Value* rising = b("aten::add", {start, b("aten::mul", {i, step})});
  Value* falling = b("aten::sub", {end, b("aten::mul", {b("aten::rsub", {i, steps - 1}), step})});
  return b("aten::where", {b("aten::lt", {i, steps / 2}), rising, falling});
}

// A matrix norm over dims d1, d2 (normalized, distinct) by reductions: fro, and the max/min
// (inf, 1 / -inf, -1) of the absolute row or column sums; nullptr for the norms that need
// singular values (2, -2, nuc).
Value* matrix_norm(RewriteBuilder& b, Value* x, const c10::IValue& ord, int64_t d1, int64_t d2,
                   bool keep) {
  std::vector<int64_t> dims = {d1, d2};
  if (ord.isString()) {
    if (ord.toStringRef() != "fro") return nullptr;
    return b("aten::linalg_vector_norm", {x, 2.0, dims, keep});
  }
  if (!ord.isInt() && !ord.isDouble()) return nullptr;
  const double p = ord.toScalar().toDouble();
  const bool rows = std::isinf(p);  // inf: the largest sum along a row (over d2)
  if (!rows && p != 1 && p != -1) return nullptr;
  Value* sums = b("aten::sum", {b("aten::abs", {x}), std::vector<int64_t>{rows ? d2 : d1}, true});
  Value* picked =
      b(p > 0 ? "aten::amax" : "aten::amin", {sums, std::vector<int64_t>{rows ? d1 : d2}, true});
  return keep ? picked : b("aten::squeeze", {picked, dims});
}

}  // namespace

Value* decompose_arrange(GraphPtr& graph, Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema) return nullptr;
  const std::string name = schema->name(), overload = schema->overload_name();
  const auto in = [&](size_t i) { return node->input(i); };
  const size_t n = node->inputs().size();
  RewriteBuilder b(graph);

  if (name == "aten::index" && n == 2 && in(1)->node()->kind() == c10::prim::Constant) {
    // Constant propagation folds a list of constant indices (x[[1, 2]]) into one constant: the
    // list again, of constant tensors and Nones, as the converter takes it.
    auto list = constant_value(in(1));
    if (!list || !list->isList()) return nullptr;
    std::vector<Value*> items;
    for (const c10::IValue& v : list->toListRef()) items.push_back(b.constant(v));
    Value* rebuilt =
        graph->insertNode(graph->createList(c10::OptionalType::ofTensor(), items))->output();
    return b("aten::index", {in(0), rebuilt});
  }
  if ((name == "aten::fft_fftshift" || name == "aten::fft_ifftshift") && n == 2) {
    // A roll by half of each dim (fftshift: n / 2, ifftshift: the rest, (n + 1) / 2).
    const auto rank = known_rank(in(0));
    if (!rank) return nullptr;
    const auto dims = dims_argument(in(1), *rank);
    if (!dims) return nullptr;
    if (dims->empty()) return in(0);
    std::vector<Value*> shifts;
    for (int64_t d : *dims) {
      Value* size = b.size(in(0), d);
      if (name == "aten::fft_ifftshift") size = b("aten::add", {size, 1});
      shifts.push_back(b("aten::floordiv", {size, 2}));
    }
    return b("aten::roll", {in(0), b.list(shifts), *dims});
  }
  if (name == "aten::repeat_interleave" && overload == "self_int" && n == 4 &&
      is_constant_none(in(2))) {
    // Without a dim, the flattened tensor's elements (repeat_interleave along its only dim).
    Value* flat = b("aten::reshape", {in(0), std::vector<int64_t>{-1}});
    flat->setType(in(0)->type()->expectRef<c10::TensorType>().withDim(1));
    return graph->insert(c10::aten::repeat_interleave, {flat, in(1), 0},
                         {torch::jit::NamedValue("output_size", in(3))});
  }
  if (name == "aten::tensor_split" && overload == "tensor_indices_or_sections" && n == 3) {
    // A constant tensor of the sections (0-d) or the indices (1-d): the int overloads.
    auto t = constant_value(in(1));
    if (!t || !t->isTensor() || t->toTensor().scalar_type() != c10::kLong) return nullptr;
    const at::Tensor split = t->toTensor().contiguous();
    if (split.dim() == 0) return b("aten::tensor_split", {in(0), split.item<int64_t>(), in(2)});
    if (split.dim() != 1) return nullptr;
    std::vector<int64_t> indices(split.data_ptr<int64_t>(),
                                 split.data_ptr<int64_t>() + split.numel());
    return b("aten::tensor_split", {in(0), indices, in(2)});
  }
  if ((name == "aten::meshgrid" && n == 1) || (name == "aten::meshgrid" && n == 2)) {
    // Each 0-d or 1-d tensor along its own dim of the grid, expanded to the grid; xy indexing
    // swaps the grid's first two dims (the first tensor along the second dim).
    auto tensors = listed_tensors(in(0));
    if (!tensors || tensors->empty()) return nullptr;
    for (Value* t : *tensors) {
      if (*known_rank(t) > 1) return nullptr;
    }
    bool xy = false;
    if (n == 2) {
      auto indexing = constant_value(in(1));
      if (!indexing || !indexing->isString()) return nullptr;
      if (indexing->toStringRef() != "ij" && indexing->toStringRef() != "xy") return nullptr;
      xy = indexing->toStringRef() == "xy" && tensors->size() > 1;
    }
    std::vector<Value*> order = *tensors;
    if (xy) std::swap(order[0], order[1]);
    std::vector<Value*> out = grids(b, order);
    if (xy) std::swap(out[0], out[1]);
    return tensor_list(graph, out);
  }
  if (name == "aten::cartesian_prod" && n == 1) {
    // The grid of the 1-d tensors, each flattened, stacked as the columns of [count, k]; one
    // tensor is itself.
    auto tensors = listed_tensors(in(0));
    if (!tensors || tensors->empty()) return nullptr;
    for (Value* t : *tensors) {
      if (*known_rank(t) != 1) return nullptr;
    }
    if (tensors->size() == 1) return (*tensors)[0];
    std::vector<Value*> columns;
    for (Value* g : grids(b, *tensors)) {
      columns.push_back(b("aten::reshape", {g, std::vector<int64_t>{-1}}));
    }
    return b("aten::stack", {tensor_list(graph, columns), 1});
  }
  if (name == "aten::block_diag" && n == 1) {
    // The tensors (0-d as [1, 1], 1-d as one row) on the diagonal of a zero matrix: each padded
    // left by the columns before it and right by those after, the rows concatenated.
    auto tensors = listed_tensors(in(0));
    if (!tensors || tensors->empty()) return nullptr;
    const auto type = promoted_dtype(*tensors);
    if (!type) return nullptr;
    std::vector<Value*> blocks, cols;
    for (Value* t : *tensors) {
      const int64_t rank = *known_rank(t);
      if (rank > 2) return nullptr;
      Value* m = rank == 2 ? t : b("aten::reshape", {t, std::vector<int64_t>{1, -1}});
      if (known_dtype(t) != type) m = b.cast(m, *type);
      blocks.push_back(m);
      cols.push_back(b.size(m, 1));
    }
    Value* total = b.constant(0);
    for (Value* c : cols) total = b("aten::add", {total, c});
    Value* before = b.constant(0);
    std::vector<Value*> rows;
    for (size_t i = 0; i < blocks.size(); ++i) {
      Value* after = b("aten::sub", {b("aten::sub", {total, before}), cols[i]});
      rows.push_back(b("aten::constant_pad_nd", {blocks[i], b.list({before, after}), 0}));
      before = b("aten::add", {before, cols[i]});
    }
    return b("aten::cat", {tensor_list(graph, rows), 0});
  }
  if ((name == "aten::linspace" || name == "aten::logspace") &&
      (overload == "Tensor_Tensor" || overload == "Tensor_Scalar" || overload == "Scalar_Tensor") &&
      n == (name == "aten::linspace" ? 7u : 8u)) {
    // Of a float dtype and constant steps; ends of tensors (0-d, or of one element) are read
    // at run time. logspace: base to the power of linspace's values.
    auto steps = constant_value(in(2));
    auto dtype = constant_value(in(name == "aten::linspace" ? 3 : 4));
    if (!steps || !steps->isInt() || steps->toInt() < 0 || !dtype) return nullptr;
    const c10::ScalarType type =
        dtype->isNone() ? c10::kFloat : static_cast<c10::ScalarType>(dtype->toInt());
    if (!c10::isFloatingType(type) || type == c10::kDouble) return nullptr;
    const auto end_point = [&](Value* v) -> Value* {
      if (known_rank(v)) return v;
      auto number = constant_number(v);
      return number ? b.constant(at::scalar_tensor(*number, at::kDouble)) : nullptr;
    };
    Value* start = end_point(in(0));
    Value* end = end_point(in(1));
    if (!start || !end) return nullptr;
    // No steps: an empty slice of the start, on its device.
    Value* values =
        steps->toInt() == 0
            ? b.cast(b("aten::slice",
                       {b("aten::reshape", {start, std::vector<int64_t>{1}}), 0, 0, 0, 1}),
                     type)
            : linear_steps(b, start, end, steps->toInt(), type);
    if (name == "aten::linspace") return values;
    auto base = constant_number(in(3));
    if (!base) return nullptr;
    return b("aten::pow", {*base, values});
  }
  if (name.rfind("aten::_upsample_nearest_exact", 0) == 0) {
    // nearest-exact: output index o reads input index min(floor((o + 0.5) * scale), in - 1),
    // scale = 1 / the scale factor given, else in / out, in f32 as torch computes it; an
    // index_select along each spatial dim.
    const std::string suffix = name.substr(std::string("aten::_upsample_nearest_exact").size());
    if (suffix != "1d" && suffix != "2d" && suffix != "3d") return nullptr;
    const int64_t spatial = suffix[0] - '0';
    const auto rank = known_rank(in(0));
    if (!rank || *rank != spatial + 2) return nullptr;
    const bool vec = overload == "vec";
    if (n != (vec ? 3u : 2u + static_cast<size_t>(spatial))) return nullptr;
    auto size = constant_value(in(1));
    std::vector<int64_t> out_size;
    std::vector<double> factors(static_cast<size_t>(spatial), 0);
    if (size && size->isIntList()) out_size = size->toIntVector();
    if (vec) {
      auto scales = constant_value(in(2));
      if (!size || !scales || size->isNone() == scales->isNone()) return nullptr;
      if (scales->isDoubleList()) factors = scales->toDoubleVector();
    } else {
      if (out_size.empty()) return nullptr;  // the size torch resizes to, not known here
      for (int64_t d = 0; d < spatial; ++d) {
        auto s = constant_value(in(2 + static_cast<size_t>(d)));
        if (!s || !(s->isNone() || s->isDouble())) return nullptr;
        if (s->isDouble()) factors[static_cast<size_t>(d)] = s->toDouble();
      }
    }
    if ((!out_size.empty() && static_cast<int64_t>(out_size.size()) != spatial) ||
        static_cast<int64_t>(factors.size()) != spatial) {
      return nullptr;
    }
    Value* x = in(0);
    for (int64_t d = 0; d < spatial; ++d) {
      const double factor = factors[static_cast<size_t>(d)];
      if (out_size.empty() && !(factor > 0)) return nullptr;
      Value* input = b.size(in(0), 2 + d);
      Value* output = out_size.empty() ? b("aten::floor", {b("aten::mul", {input, factor})})
                                       : b.constant(out_size[static_cast<size_t>(d)]);
      Value* scale = factor > 0 ? b.constant(1.0 / factor) : b("aten::div", {input, output});
      Value* at = b("aten::add", {b.cast(b("aten::arange", {output}), c10::kFloat), 0.5});
      Value* index = b.cast(b("aten::floor", {b("aten::mul", {at, scale})}), c10::kLong);
      // At most in - 1 (a tensor of it: the clamp converter takes constant bounds only).
      Value* last = b("aten::add", {b("aten::mul", {index, 0}), b("aten::sub", {input, 1})});
      index = b("aten::minimum", {index, last});
      x = b("aten::index_select", {x, 2 + d, index});
    }
    return x;
  }
  if (name == "aten::combinations" && n == 3) {
    // Of r = 1: each element its own combination, [n, 1].
    if (!is_constant_int(in(1), 1) || known_rank(in(0)) != 1) return nullptr;
    return b("aten::unsqueeze", {in(0), 1});
  }
  if (name == "aten::histc" && n == 4) {
    // As torch: `bins` equal bins over [min, max] (the data's own range when min == max, widened
    // by 1 each way when that is one value), element e in bin (e - min) * bins / (max - min)
    // (max in the last), others and NaN not counted; a range that is not finite (NaN in the data)
    // is torch's error, NaN counts here. f32 only: torch rounds each step of f16's bin index to
    // f16, which fused engine kernels do not.
    const auto type = known_dtype(in(0));
    auto bins = constant_value(in(1));
    const auto lo = constant_number(in(2)), hi = constant_number(in(3));
    if (type != c10::kFloat || !bins || !bins->isInt() || bins->toInt() < 1 || !lo || !hi ||
        *lo > *hi) {
      return nullptr;
    }
    Value* x = b("aten::reshape", {in(0), std::vector<int64_t>{-1}});
    Value* low = nullptr;
    Value* high = nullptr;
    if (*lo == *hi) {
      low = b("aten::amin", {x, std::vector<int64_t>{}, false});
      high = b("aten::amax", {x, std::vector<int64_t>{}, false});
      Value* same = b("aten::eq", {low, high});
      low = b("aten::where", {same, b("aten::sub", {low, 1}), low});
      high = b("aten::where", {same, b("aten::add", {high, 1}), high});
    } else {
      low = b.constant(at::scalar_tensor(*lo, *type));
      high = b.constant(at::scalar_tensor(*hi, *type));
    }
    const int64_t k = bins->toInt();
    Value* position = b(
        "aten::div", {b("aten::mul", {b("aten::sub", {x, low}), k}), b("aten::sub", {high, low})});
    Value* bin =
        b("aten::clamp", {b.cast(b("aten::floor", {position}), c10::kLong), b.none(), k - 1});
    Value* inside = b("aten::logical_and", {b("aten::ge", {x, low}), b("aten::le", {x, high})});
    Value* hits = b("aten::logical_and",
                    {b("aten::eq", {b("aten::unsqueeze", {bin, 1}), b("aten::arange", {k})}),
                     b("aten::unsqueeze", {inside, 1})});
    Value* counts = b("aten::sum", {b.cast(hits, *type), std::vector<int64_t>{0}, false});
    Value* finite =
        b("aten::logical_and", {b("aten::isfinite", {low}), b("aten::isfinite", {high})});
    return b("aten::where",
             {finite, counts, b("aten::mul", {counts, std::numeric_limits<double>::quiet_NaN()})});
  }
  if (name == "aten::pad" && n == 4) {
    // Circular padding: along each padded dim (pairs from the last dim), its last `left`
    // elements before it and its first `right` after it.
    auto mode = constant_value(in(2));
    auto pads = constant_value(in(1));
    const auto rank = known_rank(in(0));
    if (!mode || !mode->isString() || mode->toStringRef() != "circular" || !pads ||
        !pads->isIntList() || !rank) {
      return nullptr;
    }
    const std::vector<int64_t> p = pads->toIntVector();
    if (p.size() % 2 != 0 || static_cast<int64_t>(p.size() / 2) > *rank) return nullptr;
    for (int64_t v : p) {
      if (v < 0) return nullptr;  // cropping: left to torch
    }
    Value* x = in(0);
    for (size_t i = 0; i < p.size() / 2; ++i) {
      const int64_t d = *rank - 1 - static_cast<int64_t>(i);
      const int64_t left = p[2 * i], right = p[2 * i + 1];
      std::vector<Value*> parts;
      if (left > 0) parts.push_back(b("aten::slice", {x, d, -left, b.none(), 1}));
      parts.push_back(x);
      if (right > 0) parts.push_back(b("aten::slice", {x, d, 0, right, 1}));
      if (parts.size() > 1) x = b("aten::cat", {tensor_list(graph, parts), d});
    }
    return x;
  }
  if (name == "aten::_convolution_mode" && n == 7) {
    // A traced convolution of string padding ("same", "valid"): the convNd overload that
    // takes it, by the weight's rank.
    const auto rank = known_rank(in(1));
    if (!rank || *rank < 3 || *rank > 5) return nullptr;
    const std::string conv = "aten::conv" + std::to_string(*rank - 2) + "d";
    return b(conv.c_str(), {in(0), in(1), in(2), in(3), in(4), in(5), in(6)});
  }
  if ((name == "aten::max_unpool2d" && n == 3) || (name == "aten::max_unpool3d" && n == 5)) {
    // Each value written at its index into the flattened output planes of zeros: [*, H W] or
    // [*, D H W], the spatial dims joined, a scatter along them, the output size restored.
    const int64_t spatial = name == "aten::max_unpool2d" ? 2 : 3;
    const auto rank = known_rank(in(0));
    if (!rank || (*rank != spatial + 1 && *rank != spatial + 2)) return nullptr;
    // The output size: a constant, or a list built in the graph (max_unpool1d's traced size).
    std::vector<Value*> out_size;
    if (auto size = constant_value(in(2)); size && size->isIntList()) {
      for (int64_t s : size->toIntVector()) out_size.push_back(b.constant(s));
    } else if (in(2)->node()->kind() == c10::prim::ListConstruct) {
      out_size.assign(in(2)->node()->inputs().begin(), in(2)->node()->inputs().end());
    }
    if (static_cast<int64_t>(out_size.size()) != spatial) return nullptr;
    const int64_t lead = *rank - spatial;
    std::vector<Value*> planes, shape;
    for (int64_t d = 0; d < lead; ++d) planes.push_back(b.size(in(0), d));
    shape = planes;
    shape.insert(shape.end(), out_size.begin(), out_size.end());
    planes.push_back(b.product(out_size));
    Value* values = b("aten::flatten", {in(0), lead, -1});
    Value* index = b("aten::flatten", {in(1), lead, -1});
    Value* zeros = b("aten::new_zeros", {values, b.list(planes)});
    Value* written = b("aten::scatter", {zeros, -1, index, values});
    return b("aten::reshape", {written, b.list(shape)});
  }
  if (name == "aten::diagonal_scatter" && n == 5) {
    // src written on the diagonal at `offset` of dims d1, d2: those two dims moved last and
    // flattened, src scattered to every (cols + 1)-th element from the diagonal's first, the
    // dims put back.
    const auto rank = known_rank(in(0));
    auto offset = constant_value(in(2)), d1 = constant_value(in(3)), d2 = constant_value(in(4));
    const auto type = known_dtype(in(0));
    if (!rank || *rank < 2 || !type || !offset || !offset->isInt() || !d1 || !d1->isInt() || !d2 ||
        !d2->isInt()) {
      return nullptr;
    }
    const auto a = normalized_dim(d1->toInt(), *rank), c = normalized_dim(d2->toInt(), *rank);
    if (!a || !c || *a == *c) return nullptr;
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < *rank; ++i) {
      if (i != *a && i != *c) perm.push_back(i);
    }
    perm.push_back(*a);
    perm.push_back(*c);
    std::vector<int64_t> inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = int64_t(i);
    Value* moved = b("aten::permute", {in(0), perm});
    Value* cols = b.size(in(0), *c);
    const int64_t k = offset->toInt();
    Value* start = k >= 0 ? b.constant(k) : b("aten::mul", {cols, -k});
    Value* index =
        b("aten::add",
          {b("aten::mul", {b("aten::arange", {b.size(in(1), -1)}), b("aten::add", {cols, 1})}),
           start});
    Value* expanded = b("aten::expand_as", {index, in(1)});
    Value* flat = b("aten::flatten", {moved, -2, -1});
    Value* written = b("aten::scatter", {flat, -1, expanded, b.cast(in(1), *type)});
    Value* back = b("aten::reshape", {written, b("aten::size", {moved})});
    return b("aten::permute", {back, inverse});
  }
  if (name == "aten::gradient" && n == 4 &&
      (overload == "scalarint" || overload == "scalararray" || overload == "scalarrayint" ||
       overload == "scalarrayarray")) {
    // Central differences inside, one-sided ones (first or second order) at the two ends, along
    // each dim, over uniform spacings (a number for all dims, or one per dim).
    const auto rank = known_rank(in(0));
    auto spacing = constant_value(in(1)), edge = constant_value(in(3));
    if (!rank || *rank < 1 || !spacing || !edge || !edge->isInt() ||
        (edge->toInt() != 1 && edge->toInt() != 2)) {
      return nullptr;
    }
    const auto type = known_dtype(in(0));
    if (!type || *type == c10::kBool || c10::isComplexType(*type)) return nullptr;
    const auto dims = dims_argument(in(2), *rank);
    if (!dims || dims->empty()) return nullptr;
    // Of integers, in the default float, as torch computes it.
    Value* x = c10::isFloatingType(*type) ? in(0) : b.cast(in(0), c10::kFloat);
    std::vector<double> h;
    if (spacing->isNone()) {
      h.assign(dims->size(), 1.0);
    } else if (spacing->isInt() || spacing->isDouble()) {
      h.assign(dims->size(), spacing->toScalar().toDouble());
    } else if (spacing->isList()) {
      for (const c10::IValue& s : spacing->toListRef()) {
        if (!s.isInt() && !s.isDouble()) return nullptr;
        h.push_back(s.toScalar().toDouble());
      }
      if (h.size() != dims->size()) return nullptr;
    } else {
      return nullptr;
    }
    const bool second = edge->toInt() == 2;
    std::vector<Value*> out;
    for (size_t i = 0; i < dims->size(); ++i) {
      const int64_t d = (*dims)[i];
      Value* size = b.size(x, d);
      const auto at = [&](int64_t from, Value* to) {
        return b("aten::slice", {x, d, from, to, 1});
      };
      const auto last = [&](int64_t back) { return b("aten::sub", {size, back}); };
      Value* inner = b("aten::div", {b("aten::sub", {at(2, size), at(0, last(2))}), 2 * h[i]});
      Value* first = nullptr;
      Value* end = nullptr;
      if (!second) {
        first =
            b("aten::div", {b("aten::sub", {at(1, b.constant(2)), at(0, b.constant(1))}), h[i]});
        end = b("aten::div", {b("aten::sub", {at(-1, size), at(-2, last(1))}), h[i]});
      } else {
        // (-3 x0 + 4 x1 - x2) / 2h and (3 x[-1] - 4 x[-2] + x[-3]) / 2h.
        Value* x0 = at(0, b.constant(1));
        Value* x1 = at(1, b.constant(2));
        Value* x2 = at(2, b.constant(3));
        first = b("aten::div",
                  {b("aten::sub",
                     {b("aten::sub", {b("aten::mul", {x1, 4.0}), b("aten::mul", {x0, 3.0})}), x2}),
                   2 * h[i]});
        Value* y0 = at(-1, size);
        Value* y1 = at(-2, last(1));
        Value* y2 = at(-3, last(2));
        end = b("aten::div",
                {b("aten::add",
                   {b("aten::sub", {b("aten::mul", {y0, 3.0}), b("aten::mul", {y1, 4.0})}), y2}),
                 2 * h[i]});
      }
      out.push_back(b("aten::cat", {tensor_list(graph, {first, inner, end}), d}));
    }
    return tensor_list(graph, out);
  }
  if ((name == "aten::linalg_norm" || name == "aten::linalg_matrix_norm") && n == 5) {
    // linalg_norm: no ord, the 2-norm of the vector (all dims, or those given); a number of one
    // dim (or of a 1-d tensor), that vector norm; of two dims (or of a matrix), the matrix norm.
    // dtype: computed in it, as torch does.
    const auto rank = known_rank(in(0));
    auto ord = constant_value(in(1)), dim = constant_value(in(2)), keep = constant_value(in(3)),
         dtype = constant_value(in(4));
    if (!rank || !ord || !dim || !keep || !keep->isBool() || !dtype) return nullptr;
    const auto type =
        dtype->isNone() ? known_dtype(in(0)) : static_cast<c10::ScalarType>(dtype->toInt());
    if (!type || !c10::isFloatingType(*type)) return nullptr;
    Value* x = dtype->isNone() ? in(0) : b.cast(in(0), *type);
    const bool k = keep->toBool();
    std::optional<std::vector<int64_t>> dims;
    if (!dim->isNone()) dims = dims_argument(in(2), *rank);
    if (!dim->isNone() && !dims) return nullptr;
    if (name == "aten::linalg_norm" && ord->isNone()) {
      if (!dims) return b("aten::linalg_vector_norm", {x, 2.0, b.none(), k});
      return b("aten::linalg_vector_norm", {x, 2.0, *dims, k});
    }
    if (name == "aten::linalg_norm" && !ord->isString() &&
        (dims ? dims->size() == 1 : *rank == 1)) {
      if (!ord->isInt() && !ord->isDouble()) return nullptr;
      const double p = ord->toScalar().toDouble();
      return b.norm(x, p, dims ? *dims : std::vector<int64_t>{0}, k, *type);
    }
    if (!dims) {
      if (*rank != 2) return nullptr;
      dims = std::vector<int64_t>{0, 1};
    }
    if (dims->size() != 2) return nullptr;
    return matrix_norm(b, x, *ord, (*dims)[0], (*dims)[1], k);
  }
  return nullptr;
}

}  // namespace kiln::lowering
