// oneDNN plumbing shared by the matmul and convolution kernels: the CPU engine, f32 staging of
// f16/bf16 tensors, and the post-op epilogue (bias, activation, residual, activation2).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <dnnl.hpp>
#include <string>
#include <vector>

#include "engine/cpu/block_ops.h"
#include "engine/cpu/convert.h"
#include "util/errors.h"
#include "util/logging.h"

namespace kiln::engine::cpu::onednn {

inline dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

inline dnnl::memory::dims to_dims(const Shape& s) {
  return dnnl::memory::dims(s.begin(), s.end());
}

// A tensor's contents as contiguous f32: the tensor's own memory when it is f32 (no copy),
// otherwise a widened copy, so one f32 primitive serves every floating dtype.
class F32Data {
 public:
  explicit F32Data(const TensorView& t) {
    if (t.dtype == DataType::kF32) {
      ptr_ = t.as<float>();
      return;
    }
    const int64_t n = t.numel();
    copy_.resize(static_cast<size_t>(n));
#pragma omp parallel for if (n > 64 * 1024)
    for (int64_t i = 0; i < n; ++i)
      copy_[static_cast<size_t>(i)] = load_as<float>(t.dtype, t.data, i);
    ptr_ = copy_.data();
  }
  float* data() const {
    return ptr_;
  }

 private:
  float* ptr_ = nullptr;
  std::vector<float> copy_;
};

// Where a kernel's f32 result goes before the epilogue: the output itself when it is f32.
class F32Result {
 public:
  explicit F32Result(const TensorView& out) {
    if (out.dtype == DataType::kF32) {
      ptr_ = out.as<float>();
    } else {
      buf_.resize(static_cast<size_t>(out.numel()));
      ptr_ = buf_.data();
    }
  }
  float* data() const { return ptr_; }

 private:
  float* ptr_ = nullptr;
  std::vector<float> buf_;
};

// y = act(y + bias[channel]) [+ residual, then act2], stored into `out` (which may alias y).
// The channel of element i is (i / inner) % channels; a 1-element bias broadcasts.
inline void finish(const PostOps& post, const TensorView* bias, const TensorView* residual,
                   int64_t channels, int64_t inner, const float* y, const TensorView& out) {
  const int64_t total = out.numel();
  if (total == 0) return;
  const bool trivial = !bias && !residual && post.activation == ActivationKind::kNone &&
                       post.activation2 == ActivationKind::kNone;
  if (trivial && out.dtype == DataType::kF32 && out.data == y) return;
  std::vector<float> bias_f;
  if (bias) {
    bias_f.resize(static_cast<size_t>(bias->numel()));
    for (int64_t i = 0; i < bias->numel(); ++i) {
      bias_f[static_cast<size_t>(i)] = load_as<float>(bias->dtype, bias->data, i);
    }
  }
  const bool bias_scalar = bias_f.size() == 1;
  BroadcastMap res_map(residual ? residual->shape : out.shape, out.shape);
  constexpr int64_t kBlock = 512;
  const int64_t blocks = (total + kBlock - 1) / kBlock;
#pragma omp parallel if (total > 32 * 1024)
  {
    std::vector<float> v(kBlock), r(kBlock);
    std::vector<int64_t> scratch(kBlock);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t start = blk * kBlock, n = std::min(kBlock, total - start);
      std::copy(y + start, y + start + n, v.data());
      if (bias && inner == 1 && !bias_scalar) {  // matmul: the channel is the last dim
        int64_t c = start % channels;
        for (int64_t i = 0; i < n; ++i) {
          v[static_cast<size_t>(i)] += bias_f[static_cast<size_t>(c)];
          c = c + 1 == channels ? 0 : c + 1;
        }
      } else if (bias) {
        // Runs of one channel: no division per element.
        for (int64_t i = 0; i < n;) {
          const int64_t pos = start + i;
          const int64_t len = bias_scalar ? n - i : std::min(n - i, inner - pos % inner);
          const float b = bias_f[bias_scalar ? 0 : static_cast<size_t>((pos / inner) % channels)];
          for (int64_t j = i; j < i + len; ++j) v[static_cast<size_t>(j)] += b;
          i += len;
        }
      }
      if (post.activation != ActivationKind::kNone) {
        activation_block(post.activation, post.alpha, post.beta, v.data(), v.data(), n);
      }
      if (residual) {
        load_block<float>(*residual, res_map, start, n, r.data(), scratch.data());
        for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] += r[static_cast<size_t>(i)];
      }
      if (post.activation2 != ActivationKind::kNone) {
        activation_block(post.activation2, post.alpha2, post.beta2, v.data(), v.data(), n);
      }
      store_block<float>(out, start, n, v.data());
    }
  }
}

