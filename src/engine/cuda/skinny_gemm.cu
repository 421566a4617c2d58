// A GEMM of few rows against a weight: y[rows, n] = post(a[rows, k] w[n, k]^T) (a linear layer's
// weight; or a w[k, n], as GPT-2's projections keep theirs) in f16 or bf16
// with fp32 accumulation and every post-op (bias, activation, residual, second activation) in its
// epilogue. Transformers at batch 1 run their linear layers at 128 rows or fewer, where cuBLASLt
// gives each output tile of 64 columns one SM and a long K loop: BERT's 48 GEMMs took 4.3-7.5 us
// each in a graph replay on an H100 (NOTES.md G71), several times what reading their weights
// costs. Here K is split across the blocks of a thread-block cluster (sm_90): each block
// multiplies its share of K for all of the tile's rows (mma.sync m16n8k16 from a cp.async
// pipeline), then the blocks add their partial tiles through distributed shared memory, each
// finishing a share of the tile's rows: no workspace, no second kernel, and the sum is taken in
// the same order on every run.
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

namespace kiln::engine::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kBlockThreads = 256;  // 8 warps
constexpr int kTileN = 64;          // output columns a block
constexpr int kTileK = 32;          // K a pipeline stage: 64-byte rows of 4 16-byte chunks
constexpr int kStages = 4;
constexpr int kMaxSplits = 8;  // a portable cluster

template <int BM>
constexpr int smem_bytes() {
  return kStages * (BM + kTileN) * kTileK * 2;
}

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
// KN: w is [k, n] (a stage holds its 32 x 64 block as 128-byte rows, read transposed).
template <class T, int BM, bool KN>
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
  static_assert(BM * kLd * 4 <= smem_bytes<BM>(), "the partial tile reuses the pipeline");
  extern __shared__ __align__(16) uint8_t smem[];

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
  for (int kt = 0; kt < k_tiles; ++kt) {
    wait_async<kStages - 2>();
    __syncthreads();  // stage kt landed for all; stage kt - 1 is read by no warp any more
    const int next = kt + kStages - 1;
    if (next < k_tiles) {
      load_a(next % kStages, next);
      load_w(next % kStages, next);
    }
    commit_async();
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
  wait_async<0>();
  __syncthreads();  // the pipeline's shared memory becomes the partial tile

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
  // No block leaves while another reads its partial tile. The partials read have been used, so
  // this barrier orders nothing in memory: a relaxed arrival, without the GPU-wide fence that
  // cluster.sync()'s release semantics cost (MEMBAR.ALL.GPU).
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

std::atomic<int64_t> launches{0};

template <class T, int BM, bool KN>
void launch_typed(cudaStream_t stream, int64_t rows, int64_t n, int64_t k, int splits,
                  const void* a, const void* w, void* y, const SkinnyPostOps& post, bool early) {
  const KernelLaunch how{dim3(static_cast<unsigned>(splits), static_cast<unsigned>(n / kTileN),
                              static_cast<unsigned>((rows + BM - 1) / BM)),
                         kBlockThreads,
                         static_cast<size_t>(smem_bytes<BM>()),
                         stream,
                         early,
                         static_cast<unsigned>(splits)};
  launch_kernel(how, skinny_gemm_kernel<T, BM, KN>, static_cast<const T*>(a),
                static_cast<const T*>(w), static_cast<T*>(y), static_cast<int>(rows),
                static_cast<int>(n), static_cast<int>(k), static_cast<int>(k / splits),
                static_cast<const T*>(post.bias), post.act, post.alpha, post.beta,
                static_cast<const T*>(post.residual), post.act2, post.alpha2, post.beta2, early);
}

}  // namespace

bool skinny_gemm_takes(DataType t, int64_t rows, int64_t n, int64_t k, const void* a, const void* w,
                       const void* y, const SkinnyPostOps& post) {
  return (t == DataType::kF16 || t == DataType::kBF16) && rows >= 1 && rows <= kSkinnyMaxRows &&
         n >= kTileN && n % kTileN == 0 && n / kTileN <= 65535 && k >= kTileK && k % kTileK == 0 &&
         rows * std::max(n, k) < (int64_t{1} << 31) && aligned16(a) && aligned16(w) &&
         aligned16(y) &&
         reinterpret_cast<uintptr_t>(post.residual) % 8 == 0;  // read 4 elements at a time
}

