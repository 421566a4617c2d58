// The shuffle family (shuffle: transpose/reshape, concat, slice, pad, gather, scatter): shape
// inference and the slice view both backends' kernels use.
#include <algorithm>
#include <sstream>

#include "engine/layers/infer.h"
#include "engine/layers/setup.h"
#include "util/errors.h"

namespace kiln::engine {
namespace {

std::string ints_to_string(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

void check_perm(const std::string& layer, const std::vector<int64_t>& perm, size_t rank,
                const char* which) {
  bool ok = perm.size() == rank;
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    ok = ok && p >= 0 && p < static_cast<int64_t>(rank) && !seen[static_cast<size_t>(p)];
    if (ok) seen[static_cast<size_t>(p)] = true;
  }
  KILN_CHECK(ok, InvalidArgument, "layer `", layer, "`: ", which, " ", ints_to_string(perm),
             " is not a permutation of the ", rank, " dims of its input");
}

Shape permute(const Shape& s, const std::vector<int64_t>& perm) {
  if (perm.empty()) return s;
  Shape out(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) out[i] = s[static_cast<size_t>(perm[i])];
  return out;
}

// Applies reshape dims (0 copies, -1 infers) to `in`. Dynamic input dims that a 0 copies at
// their own position cancel out, so [?, 4] -> [0, -1] still infers the -1 statically.
Shape resolve_reshape(const std::string& layer, const Shape& in, const std::vector<int64_t>& spec) {
  Shape out(spec.size());
  int64_t infer_at = -1;
  std::vector<bool> copied(in.size(), false);
  for (size_t i = 0; i < spec.size(); ++i) {
    const int64_t v = spec[i];
    if (v == 0) {
      KILN_CHECK(i < in.size(), InvalidArgument, "layer `", layer, "`: reshape ",
                 ints_to_string(spec), " copies dim ", i, " (0) but the input has rank ",
                 in.size());
      out[i] = in[i];
      copied[i] = true;
    } else if (v == -1) {
      KILN_CHECK(infer_at < 0, InvalidArgument, "layer `", layer, "`: reshape ",
                 ints_to_string(spec), " has more than one -1");
      infer_at = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(v > 0, InvalidArgument, "layer `", layer, "`: reshape ", ints_to_string(spec),
                 " has bad dim ", v);
      out[i] = v;
    }
  }
  bool cancellable = true;  // every dynamic input dim is copied to its own position
  int64_t in_rest = 1, out_rest = 1;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == kDynamic) {
      cancellable = cancellable && copied[i];
    } else if (!copied[i]) {
      in_rest = volume({in_rest, in[i]});
    }
  }
  const std::string what = "layer `" + layer + "`: cannot reshape " + shape_to_string(in) + " to " +
                           ints_to_string(spec);
  for (size_t i = 0; i < spec.size(); ++i) {
    const bool was_copied = i < copied.size() && copied[i];  // the output may have more dims
    if (static_cast<int64_t>(i) == infer_at || was_copied) continue;
    // Reshape dims come from plans too: a product past 2^48 elements is an error, not overflow.
    KILN_CHECK(
        !__builtin_mul_overflow(out_rest, out[i], &out_rest) && out_rest <= (int64_t{1} << 48),
        InvalidArgument, what, ": more than 2^48 elements");
  }
  if (infer_at >= 0) {
    auto& d = out[static_cast<size_t>(infer_at)];
    if (!cancellable) {
      d = kDynamic;
    } else {
      KILN_CHECK(out_rest != 0, InvalidArgument, what, ": -1 is ambiguous with zero-size dims");
      KILN_CHECK(in_rest % out_rest == 0, ShapeMismatch, what, ": volume ", in_rest,
                 " is not divisible by ", out_rest);
      d = in_rest / out_rest;
    }
  } else if (cancellable) {
    KILN_CHECK(in_rest == out_rest, ShapeMismatch, what, ": volumes differ");
  }
  return out;
}

}  // namespace

