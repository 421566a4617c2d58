// CPU kernel of the convolution family: cached oneDNN f32 (de)convolution in the layouts oneDNN
// prefers (blocked jit kernels), reordering activations per run and weights once, followed by
// the shared post-op epilogue.
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "engine/cpu/onednn.h"
#include "util/hash.h"

namespace kiln::engine::cpu {

namespace {

using dnnl::memory;

// The memory layouts a primitive descriptor is asked for, in the order they are tried: the ones
// oneDNN prefers (`any`), plain nc(d)hw, and blocked nC(d)hw8c data (weights `any`).
enum class Layouts { kPreferred, kPlain, kBlocked };

// The primitive for the last input shapes; rebuilt only when they change. src/dst/weights are
// in the layouts of the implementation in use; the plain (user) descs say when a reorder is
// needed.
struct ConvState : KernelState {
  Shape key;
  // oneDNN's implementation iterator points at the operation descriptor: it lives here, with it.
  std::optional<dnnl::convolution_forward::desc> conv_desc;
  std::optional<dnnl::deconvolution_forward::desc> deconv_desc;
  dnnl::primitive_desc pd;  // the implementation in use; onednn::run_first_working moves it on
  dnnl::primitive primitive;
  memory::desc src_md, wei_md, dst_md;        // the primitive's
  memory::desc user_src, user_wei, user_dst;  // plain nc(d)hw / (g)oi(d)hw
  dnnl::reorder src_reorder, dst_reorder, wei_reorder;
  memory src_mem, dst_mem, wei_mem;  // staging in the primitive's layouts
  // What wei_mem was reordered from. A constant (an engine weight: the runtime guarantees its
  // bytes never change) is keyed by its address, so it is reordered once and never read again;
  // any other weight input by a digest of its bytes, since an activation or a rebound input
  // may change contents at a fixed address.
  const void* wei_source = nullptr;
  uint64_t wei_digest = 0;
  bool wei_valid = false;
  // Post-ops done by the primitive (bias, then the first activation); finish() does the rest.
  bool fused_bias = false, fused_activation = false;
  Layouts layouts = Layouts::kPreferred;  // what pd was described with
};

std::vector<int64_t> or_default(const std::vector<int64_t>& v, size_t nd, int64_t fallback) {
  return v.empty() ? std::vector<int64_t>(nd, fallback) : v;
}

memory::format_tag data_tag(size_t nd, bool channels_last) {
  if (channels_last) {
    return nd == 1   ? memory::format_tag::nwc
           : nd == 2 ? memory::format_tag::nhwc
                     : memory::format_tag::ndhwc;
  }
  return nd == 1   ? memory::format_tag::ncw
         : nd == 2 ? memory::format_tag::nchw
                   : memory::format_tag::ncdhw;
}
memory::format_tag weights_tag(size_t nd, bool grouped, bool channels_last) {
  if (channels_last) {  // [g,] O, k..., C/g
    if (grouped) {
      return nd == 1   ? memory::format_tag::gowi
             : nd == 2 ? memory::format_tag::gohwi
                       : memory::format_tag::godhwi;
    }
    return nd == 1   ? memory::format_tag::owi
           : nd == 2 ? memory::format_tag::ohwi
                     : memory::format_tag::odhwi;
  }
  if (grouped) {
    return nd == 1   ? memory::format_tag::goiw
           : nd == 2 ? memory::format_tag::goihw
                     : memory::format_tag::goidhw;
  }
  return nd == 1   ? memory::format_tag::oiw
         : nd == 2 ? memory::format_tag::oihw
                   : memory::format_tag::oidhw;
}

// Torch stores transposed weights as [g, C/g, O/g, k...]; oneDNN wants [g, O/g, C/g, k...].
std::vector<float> swap_io(const float* w, int64_t g, int64_t cg, int64_t og, int64_t k) {
  std::vector<float> t(static_cast<size_t>(g * cg * og * k));
#pragma omp parallel for collapse(2) if (g * cg * og * k > 64 * 1024)
  for (int64_t gi = 0; gi < g; ++gi) {
    for (int64_t ci = 0; ci < cg; ++ci) {
      for (int64_t oi = 0; oi < og; ++oi) {
        const float* src = w + ((gi * cg + ci) * og + oi) * k;
        float* dst = t.data() + ((gi * og + oi) * cg + ci) * k;
        std::copy(src, src + k, dst);
      }
    }
  }
  return t;
}

// The primitive descriptor (the first implementation oneDNN offers for `layouts`) and the
// plain layouts. Shapes are as the layer has them (channels-last ones permuted: oneDNN's dims
// are always channels-first, the layout is in the memory format). Channels-last data is asked
// for as it is (no reorders) with `kPreferred`.
void describe(ConvState& s, const ConvolutionParams& p, const Shape& x_layer, const Shape& w_layer,
              const Shape& out_layer, Layouts layouts) {
  s.layouts = layouts;
  const bool cl = p.channels_last;
  const Shape x = cl ? to_channels_first(x_layer) : x_layer;
  const Shape w = cl ? to_channels_first(w_layer) : w_layer;
  const Shape out = cl ? to_channels_first(out_layer) : out_layer;
  dnnl::primitive_attr attr;
  s.fused_bias = p.post.has_bias;
  dnnl::post_ops ops;
  s.fused_activation = onednn::eltwise_for(p.post.activation, p.post.alpha, p.post.beta, &ops);
  if (s.fused_activation) attr.set_post_ops(ops);
  const size_t nd = x.size() - 2;
  const int64_t g = p.groups;
  const auto strides = or_default(p.strides, nd, 1);
  const auto pb = or_default(p.padding_begin, nd, 0);
  auto pe = or_default(p.padding_end, nd, 0);
  const auto op = or_default(p.output_padding, nd, 0);
  auto dil = or_default(p.dilations, nd, 1);
  for (auto& d : dil) d -= 1;  // oneDNN counts the gaps between taps
  // output_padding extends the end of a transposed output: negative end padding.
  if (p.transposed) {
    for (size_t d = 0; d < nd; ++d) pe[d] -= op[d];
  }
  const int64_t o = out[1], c = x[1];
  Shape wd = {g, o / g, c / g};  // both kinds, once transposed weights are swapped
  wd.insert(wd.end(), w.begin() + 2, w.end());
  if (g == 1) wd.erase(wd.begin());
  const auto f32 = memory::data_type::f32;
  const auto any = memory::format_tag::any;
  const auto blocked = nd == 1   ? memory::format_tag::nCw8c
                       : nd == 2 ? memory::format_tag::nChw8c
                                 : memory::format_tag::nCdhw8c;
  s.user_src = memory::desc(onednn::to_dims(x), f32, data_tag(nd, cl));
  s.user_dst = memory::desc(onednn::to_dims(out), f32, data_tag(nd, cl));
  s.user_wei = memory::desc(onednn::to_dims(wd), f32, weights_tag(nd, g > 1, cl));
  const auto asked = [&](const memory::desc& plain, const Shape& dims, bool data) {
    if (layouts == Layouts::kPlain || (cl && data && layouts == Layouts::kPreferred)) return plain;
    const bool block = data && layouts == Layouts::kBlocked;
    return memory::desc(onednn::to_dims(dims), f32, block ? blocked : any);
  };
  const memory::desc asked_src = asked(s.user_src, x, true),
                     asked_dst = asked(s.user_dst, out, true),
                     asked_wei = asked(s.user_wei, wd, false);
  const memory::desc bias_md =
      s.fused_bias ? memory::desc({out[1]}, f32, memory::format_tag::a) : memory::desc();
  auto& eng = onednn::cpu_engine();
  const auto as_dims = [](const std::vector<int64_t>& v) {
    return memory::dims(v.begin(), v.end());
  };
  if (p.transposed) {
    s.deconv_desc.emplace(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                          asked_src, asked_wei, bias_md, asked_dst, as_dims(strides), as_dims(dil),
                          as_dims(pb), as_dims(pe));
    s.pd = dnnl::deconvolution_forward::primitive_desc(*s.deconv_desc, attr, eng);
  } else {
    s.conv_desc.emplace(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                        asked_src, asked_wei, bias_md, asked_dst, as_dims(strides), as_dims(dil),
                        as_dims(pb), as_dims(pe));
    s.pd = dnnl::convolution_forward::primitive_desc(*s.conv_desc, attr, eng);
  }
}

// The primitive, staging buffers and reorders of the implementation s.pd holds; the weights
// are brought into its layout on the next run.
void instantiate(ConvState& s) {
  auto& eng = onednn::cpu_engine();
  s.src_md = s.pd.src_desc(0), s.wei_md = s.pd.weights_desc(0), s.dst_md = s.pd.dst_desc(0);
  s.primitive = dnnl::primitive(s.pd);
  // Staging buffers and reorders exist only where oneDNN's layout differs from the plain one.
  s.src_mem = s.dst_mem = memory();
  s.src_reorder = s.dst_reorder = s.wei_reorder = dnnl::reorder();
  if (s.src_md != s.user_src) {
    s.src_mem = memory(s.src_md, eng);
    s.src_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(eng, s.user_src, eng, s.src_md));
  }
  if (s.dst_md != s.user_dst) {
    s.dst_mem = memory(s.dst_md, eng);
    s.dst_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(eng, s.dst_md, eng, s.user_dst));
  }
  s.wei_mem = memory(s.wei_md, eng);
  if (s.wei_md != s.user_wei) {
    s.wei_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(eng, s.user_wei, eng, s.wei_md));
  }
  s.wei_valid = false;
}

