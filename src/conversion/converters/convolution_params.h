// Static-parameter helpers shared by the convolution, linear, normalization, pooling, reduce,
// softmax and attention converters: validators naming schema arguments, and int-list reading.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "conversion/context.h"
#include "conversion/registry.h"
#include "util/errors.h"

namespace kiln::conversion {

// Known before conversion: a constant, or a list/tuple of such. Validators run without a
// context (partitioning asks them), so values an evaluator could compute do not count.
inline bool is_static_value(const torch::jit::Value* v) {
  const torch::jit::Node* n = v->node();
  if (n->kind() == torch::jit::prim::Constant) return true;
  if (n->kind() == torch::jit::prim::ListConstruct ||
      n->kind() == torch::jit::prim::TupleConstruct) {
    for (const torch::jit::Value* in : n->inputs()) {
      if (!is_static_value(in)) return false;
    }
    return true;
  }
  return false;
}

// The schema's name for input i ("stride"), so that reasons read like the Python call.
inline std::string arg_name(const torch::jit::Node* n, size_t i) {
  if (const c10::FunctionSchema* s = n->maybeSchema()) {
    if (i < s->arguments().size()) return s->arguments()[i].name();
  }
  return "input " + std::to_string(i);
}

// The reason when any of the inputs `indices` is not static (indices past the end are skipped,
// so one list serves overloads of different arity).
inline std::optional<std::string> require_static(const torch::jit::Node* n,
                                                 std::initializer_list<size_t> indices) {
  for (size_t i : indices) {
    if (i < n->inputs().size() && !is_static_value(n->input(i))) {
      return arg_name(n, i) + " (%" + n->input(i)->debugName() + ") must be a constant";
    }
  }
  return std::nullopt;
}

// Every input from `from` on must be static.
inline std::optional<std::string> require_static_from(const torch::jit::Node* n, size_t from) {
  for (size_t i = from; i < n->inputs().size(); ++i) {
    if (auto r = require_static(n, {i})) return r;
  }
  return std::nullopt;
}

// The constant value of input i, when it is a prim::Constant (None included).
inline std::optional<c10::IValue> constant_input(const torch::jit::Node* n, size_t i) {
  if (i >= n->inputs().size()) return std::nullopt;
  return torch::jit::toIValue(n->input(i));
}

// An int-list parameter with `nd` values; a single value repeats, as torch's int[N] allows.
// An empty list gives `fallback` (pooling's stride=[] means the kernel size).
inline std::vector<int64_t> int_list(ConversionContext& ctx, const torch::jit::Value* v, size_t nd,
                                     const std::string& what,
                                     const std::vector<int64_t>& fallback = {}) {
  const c10::IValue& iv = ctx.ivalue(v);
  std::vector<int64_t> values;
  if (iv.isInt()) {
    values = {iv.toInt()};
  } else {
    KILN_CHECK(iv.isIntList(), InvalidArgument, what, " (%", v->debugName(),
               ") must be an int list, got ", iv.tagKind());
    values = iv.toIntVector();
  }
  if (values.empty() && !fallback.empty()) return fallback;
  if (values.size() == 1 && nd > 1) values.assign(nd, values[0]);
  KILN_CHECK(values.size() == nd, InvalidArgument, what, " has ", values.size(), " values for ", nd,
             " spatial dims");
  return values;
}

// A dim list that may be None or a single int (reductions); empty means every dim.
inline std::vector<int64_t> dim_list(ConversionContext& ctx, const torch::jit::Value* v) {
  const c10::IValue& iv = ctx.ivalue(v);
  if (iv.isNone()) return {};
  if (iv.isInt()) return {iv.toInt()};
  KILN_CHECK(iv.isIntList(), InvalidArgument, "dim (%", v->debugName(),
             ") must be an int or int list, got ", iv.tagKind());
  return iv.toIntVector();
}

// Inserts a leading size-1 dim (unbatched inputs to batched layers); dynamic dims stay
// dynamic because the new dim is appended and then moved to the front.
inline engine::TensorId add_leading_dim(ConversionContext& ctx, const torch::jit::Node* n,
                                        engine::TensorId x) {
  const size_t rank = ctx.desc(x).shape.size();
  engine::ShuffleParams p;
  p.has_reshape = true;
  p.reshape.assign(rank, 0);
  p.reshape.push_back(1);
  p.second_perm.push_back(static_cast<int64_t>(rank));
  for (size_t d = 0; d < rank; ++d) p.second_perm.push_back(static_cast<int64_t>(d));
  return ctx.add(n, p, {x}, "batched");
}

// Removes a leading size-1 dim (the inverse of add_leading_dim).
inline engine::TensorId drop_leading_dim(ConversionContext& ctx, const torch::jit::Node* n,
                                         engine::TensorId x) {
  const size_t rank = ctx.desc(x).shape.size();
  engine::ShuffleParams p;
  for (size_t d = 1; d < rank; ++d) p.first_perm.push_back(static_cast<int64_t>(d));
  p.first_perm.push_back(0);
  p.has_reshape = true;
  p.reshape.assign(rank - 1, 0);
  return ctx.add(n, p, {x}, "unbatched");
}

}  // namespace kiln::conversion