std::vector<InferOutput> infer(const std::string& layer, const ShuffleParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 2);
  Shape s = in[0].shape;
  if (!p.first_perm.empty()) {
    check_perm(layer, p.first_perm, s.size(), "first_perm");
    s = permute(s, p.first_perm);
  }
  if (in.size() == 2) {
    const InferInput& st = in[1];
    KILN_CHECK(p.has_reshape, InvalidArgument, "layer `", layer,
               "`: a shape-tensor input needs has_reshape");
    const size_t rank = shape_input_rank(layer, st);
    check_known_dims(layer, p.reshape, rank);
    if (st.values) {
      s = resolve_reshape(layer, s, *st.values);
      matches_known(layer, s, p.reshape);
    } else {
      s = p.reshape.empty() ? Shape(rank, kDynamic) : p.reshape;
    }
  } else if (p.has_reshape) {
    s = resolve_reshape(layer, s, p.reshape);
  }
  if (!p.second_perm.empty()) {
    check_perm(layer, p.second_perm, s.size(), "second_perm");
    s = permute(s, p.second_perm);
  }
  if (p.cast) {
    KILN_CHECK(is_floating(in[0].dtype) && is_floating(p.to), InvalidArgument, "layer `", layer,
               "`: a shuffle casts between float dtypes only, not ", dtype_name(in[0].dtype),
               " to ", dtype_name(p.to));
    return {{p.to, s}};
  }
  return {{in[0].dtype, s}};
}

std::vector<InferOutput> infer(const std::string& layer, const ConcatParams& p,
                               const std::vector<InferInput>& in) {
  KILN_CHECK(!in.empty(), InvalidArgument, "layer `", layer, "`: concat needs inputs");
  const size_t rank = in[0].shape.size();
  const std::string what = "layer `" + layer + "`";
  const int axis = normalize_axis(p.axis, p.stack ? rank + 1 : rank, what);
  Shape out = in[0].shape;
  for (size_t k = 1; k < in.size(); ++k) {
    KILN_CHECK(in[k].dtype == in[0].dtype, InvalidArgument, what, ": input ", k, " is ",
               dtype_name(in[k].dtype), ", input 0 is ", dtype_name(in[0].dtype));
    KILN_CHECK(in[k].shape.size() == rank, ShapeMismatch, what, ": input ", k, " has shape ",
               shape_to_string(in[k].shape), ", input 0 has ", shape_to_string(in[0].shape));
    for (size_t d = 0; d < rank; ++d) {
      const int64_t a = out[d], b = in[k].shape[d];
      if (!p.stack && static_cast<int>(d) == axis) {
        out[d] = a == kDynamic || b == kDynamic ? kDynamic : a + b;
        continue;
      }
      KILN_CHECK(a == b || a == kDynamic || b == kDynamic, ShapeMismatch, what, ": input ", k,
                 " has shape ", shape_to_string(in[k].shape), ", which differs from ",
                 shape_to_string(in[0].shape), " at dim ", d);
      if (a == kDynamic) out[d] = b;
    }
  }
  if (p.stack) out.insert(out.begin() + axis, static_cast<int64_t>(in.size()));
  return {{in[0].dtype, out}};
}

std::vector<InferOutput> infer(const std::string& layer, const SliceParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  const std::string what = "layer `" + layer + "`";
  KILN_CHECK(p.starts.size() == p.axes.size() && p.ends.size() == p.axes.size() &&
                 (p.steps.empty() || p.steps.size() == p.axes.size()),
             InvalidArgument, what, ": axes, starts, ends and steps differ in length");
  Shape out = in[0].shape;
  std::vector<bool> seen(out.size(), false);
  for (size_t i = 0; i < p.axes.size(); ++i) {
    const size_t a = static_cast<size_t>(normalize_axis(p.axes[i], out.size(), what));
    KILN_CHECK(!seen[a], InvalidArgument, what, ": axis ", p.axes[i], " sliced twice");
    seen[a] = true;
    const int64_t step = p.steps.empty() ? 1 : p.steps[i];
    KILN_CHECK(step > 0, InvalidArgument, what, ": step ", step, " must be positive");
    const int64_t d = out[a];
    if (d == kDynamic) continue;
    int64_t start = p.starts[i], end = p.ends[i];
    if (start < 0) start += d;
    if (end < 0) end += d;
    start = std::clamp<int64_t>(start, 0, d);
    end = std::clamp<int64_t>(end, 0, d);
    out[a] = end > start ? (end - start + step - 1) / step : 0;
  }
  return {{in[0].dtype, out}};
}

