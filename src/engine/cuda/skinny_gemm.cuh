// The GEMM of few rows (kernels.h: launch_skinny_gemm), the kernel itself: included by
// skinny_gemm.cu, which instantiates its mma.sync form for every architecture kiln builds, and
// by skinny_gemm_sm90a.cu, which instantiates its wgmma form for sm_90a only (wgmma exists only
// in that architecture-specific target).
//
// y[rows, n] = post(a[rows, k] w[n, k]^T) (a linear layer's weight; or a w[k, n], as GPT-2's
// projections keep theirs) in f16 or bf16 with fp32 accumulation and every post-op (bias,
// activation, residual, second activation) in its epilogue. Transformers at batch 1 run their
// linear layers at 128 rows or fewer, where cuBLASLt gives each output tile of 64 columns one SM
// and a long K loop: BERT's 48 GEMMs took 4.3-7.5 us each in a graph replay on an H100 (NOTES.md
// G71), several times what reading their weights costs. Here K is split across the blocks of a
// thread-block cluster (sm_90): each block multiplies its share of K for all of the tile's rows,
// then the blocks add their partial tiles through distributed shared memory, each finishing a
// share of the tile's rows: no workspace, no second kernel, and the sum is taken in the same
// order on every run.
//
// A block's products run one of two ways (Products): warp by warp with mma.sync m16n8k16 from
// ldmatrix fragments, or as two warpgroups issuing wgmma straight from the shared-memory stages
// (sm_90a, [n, k] weights): the same stages, the same accumulator layout, about two thirds of the
// instructions a k tile. On an H100 the wgmma form is 5-10% ahead of mma.sync, and both trail
// cuBLASLt 1.6-2.1x on BERT's GEMMs at 128 rows (NOTES.md G73). The products do not decide it:
// a launch pays ~4.5 us before any of them count (tools/device/skinny_phases.cu, G74). That is
// 1.28 us of gap after the kernel ahead (a cluster launch), ~1 us for the cluster barrier's
// release fence, ~1.7 us to sum the partials and ~0.6 us for the last barrier.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"
#include "engine/cuda/mma.cuh"

// A probe's hook (tools/device/skinny_phases.cu): the kernel calls it at the start and end of
// each phase of a block (entry, prologue issued, main loop done, partials visible, rows stored,
// exit); nothing in the engine's build.
#ifndef KILN_SKINNY_MARK
#define KILN_SKINNY_MARK(phase)
#endif

