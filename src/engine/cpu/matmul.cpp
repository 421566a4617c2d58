// CPU kernel of the matmul family: a cached oneDNN f32 matmul (transposes as strides, batch
// dims broadcast by oneDNN) with bias and the first activation fused into the primitive where
// oneDNN computes them exactly; the shared epilogue does the rest. Integer products (i64, i32)
// run our own cache-blocked loops, wrapping around as torch's do.
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "engine/cpu/onednn.h"
#include "engine/layers/setup.h"

namespace kiln::engine::cpu {

namespace {

using dnnl::memory;

// The primitive for the last input shapes; rebuilt only when they change.
struct MatMulState : KernelState {
  std::vector<int64_t> key;
  // oneDNN's implementation iterator points at the operation descriptor: it lives here, with it.
  std::optional<dnnl::matmul::desc> desc;
  dnnl::primitive_desc pd;  // the implementation in use; onednn::run_first_working moves it on
  dnnl::primitive primitive;
  memory::desc src_md, wei_md, dst_md, bias_md;
  bool fused_bias = false, fused_activation = false;
  // A constant b (an engine weight: its bytes never change) is reordered once, from
  // wei_source, into the layout the implementation asked for (wei_md: oneDNN's packed, blocked
  // weights), so no run reads the plain matrix: no per-run packing, and none of the cache-set
  // aliasing of plain rows a multiple of 4 KiB apart.
  memory wei_mem;
  const void* wei_source = nullptr;
};

// An operand as oneDNN sees it: logical [batch..., rows, cols] padded to `rank`, with strides
// that express a transpose of its two trailing dims.
memory::desc operand_desc(const Shape& physical, bool transpose, size_t rank) {
  Shape dims(rank - physical.size(), 1);
  dims.insert(dims.end(), physical.begin(), physical.end());
  std::vector<int64_t> strides = contiguous_strides(dims);
  if (transpose) {
    std::swap(dims[rank - 1], dims[rank - 2]);
    std::swap(strides[rank - 1], strides[rank - 2]);
  }
  return memory::desc(onednn::to_dims(dims), memory::data_type::f32,
                      memory::dims(strides.begin(), strides.end()));
}

// Reorders the constant b (any floating dtype, in its plain layout `plain`) into state.wei_mem,
// in the implementation's weights layout.
void pack_constant_b(MatMulState& s, const TensorView& b, const memory::desc& plain,
                     dnnl::stream& stream) {
  auto& eng = onednn::cpu_engine();
  onednn::F32Data fb(b);
  memory src(plain, eng, fb.data());
  s.wei_mem = memory(s.wei_md, eng);
  dnnl::reorder(src, s.wei_mem).execute(stream, src, s.wei_mem);
  stream.wait();
  s.wei_source = b.data;
}

// Element offset of batch matrix t (row-major over `batch`) in an operand with these strides.
int64_t batch_offset(const Shape& batch, const std::vector<int64_t>& strides, int64_t t) {
  int64_t off = 0;
  for (size_t d = batch.size(); d-- > 0;) {
    off += (t % batch[d]) * strides[d];
    t /= batch[d];
  }
  return off;
}

// y = a @ b (+ bias over N) in integers of type T, wrapping around in two's complement
// (scalar_math.h). Each task is a block of output rows and columns of one batch matrix: it
// copies a depth slice of b's columns into a contiguous panel (whatever b's transpose), which
// every row of the block then reads in order, accumulating in int64 (the same result modulo
// 2^32 for i32).
template <class T>
void integer_matmul(const MatMulGeometry& g, const T* a, const T* b, const T* bias,
                    int64_t bias_size, T* y) {
  constexpr int64_t kRows = 16, kDepth = 128, kCols = 128;
  const int64_t m = g.m, n = g.n, k = g.k;
  const int64_t row_blocks = (m + kRows - 1) / kRows, col_blocks = (n + kCols - 1) / kCols;
  const int64_t tasks = g.batches() * row_blocks * col_blocks;
#pragma omp parallel if (tasks > 1 && g.batches() * m * n * k > 64 * 1024)
  {
    std::vector<int64_t> panel(static_cast<size_t>(kDepth * kCols));
    std::vector<int64_t> acc(static_cast<size_t>(kRows * kCols));
#pragma omp for schedule(static)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t t = task / (row_blocks * col_blocks);
      const int64_t i0 = (task / col_blocks % row_blocks) * kRows, i1 = std::min(m, i0 + kRows);
      const int64_t j0 = task % col_blocks * kCols, nc = std::min(n, j0 + kCols) - j0;
      const T* at = a + batch_offset(g.batch, g.a_batch_strides, t);
      const T* bt = b + batch_offset(g.batch, g.b_batch_strides, t) + j0 * g.b_col;
      std::fill(acc.begin(), acc.begin() + (i1 - i0) * nc, 0);
      for (int64_t p0 = 0; p0 < k; p0 += kDepth) {
        const int64_t kd = std::min(k, p0 + kDepth) - p0;
        for (int64_t p = 0; p < kd; ++p) {
          const T* src = bt + (p0 + p) * g.b_row;
          int64_t* dst = panel.data() + p * nc;
          for (int64_t j = 0; j < nc; ++j) dst[j] = src[j * g.b_col];
        }
        for (int64_t i = i0; i < i1; ++i) {
          int64_t* row = acc.data() + (i - i0) * nc;
          const T* ai = at + i * g.a_row + p0 * g.a_col;
          for (int64_t p = 0; p < kd; ++p) {
            const int64_t av = ai[p * g.a_col];
            const int64_t* bp = panel.data() + p * nc;
            for (int64_t j = 0; j < nc; ++j) row[j] = wrapping_add(row[j], wrapping_mul(av, bp[j]));
          }
        }
      }
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t* row = acc.data() + (i - i0) * nc;
        T* dst = y + (t * m + i) * n + j0;
        for (int64_t j = 0; j < nc; ++j) {
          const int64_t v = bias ? wrapping_add(row[j], bias[bias_size == 1 ? 0 : j0 + j]) : row[j];
          dst[j] = static_cast<T>(v);
        }
      }
    }
  }
}

