// Host side of the shared device helpers: Dims for broadcast and strided operands.
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {
namespace {

// Drops size-1 dims and merges neighbours that every operand steps through as one dim.
std::vector<Dims> merge(const std::string& layer, const Shape& shape,
                        const std::vector<std::vector<int64_t>>& strides) {
  std::vector<int64_t> size;
  std::vector<std::vector<int64_t>> st(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool mergeable = !size.empty();
    for (size_t j = 0; j < strides.size() && mergeable; ++j) {
      mergeable = st[j].back() == strides[j][d] * shape[d];
    }
    if (mergeable) {
      size.back() *= shape[d];
      for (size_t j = 0; j < strides.size(); ++j) st[j].back() = strides[j][d];
    } else {
      size.push_back(shape[d]);
      for (size_t j = 0; j < strides.size(); ++j) st[j].push_back(strides[j][d]);
    }
  }
  KILN_CHECK(size.size() <= static_cast<size_t>(kMaxRank), Unsupported, "layer `", layer,
             "`: the CUDA kernels index at most ", kMaxRank, " dims, this needs ", size.size());
  std::vector<Dims> out(strides.size());
  for (size_t j = 0; j < strides.size(); ++j) {
    out[j].rank = static_cast<int>(size.size());
    for (size_t d = 0; d < size.size(); ++d) {
      out[j].size[d] = size[d];
      out[j].stride[d] = st[j][d];
    }
  }
  return out;
}

__device__ __forceinline__ long long global_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void gate_kernel(volatile int* flag, long long timeout_ns) {
  const long long start = global_ns();
  while (flag[0] == 0) {
    if (global_ns() - start > timeout_ns) {
      flag[1] = 1;
      return;
    }
    __nanosleep(1000);
  }
}

}  // namespace

void launch_gate(cudaStream_t stream, volatile int* flag, long long timeout_ns) {
  gate_kernel<<<1, 1, 0, stream>>>(flag, timeout_ns);
  KILN_CUDA_CHECK_LAUNCH("profiling gate");
}

std::vector<Dims> merge_dims(const std::string& layer, const Shape& shape,
                             const std::vector<std::vector<int64_t>>& strides) {
  return merge(layer, shape, strides);
}

std::vector<Dims> broadcast_dims(const std::string& layer, const Shape& out,
                                 const std::vector<Shape>& inputs) {
  std::vector<std::vector<int64_t>> strides = {contiguous_strides(out)};
  for (const Shape& in : inputs) {
    const auto cs = contiguous_strides(in);
    const size_t offset = out.size() - in.size();
    std::vector<int64_t> s(out.size(), 0);
    for (size_t d = offset; d < out.size(); ++d) {
      s[d] = in[d - offset] == 1 ? 0 : cs[d - offset];
    }
    strides.push_back(std::move(s));
  }
  return merge(layer, out, strides);
}

int multiprocessors(int device) {
  int sms = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return std::max(sms, 1);
}

size_t optin_shared_bytes(int device) {
  int bytes = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return static_cast<size_t>(bytes);
}

void allow_shared_bytes(const void* kernel, size_t bytes, int device,
                        std::atomic<uint64_t>& configured) {
  if (bytes <= 48 * 1024) return;
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (configured.load() & bit) != 0) return;
  KILN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(bytes)));
  configured.fetch_or(bit);
}

Dims strided_dims(const std::string& layer, const Shape& shape,
                  const std::vector<int64_t>& strides) {
  return merge(layer, shape, {contiguous_strides(shape), strides})[1];
}

}  // namespace kiln::engine::cuda