namespace kiln::engine::cuda {
namespace skinny {

namespace cg = cooperative_groups;

constexpr int kBlockThreads = 256;  // 8 warps
constexpr int kTileN = 64;          // output columns a block
constexpr int kTileK = 32;          // K a pipeline stage: 64-byte rows of 4 16-byte chunks
constexpr int kStages = 4;
constexpr int kMaxSplits = 8;  // a portable cluster
// The stages start on a 512-byte boundary (the period of wgmma's 64-byte swizzle), so a block
// asks for that much more shared memory than they take.
constexpr int kSmemAlign = 512;

enum class Products { kMmaSync, kWgmma };

template <int BM>
constexpr int smem_bytes() {
  return kStages * (BM + kTileN) * kTileK * 2 + kSmemAlign;
}

// wgmma (sm_90a): a warpgroup's 64 x N product of a and w's k-major tiles in shared memory, both
// in the stages' layout (swizzled(): the hardware's 64-byte swizzle of 64-byte rows, 8-row
// groups 512 bytes apart), described by start address, the 8-row groups' stride (512) and the
// swizzle mode (2: 64 bytes). The leading-dimension offset is unused for swizzled k-major tiles.
__device__ __forceinline__ uint64_t sw64_descriptor(uint32_t smem_address) {
  return static_cast<uint64_t>((smem_address & 0x3ffff) >> 4) | uint64_t{1} << 16 |
         uint64_t{512 >> 4} << 32 | uint64_t{2} << 62;
}
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Writes by this thread's cp.async (the generic proxy) made visible to wgmma's reads (the async
// proxy) of the same shared memory, once a barrier has ordered every thread's fence before them.
__device__ __forceinline__ void fence_async_shared() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// D (64 x 8 * NT, fp32, a warp's 16 rows at its lanes as mma.sync's m16n8 fragments, one per 8
// columns) += A (64 x 16) B (16 x 8 * NT), both k-major in shared memory.
#define KILN_WGMMA(N, TYPE, REGS, A, B)                                                          \
  "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE \
  "." TYPE " {" REGS "}, %" #A ", %" #B ", p, 1, 1, 0, 0;\n}\n"
#define KILN_WGMMA_REGS16 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
#define KILN_WGMMA_REGS32 \
  KILN_WGMMA_REGS16 ",%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define KILN_WGMMA_ACC8(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define KILN_WGMMA_ACC32 \
  KILN_WGMMA_ACC8(0), KILN_WGMMA_ACC8(1), KILN_WGMMA_ACC8(2), KILN_WGMMA_ACC8(3)
#define KILN_WGMMA_ACC64 \
  KILN_WGMMA_ACC32, KILN_WGMMA_ACC8(4), KILN_WGMMA_ACC8(5), KILN_WGMMA_ACC8(6), KILN_WGMMA_ACC8(7)
template <class T, int NT>
__device__ __forceinline__ void wgmma_step(float (&d)[NT][4], uint64_t a, uint64_t b) {
  static_assert(NT == 4 || NT == 8, "warpgroup products of 32 or 64 columns");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool f16 = std::is_same_v<T, __half>;
  if constexpr (NT == 8 && f16) {
    asm volatile(KILN_WGMMA(64, "f16", KILN_WGMMA_REGS32, 32, 33)
                 : KILN_WGMMA_ACC64
                 : "l"(a), "l"(b));
  } else if constexpr (NT == 8) {
    asm volatile(KILN_WGMMA(64, "bf16", KILN_WGMMA_REGS32, 32, 33)
                 : KILN_WGMMA_ACC64
                 : "l"(a), "l"(b));
  } else if constexpr (f16) {
    asm volatile(KILN_WGMMA(32, "f16", KILN_WGMMA_REGS16, 16, 17)
                 : KILN_WGMMA_ACC32
                 : "l"(a), "l"(b));
  } else {
    asm volatile(KILN_WGMMA(32, "bf16", KILN_WGMMA_REGS16, 16, 17)
                 : KILN_WGMMA_ACC32
                 : "l"(a), "l"(b));
  }
#else
  __trap();  // instantiated only in skinny_gemm_sm90a.cu
#endif
}
#undef KILN_WGMMA
#undef KILN_WGMMA_REGS16
#undef KILN_WGMMA_REGS32
#undef KILN_WGMMA_ACC8
#undef KILN_WGMMA_ACC32
#undef KILN_WGMMA_ACC64

// Byte offset of 16-byte chunk `c` (0-3) of row `r` in a stage's operand of 64-byte rows: the
// chunks of rows 2j and 2j+1 are permuted by j, so that ldmatrix's 8 rows of one chunk fall in
// distinct banks.
__device__ __forceinline__ int swizzled(int r, int c) {
  return r * 64 + ((c ^ ((r >> 1) & 3)) << 4);
}

// The same for 128-byte rows (8 chunks: a [k, n] weight's 64 columns), permuted by the row.
__device__ __forceinline__ int swizzled128(int r, int c) {
  return r * 128 + ((c ^ (r & 7)) << 4);
}

// Grid (splits, n / 64, ceil(rows / BM)), clusters of (splits, 1, 1): block `split` of a cluster
// multiplies K range [split * k_split, (split + 1) * k_split) for rows [m0, m0 + BM) and columns
// [n0, n0 + 64). Warps: BM / 16 along the rows (16 rows each), the rest along the columns.
// KN: w is [k, n] (a stage holds its 32 x 64 block as 128-byte rows, read transposed; mma.sync
// only). kWgmma: warpgroup g multiplies rows [64 g, 64 g + 64) of 128 (all 64 columns), or all 64
// rows for columns [32 g, 32 g + 32): each warp's accumulators are then those of warp
// (warp_m, warp_n) of the mma.sync form.
template <class T, int BM, bool KN, Products P>
__global__ void __launch_bounds__(kBlockThreads)
    skinny_gemm_kernel(const T* __restrict__ a, const T* __restrict__ w, T* __restrict__ y,
                       int rows, int n, int k, int k_split, const T* __restrict__ bias,
                       ActivationKind act, float alpha, float beta, const T* __restrict__ res,
                       ActivationKind act2, float alpha2, float beta2, bool prefetch_w) {
  constexpr int kWarpsM = BM / 16;
  constexpr int kWarpsN = (kBlockThreads / 32) / kWarpsM;
  constexpr int kWarpCols = kTileN / kWarpsN;
  constexpr int kTilesN = kWarpCols / 8;
  constexpr int kABytes = BM * kTileK * 2, kStageBytes = (BM + kTileN) * kTileK * 2;
  constexpr int kLd = kTileN + 8;  // floats a row of the partial tile (2-way bank conflicts)
  static_assert(BM * kLd * 4 <= smem_bytes<BM>() - kSmemAlign,
                "the partial tile reuses the pipeline");
  static_assert(P == Products::kMmaSync || !KN, "wgmma reads k-major weights only");
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const uint32_t smem_raw_address = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint8_t* const smem = smem_raw + ((kSmemAlign - smem_raw_address % kSmemAlign) % kSmemAlign);
  const uint32_t smem_address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  KILN_SKINNY_MARK(0);
  cg::cluster_group cluster = cg::this_cluster();
  const int split = static_cast<int>(cluster.block_rank());
  const int splits = static_cast<int>(cluster.num_blocks());
  const int n0 = blockIdx.y * kTileN, m0 = blockIdx.z * BM, k0 = split * k_split;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp % kWarpsM, warp_n = warp / kWarpsM;

  // Each thread's chunks of a stage: where they come from at k tile 0 and where they go in the
  // stage, worked out once (a stage's loads are then an add a chunk). Rows of a past `rows` read
  // nothing (their source stays in bounds, at row 0).
  constexpr int kAChunks = BM * 4 / kBlockThreads;
  static_assert(BM * 4 % kBlockThreads == 0 && kTileN * 4 == kBlockThreads, "whole chunks");
  const T* a_src[kAChunks];
  int a_dst[kAChunks], a_bytes[kAChunks];
#pragma unroll
  for (int j = 0; j < kAChunks; ++j) {
    const int i = tid + j * kBlockThreads, r = i >> 2, c = i & 3;
    const bool ok = m0 + r < rows;
    a_src[j] = a + static_cast<size_t>(ok ? m0 + r : 0) * k + k0 + c * 8;
    a_dst[j] = swizzled(r, c);
    a_bytes[j] = ok ? 16 : 0;
  }
  // w: [n, k] (64 rows of n, 4 chunks of k) or [k, n] (32 rows of k, 8 chunks of columns).
  const T* const w_src = KN ? w + static_cast<size_t>(k0 + (tid >> 3)) * n + n0 + (tid & 7) * 8
                            : w + static_cast<size_t>(n0 + (tid >> 2)) * k + k0 + (tid & 3) * 8;
  const size_t w_step = KN ? static_cast<size_t>(kTileK) * n : kTileK;
  const int w_dst = kABytes + (KN ? swizzled128(tid >> 3, tid & 7) : swizzled(tid >> 2, tid & 3));
  const auto load_a = [&](int stage, int kt) {
    uint8_t* const sa = smem + stage * kStageBytes;
#pragma unroll
    for (int j = 0; j < kAChunks; ++j) {
      copy16_async(sa + a_dst[j], a_src[j] + kt * kTileK, a_bytes[j]);
    }
  };
  const auto load_w = [&](int stage, int kt) {
    copy16_async(smem + stage * kStageBytes + w_dst, w_src + kt * w_step);
  };
  // Each warp's ldmatrix rows within a stage, per 16 of k: A's 16 rows; B's matrices (columns 0-7
  // at k 0-7 and 8-15, then columns 8-15 at k 0-7 and 8-15) for each pair of 8-column tiles.
  int a_frag[kTileK / 16], b_frag[kTileK / 16][kTilesN / 2];
#pragma unroll
  for (int kk = 0; kk < kTileK / 16; ++kk) {
    a_frag[kk] = swizzled(warp_m * 16 + (lane & 15), kk * 2 + (lane >> 4));
#pragma unroll
    for (int p = 0; p < kTilesN / 2; ++p) {
      if constexpr (KN) {
        const int r = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        b_frag[kk][p] = kABytes + swizzled128(r, (warp_n * kWarpCols + p * 16) / 8 + (lane >> 4));
      } else {
        const int r = warp_n * kWarpCols + p * 16 + (lane & 7) + ((lane >> 4) << 3);
        b_frag[kk][p] = kABytes + swizzled(r, kk * 2 + ((lane >> 3) & 1));
      }
    }
  }

  float acc[kTilesN][4];
#pragma unroll
  for (int t = 0; t < kTilesN; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
  const int k_tiles = k_split / kTileK;
  // A constant weight's first stages may stream in while the kernel ahead finishes (launched
  // early: device_util.cuh), as a group of their own ahead of the first stages' rows of a.
  if (prefetch_w) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < k_tiles) load_w(s, s);
    }
    commit_async();
  }
  wait_for_prerequisites();
  // This block finishes rows [r_begin, r_end) of the tile (the splits' partials summed in rank
  // order, then the post-ops), 4 columns a thread: always the same 4 (the block's threads are a
  // multiple of the tile's 16 groups of 4). Their bias and residual are read now, so that their
  // latency passes under the main loop's instead of after the partials are summed.
  constexpr int kGroups = kTileN / 4, kItems = BM * kGroups / kBlockThreads;
  const int per = (BM + splits - 1) / splits;
  const int r_begin = split * per, r_end = min(BM, r_begin + per);
  const int c = (tid % kGroups) * 4, gn = n0 + c;
  float bias_v[4] = {0.f, 0.f, 0.f, 0.f};
  if (bias) {
#pragma unroll
    for (int q = 0; q < 4; ++q) bias_v[q] = static_cast<float>(bias[gn + q]);
  }
  uint2 res_v[kItems];
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const int r = r_begin + (tid + it * kBlockThreads) / kGroups;
    res_v[it] = res && r < r_end && m0 + r < rows
                    ? *reinterpret_cast<const uint2*>(res + static_cast<size_t>(m0 + r) * n + gn)
                    : make_uint2(0, 0);
  }
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) {
      load_a(s, s);
      if (!prefetch_w) load_w(s, s);
    }
    commit_async();
  }
  KILN_SKINNY_MARK(1);
  for (int kt = 0; kt < k_tiles; ++kt) {
    wait_async<kStages - 2>();
    if constexpr (P == Products::kWgmma) {
      wgmma_wait<0>();  // this warpgroup's products of stage kt - 1 are done
      fence_async_shared();
    }
    __syncthreads();  // stage kt landed for all; stage kt - 1 is read by no warp any more
    const int next = kt + kStages - 1;
    if (next < k_tiles) {
      load_a(next % kStages, next);
      load_w(next % kStages, next);
    }
    commit_async();
    if constexpr (P == Products::kWgmma) {
      // A's 64 rows of this warpgroup and B's kWarpCols rows (w's columns), 16 of k a step: 32
      // bytes further into the swizzled rows, which the hardware swizzles by address as
      // swizzled() stored them.
      const uint32_t stage = smem_address + (kt % kStages) * kStageBytes;
      const uint32_t a_tile = stage + (warp_m / 4) * 64 * 64;
      const uint32_t b_tile = stage + kABytes + warp_n * kWarpCols * 64;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        wgmma_step<T, kTilesN>(acc, sw64_descriptor(a_tile + kk * 32),
                               sw64_descriptor(b_tile + kk * 32));
      }
      wgmma_commit();
      continue;
    }
    // The tile's fragments all requested before the first product, so their latencies overlap.
    const uint8_t* const stage = smem + (kt % kStages) * kStageBytes;
    uint32_t af[kTileK / 16][4], bf[kTileK / 16][kTilesN / 2][4];
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
      ldmatrix_x4(af[kk], stage + a_frag[kk]);
