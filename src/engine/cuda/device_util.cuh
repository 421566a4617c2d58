// Device helpers shared by the CUDA kernels: dtype loads/stores through a compute type, index
// math over small fixed-rank shapes, and launch sizes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/cuda/cuda_check.h"
#include "engine/scalar_math.h"
#include "engine/types.h"

namespace kiln::engine::cuda {

// Programmatic dependent launch (sm_90): a kernel launched with programmatic stream serialization
// (launch_kernel's `early`) may start before the kernel ahead of it in the stream has finished,
// once every block of that one has called allow_dependents() or exited. Until its
// wait_for_prerequisites() returns it reads nothing an earlier kernel writes and writes nothing;
// launched as usual, wait_for_prerequisites() returns at once, and allow_dependents() does nothing
// where no such kernel follows.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// How launch_kernel launches: <<<grid, block, smem, stream>>>, plus `early`: programmatically
// dependent on the kernel ahead (the switch programmatic_launch; only for kernels whose every read
// of an earlier kernel's output and every write come after their wait_for_prerequisites(): their
// launch and the start of their blocks then overlap the end of the kernel ahead), and `cluster`:
// blocks a thread-block cluster along x (sm_90; 0: launched without clusters).
struct KernelLaunch {
  dim3 grid, block;
  size_t smem = 0;
  cudaStream_t stream = nullptr;
  bool early = false;
  unsigned cluster = 0;
};

// Launches `kernel` as `how` says. As with <<<>>>, a launch that fails leaves its error to
// KILN_CUDA_CHECK_LAUNCH, which names the layer.
template <class... Params, class... Args>
void launch_kernel(const KernelLaunch& how, void (*kernel)(Params...), Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = how.grid;
  config.blockDim = how.block;
  config.dynamicSmemBytes = how.smem;
  config.stream = how.stream;
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (how.cluster > 0) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count++].val.clusterDim = {how.cluster, 1, 1};
  }
  if (how.early) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = attributes;
  config.numAttrs = count;
  cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

// Kernels index shapes of at most this rank (after merging dims that need no separate index).
constexpr int kMaxRank = 8;
constexpr int kThreads = 256;

// A shape plus one stride vector, passed to kernels by value.
struct Dims {
  int rank = 0;
  int64_t size[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};  // of the operand being indexed, in elements
};

inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

// Offset of flat (row-major) index i of d's shape in the strided operand.
__device__ __forceinline__ int64_t offset_of(const Dims& d, int64_t i) {
  int64_t off = 0;
#pragma unroll
  for (int k = kMaxRank - 1; k >= 0; --k) {
    if (k < d.rank) {
      const int64_t s = d.size[k];
      off += (i % s) * d.stride[k];
      i /= s;
    }
  }
  return off;
}

// 16 bytes of T (8 halves or 4 floats): one vector load or store where the address is aligned.
template <class T>
struct alignas(16) Vec16 {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

// N elements of T loaded or stored as one word (sizeof(T) * N bytes, a power of two up to 16).
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// cp.async (sm_80+): copies 16 bytes from global to shared memory, of which the first
// `src_bytes` (0 or 16) come from `src` and the rest are zeros; commit_async closes a group of
// such copies and wait_async<N> waits until at most the N newest groups are still in flight.
__device__ __forceinline__ void copy16_async(void* dst, const void* src, int src_bytes = 16) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d),
               "l"(__cvta_generic_to_global(src)), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void commit_async() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Asks the L2 cache for the 128-byte line holding `p` without waiting for it.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(__cvta_generic_to_global(p)));
}

// Host side: lets `kernel` use up to `bytes` of dynamic shared memory, which above 48 KiB it must
// opt into, once per device (the attribute is per context); `configured` holds the devices done,
// a bit each (one per kernel and size, so a static next to the launch).
void allow_shared_bytes(const void* kernel, size_t bytes, int device,
                        std::atomic<uint64_t>& configured);

// Host side: builds Dims for indexing an operand of shape `in` broadcast to `out` (stride 0 on
// broadcast dims), merging adjacent dims where that loses nothing; `more` are further operands
// (same output shape) merged consistently. Throws Unsupported past kMaxRank.
std::vector<Dims> broadcast_dims(const std::string& layer, const Shape& out,
                                 const std::vector<Shape>& inputs);
// Dims of operands indexed over `shape` by per-dim `strides` (a row per operand, one entry per
// dim of `shape`): size-1 dims dropped, neighbours merged where every row allows.
std::vector<Dims> merge_dims(const std::string& layer, const Shape& shape,
                             const std::vector<std::vector<int64_t>>& strides);
// Dims of a strided view: `shape` with per-dim `strides`, merged where contiguous.
Dims strided_dims(const std::string& layer, const Shape& shape,
                  const std::vector<int64_t>& strides);

}  // namespace kiln::engine::cuda