// Brings the weights into state.wei_mem unless they are already there.
void prepare_weights(ConvState& s, const ConvolutionParams& p, const TensorView& w,
                     dnnl::stream& stream) {
  const size_t bytes = static_cast<size_t>(w.numel()) * dtype_size(w.dtype);
  if (w.constant) {
    if (s.wei_valid && s.wei_source == w.data) return;
  } else {
    const uint64_t digest = hash_bytes(w.data, bytes);
    if (s.wei_valid && s.wei_source == nullptr && digest == s.wei_digest) return;
    s.wei_digest = digest;
  }
  s.wei_valid = false;
  onednn::F32Data fw(w);
  std::vector<float> swapped;
  float* weights = fw.data();
  if (p.transposed) {
    const int64_t g = p.groups, cg = w.shape[0] / g, og = w.shape[1];
    swapped = swap_io(weights, g, cg, og, w.numel() / (w.shape[0] * og));
    weights = swapped.data();
  }
  auto& eng = onednn::cpu_engine();
  memory user(s.user_wei, eng, weights);
  if (s.wei_md != s.user_wei) {
    s.wei_reorder.execute(stream, user, s.wei_mem);
  } else {
    std::copy(weights, weights + w.numel(), static_cast<float*>(s.wei_mem.get_data_handle()));
  }
  stream.wait();
  s.wei_source = w.constant ? w.data : nullptr;
  s.wei_valid = true;
}