#pragma unroll
      for (int p = 0; p < kTilesN / 2; ++p) {
        if constexpr (KN) {
          ldmatrix_x4_trans(bf[kk][p], stage + b_frag[kk][p]);
        } else {
          ldmatrix_x4(bf[kk][p], stage + b_frag[kk][p]);
        }
      }
    }
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
#pragma unroll
      for (int p = 0; p < kTilesN / 2; ++p) {
        mma_step<T>(acc[2 * p], af[kk], bf[kk][p][0], bf[kk][p][1]);
        mma_step<T>(acc[2 * p + 1], af[kk], bf[kk][p][2], bf[kk][p][3]);
      }
    }
  }
  allow_dependents();  // a GEMM after this one may start streaming its weights
  if constexpr (P == Products::kWgmma) wgmma_wait<0>();
  wait_async<0>();
  __syncthreads();  // the pipeline's shared memory becomes the partial tile
  KILN_SKINNY_MARK(2);

  float* part = reinterpret_cast<float*>(smem);
  {
    const int row = warp_m * 16 + (lane >> 2);
#pragma unroll
    for (int t = 0; t < kTilesN; ++t) {
      const int col = warp_n * kWarpCols + t * 8 + 2 * (lane & 3);
      *reinterpret_cast<float2*>(part + row * kLd + col) = make_float2(acc[t][0], acc[t][1]);
      *reinterpret_cast<float2*>(part + (row + 8) * kLd + col) = make_float2(acc[t][2], acc[t][3]);
    }
  }
  cluster.sync();  // every block's partial tile is written
  KILN_SKINNY_MARK(3);

  // The splits' partials summed for each of this thread's rows, then every post-op over all of
  // its rows at once (one copy of an activation's code in the kernel, not one a row).
  float v[kItems * 4];
  bool live[kItems];
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    const int r = r_begin + (tid + it * kBlockThreads) / kGroups;
    live[it] = r < r_end && m0 + r < rows;
