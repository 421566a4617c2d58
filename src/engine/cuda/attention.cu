// CUDA kernels of scaled dot-product attention, with the CPU kernel's semantics. Two paths:
// - flash: q, k, v and out all f16 or all bf16, no mask (causal or not), E == Ev a multiple of 16
//   up to 128, equal batch dims (fused_attention_applies, which the builder asks too) and 16-byte
//   aligned data. It also reads packed heads (AttentionParams::heads: q, k, v as column ranges
//   of [B, rows, width] tensors, the output [B, L, heads * E]) through row strides. One block of 4
//   warps takes 64 query rows and streams 64-row key/value tiles through shared memory (cp.async,
//   two stages); q k^T and p v run on tensor cores (WMMA, float accumulation) around an online
//   softmax in float, with p rounded to the input dtype for p v.
// - otherwise the simple kernel: one block per query row computes its scores (in a workspace row),
//   a safe softmax and the weighted sum of values, in double like the CPU kernel.
// Rows whose every position is masked out produce zeros.
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kAttentionThreads = 128;

template <bool kMax>
__device__ double block_reduce(double v) {
  __shared__ double partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const double other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmax(v, other) : v + other;
  }
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  v = lane < warps ? partial[lane] : (kMax ? -INFINITY : 0.0);
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const double other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmax(v, other) : v + other;
  }
  return v;
}

struct AttentionArgs {
  const void *q, *k, *v, *mask;
  DataType qt, kt, vt, mt, ot;
  void* out;
  Dims qb, kb, vb;  // output batch index -> operand batch index (in matrices)
  Dims md;          // flat [batch, L, S] index -> mask element
  int64_t L, S, E, Ev, rows;
  double scale;
  bool causal, bool_mask;
  double* scores;  // rows x S
};

__global__ void attention_kernel_t(AttentionArgs a) {
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const int64_t b = r / a.L, i = r % a.L;
    const int64_t qrow = (offset_of(a.qb, b) * a.L + i) * a.E;
    const int64_t kmat = offset_of(a.kb, b) * a.S * a.E;
    const int64_t vmat = offset_of(a.vb, b) * a.S * a.Ev;
    double* score = a.scores + r * a.S;
    double mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < a.S; j += blockDim.x) {
      double s = -INFINITY;
      bool kept = !(a.causal && j > i);
      if (kept && a.mask && a.bool_mask) {
        kept = load_as<int64_t>(a.mt, a.mask, offset_of(a.md, r * a.S + j)) != 0;
      }
      if (kept) {
        double dot = 0;
        for (int64_t e = 0; e < a.E; ++e) {
          dot += static_cast<double>(load_as<float>(a.qt, a.q, qrow + e)) *
                 load_as<float>(a.kt, a.k, kmat + j * a.E + e);
        }
        s = dot * a.scale;
        if (a.mask && !a.bool_mask) s += load_as<float>(a.mt, a.mask, offset_of(a.md, r * a.S + j));
      }
      score[j] = s;
      mx = fmax(mx, s);
    }
    mx = block_reduce<true>(mx);
    double sum = 0;
    if (mx != -INFINITY) {
      for (int64_t j = threadIdx.x; j < a.S; j += blockDim.x) {
        const double w = exp(score[j] - mx);
        score[j] = w;
        sum += w;
      }
    }
    sum = block_reduce<false>(sum);
    __syncthreads();  // every score row entry is final before any thread reads the row
    for (int64_t e = threadIdx.x; e < a.Ev; e += blockDim.x) {
      double acc = 0;
      if (mx != -INFINITY) {
        for (int64_t j = 0; j < a.S; ++j) {
          const double w = score[j] / sum;
          if (w != 0) acc += w * load_as<float>(a.vt, a.v, vmat + j * a.Ev + e);
        }
      }
      store_as<double>(a.ot, a.out, r * a.Ev + e, acc);
    }
    __syncthreads();
  }
}

Shape batch_of(const Shape& s) {
  return Shape(s.begin(), s.end() - 2);
}

// ---- flash path ----

constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = kFlashWarps * kWarp;
constexpr int kMma = 16;                        // side of a WMMA tile
constexpr int kQueryTile = kFlashWarps * kMma;  // query rows per block, 16 per warp
constexpr int kKeyTile = 64;                    // key/value rows per step
// Row strides of the per-warp score (float) and probability blocks: 8 past the width puts the
// softmax's float4 reads and 8-byte writes of a quarter/half warp in distinct banks.
constexpr int kScoreLd = kKeyTile + 8;
constexpr int kProbLd = kKeyTile + 8;
constexpr size_t kElemBytes = 2;  // f16 and bf16

