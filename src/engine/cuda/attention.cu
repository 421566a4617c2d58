// CUDA kernels of scaled dot-product attention, with the CPU kernel's semantics. Two paths:
// - flash: q, k, v and out all f16 or all bf16, no mask (causal or not), E == Ev a multiple of 16
//   up to 128, equal batch dims (fused_attention_applies, which the builder asks too) and 16-byte
//   aligned data. It also reads packed heads (AttentionParams::heads: q, k, v as column ranges
//   of [B, rows, width] tensors, the output [B, L, heads * E]) through row strides. One block of 4
//   warps takes 64 query rows and streams 64-row key/value tiles through shared memory (cp.async,
//   two stages); q k^T and p v run on tensor cores (mma.sync on ldmatrix fragments, float
//   accumulation) around an online softmax in float held in registers, with p rounded to the
//   input dtype for p v. Key fragments past S, and warps whose 16 rows are all past L, skip
//   their math (at L = S = 197 full tiles do 1.69x the useful math, 1.1x with the skips; the
//   kernel measured no faster for it: it is latency-bound, bench/NOTES.md G17).
// - otherwise the simple kernel: one block per query row computes its scores (in a workspace row),
//   a safe softmax and the weighted sum of values, in double like the CPU kernel.
// Rows whose every position is masked out produce zeros.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

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
constexpr size_t kElemBytes = 2;                // f16 and bf16

// Shared memory of the flash kernel for head size E, in bytes: two stages of a key tile and a
// value tile, then the query tile. Rows are E + 8 elements apart: 16-byte aligned, and the
// fragment loads of a warp (8 rows x 4 words, or ldmatrix's 8 rows x 16 bytes) hit 32 distinct
// banks.
template <int E>
struct FlashSmem {
  static constexpr int kLd = E + 8;
  static constexpr int kTile = kKeyTile * kLd;  // elements of one query, key or value tile
  static_assert(kQueryTile == kKeyTile, "query and key tiles share a shape");
  static constexpr size_t kQuery = 2 * 2 * kTile * kElemBytes;
  static constexpr size_t kBytes = kQuery + kTile * kElemBytes;
  static_assert(E % kMma == 0 && E <= 128, "head sizes the flash kernel takes");
};

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