#pragma unroll
    for (int q = 0; q < 4; ++q) v[it * 4 + q] = bias_v[q];
    if (!live[it]) continue;
    // Every split's partial requested before the first is added: the loads' latencies overlap.
    float4 p[kMaxSplits];
#pragma unroll
    for (int j = 0; j < kMaxSplits; ++j) {
      if (j < splits) {
        p[j] = *reinterpret_cast<const float4*>(cluster.map_shared_rank(part, j) + r * kLd + c);
      }
    }
#pragma unroll
    for (int j = 0; j < kMaxSplits; ++j) {
      if (j < splits) {
        v[it * 4] += p[j].x, v[it * 4 + 1] += p[j].y, v[it * 4 + 2] += p[j].z;
        v[it * 4 + 3] += p[j].w;
      }
    }
  }
  activate_all(act, v, alpha, beta);
  if (res) {
#pragma unroll
    for (int it = 0; it < kItems; ++it) {
      T in[4];
      *reinterpret_cast<uint2*>(in) = res_v[it];
#pragma unroll
      for (int q = 0; q < 4; ++q) v[it * 4 + q] += static_cast<float>(in[q]);
    }
  }
  activate_all(act2, v, alpha2, beta2);
#pragma unroll
  for (int it = 0; it < kItems; ++it) {
    if (!live[it]) continue;
    const int gm = m0 + r_begin + (tid + it * kBlockThreads) / kGroups;
    T out[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) out[q] = T(v[it * 4 + q]);
    *reinterpret_cast<uint2*>(y + static_cast<size_t>(gm) * n + gn) =
        *reinterpret_cast<const uint2*>(out);
  }
  KILN_SKINNY_MARK(4);
  // No block leaves while another reads its partial tile. The partials read have been used, so
  // this barrier orders nothing in memory: a relaxed arrival, without the GPU-wide fence that
  // cluster.sync()'s release semantics cost (MEMBAR.ALL.GPU).
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
  KILN_SKINNY_MARK(5);
}