std::vector<InferOutput> infer(const std::string& layer, const PadParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  const Shape& s = in[0].shape;
  KILN_CHECK(p.begin.size() == s.size() && p.end.size() == s.size(), InvalidArgument, "layer `",
             layer, "`: pads ", ints_to_string(p.begin), " / ", ints_to_string(p.end),
             " do not give every dim of ", shape_to_string(s));
  Shape out = s;
  for (size_t d = 0; d < s.size(); ++d) {
    if (s[d] == kDynamic) continue;
    constexpr int64_t kMaxPad = int64_t{1} << 48;  // keeps the sum below from overflowing
    KILN_CHECK(p.begin[d] >= -kMaxPad && p.begin[d] <= kMaxPad && p.end[d] >= -kMaxPad &&
                   p.end[d] <= kMaxPad,
               InvalidArgument, "layer `", layer, "`: pads ", p.begin[d], ", ", p.end[d],
               " of dim ", d, " are out of range");
    out[d] = s[d] + p.begin[d] + p.end[d];
    KILN_CHECK(out[d] >= 0, ShapeMismatch, "layer `", layer, "`: pads ", p.begin[d], ", ", p.end[d],
               " crop dim ", d, " of ", shape_to_string(s), " below zero");
    if (p.mode == PadMode::kReflect) {
      KILN_CHECK(p.begin[d] < s[d] && p.end[d] < s[d], InvalidArgument, "layer `", layer,
                 "`: reflect pads ", p.begin[d], ", ", p.end[d], " must be below dim ", d, " of ",
                 shape_to_string(s));
    } else if (p.mode == PadMode::kReplicate) {
      KILN_CHECK(s[d] > 0 || (p.begin[d] <= 0 && p.end[d] <= 0), InvalidArgument, "layer `", layer,
                 "`: replicate pad of empty dim ", d);
    }
  }
  return {{in[0].dtype, out}};
}

std::vector<InferOutput> infer(const std::string& layer, const GatherParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 2, 2);
  const std::string what = "layer `" + layer + "`";
  const Shape &data = in[0].shape, &idx = in[1].shape;
  KILN_CHECK(in[1].dtype == DataType::kI64 || in[1].dtype == DataType::kI32, InvalidArgument, what,
             ": indices must be i64 or i32, got ", dtype_name(in[1].dtype));
  const size_t axis = static_cast<size_t>(normalize_axis(p.axis, data.size(), what));
  if (p.mode == GatherMode::kDefault) {
    Shape out(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(axis));
    out.insert(out.end(), idx.begin(), idx.end());
    out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.end());
    return {{in[0].dtype, out}};
  }
  KILN_CHECK(idx.size() == data.size(), ShapeMismatch, what, ": indices ", shape_to_string(idx),
             " and data ", shape_to_string(data), " differ in rank");
  for (size_t d = 0; d < data.size(); ++d) {
    KILN_CHECK(d == axis || idx[d] == kDynamic || data[d] == kDynamic || idx[d] <= data[d],
               ShapeMismatch, what, ": indices ", shape_to_string(idx), " are larger than data ",
               shape_to_string(data), " at dim ", d);
  }
  return {{in[0].dtype, idx}};
}