// The residual post-op of an integer matmul: out += residual (broadcast), wrapping around.
template <class T>
void add_residual(const TensorView& residual, const TensorView& out) {
  const BroadcastMap map(residual.shape, out.shape);
  const T* r = residual.as<T>();
  T* y = out.as<T>();
  map.for_runs(0, out.numel(), [&](int64_t i, int64_t off, int64_t len, int64_t stride) {
    for (int64_t j = 0; j < len; ++j) {
      y[i + j] = static_cast<T>(wrapping_add(y[i + j], r[off + j * stride]));
    }
  });
}

template <class T>
void integer_matmul_kernel(KernelArgs& args) {
  const auto& p = std::get<MatMulParams>(args.layer.params);
  const TensorView &a = args.inputs[0], &b = args.inputs[1], &out = args.outputs[0];
  if (out.numel() == 0) return;
  const auto post = onednn::post_inputs(p.post, args.inputs);
  integer_matmul<T>(matmul_geometry(p, a.shape, b.shape), a.as<T>(), b.as<T>(),
                    post.bias ? post.bias->as<T>() : nullptr, post.bias ? post.bias->numel() : 0,
                    out.as<T>());
  if (post.residual) add_residual<T>(*post.residual, out);
}

void matmul_kernel(KernelArgs& args) {
  const auto& p = std::get<MatMulParams>(args.layer.params);
  const std::string& layer = args.layer.name;
  const TensorView& a = args.inputs[0];
  const TensorView& b = args.inputs[1];
  const TensorView& out = args.outputs[0];
  if (a.dtype == DataType::kI64) return integer_matmul_kernel<int64_t>(args);
  if (a.dtype == DataType::kI32) return integer_matmul_kernel<int32_t>(args);
  KILN_CHECK(is_floating(a.dtype), InvalidArgument, "layer `", layer,
             "` (matmul): needs floating, i64 or i32 operands, got ", dtype_name(a.dtype));
  if (out.numel() == 0) return;

  // Promote rank-1 operands; a promoted a is [1, K] and a promoted b is [K, 1].
  const bool a_vec = a.shape.size() == 1, b_vec = b.shape.size() == 1;
  const bool ta = p.transpose_a && !a_vec, tb = p.transpose_b && !b_vec;
  const Shape bs = b_vec ? Shape{b.shape[0], 1} : b.shape;
  // A row-major batch of matrices against one 2-d b ([batch..., M, K] x [K, N]: a linear layer)
  // is one GEMM of batch x M rows: oneDNN packs constant weights for 2-d problems only.
  Shape as = a_vec ? Shape{1, a.shape[0]} : a.shape;
  if (as.size() > 2 && bs.size() == 2 && !ta) as = Shape{a.numel() / as.back(), as.back()};
  const size_t rank = std::max(as.size(), bs.size());
  const int64_t m = ta ? as.back() : as[as.size() - 2];
  const int64_t k = ta ? as[as.size() - 2] : as.back();
  const int64_t n = tb ? bs[bs.size() - 2] : bs.back();

  const auto post = onednn::post_inputs(p.post, args.inputs);
  onednn::F32Result y(out);
  MatMulState* state = nullptr;  // set when the primitive runs
  if (k == 0) {
    std::fill(y.data(), y.data() + out.numel(), 0.f);
  } else {
    const bool pack_b = b.constant;
    std::vector<int64_t> key = {static_cast<int64_t>(ta), static_cast<int64_t>(tb),
                                static_cast<int64_t>(pack_b), -1};
    key.insert(key.end(), as.begin(), as.end());
    key.push_back(-1);
    key.insert(key.end(), bs.begin(), bs.end());
    state = dynamic_cast<MatMulState*>(args.state.get());
    onednn::guarded(layer, [&] {
      if (!state || state->key != key) {
        auto fresh = std::make_unique<MatMulState>();
        fresh->key = key;
        fresh->src_md = operand_desc(as, ta, rank);
        fresh->wei_md = operand_desc(bs, tb, rank);
        Shape dst(rank);
        const auto src_dims = fresh->src_md.dims(), wei_dims = fresh->wei_md.dims();
        for (size_t d = 0; d + 2 < rank; ++d) dst[d] = src_dims[d] == 1 ? wei_dims[d] : src_dims[d];
        dst[rank - 2] = m;
        dst[rank - 1] = n;
        const std::vector<int64_t> dst_strides = contiguous_strides(dst);
        fresh->dst_md = memory::desc(onednn::to_dims(dst), memory::data_type::f32,
                                     memory::dims(dst_strides.begin(), dst_strides.end()));
        // Bias [N] or [1] broadcasts over every other dim: oneDNN's bias of [1, ..., 1, N].
        fresh->fused_bias = post.bias != nullptr;
        if (fresh->fused_bias) {
          memory::dims bias_dims(rank, 1);
          bias_dims[rank - 1] = post.bias->numel();
          fresh->bias_md = memory::desc(bias_dims, memory::data_type::f32,
                                        memory::dims(contiguous_strides(bias_dims)));
        }
        dnnl::primitive_attr attr;
        // The activation follows the bias, so it is fused only with the bias (or without one).
        dnnl::post_ops ops;
        fresh->fused_activation =
            (fresh->fused_bias || !post.bias) &&
            onednn::eltwise_for(p.post.activation, p.post.alpha, p.post.beta, &ops);
        if (fresh->fused_activation) attr.set_post_ops(ops);
        // Constant weights in whatever layout the implementation prefers (packed once).
        const memory::desc wei_any =
            pack_b ? memory::desc(fresh->wei_md.dims(), memory::data_type::f32,
                                  memory::format_tag::any)
                   : fresh->wei_md;
        fresh->desc.emplace(fresh->src_md, wei_any, fresh->bias_md, fresh->dst_md);
        fresh->pd = dnnl::matmul::primitive_desc(*fresh->desc, attr, onednn::cpu_engine());
        fresh->primitive = dnnl::primitive(fresh->pd);
        state = fresh.get();
        args.state = std::move(fresh);
      }
      auto& eng = onednn::cpu_engine();
      dnnl::stream stream(eng);
      onednn::F32Data fa(a);
      std::optional<onednn::F32Data> fb;
      if (!pack_b) fb.emplace(b);
      memory src(state->src_md, eng, fa.data()), dst(state->dst_md, eng, y.data());
      std::unordered_map<int, memory> exec_args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}};
      if (!pack_b) exec_args[DNNL_ARG_WEIGHTS] = memory(state->wei_md, eng, fb->data());
      std::optional<onednn::F32Data> fbias;
      if (state->fused_bias) {
        fbias.emplace(*post.bias);
        exec_args[DNNL_ARG_BIAS] = memory(state->bias_md, eng, fbias->data());
      }
      // The data are plain strided layouts, the same for every implementation; packed weights
      // follow the implementation's layout.
      const auto next = [&] {
        if (!state->pd.next_impl()) return false;
        state->primitive = dnnl::primitive(state->pd);
        state->wei_source = nullptr;
        return true;
      };
      onednn::run_first_working(layer, state->pd, next, [&] {
        if (pack_b && state->wei_source != b.data) {
          state->wei_md = state->pd.weights_desc();
          pack_constant_b(*state, b, operand_desc(bs, tb, rank), stream);
        }
        if (pack_b) exec_args[DNNL_ARG_WEIGHTS] = state->wei_mem;
        state->primitive.execute(stream, exec_args);
        stream.wait();
      });
    });
  }
  // What the primitive did not fuse (all of it when no primitive ran, k == 0).
  PostOps rest = p.post;
  const TensorView* bias = post.bias;
  if (state && state->fused_activation) rest.activation = ActivationKind::kNone;
  if (state && state->fused_bias) bias = nullptr;
  // The result is [batch..., M, N] in memory whatever dims the output dropped; bias runs over N.
  onednn::finish(rest, bias, post.residual, n, 1, y.data(), out);
}

}  // namespace

void register_matmul(KernelTable& t) {
  t.set<MatMulParams>(matmul_kernel);
}

}  // namespace kiln::engine::cpu