// Tensor-core primitives (PTX, sm_80+): D += A B for a 16x16 A (row-major, four 32-bit registers
// of two elements), a 16x8 B (two registers) and a 16x8 float D. Lane l holds rows g = l / 4 and
// g + 8 of A and D, at columns 2 (l % 4) + {0, 1} (A also at + 8); and B's column g at rows
// 2 (l % 4) + {0, 1} and + 8.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four 8x8 matrices of 16-bit elements from shared memory, transposed: lanes 8i..8i+7 give the
// row addresses of matrix i, and register i holds matrix i in B's fragment layout.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The same without the transpose: register i holds matrix i in A's (or, for a matrix of
// column-major B, B's) fragment layout.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Two floats rounded to T and packed (lo in the low half), their rounded values added to `sum`.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi, float& sum) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    sum += __low2float(h) + __high2float(h);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    sum += __low2float(h) + __high2float(h);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Each warp owns 16 query rows; scores, probabilities and the output accumulator stay in
// registers (mma fragments): lane l holds rows g = l / 4 and g + 8, so a row's max and sum are
// reductions over the 4 lanes of a quad, and the score fragments of 16 keys are, rounded, the A
// fragment of p v without a trip through shared memory.
template <class T, int E>
__global__ void __launch_bounds__(kFlashThreads) flash_attention_kernel(FlashArgs a) {
  using Smem = FlashSmem<E>;
  constexpr int kLd = Smem::kLd;
  constexpr int kKSteps = E / 16;          // k-steps of q k^T
  constexpr int kKeyFrags = kKeyTile / 8;  // 8-key column blocks of the scores
  constexpr int kOutFrags = E / 8;         // 8-column blocks of the output
  static_assert(kKeyFrags % 2 == 0, "key fragments go in pairs (one ldmatrix.x4)");
  static_assert(sizeof(T) == kElemBytes, "16-bit elements");
  extern __shared__ __align__(128) unsigned char smem[];
  T* const kv = reinterpret_cast<T*>(smem);
  T* const q_tile = reinterpret_cast<T*>(smem + Smem::kQuery);
  const int warp = static_cast<int>(threadIdx.x) / kWarp,
            lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, quad = lane % 4;
  const T* const q_rows = q_tile + warp * kMma * kLd;  // the warp's 16 rows

  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kQueryTile;
  const int64_t key_tiles = (a.S + kKeyTile - 1) / kKeyTile;
  // Causal: keys past the block's last query row are masked in every row of the block.
  const int64_t last_tile = (q0 + kQueryTile - 1) / kKeyTile;
  const int64_t tiles = a.causal && last_tile + 1 < key_tiles ? last_tile + 1 : key_tiles;
  const int64_t row[2] = {q0 + warp * kMma + g, q0 + warp * kMma + g + 8};  // the lane's rows
  // A warp whose 16 rows are all past L computes nothing (it still copies and waits with the
  // block): the last query tile of L = 197 has one active warp of four.
  const bool active = q0 + warp * kMma < a.L;

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
    float o[kOutFrags][4];
#pragma unroll
    for (int f = 0; f < kOutFrags; ++f) o[f][0] = o[f][1] = o[f][2] = o[f][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // running max (base 2) and sum

    for (int64_t t = 0; t < tiles; ++t) {
      wait_async<0>();  // tile t (started during step t - 1, or above) has landed ...
      __syncthreads();  // ... for every thread, and no warp still reads tile t - 1's stage
      if (t + 1 < tiles) {
        T* const next = kv + ((t + 1) % 2) * 2 * Smem::kTile;
        load_tile_async<E>(next, km, (t + 1) * kKeyTile, a.S, a.ko.ld);
        load_tile_async<E>(next + Smem::kTile, vm, (t + 1) * kKeyTile, a.S, a.vo.ld);
        commit_async();
      }
      const T* const kt = kv + (t % 2) * 2 * Smem::kTile;
      const T* const vt = kt + Smem::kTile;

      if (!active) continue;  // (after the barrier and the next tile's copy, which it shares)
      // Keys of this tile that exist: fragments wholly past S are skipped (their p would be 0).
      const int64_t j0 = t * kKeyTile;
      const int64_t valid = a.S - j0 < kKeyTile ? a.S - j0 : kKeyTile;

      // Scores of the warp's 16 rows against the tile's keys: q's A fragment and two 8-key B
      // fragments (k's rows, e contiguous: column-major B) per ldmatrix.
      float s[kKeyFrags][4];
#pragma unroll
      for (int n = 0; n < kKeyFrags; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
      const int mat = lane / 8, mat_row = lane % 8;
#pragma unroll
      for (int c = 0; c < kKSteps; ++c) {
        uint32_t qa[4];
        ldmatrix_x4(qa, q_rows + (lane % 16) * kLd + c * 16 + (lane / 16) * 8);
#pragma unroll
        for (int n = 0; n < kKeyFrags; n += 2) {
          if (n * 8 >= valid) break;
          uint32_t kb[4];
          ldmatrix_x4(kb, kt + ((n + mat / 2) * 8 + mat_row) * kLd + c * 16 + (mat % 2) * 8);
          mma_16816<T>(s[n], qa, kb[0], kb[1]);
          mma_16816<T>(s[n + 1], qa, kb[2], kb[3]);
        }
      }

      // Online softmax in base 2: keys >= S (and > the row, if causal) are out; a full tile of
      // a non-causal layer needs no mask.
      float tile_max[2] = {-INFINITY, -INFINITY};
      if (valid == kKeyTile && !a.causal) {
#pragma unroll
        for (int n = 0; n < kKeyFrags; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[n][e] *= a.scale_log2;
            tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
          }
        }
      } else {
#pragma unroll
        for (int n = 0; n < kKeyFrags; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int rr = e / 2;
            const int jj = n * 8 + 2 * quad + e % 2;
            const bool kept = jj < valid && (!a.causal || j0 + jj <= row[rr]);
            s[n][e] = kept ? s[n][e] * a.scale_log2 : -INFINITY;
            tile_max[rr] = fmaxf(tile_max[rr], s[n][e]);
          }
        }
      }
      float base[2], alpha[2];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const float m_new = fmaxf(m[rr], quad_max(tile_max[rr]));
        base[rr] = m_new == -INFINITY ? 0.0f : m_new;  // nothing kept yet: p and o stay 0
        alpha[rr] = exp2f(m[rr] - base[rr]);
        m[rr] = m_new;
      }
      // p, rounded to T (the sum takes p as rounded, the weights p v uses, so they sum to one),
      // as A fragments of 16 keys each.
      uint32_t p[kKeyTile / 16][4];
      float sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int n = 0; n < kKeyFrags; ++n) {
        const uint32_t lo = pack2<T>(exp2f(s[n][0] - base[0]), exp2f(s[n][1] - base[0]), sum[0]);
        const uint32_t hi = pack2<T>(exp2f(s[n][2] - base[1]), exp2f(s[n][3] - base[1]), sum[1]);
        p[n / 2][(n % 2) * 2] = lo;
        p[n / 2][(n % 2) * 2 + 1] = hi;
      }
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) l[rr] = l[rr] * alpha[rr] + quad_sum(sum[rr]);
#pragma unroll
      for (int f = 0; f < kOutFrags; ++f) {
        o[f][0] *= alpha[0], o[f][1] *= alpha[0];
        o[f][2] *= alpha[1], o[f][3] *= alpha[1];
      }

      // o += p v: v's 16 x 16 blocks by ldmatrix (transposed) as the B fragments of two
      // 8-column output blocks; 16-key blocks past S hold p == 0 (and zero-filled v): skipped.
#pragma unroll
      for (int kc = 0; kc < kKeyTile / 16; ++kc) {
        if (kc * 16 >= valid) break;
#pragma unroll
        for (int np = 0; np < E / 16; ++np) {
          uint32_t bv[4];
          ldmatrix_x4_trans(
              bv, vt + (kc * 16 + (mat % 2) * 8 + mat_row) * kLd + np * 16 + (mat / 2) * 8);
          mma_16816<T>(o[2 * np], p[kc], bv[0], bv[1]);
          mma_16816<T>(o[2 * np + 1], p[kc], bv[2], bv[3]);
        }
      }
    }

    // o / l (l == 0 only when S == 0: zeros, like the simple kernel); rows past L not stored.
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      if (row[rr] >= a.L) continue;
      const float inv = l[rr] > 0 ? 1.0f / l[rr] : 0.0f;
      T* const orow = om + row[rr] * a.oo.ld + 2 * quad;
      float unused = 0;
#pragma unroll
      for (int f = 0; f < kOutFrags; ++f) {
        *reinterpret_cast<uint32_t*>(orow + f * 8) =
            pack2<T>(o[f][2 * rr] * inv, o[f][2 * rr + 1] * inv, unused);
      }
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