std::vector<InferOutput> infer(const std::string& layer, const ScatterParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 3, 3);
  const std::string what = "layer `" + layer + "`";
  const Shape &data = in[0].shape, &idx = in[1].shape, &upd = in[2].shape;
  KILN_CHECK(static_cast<uint8_t>(p.reduce) <= static_cast<uint8_t>(ScatterReduce::kMin),
             InvalidArgument, what, ": unknown scatter reduction ", int(p.reduce));
  KILN_CHECK(in[1].dtype == DataType::kI64 || in[1].dtype == DataType::kI32, InvalidArgument, what,
             ": indices must be i64 or i32, got ", dtype_name(in[1].dtype));
  KILN_CHECK(in[2].dtype == in[0].dtype, InvalidArgument, what, ": updates are ",
             dtype_name(in[2].dtype), ", data is ", dtype_name(in[0].dtype));
  const size_t axis = static_cast<size_t>(normalize_axis(p.axis, data.size(), what));
  KILN_CHECK(idx.size() == data.size() && upd.size() == data.size(), ShapeMismatch, what, ": data ",
             shape_to_string(data), ", indices ", shape_to_string(idx), " and updates ",
             shape_to_string(upd), " differ in rank");
  for (size_t d = 0; d < data.size(); ++d) {
    const bool known = idx[d] != kDynamic && upd[d] != kDynamic && data[d] != kDynamic;
    KILN_CHECK(!known || (idx[d] <= upd[d] && (d == axis || idx[d] <= data[d])), ShapeMismatch,
               what, ": indices ", shape_to_string(idx), " do not fit updates ",
               shape_to_string(upd), " and data ", shape_to_string(data), " at dim ", d);
  }
  return {{in[0].dtype, data}};
}

SliceView slice_view(const std::string& layer, const SliceParams& p, const Shape& in) {
  const std::vector<int64_t> strides = contiguous_strides(in);
  SliceView view{0, strides};
  for (size_t i = 0; i < p.axes.size(); ++i) {
    const size_t a = static_cast<size_t>(normalize_axis(p.axes[i], in.size(), layer));
    const int64_t d = in[a], step = p.steps.empty() ? 1 : p.steps[i];
    const int64_t start =
        std::clamp<int64_t>(p.starts[i] < 0 ? p.starts[i] + d : p.starts[i], 0, d);
    view.offset += start * strides[a];
    view.strides[a] = strides[a] * step;
  }
  return view;
}

ConcatRows concat_rows(const std::string& layer, const ConcatParams& p,
                       const std::vector<TensorRef>& inputs) {
  const Shape& s0 = inputs.at(0).shape;
  const size_t elem_bytes = dtype_size(inputs[0].dtype);
  const int axis = normalize_axis(p.axis, p.stack ? s0.size() + 1 : s0.size(), layer);
  ConcatRows r;
  for (int d = 0; d < axis; ++d) r.outer *= s0[static_cast<size_t>(d)];
  for (const TensorRef& in : inputs) {
    int64_t n = 1;
    for (size_t d = static_cast<size_t>(axis); d < in.shape.size(); ++d) n *= in.shape[d];
    r.chunk.push_back(static_cast<size_t>(n) * elem_bytes);
    r.at.push_back(r.row);
    r.row += r.chunk.back();
  }
  return r;
}

ConcatPitches concat_pitches(const std::string& layer, const ConcatRows& r,
                             const std::vector<TensorRef>& inputs, const TensorRef& out) {
  const auto pitch_of = [&](const TensorRef& t, size_t row, const char* what) {
    if (t.dense() || r.outer <= 1) return row;
    const size_t es = dtype_size(t.dtype);
    KILN_CHECK(static_cast<size_t>(t.row) * es == row, InternalError, "concat `", layer,
               "`: ", what, " placed in rows of ", t.row, " elements, where the concat's have ",
               row / es);
    return static_cast<size_t>(t.pitch) * es;
  };
  ConcatPitches p;
  p.out = pitch_of(out, r.row, "its output");
  for (size_t k = 0; k < inputs.size(); ++k) {
    p.in.push_back(pitch_of(inputs[k], r.chunk[k], "an input"));
  }
  return p;
}

}  // namespace kiln::engine
