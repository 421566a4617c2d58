// CPU kernel of the matmul family: a cached oneDNN f32 matmul (transposes as strides, batch
// dims broadcast by oneDNN) with bias and the first activation fused into the primitive where
// oneDNN computes them exactly; the shared epilogue does the rest.
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "engine/cpu/onednn.h"

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
  // A constant b (an engine weight) that is not f32 or has rows a multiple of 4 KiB long is
  // kept here as f32 with padded rows (wei_md describes it), copied once from wei_source.
  memory wei_mem;
  const void* wei_source = nullptr;
};

// The row length (elements) of a constant b's cached copy. With M = 128 and B's rows 12 KiB
// apart, oneDNN 2.6's sgemm on AVX2 took 7.9 ms with B at 16 mod 64 and 17.8 ms at 32 mod 64
// (rows a multiple of 4 KiB apart share cache sets); rows padded by 128 bytes take 6.5-7.0 ms
// at any address (bench/NOTES.md §6).
int64_t cached_row_length(int64_t cols) {
  return (cols * static_cast<int64_t>(sizeof(float))) % 4096 == 0 ? cols + 32 : cols;
}

// An operand as oneDNN sees it: logical [batch..., rows, cols] padded to `rank`, with strides
// that express a transpose of its two trailing dims; rows are `row_length` elements apart.
memory::desc operand_desc(const Shape& physical, bool transpose, size_t rank,
                          int64_t row_length = -1) {
  Shape dims(rank - physical.size(), 1);
  dims.insert(dims.end(), physical.begin(), physical.end());
  Shape padded = dims;
  if (row_length >= 0) padded[rank - 1] = row_length;
  std::vector<int64_t> strides = contiguous_strides(padded);
  if (transpose) {
    std::swap(dims[rank - 1], dims[rank - 2]);
    std::swap(strides[rank - 1], strides[rank - 2]);
  }
  return memory::desc(onednn::to_dims(dims), memory::data_type::f32,
                      memory::dims(strides.begin(), strides.end()));
}

// Copies the constant b (physical [batch..., rows, cols], any floating dtype) into
// state.wei_mem, whose rows are `row_length` elements apart.
void cache_constant_b(MatMulState& s, const TensorView& b, const Shape& bs, int64_t row_length) {
  const int64_t cols = bs.back(), rows = b.numel() / std::max<int64_t>(cols, 1);
  s.wei_mem = memory(s.wei_md, onednn::cpu_engine());
  auto* dst = static_cast<float*>(s.wei_mem.get_data_handle());
  onednn::F32Data fb(b);
#pragma omp parallel for if (rows * cols > 64 * 1024)
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(fb.data() + r * cols, fb.data() + (r + 1) * cols, dst + r * row_length);
  }
  s.wei_source = b.data;
}

void matmul_kernel(KernelArgs& args) {
  const auto& p = std::get<MatMulParams>(args.layer.params);
  const std::string& layer = args.layer.name;
  const TensorView& a = args.inputs[0];
  const TensorView& b = args.inputs[1];
  const TensorView& out = args.outputs[0];
  KILN_CHECK(is_floating(a.dtype), InvalidArgument, "layer `", layer,
             "` (matmul): integer matmul is not supported, got ", dtype_name(a.dtype));
  if (out.numel() == 0) return;

  // Promote rank-1 operands; a promoted a is [1, K] and a promoted b is [K, 1].
  const bool a_vec = a.shape.size() == 1, b_vec = b.shape.size() == 1;
  const bool ta = p.transpose_a && !a_vec, tb = p.transpose_b && !b_vec;
  const Shape as = a_vec ? Shape{1, a.shape[0]} : a.shape;
  const Shape bs = b_vec ? Shape{b.shape[0], 1} : b.shape;
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
    // A constant b that is not f32 or whose rows need padding is read from a cached copy
    // (an f32 constant with good rows is read in place); the copy's layout is part of the key.
    const bool cache_b =
        b.constant && (b.dtype != DataType::kF32 || cached_row_length(bs.back()) != bs.back());
    const int64_t row_length = cache_b ? cached_row_length(bs.back()) : -1;
    std::vector<int64_t> key = {static_cast<int64_t>(ta), static_cast<int64_t>(tb), row_length, -1};
    key.insert(key.end(), as.begin(), as.end());
    key.push_back(-1);
    key.insert(key.end(), bs.begin(), bs.end());
    state = dynamic_cast<MatMulState*>(args.state.get());
    onednn::guarded(layer, [&] {
      if (!state || state->key != key) {
        auto fresh = std::make_unique<MatMulState>();
        fresh->key = key;
        fresh->src_md = operand_desc(as, ta, rank);
        fresh->wei_md = operand_desc(bs, tb, rank, row_length);
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
        dnnl::algorithm act_alg;
        float act_a, act_b;
        // The activation follows the bias, so it is fused only with the bias (or without one).
        fresh->fused_activation =
            (fresh->fused_bias || !post.bias) &&
            onednn::eltwise_for(p.post.activation, p.post.alpha, &act_alg, &act_a, &act_b);
        if (fresh->fused_activation) {
          dnnl::post_ops ops;
          ops.append_eltwise(1.f, act_alg, act_a, act_b);
          attr.set_post_ops(ops);
        }
        fresh->desc.emplace(fresh->src_md, fresh->wei_md, fresh->bias_md, fresh->dst_md);
        fresh->pd = dnnl::matmul::primitive_desc(*fresh->desc, attr, onednn::cpu_engine());
        fresh->primitive = dnnl::primitive(fresh->pd);
        state = fresh.get();
        args.state = std::move(fresh);
      }
      auto& eng = onednn::cpu_engine();
      if (cache_b && state->wei_source != b.data) cache_constant_b(*state, b, bs, row_length);
      onednn::F32Data fa(a);
      std::optional<onednn::F32Data> fb;
      if (!cache_b) fb.emplace(b);
      memory src(state->src_md, eng, fa.data()), dst(state->dst_md, eng, y.data());
      memory wei = cache_b ? state->wei_mem : memory(state->wei_md, eng, fb->data());
      dnnl::stream stream(eng);
      std::unordered_map<int, memory> exec_args = {
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
      std::optional<onednn::F32Data> fbias;
      if (state->fused_bias) {
        fbias.emplace(*post.bias);
        exec_args[DNNL_ARG_BIAS] = memory(state->bias_md, eng, fbias->data());
      }
      // The operands are plain strided layouts, the same for every implementation.
      const auto next = [&] {
        if (!state->pd.next_impl()) return false;
        state->primitive = dnnl::primitive(state->pd);
        return true;
      };
      onednn::run_first_working(layer, state->pd, next, [&] {
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