bool skinny_gemm_form_valid(int64_t k, int form) {
  const int splits = skinny_form_splits(form), block_rows = skinny_form_rows(form);
  return splits >= 1 && splits <= kMaxSplits && k % kTileK == 0 && (k / kTileK) % splits == 0 &&
         (block_rows == 0 || block_rows == 64 || block_rows == 128);
}

std::vector<int> skinny_gemm_forms(int64_t rows, int64_t n, int64_t k, int sms) {
  // The valid splits, fewest first, and among them the largest whose blocks (`tiles` of them a
  // split) fit `wave` blocks.
  const auto splits_for = [&](int64_t tiles, int64_t cap, int64_t wave) {
    std::vector<int> valid;
    for (int s : {1, 2, 3, 4, 6, 8}) {
      if ((k / kTileK) % s == 0 && (s == 1 || tiles * s <= cap)) valid.push_back(s);
    }
    int fill = 0;
    for (size_t i = 0; i < valid.size(); ++i) {
      if (tiles * valid[i] <= wave) fill = static_cast<int>(i);
    }
    return std::make_pair(valid, fill);
  };
  const int64_t sm = sms;
  const int64_t tiles = (n / kTileN) * (rows <= 64 ? 1 : (rows + 127) / 128);
  const auto [valid, fill] = splits_for(tiles, 2 * sm, sm);
  // The split that fills the SMs best in one wave first, then its neighbours among the valid.
  std::vector<int> out;
  for (int i : {fill, fill - 1, fill + 1}) {
    if (i >= 0 && i < static_cast<int>(valid.size())) out.push_back(skinny_form(valid[i]));
  }
  // Above 64 rows, blocks of 64 rows too: twice the blocks, two an SM, and so twice the warps a
  // scheduler to hide their latencies behind each other's.
  if (rows > 64) {
    const int64_t tiles64 = (n / kTileN) * ((rows + 63) / 64);
    const auto [valid64, fill64] = splits_for(tiles64, 2 * sm, 2 * sm);
    out.push_back(skinny_form(valid64[fill64], 64));
  }
  return out;
}

int64_t skinny_gemm_launches() {
  return launches.load();
}

void launch_skinny_gemm(cudaStream_t stream, const std::string& layer, DataType t, int64_t rows,
                        int64_t n, int64_t k, int form, const void* a, const void* w, bool w_kn,
                        void* y, const SkinnyPostOps& post, bool early) {
  KILN_CHECK(skinny_gemm_form_valid(k, form), InvalidArgument, "layer `", layer,
             "`: ", skinny_form_splits(form), " K splits (1 to 8, dividing K / 32 = ", k / kTileK,
             ") in blocks of ", skinny_form_rows(form),
             " rows (0: by the rows, 64 or 128) is not a form of the GEMM of few rows");
  const int splits = skinny_form_splits(form);
  const int block_rows = skinny_form_rows(form) > 0 ? skinny_form_rows(form)
                         : rows <= 64               ? 64
                                                    : 128;
  const auto launch = [&](auto type, auto kn) {
    using T = decltype(type);
    block_rows == 64
        ? launch_typed<T, 64, decltype(kn)::value>(stream, rows, n, k, splits, a, w, y, post, early)
        : launch_typed<T, 128, decltype(kn)::value>(stream, rows, n, k, splits, a, w, y, post,
                                                    early);
  };
  const auto by_layout = [&](auto type) {
    w_kn ? launch(type, std::true_type{}) : launch(type, std::false_type{});
  };
  t == DataType::kF16 ? by_layout(__half{}) : by_layout(__nv_bfloat16{});
  KILN_CUDA_CHECK_LAUNCH(layer);
  ++launches;
}

}  // namespace kiln::engine::cuda