void convolution_kernel(KernelArgs& args) {
  const auto& p = std::get<ConvolutionParams>(args.layer.params);
  const std::string& layer = args.layer.name;
  const TensorView& x = args.inputs[0];
  const TensorView& w = args.inputs[1];
  const TensorView& out = args.outputs[0];
  KILN_CHECK(is_floating(x.dtype), InvalidArgument, "layer `", layer,
             "` (convolution): integer convolution is not supported, got ", dtype_name(x.dtype));
  if (out.numel() == 0) return;
  // The channel dim and the elements per channel run the epilogue's bias indexing needs.
  const int64_t channels = p.channels_last ? out.shape.back() : out.shape[1];
  const int64_t spatial = p.channels_last ? 1 : out.numel() / (out.shape[0] * out.shape[1]);
  const auto post = onednn::post_inputs(p.post, args.inputs);
  onednn::F32Result y(out);
  ConvState* state = nullptr;  // set when the primitive runs
  if (x.numel() == 0 || w.numel() == 0) {
    std::fill(y.data(), y.data() + out.numel(), 0.f);  // empty reductions (no input channels)
  } else {
    Shape key = x.shape;
    key.insert(key.end(), w.shape.begin(), w.shape.end());
    state = dynamic_cast<ConvState*>(args.state.get());
    onednn::guarded(layer, [&] {
      if (!state || state->key != key) {
        auto fresh = std::make_unique<ConvState>();
        fresh->key = key;
        describe(*fresh, p, x.shape, w.shape, out.shape, Layouts::kPreferred);
        instantiate(*fresh);
        state = fresh.get();
        args.state = std::move(fresh);
      }
      auto& eng = onednn::cpu_engine();
      dnnl::stream stream(eng);
      onednn::F32Data fx(x);
      std::optional<onednn::F32Data> fb;
      if (state->fused_bias) fb.emplace(*post.bias);
      // oneDNN's implementations for the layouts it prefers, then for the plain ones, then for
      // blocked data (which its gemm-based implementations refuse).
      const auto next = [&] {
        bool found = state->pd.next_impl();
        while (!found && state->layouts != Layouts::kBlocked) {
          try {
            describe(*state, p, x.shape, w.shape, out.shape,
                     static_cast<Layouts>(static_cast<int>(state->layouts) + 1));
            found = true;
          } catch (const dnnl::error&) {  // nothing for these layouts: the next ones
          }
        }
        if (found) {
          instantiate(*state);
        } else {
          state->key.clear();  // all failed: the next run starts over
        }
        return found;
      };
      onednn::run_first_working(layer, state->pd, next, [&] {
        prepare_weights(*state, p, w, stream);
        memory user_src(state->user_src, eng, fx.data()), user_dst(state->user_dst, eng, y.data());
        memory src = user_src, dst = user_dst;
        if (state->src_reorder) {
          state->src_reorder.execute(stream, user_src, state->src_mem);
          src = state->src_mem;
        }
        if (state->dst_reorder) dst = state->dst_mem;
        std::unordered_map<int, memory> exec_args = {
            {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, state->wei_mem}, {DNNL_ARG_DST, dst}};
        if (state->fused_bias) {
          exec_args[DNNL_ARG_BIAS] =
              memory(memory::desc({channels}, memory::data_type::f32, memory::format_tag::a), eng,
                     fb->data());
        }
        state->primitive.execute(stream, exec_args);
        if (state->dst_reorder) state->dst_reorder.execute(stream, state->dst_mem, user_dst);
        stream.wait();
      });
    });
  }
  // What the primitive did not fuse (all of it when no primitive ran).
  PostOps rest = p.post;
  const TensorView* bias = post.bias;
  if (state && state->fused_activation) rest.activation = ActivationKind::kNone;
  if (state && state->fused_bias) bias = nullptr;
  onednn::finish(rest, bias, post.residual, channels, spatial, y.data(), out);
}

}  // namespace

void register_convolution(KernelTable& t) {
  t.set<ConvolutionParams>(convolution_kernel);
}

}  // namespace kiln::engine::cpu