// Shared memory of the flash kernel for head size E, in bytes; every WMMA pointer is 32-byte
// aligned as WMMA requires. Two stages of a key tile and a value tile, the query tile, then per
// warp a 16 x 64 score block (floats), a 16 x 64 probability block and 16 row factors. (Query
// fragments held in registers across the key loop made E = 128 spill.)
template <int E>
struct FlashSmem {
  static constexpr int kLd = E + 8;  // tile row stride in elements: 16-byte rows over all banks
  static constexpr int kTile = kKeyTile * kLd;  // elements of one query, key or value tile
  static_assert(kQueryTile == kKeyTile, "query and key tiles share a shape");
  static constexpr size_t kQuery = 2 * 2 * kTile * kElemBytes;
  static constexpr size_t kScores = kQuery + kTile * kElemBytes;
  static constexpr size_t kProbs = kScores + kFlashWarps * kMma * kScoreLd * sizeof(float);
  static constexpr size_t kFactors = kProbs + kFlashWarps * kMma * kProbLd * kElemBytes;
  static constexpr size_t kBytes = kFactors + kFlashWarps * kMma * sizeof(float);
  static_assert(E % kMma == 0 && E <= 128, "head sizes the flash kernel takes");
};

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// cp.async of 16 bytes, of which the first `src_bytes` (0 or 16) come from `src`, the rest zeros.
__device__ __forceinline__ void copy16_async(void* dst, const void* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d),
               "l"(__cvta_generic_to_global(src)), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void commit_async() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void wait_async_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Starts copying rows [row0, row0 + 64) of a [rows, E] matrix of row stride `ld` into a tile of
// row stride FlashSmem<E>::kLd; rows past `rows` are zero-filled (keeps 0 * garbage out of p v).
template <int E, class T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* src, int64_t row0, int64_t rows,
                                                int64_t ld) {
  constexpr int kChunks = E / 8;  // 16-byte pieces per row
  constexpr int kLd = FlashSmem<E>::kLd;
#pragma unroll
  for (int it = 0; it < kKeyTile * kChunks / kFlashThreads; ++it) {
    const int c = it * kFlashThreads + static_cast<int>(threadIdx.x);
    const int r = c / kChunks, e = (c % kChunks) * 8;
    const bool inside = row0 + r < rows;
    copy16_async(tile + r * kLd + e, inside ? src + (row0 + r) * ld + e : src, inside ? 16 : 0);
  }
}

// Where the matrices of q, k, v or out lie: matrix (b, h) starts at b * batch + h * head
// elements and its rows are `ld` apart (contiguous [B, L, E]: {L * E, 0, E}; packed heads:
// {rows * width, E, width}, the column offset already added to the pointer).
struct FlashOperand {
  int64_t batch, head, ld;
};

struct FlashArgs {
  const void *q, *k, *v;
  void* out;
  FlashOperand qo, ko, vo, oo;
  int64_t batch, heads, L, S;  // batch counts (b, h) pairs: b = index / heads
  float scale_log2;            // scale * log2(e): the softmax works in base 2
  bool causal;
};

