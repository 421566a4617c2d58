// CPU kernel of the convolution family: cached oneDNN f32 (de)convolution on plain layouts,
// followed by the shared post-op epilogue.
#include <algorithm>

#include "engine/cpu/onednn.h"

namespace kiln::engine::cpu {

namespace {

using dnnl::memory;

// The primitive for the last input shapes; rebuilt only when they change.
struct ConvState : KernelState {
  Shape key;
  dnnl::primitive primitive;
  memory::desc src_md, wei_md, dst_md;
};

std::vector<int64_t> or_default(const std::vector<int64_t>& v, size_t nd, int64_t fallback) {
  return v.empty() ? std::vector<int64_t>(nd, fallback) : v;
}

memory::format_tag data_tag(size_t nd) {
  return nd == 1   ? memory::format_tag::ncw
         : nd == 2 ? memory::format_tag::nchw
                   : memory::format_tag::ncdhw;
}
memory::format_tag weights_tag(size_t nd, bool grouped) {
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

void build(ConvState& s, const ConvolutionParams& p, const Shape& x, const Shape& w,
           const Shape& out) {
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
  s.src_md = memory::desc(onednn::to_dims(x), memory::data_type::f32, data_tag(nd));
  s.dst_md = memory::desc(onednn::to_dims(out), memory::data_type::f32, data_tag(nd));
  s.wei_md = memory::desc(onednn::to_dims(wd), memory::data_type::f32, weights_tag(nd, g > 1));
  auto& eng = onednn::cpu_engine();
  const auto as_dims = [](const std::vector<int64_t>& v) {
    return memory::dims(v.begin(), v.end());
  };
  if (p.transposed) {
    dnnl::deconvolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, s.src_md,
        s.wei_md, s.dst_md, as_dims(strides), as_dims(dil), as_dims(pb), as_dims(pe));
    s.primitive =
        dnnl::deconvolution_forward(dnnl::deconvolution_forward::primitive_desc(desc, eng));
  } else {
    dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, s.src_md, s.wei_md,
        s.dst_md, as_dims(strides), as_dims(dil), as_dims(pb), as_dims(pe));
    s.primitive = dnnl::convolution_forward(dnnl::convolution_forward::primitive_desc(desc, eng));
  }
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
  const int64_t spatial = out.numel() / (out.shape[0] * out.shape[1]);
  const auto post = onednn::post_inputs(p.post, args.inputs);
  onednn::F32Result y(out);
  if (x.numel() == 0 || w.numel() == 0) {
    std::fill(y.data(), y.data() + out.numel(), 0.f);  // empty reductions (no input channels)
  } else {
    Shape key = x.shape;
    key.insert(key.end(), w.shape.begin(), w.shape.end());
    auto* state = dynamic_cast<ConvState*>(args.state.get());
    onednn::guarded(layer, [&] {
      if (!state || state->key != key) {
        auto fresh = std::make_unique<ConvState>();
        fresh->key = key;
        build(*fresh, p, x.shape, w.shape, out.shape);
        state = fresh.get();
        args.state = std::move(fresh);
      }
      onednn::F32Data fx(x), fw(w);
      std::vector<float> swapped;
      float* weights = fw.data();
      if (p.transposed) {
        const int64_t g = p.groups, cg = w.shape[0] / g, og = w.shape[1];
        swapped = swap_io(weights, g, cg, og, w.numel() / (w.shape[0] * og));
        weights = swapped.data();
      }
      auto& eng = onednn::cpu_engine();
      memory src(state->src_md, eng, fx.data()), wei(state->wei_md, eng, weights),
          dst(state->dst_md, eng, y.data());
      dnnl::stream stream(eng);
      state->primitive.execute(stream,
                               {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
      stream.wait();
    });
  }
  onednn::finish(p.post, post.bias, post.residual, out.shape[1], spatial, y.data(), out);
}

}  // namespace

void register_convolution(KernelTable& t) {
  t.set<ConvolutionParams>(convolution_kernel);
}

}  // namespace kiln::engine::cpu
