// oneDNN plumbing shared by the matmul and convolution kernels: the CPU engine, f32 staging of
// f16/bf16 tensors, and the post-op epilogue (bias, activation, residual, activation2).
#pragma once

#include <omp.h>

#include <dnnl.hpp>
#include <string>
#include <vector>

#include "engine/cpu/convert.h"
#include "engine/cpu/elementwise_math.h"
#include "util/errors.h"

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
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = y[start + i];
      if (bias) {
        for (int64_t i = 0; i < n; ++i) {
          const int64_t c = bias_scalar ? 0 : ((start + i) / inner) % channels;
          v[static_cast<size_t>(i)] += bias_f[static_cast<size_t>(c)];
        }
      }
      if (post.activation != ActivationKind::kNone) {
        for (auto& x : v) x = activate(post.activation, x, post.alpha, post.beta);
      }
      if (residual) {
        load_block<float>(*residual, res_map, start, n, r.data(), scratch.data());
        for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] += r[static_cast<size_t>(i)];
      }
      if (post.activation2 != ActivationKind::kNone) {
        for (auto& x : v) x = activate(post.activation2, x, post.alpha2, post.beta2);
      }
      store_block<float>(out, start, n, v.data());
    }
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

}  // namespace kiln::engine::cpu::onednn