template <class T, int BM, bool KN, Products P>
void launch_typed(cudaStream_t stream, int64_t rows, int64_t n, int64_t k, int splits,
                  const void* a, const void* w, void* y, const SkinnyPostOps& post, bool early) {
  const auto kernel = skinny_gemm_kernel<T, BM, KN, P>;
  constexpr int smem = smem_bytes<BM>();  // above 48 KiB at 128 rows: opted into
  static std::atomic<uint64_t> configured{0};
  int device = -1;
  KILN_CUDA_CHECK(cudaGetDevice(&device));
  allow_shared_bytes(reinterpret_cast<const void*>(kernel), smem, device, configured);
  const KernelLaunch how{dim3(static_cast<unsigned>(splits), static_cast<unsigned>(n / kTileN),
                              static_cast<unsigned>((rows + BM - 1) / BM)),
                         kBlockThreads,
                         static_cast<size_t>(smem),
                         stream,
                         early,
                         static_cast<unsigned>(splits)};
  launch_kernel(how, kernel, static_cast<const T*>(a), static_cast<const T*>(w), static_cast<T*>(y),
                static_cast<int>(rows), static_cast<int>(n), static_cast<int>(k),
                static_cast<int>(k / splits), static_cast<const T*>(post.bias), post.act,
                post.alpha, post.beta, static_cast<const T*>(post.residual), post.act2, post.alpha2,
                post.beta2, early);
}

// skinny_gemm_sm90a.cu: the wgmma form of a [n, k] weight's GEMM.
void launch_wgmma(cudaStream_t stream, DataType t, int64_t rows, int64_t n, int64_t k, int splits,
                  int block_rows, const void* a, const void* w, void* y, const SkinnyPostOps& post,
                  bool early);

}  // namespace skinny
}  // namespace kiln::engine::cuda
