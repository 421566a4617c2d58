// A squeeze-excitation layer takes the 1x1 projection after it.
#include "engine/passes/passes.h"

#include <algorithm>

namespace kiln::engine {

// Squeeze-excitation whose result only feeds a 1x1 convolution (efficientnet's projection, with
// its bias and residual) takes that convolution (SqueezeExcitationParams::project) where
// applies(samples, pixels, channels, out channels) says it pays: the projection then runs on x
// with its weights scaled per sample, and the excite pass is gone (bench/NOTES.md G29). Static
// channels-last shapes, stride 1 without padding or dilation, one dtype throughout, a residual of
// the output's shape. The layer runs where the convolution ran (after its residual exists).
// Returns how many it folded.
int fold_excitation_into_projection(
    Network& net, const std::function<bool(int64_t, int64_t, int64_t, int64_t)>& applies,
    std::vector<std::string>& fusions) {
  const auto all_are = [](const std::vector<int64_t>& v, int64_t want) {
    return std::all_of(v.begin(), v.end(), [&](int64_t d) { return d == want; });
  };
  const auto fold_at = [&](size_t i) {
    const Layer& se_layer = net.layers()[i];
    const auto* se = std::get_if<SqueezeExcitationParams>(&se_layer.params);
    if (!se || se->project || !se->channels_last) return false;
    size_t j = 0;
    const Layer* conv = single_consumer(net, se_layer.outputs[0], &j);
    const auto* cp = conv ? std::get_if<ConvolutionParams>(&conv->params) : nullptr;
    if (!cp || conv->inputs[0] != se_layer.outputs[0] || !cp->channels_last || cp->transposed ||
        cp->groups != 1 || !all_are(cp->strides, 1) || !all_are(cp->padding_begin, 0) ||
        !all_are(cp->padding_end, 0) || !all_are(cp->dilations, 1)) {
      return false;
    }
    const TensorDesc& xd = net.tensor(se_layer.inputs[0]);
    const Shape& w = net.tensor(conv->inputs[1]).shape;
    const TensorDesc& yd = net.tensor(conv->outputs[0]);
    const auto is_static = [](const Shape& s) {
      return std::all_of(s.begin(), s.end(), [](int64_t d) { return d >= 1; });
    };
    if (!is_static(xd.shape) || !is_static(yd.shape) || w.size() != xd.shape.size() ||
        w.back() != xd.shape.back() ||
        !std::all_of(w.begin() + 1, w.end() - 1, [](int64_t d) { return d == 1; })) {
      return false;
    }
    for (TensorId id : conv->inputs) {
      if (net.tensor(id).dtype != xd.dtype) return false;
    }
    if (yd.dtype != xd.dtype ||
        (cp->post.has_residual && net.tensor(conv->inputs.back()).shape != yd.shape)) {
      return false;
    }
    const int64_t samples = xd.shape[0], channels = xd.shape.back();
    if (!applies(samples, volume(xd.shape) / (samples * channels), channels, w[0])) return false;
    SqueezeExcitationParams fused = *se;
    fused.project = true;
    fused.projection = cp->post;
    fused.tf32 = cp->tf32;
    std::vector<TensorId> inputs = se_layer.inputs;
    inputs.insert(inputs.end(), conv->inputs.begin() + 1, conv->inputs.end());
    fusions.push_back(se_layer.name + " + " + conv->name + " -> " + conv->name +
                      " (squeeze-excitation + projection)");
    merge_into_consumer(net, i, j, Layer{conv->name, fused, inputs, conv->outputs});
    return true;
  };
  return rewrite_each(net, fold_at);
}

}  // namespace kiln::engine