// Appends to `ops` the oneDNN eltwise post-op computing activation `k` as activate() defines it
// (scalar_ops.h), if there is one; false (nothing appended) for the others, which stay in finish()
// (a pass of its own over the output). One exception, NaN through ReLU and clamp: oneDNN takes max
// and min with the bounds, so a NaN comes out as the lower bound (0 for ReLU), as PyTorch's own
// frozen oneDNN convolution + ReLU gives it; activate(), eager PyTorch and ONNX Runtime keep NaN.
// Keeping it would cost: the one NaN-keeping form oneDNN has, ELU with alpha 0, evaluates an exp
// (ResNet-50 4% slower on 2 cores than with max), and a clamp built from it is slower than the
// separate pass (MobileNet-v2 2.9 ms against 2.3; fused as here 1.75: bench/NOTES.md G75). A clamp
// with no lower bound stays in finish(): max with -inf would give -inf for NaN.
inline bool eltwise_for(ActivationKind k, double alpha, double beta, dnnl::post_ops* ops) {
  using A = ActivationKind;
  using dnnl::algorithm;
  const auto add = [&](algorithm alg, double a = 0, double b = 0) {
    ops->append_eltwise(1.f, alg, static_cast<float>(a), static_cast<float>(b));
  };
  switch (k) {
    case A::kRelu:
      add(algorithm::eltwise_relu);
      return true;
    case A::kLeakyRelu:  // x > 0 ? x : alpha * x
      add(algorithm::eltwise_relu, alpha);
      return true;
    case A::kClamp:  // alpha the lower bound (-inf: none), beta the upper (+inf: none)
      if (!std::isfinite(alpha) || std::isnan(beta)) return false;
      add(algorithm::eltwise_clip_v2, alpha, beta);
      return true;
    case A::kHardSwish:  // x * relu6(x + 3) / 6: NaN gives NaN through the product
      add(algorithm::eltwise_hardswish);
      return true;
    case A::kGelu:
      add(algorithm::eltwise_gelu_erf);
      return true;
    case A::kGeluTanh:
      add(algorithm::eltwise_gelu_tanh);
      return true;
    case A::kSigmoid:
      add(algorithm::eltwise_logistic);
      return true;
    case A::kTanh:
      add(algorithm::eltwise_tanh);
      return true;
    case A::kSilu:
      add(algorithm::eltwise_swish, 1.0);
      return true;
    case A::kElu:
      add(algorithm::eltwise_elu, alpha);
      return true;
    default:
      return false;
  }
}

// The post-op inputs that follow the two operands (a/b or x/w), in order.
struct PostInputs {
  const TensorView* bias = nullptr;
  const TensorView* residual = nullptr;
};
inline PostInputs post_inputs(const PostOps& post, const std::vector<TensorView>& inputs) {
  PostInputs p;
  size_t i = 2;
  if (post.has_bias) p.bias = &inputs.at(i++);
  if (post.has_residual) p.residual = &inputs.at(i++);
  return p;
}

// Runs `fn`, turning oneDNN failures into kiln errors that name the layer.
template <class Fn>
void guarded(const std::string& layer, Fn&& fn) {
  try {
    fn();
  } catch (const dnnl::error& e) {
    KILN_THROW(Unsupported, "layer `", layer, "`: oneDNN failed: ", e.what());
  }
}

// Runs `attempt` on the implementation `pd` holds. When it fails with a oneDNN error, calls
// `next`, which moves `pd` on to another implementation (oneDNN's next, or another
// descriptor) and rebuilds what depends on it, returning false when there is none; then tries
// again. The state keeps whichever implementation worked. Some implementations pass creation
// and fail only when they run: in a process that also loads libtorch 2.x (which carries its own
// oneDNN 3.x), libtorch's copy of the weak std::call_once thunk of gemm_info_t::jit_init
// interposes libdnnl's, so libdnnl's jit GEMM kernels are never generated and every "gemm:jit"
// primitive returns `unimplemented`.
template <class Next, class Attempt>
void run_first_working(const std::string& layer, const dnnl::primitive_desc& pd, Next&& next,
                       Attempt&& attempt) {
  std::string failed;
  for (;;) {
    try {
      attempt();
      return;
    } catch (const dnnl::error& e) {
      const std::string impl = pd.impl_info_str();
      failed += (failed.empty() ? "" : "; ") + impl + ": " + e.what();
      if (!next()) {
        KILN_THROW(Unsupported, "layer `", layer, "`: no oneDNN implementation ran (", failed, ")");
      }
      KILN_LOG(kWarning, "layer `", layer, "`: oneDNN implementation ", impl, " failed (", e.what(),
               "); using ", pd.impl_info_str());
    }
  }
}

}  // namespace kiln::engine::cpu::onednn