template <class T, int E>
__global__ void __launch_bounds__(kFlashThreads) flash_attention_kernel(FlashArgs a) {
  namespace wmma = nvcuda::wmma;
  using Smem = FlashSmem<E>;
  using Acc = wmma::fragment<wmma::accumulator, kMma, kMma, kMma, float>;
  constexpr int kLd = Smem::kLd, kFrags = E / kMma;
  static_assert(sizeof(T) == kElemBytes, "16-bit elements");
  extern __shared__ __align__(128) unsigned char smem[];
  T* const kv = reinterpret_cast<T*>(smem);
  const int warp = static_cast<int>(threadIdx.x) / kWarp,
            lane = static_cast<int>(threadIdx.x) % kWarp;
  T* const q_tile = reinterpret_cast<T*>(smem + Smem::kQuery);
  const T* const q_rows = q_tile + warp * kMma * kLd;  // the warp's 16 rows
  float* const scores = reinterpret_cast<float*>(smem + Smem::kScores) + warp * kMma * kScoreLd;
  T* const probs = reinterpret_cast<T*>(smem + Smem::kProbs) + warp * kMma * kProbLd;
  float* const factor = reinterpret_cast<float*>(smem + Smem::kFactors) + warp * kMma;

  // The row each accumulator element holds (WMMA leaves the layout unspecified, but it is one
  // per fragment type): load a block whose entries are their row indices. Row factors of the
  // online softmax then scale the output fragments in registers.
  Acc row_of;
  for (int x = lane; x < kMma * kMma; x += kWarp) {
    scores[(x / kMma) * kScoreLd + x % kMma] = static_cast<float>(x / kMma);
  }
  __syncwarp();
  wmma::load_matrix_sync(row_of, scores, kScoreLd, wmma::mem_row_major);

  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kQueryTile;
  const int64_t key_tiles = (a.S + kKeyTile - 1) / kKeyTile;
  // Causal: keys past the block's last query row are masked in every row of the block.
  const int64_t last_tile = (q0 + kQueryTile - 1) / kKeyTile;
  const int64_t tiles = a.causal && last_tile + 1 < key_tiles ? last_tile + 1 : key_tiles;
  // Lanes 2r and 2r + 1 run the softmax of the warp's row r, each over half its columns.
  const int r = lane / 2, half = lane % 2;
  const int64_t i = q0 + warp * kMma + r;  // that row's query index

  for (int64_t bh = blockIdx.y; bh < a.batch; bh += gridDim.y) {
    const int64_t b = bh / a.heads, h = bh % a.heads;
    const T* const qm = static_cast<const T*>(a.q) + b * a.qo.batch + h * a.qo.head;
    const T* const km = static_cast<const T*>(a.k) + b * a.ko.batch + h * a.ko.head;
    const T* const vm = static_cast<const T*>(a.v) + b * a.vo.batch + h * a.vo.head;
    T* const om = static_cast<T*>(a.out) + b * a.oo.batch + h * a.oo.head;
    __syncthreads();  // no warp still reads the previous matrix's tiles
    if (tiles > 0) {  // (else nothing is read: the rows are zeros)
      load_tile_async<E>(q_tile, qm, q0, a.L, a.qo.ld);
      load_tile_async<E>(kv, km, 0, a.S, a.ko.ld);
      load_tile_async<E>(kv + Smem::kTile, vm, 0, a.S, a.vo.ld);
      commit_async();
    }
    Acc o[kFrags];
#pragma unroll
    for (int f = 0; f < kFrags; ++f) wmma::fill_fragment(o[f], 0.0f);
    float m = -INFINITY, l = 0;  // running max (base-2 scaled) and sum of row r

    for (int64_t t = 0; t < tiles; ++t) {
      wait_async_all();  // tile t (started during step t - 1, or above) has landed ...
      __syncthreads();   // ... for every thread, and no warp still reads tile t - 1's stage
      if (t + 1 < tiles) {
        T* const next = kv + ((t + 1) % 2) * 2 * Smem::kTile;
        load_tile_async<E>(next, km, (t + 1) * kKeyTile, a.S, a.ko.ld);
        load_tile_async<E>(next + Smem::kTile, vm, (t + 1) * kKeyTile, a.S, a.vo.ld);
        commit_async();
      }
      const T* const kt = kv + (t % 2) * 2 * Smem::kTile;
      const T* const vt = kt + Smem::kTile;

      // Scores of the warp's 16 rows against the tile's 64 keys.
      Acc s[kKeyTile / kMma];
#pragma unroll
      for (int n = 0; n < kKeyTile / kMma; ++n) wmma::fill_fragment(s[n], 0.0f);
#pragma unroll
      for (int f = 0; f < kFrags; ++f) {
        wmma::fragment<wmma::matrix_a, kMma, kMma, kMma, T, wmma::row_major> qf;
        wmma::load_matrix_sync(qf, q_rows + f * kMma, kLd);
#pragma unroll
        for (int n = 0; n < kKeyTile / kMma; ++n) {
          wmma::fragment<wmma::matrix_b, kMma, kMma, kMma, T, wmma::col_major> kf;
          wmma::load_matrix_sync(kf, kt + n * kMma * kLd + f * kMma, kLd);
          wmma::mma_sync(s[n], qf, kf, s[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < kKeyTile / kMma; ++n) {
        wmma::store_matrix_sync(scores + n * kMma, s[n], kScoreLd, wmma::mem_row_major);
      }
      __syncwarp();

      // Online softmax of row r: columns below `kept` are keys < S (and <= i if causal). The
      // lane takes the float4 groups 2g + half of the row.
      const int64_t j0 = t * kKeyTile;
      int64_t kept64 = a.S - j0 < kKeyTile ? a.S - j0 : kKeyTile;
      if (a.causal && i - j0 + 1 < kept64) kept64 = i - j0 + 1;
      const int kept = kept64 > 0 ? static_cast<int>(kept64) : 0;
      const float* const srow = scores + r * kScoreLd;
      float tile_max = -INFINITY;
#pragma unroll
      for (int g = 0; g < kKeyTile / 8; ++g) {
        const int c = (2 * g + half) * 4;
        const float4 s4 = *reinterpret_cast<const float4*>(srow + c);
        const float sv[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          if (c + u < kept) tile_max = fmaxf(tile_max, sv[u] * a.scale_log2);
        }
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      const float m_new = fmaxf(m, tile_max);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // nothing kept yet: p and o stay 0
      const float alpha = exp2f(m - base);
      float sum = 0;
#pragma unroll
      for (int g = 0; g < kKeyTile / 8; ++g) {
        const int c = (2 * g + half) * 4;
        const float4 s4 = *reinterpret_cast<const float4*>(srow + c);
        const float sv[4] = {s4.x, s4.y, s4.z, s4.w};
        alignas(8) T p4[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          // The sum takes p as rounded, the weights p v uses, so they still sum to one.
          p4[u] = from_float<T>(c + u < kept ? exp2f(sv[u] * a.scale_log2 - base) : 0.0f);
          sum += to_float(p4[u]);
        }
        *reinterpret_cast<uint2*>(probs + r * kProbLd + c) = *reinterpret_cast<const uint2*>(p4);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      l = l * alpha + sum;
      m = m_new;
      if (half == 0) factor[r] = alpha;
      __syncwarp();

      // o = o * alpha (per row) + p v.
#pragma unroll
      for (int f = 0; f < kFrags; ++f) {
#pragma unroll
        for (int x = 0; x < o[f].num_elements; ++x) {
          o[f].x[x] *= factor[static_cast<int>(row_of.x[x])];
        }
      }
#pragma unroll
      for (int n = 0; n < kKeyTile / kMma; ++n) {
        wmma::fragment<wmma::matrix_a, kMma, kMma, kMma, T, wmma::row_major> pf;
        wmma::load_matrix_sync(pf, probs + n * kMma, kProbLd);
#pragma unroll
        for (int f = 0; f < kFrags; ++f) {
          wmma::fragment<wmma::matrix_b, kMma, kMma, kMma, T, wmma::row_major> vf;
          wmma::load_matrix_sync(vf, vt + n * kMma * kLd + f * kMma, kLd);
          wmma::mma_sync(o[f], pf, vf, o[f]);
        }
      }
    }

    // o / l (l == 0 only when S == 0: zeros, like the simple kernel), stored through the score
    // block 64 columns at a time as 16-byte vectors; rows past L are not stored.
    __syncwarp();
    if (half == 0) factor[r] = l > 0 ? 1.0f / l : 0.0f;
    __syncwarp();
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
#pragma unroll
      for (int x = 0; x < o[f].num_elements; ++x) {
        o[f].x[x] *= factor[static_cast<int>(row_of.x[x])];
      }
    }
#pragma unroll
    for (int c0 = 0; c0 < E; c0 += kKeyTile) {
      const int width = E - c0 < kKeyTile ? E - c0 : kKeyTile;
#pragma unroll
      for (int f = c0 / kMma; f < (c0 + width) / kMma; ++f) {
        wmma::store_matrix_sync(scores + (f * kMma - c0), o[f], kScoreLd, wmma::mem_row_major);
      }
      __syncwarp();
      const int vecs = width / 8;  // 16-byte vectors per row
      for (int x = lane; x < kMma * vecs; x += kWarp) {
        const int rr = x / vecs, c = (x % vecs) * 8;
        const int64_t row = q0 + warp * kMma + rr;
        if (row >= a.L) continue;
        alignas(16) T v8[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v8[u] = from_float<T>(scores[rr * kScoreLd + c + u]);
        *reinterpret_cast<uint4*>(om + row * a.oo.ld + c0 + c) =
            *reinterpret_cast<const uint4*>(v8);
      }
      __syncwarp();
    }
  }
}

template <class T, int E>
void launch_flash(KernelArgs& args, const FlashArgs& a, dim3 grid) {
  constexpr size_t bytes = FlashSmem<E>::kBytes;
  const auto kernel = flash_attention_kernel<T, E>;
  if (bytes > 48 * 1024) {
    // Above 48 KiB a kernel must opt in, once per device (the attribute is per context).
    static std::atomic<uint64_t> configured{0};
    const int device = args.res.device();
    const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
    if (bit == 0 || (configured.load() & bit) == 0) {
      KILN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
      configured.fetch_or(bit);
    }
  }
  kernel<<<grid, kFlashThreads, bytes, args.stream()>>>(a);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

template <class T>
void launch_flash(KernelArgs& args, const FlashArgs& a, dim3 grid, int64_t E) {
  switch (E) {
    case 16:
      return launch_flash<T, 16>(args, a, grid);
    case 32:
      return launch_flash<T, 32>(args, a, grid);
    case 48:
      return launch_flash<T, 48>(args, a, grid);
    case 64:
      return launch_flash<T, 64>(args, a, grid);
    case 80:
      return launch_flash<T, 80>(args, a, grid);
    case 96:
      return launch_flash<T, 96>(args, a, grid);
    case 112:
      return launch_flash<T, 112>(args, a, grid);
    case 128:
      return launch_flash<T, 128>(args, a, grid);
  }
  KILN_THROW(InternalError, "layer `", args.layer.name, "`: no flash attention kernel for E=", E);
}

bool aligned16(const void* d) {
  return reinterpret_cast<uintptr_t>(d) % 16 == 0;
}

// Whether the flash kernel runs this layer: what the builder asks too (fused_attention_applies),
// one dtype throughout, out shaped as q (no broadcast batch), and data aligned for 16-byte access.
bool flash_applies(const AttentionParams& p, const TensorView& q, const TensorView& k,
                   const TensorView& v, const TensorView& out) {
  return fused_attention_applies(q.shape, k.shape, v.shape, q.dtype, p.has_mask) &&
         k.dtype == q.dtype && v.dtype == q.dtype && out.dtype == q.dtype && out.shape == q.shape &&
         aligned16(q.data) && aligned16(k.data) && aligned16(v.data) && aligned16(out.data);
}

// The same for packed heads (AttentionParams::heads > 0), where rows and column offsets must
// keep 16-byte alignment too.
bool flash_applies_packed(const AttentionParams& p, const std::vector<TensorView>& in,
                          const TensorView& out) {
  const int64_t B = out.shape[0], L = out.shape[1], S = in[1].shape[1];
  if (!fused_attention_applies({B, p.heads, L, p.head_size}, {B, p.heads, S, p.head_size},
                               {B, p.heads, S, p.head_size}, out.dtype, false)) {
    return false;
  }
  for (size_t i = 0; i < 3; ++i) {
    const TensorView& t = in[i];
    if (t.dtype != out.dtype || t.shape[0] != B || t.shape[2] % 8 != 0 || p.columns[i] % 8 != 0 ||
        !aligned16(t.data)) {
      return false;
    }
  }
  return aligned16(out.data);
}

void run_flash(KernelArgs& args, FlashArgs& a, const AttentionParams& p, DataType t, int64_t E) {
  const double scale = p.scale != 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(E));
  a.scale_log2 = static_cast<float>(scale * 1.4426950408889634);  // log2(e)
  a.causal = p.causal;
  const dim3 grid(static_cast<unsigned>((a.L + kQueryTile - 1) / kQueryTile),
                  static_cast<unsigned>(std::min<int64_t>(a.batch, 65535)));
  if (t == DataType::kF16) {
    launch_flash<__half>(args, a, grid, E);
  } else {
    launch_flash<__nv_bfloat16>(args, a, grid, E);
  }
}

void flash_attention(KernelArgs& args, const AttentionParams& p) {
  const TensorView &q = args.inputs[0], &k = args.inputs[1], &v = args.inputs[2];
  const TensorView& out = args.outputs[0];
  FlashArgs a{};
  a.q = q.data, a.k = k.data, a.v = v.data, a.out = out.data;
  a.L = q.shape[q.shape.size() - 2], a.S = k.shape[k.shape.size() - 2];
  a.batch = volume(batch_of(out.shape)), a.heads = 1;
  const int64_t E = q.shape.back();
  a.qo = a.oo = FlashOperand{a.L * E, 0, E};
  a.ko = a.vo = FlashOperand{a.S * E, 0, E};
  run_flash(args, a, p, q.dtype, E);
}

// Packed heads: matrix (b, h) of operand i starts at column columns[i] + h * E of batch b.
void flash_attention_packed(KernelArgs& args, const AttentionParams& p) {
  const std::vector<TensorView>& in = args.inputs;
  const TensorView& out = args.outputs[0];
  const int64_t E = p.head_size;
  FlashArgs a{};
  const auto at = [&](size_t i) {
    return static_cast<const char*>(in[i].data) + p.columns[i] * static_cast<int64_t>(kElemBytes);
  };
  a.q = at(0), a.k = at(1), a.v = at(2), a.out = out.data;
  a.L = out.shape[1], a.S = in[1].shape[1];
  a.batch = out.shape[0] * p.heads, a.heads = p.heads;
  const auto operand = [&](const TensorView& t) {
    return FlashOperand{t.shape[1] * t.shape[2], E, t.shape[2]};
  };
  a.qo = operand(in[0]), a.ko = operand(in[1]), a.vo = operand(in[2]), a.oo = operand(out);
  run_flash(args, a, p, out.dtype, E);
}

void attention_kernel(KernelArgs& args) {
  const auto& p = std::get<AttentionParams>(args.layer.params);
  const TensorView &q = args.inputs[0], &k = args.inputs[1], &v = args.inputs[2];
  const TensorView& out = args.outputs[0];
  if (out.numel() == 0) return;  // (a grid of no blocks is a launch error)
  if (p.heads > 0) {
    KILN_CHECK(flash_applies_packed(p, args.inputs, out), Unsupported, "layer `", args.layer.name,
               "`: packed attention heads run on the flash kernel only (f16 or ",
               "bf16, head size a multiple of 16 up to 128, rows and column offsets in multiples ",
               "of 8 elements); got ", dtype_name(out.dtype), ", head size ", p.head_size);
    flash_attention_packed(args, p);
    return;
  }
  if (flash_applies(p, q, k, v, out)) {
    flash_attention(args, p);
    return;
  }
  const Shape batch = batch_of(out.shape);
  AttentionArgs a{};
  a.q = q.data, a.k = k.data, a.v = v.data, a.out = out.data;
  a.qt = q.dtype, a.kt = k.dtype, a.vt = v.dtype, a.ot = out.dtype;
  a.L = q.shape[q.shape.size() - 2], a.E = q.shape.back();
  a.S = k.shape[k.shape.size() - 2], a.Ev = v.shape.back();
  a.rows = volume(batch) * a.L;
  a.scale = p.scale != 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(a.E));
  a.causal = p.causal;
  const auto bd = broadcast_dims(args.layer.name, batch,
                                 {batch_of(q.shape), batch_of(k.shape), batch_of(v.shape)});
  a.qb = bd[1], a.kb = bd[2], a.vb = bd[3];
  if (p.has_mask) {
    const TensorView& m = args.inputs[3];
    Shape weights = batch;
    weights.push_back(a.L);
    weights.push_back(a.S);
    a.md = broadcast_dims(args.layer.name, weights, {m.shape})[1];
    a.mask = m.data, a.mt = m.dtype, a.bool_mask = m.dtype == DataType::kBool;
  }
  const size_t score_bytes = static_cast<size_t>(a.rows * a.S) * sizeof(double);
  KILN_CHECK(score_bytes <= (size_t{1} << 30), Unsupported, "layer `", args.layer.name,
             "`: attention scores of ", score_bytes, " bytes (the simple CUDA kernel keeps them)");
  a.scores = static_cast<double*>(args.res.workspace(score_bytes));
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(a.rows, 65535 * 16));
  attention_kernel_t<<<grid, kAttentionThreads, 0, args.stream()>>>(a);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

}  // namespace

void register_attention(KernelTable& t) {
  t.set<AttentionParams>(attention_kernel, kFloatTypes);
}

}  // namespace kiln::engine::cuda
