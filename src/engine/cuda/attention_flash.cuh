// The flash attention kernels (attention.cu's flash path, whose comment describes them): their
// tiles, the resident and streaming kernels, their launch shapes and launchers. Included by
// attention.cu and by attention_flash_f16.cu, _bf16.cu and _f32.cu, each of which instantiates
// launch<T> and launch_shape<T> for its element type (the three compile in parallel; the kernels of
// one type take about a third of what the one file did).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"
#include "engine/cuda/mma.cuh"

namespace kiln::engine::cuda::flash {

constexpr int kWarp = 32;
constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = kFlashWarps * kWarp;
constexpr int kMma = 16;                        // side of a WMMA tile
constexpr int kQueryTile = kFlashWarps * kMma;  // query rows per block, 16 per warp
// The resident kernel's blocks have 4 to 8 warps, chosen per layer (resident_shape).
constexpr int kResidentMinWarps = 4, kResidentMaxWarps = 8;
constexpr int kResidentMaxThreads = kResidentMaxWarps * kWarp;
constexpr int kKeyTile = 64;  // key/value rows per step

// The inner dimension of one mma for element type T: 16 (f16, bf16: m16n8k16) or 8 (f32, on
// TF32: m16n8k8). A k-step of kK elements is 32 bytes of a row either way, so that ldmatrix (8
// rows of 16 bytes) loads half a k-step's columns for either type.
template <class T>
constexpr int kK = 32 / static_cast<int>(sizeof(T));

// Shared memory of the flash kernel for element type T and head size E, in bytes: two stages of a
// key tile and a value tile, then the query tile. Rows are E elements and 16 bytes apart: 16-byte
// aligned, and the fragment loads of a warp (ldmatrix's 8 rows x 16 bytes, or 8 rows x 4 words;
// f32's scalar loads of v at rows 2t, t < 4, and 8 columns) hit 32 distinct banks.
template <class T, int E>
struct FlashSmem {
  static constexpr int kLd = E + 16 / static_cast<int>(sizeof(T));
  static constexpr int kTile = kKeyTile * kLd;  // elements of one query, key or value tile
  static_assert(kQueryTile == kKeyTile, "query and key tiles share a shape");
  static constexpr size_t kQuery = 2 * 2 * kTile * sizeof(T);
  static constexpr size_t kBytes = kQuery + kTile * sizeof(T);
  static_assert(E % kMma == 0 && E <= 128, "head sizes the flash kernel takes");
};

// Elements of T in one 16-byte copy.
template <class T>
constexpr int kPiece = 16 / static_cast<int>(sizeof(T));

// Starts copying rows [row0, row0 + 64) of a [rows, E] matrix of row stride `ld` into a tile of
// row stride FlashSmem<T, E>::kLd; rows past `rows` are zero-filled (keeps 0 * garbage out of p v).
template <int E, class T>
__device__ __forceinline__ void load_tile_async(T* tile, const T* src, int64_t row0, int64_t rows,
                                                int64_t ld) {
  constexpr int kChunks = E / kPiece<T>;  // 16-byte pieces per row
  constexpr int kLd = FlashSmem<T, E>::kLd;
#pragma unroll
  for (int it = 0; it < kKeyTile * kChunks / kFlashThreads; ++it) {
    const int c = it * kFlashThreads + static_cast<int>(threadIdx.x);
    const int r = c / kChunks, e = (c % kChunks) * kPiece<T>;
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
  int64_t batch, heads;  // batch counts (b, h) pairs: b = index / heads
  int64_t kv_group;      // k and v: head h / kv_group (grouped-query attention; 1: head h)
  int L, S;              // (run_flash checks they fit)
  float scale_log2;      // scale * log2(e): the softmax works in base 2
  bool causal;
  // The mask, if any: element (bh, r, j) at offset_of(md, bh * L * S) + r * mask_row + j * mask_col
  // (a stride is 0 where the mask broadcasts).
  const void* mask;
  DataType mt;
  bool bool_mask;
  Dims md;
  int64_t mask_row, mask_col;
};

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// 2^x by the special-function unit alone (ex2.approx.ftz: about 2 ulp, results below 2^-126
// flushed to zero, which the rounding of p to 16 bits would lose anyway); exp2f adds range
// handling around it, three more instructions per weight.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats rounded to T and packed (lo in the low half).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// The bits of a B fragment register of T whose every element is 1 (two 16-bit ones; one f32),
// so that an mma of p with it sums p's rows.
template <class T>
constexpr uint32_t kOnes2 = std::is_same_v<T, __half>          ? 0x3c003c00u
                            : std::is_same_v<T, __nv_bfloat16> ? 0x3f803f80u
                                                               : 0x3f800000u;

// What a warp carries for its 16 query rows from one key tile to the next: the output
// accumulator o (8-column mma fragments), the running sum of the weights as one more fragment
// (every column the row's sum: p times a block of ones, so the sum takes p as rounded for p v and
// the weights sum to one), and per row (g, g + 8 of the lane) the running max of the scores, in
// the units of attend_tile's `prescale`.
template <int E>
struct FlashRows {
  float o[E / 8][4];
  float l[4];
  float m[2];
  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int f = 0; f < E / 8; ++f) o[f][0] = o[f][1] = o[f][2] = o[f][3] = 0.0f;
    l[0] = l[1] = l[2] = l[3] = 0.0f;
    m[0] = m[1] = -INFINITY;
  }
};

// A mask that is the same for every query row (a key padding mask, [B, 1, 1, S] and the like:
// mask_row == 0) over the `valid` keys of the tile at j0, read once by the warp (two keys a lane
// and a ballot; every lane of the warp calls it): `keep` bit j for key j0 + j kept (bool true, or
// additive +0.0), `binary` when every key is either kept or out (bool, or additive -inf), so
// that the bits say all the mask does.
struct KeyTileMask {
  uint64_t keep;
  bool binary;
};
__device__ __forceinline__ KeyTileMask key_padding_of(const FlashArgs& a, int64_t mask_base, int j0,
                                                      int valid) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  bool kept[2] = {false, false}, binary = true;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int j = lane + h * kWarp;
    if (j >= valid) continue;
    const int64_t off = mask_base + (j0 + j) * a.mask_col;
    if (a.bool_mask) {
      kept[h] = load_as<int64_t>(a.mt, a.mask, off) != 0;
    } else {
      const float m = load_as<float>(a.mt, a.mask, off);
      kept[h] = m == 0.0f;
      binary = binary && (kept[h] || m == -INFINITY);
    }
  }
  const uint64_t lo = __ballot_sync(0xffffffffu, kept[0]), hi = __ballot_sync(0xffffffffu, kept[1]);
  return {lo | hi << 32, __all_sync(0xffffffffu, binary) != 0};
}

// One key/value tile of up to 64 rows (keys j0 .. j0 + valid - 1; rows of the tile up to the next
// multiple of 16 past `valid` are zeros) against a warp's 16 query rows `q_rows` (all in shared
// memory, rows FlashSmem<T, E>::kLd apart). Scores, probabilities and the output accumulator stay
// in registers (mma fragments): lane l holds rows g = l / 4 and g + 8, so a row's max is a
// reduction over the 4 lanes of a quad, and the score fragments of 16 keys are, rounded, the A
// fragment of p v without a trip through shared memory. `row` holds the lane's two query indices
// (for the causal mask and the mask, whose elements for the matrix start at `mask_base`). The
// softmax works in base 2 on raw scores: p = 2^(s * scale_log2 - max * scale_log2), one FFMA and
// one ex2 a weight; a negative scale (max and min trade places) multiplies the scores first and
// then uses 1. `keys`: where binary, a key padding mask's bits for the tile, read instead of the
// mask. kMasked: the tile has keys past S (valid < 64) or past a row (causal), or the layer has a
// mask; without it all 64 keys count and the code has no branches around the mma (each would cost a
// warp synchronization before the next ldmatrix).
template <class T, int E, bool kMasked>
__device__ __forceinline__ void attend_tile(FlashRows<E>& st, const T* q_rows, const T* kt,
                                            const T* vt, int j0, int valid, const int (&row)[2],
                                            const FlashArgs& a, int64_t mask_base,
                                            const KeyTileMask& keys) {
  const float scale_log2 = a.scale_log2;
  const bool causal = a.causal;
  constexpr bool kTf32 = std::is_same_v<T, float>;
  constexpr int kLd = FlashSmem<T, E>::kLd;
  constexpr int kStep = kK<T>;             // columns of one mma's k-step
  constexpr int kKSteps = E / kStep;       // k-steps of q k^T
  constexpr int kKeyFrags = kKeyTile / 8;  // 8-key column blocks of the scores
  static_assert(kKeyFrags % 2 == 0, "key fragments go in pairs (one ldmatrix.x4)");
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int quad = lane % 4;

  // Scores of the warp's 16 rows against the tile's keys: q's A fragment and two 8-key B
  // fragments (k's rows, e contiguous: column-major B) per ldmatrix; fragments wholly past
  // `valid` are skipped (their p would be 0). TF32 operands are rounded as loaded.
  float s[kKeyFrags][4];
#pragma unroll
  for (int n = 0; n < kKeyFrags; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
  const int mat = lane / 8, mat_row = lane % 8;
#pragma unroll
  for (int c = 0; c < kKSteps; ++c) {
    uint32_t qa[4];
    ldmatrix_x4(qa, q_rows + (lane % 16) * kLd + c * kStep + (lane / 16) * (kStep / 2));
    if constexpr (kTf32) {
#pragma unroll
      for (int i = 0; i < 4; ++i) qa[i] = to_tf32(qa[i]);
    }
#pragma unroll
    for (int n = 0; n < kKeyFrags; n += 2) {
      if (kMasked && n * 8 >= valid) break;
      uint32_t kb[4];
      ldmatrix_x4(kb,
                  kt + ((n + mat / 2) * 8 + mat_row) * kLd + c * kStep + (mat % 2) * (kStep / 2));
      if constexpr (kTf32) {
#pragma unroll
        for (int i = 0; i < 4; ++i) kb[i] = to_tf32(kb[i]);
      }
      mma_step<T>(s[n], qa, kb[0], kb[1]);
      mma_step<T>(s[n + 1], qa, kb[2], kb[3]);
    }
  }

  // Keys >= S (and > the row, if causal, and where a bool mask is false) are out.
  const bool prescale = scale_log2 < 0;
  const float scale = prescale ? 1.0f : scale_log2;
  // A float mask is in the units of the scaled scores; the weights are 2^(v * scale - base).
  const float mask_scale = 1.4426950408889634f / scale;
  float tile_max[2] = {-INFINITY, -INFINITY};
  if (!kMasked) {
    if (prescale) {
#pragma unroll
      for (int n = 0; n < kKeyFrags; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] *= scale_log2;
      }
    }
#pragma unroll
    for (int n = 0; n < kKeyFrags; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[n][e]);
    }
  } else {
#pragma unroll
    for (int n = 0; n < kKeyFrags; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int rr = e / 2;
        const int jj = n * 8 + 2 * quad + e % 2;
        bool kept = jj < valid && (!causal || j0 + jj <= row[rr]);
        float v = prescale ? s[n][e] * scale_log2 : s[n][e];
        if (kept && keys.binary) {
          kept = (keys.keep >> jj) & 1;
        } else if (kept && a.mask) {
          // Rows past L (computed, never stored) read the last row's mask.
          const int r = row[rr] < a.L ? row[rr] : a.L - 1;
          const int64_t off = mask_base + r * a.mask_row + (j0 + jj) * a.mask_col;
          if (a.bool_mask) {
            kept = load_as<int64_t>(a.mt, a.mask, off) != 0;
          } else {
            v += load_as<float>(a.mt, a.mask, off) * mask_scale;
          }
        }
        s[n][e] = kept ? v : -INFINITY;
        tile_max[rr] = fmaxf(tile_max[rr], s[n][e]);
      }
    }
  }
  float base[2], alpha[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const float m_new = fmaxf(st.m[rr], quad_max(tile_max[rr]));
    base[rr] = m_new == -INFINITY ? 0.0f : m_new * scale;  // nothing kept yet: p and o stay 0
    alpha[rr] = fast_exp2(fmaf(st.m[rr], scale, -base[rr]));
    st.m[rr] = m_new;
  }
  // p, rounded to T, as A fragments of one k-step each: 16 keys (f16, bf16), the score fragments
  // of two 8-key blocks side by side; or 8 keys (TF32), where the k index t of p v stands for the
  // tile's key 2t and t + 4 for key 2t + 1, so that each lane's own two scores of a row are its A
  // elements (no shuffles), and p v's B rows of v follow the same order.
  constexpr int kPSteps = kKeyTile / kStep;
  uint32_t p[kPSteps][4];
#pragma unroll
  for (int n = 0; n < kKeyFrags; ++n) {
    const float p0 = fast_exp2(fmaf(s[n][0], scale, -base[0])),
                p1 = fast_exp2(fmaf(s[n][1], scale, -base[0])),
                p2 = fast_exp2(fmaf(s[n][2], scale, -base[1])),
                p3 = fast_exp2(fmaf(s[n][3], scale, -base[1]));
    if constexpr (kTf32) {
      p[n][0] = to_tf32(p0), p[n][1] = to_tf32(p2), p[n][2] = to_tf32(p1), p[n][3] = to_tf32(p3);
    } else {
      p[n / 2][(n % 2) * 2] = pack2<T>(p0, p1);
      p[n / 2][(n % 2) * 2 + 1] = pack2<T>(p2, p3);
    }
  }
#pragma unroll
  for (int f = 0; f < E / 8; ++f) {
    st.o[f][0] *= alpha[0], st.o[f][1] *= alpha[0];
    st.o[f][2] *= alpha[1], st.o[f][3] *= alpha[1];
  }
  st.l[0] *= alpha[0], st.l[1] *= alpha[0];
  st.l[2] *= alpha[1], st.l[3] *= alpha[1];

  // o += p v: 16-bit v's 16 x 16 blocks by ldmatrix (transposed) as the B fragments of two
  // 8-column output blocks; f32 v's B elements (keys 2t and 2t + 1 of the k-step, column g of the
  // output block) by scalar loads, as ldmatrix does not transpose 32-bit elements; and l += p
  // times ones. k-steps past `valid` hold p == 0 (and zero v): skipped.
#pragma unroll
  for (int kc = 0; kc < kPSteps; ++kc) {
    if (kMasked && kc * kStep >= valid) break;
    if constexpr (kTf32) {
      const T* const v0 = vt + (kc * 8 + 2 * quad) * kLd + lane / 4;
#pragma unroll
      for (int f = 0; f < E / 8; ++f) {
        mma_step<T>(st.o[f], p[kc], to_tf32(v0[f * 8]), to_tf32(v0[kLd + f * 8]));
      }
    } else {
#pragma unroll
      for (int np = 0; np < E / 16; ++np) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv,
                          vt + (kc * 16 + (mat % 2) * 8 + mat_row) * kLd + np * 16 + (mat / 2) * 8);
        mma_step<T>(st.o[2 * np], p[kc], bv[0], bv[1]);
        mma_step<T>(st.o[2 * np + 1], p[kc], bv[2], bv[3]);
      }
    }
    mma_step<T>(st.l, p[kc], kOnes2<T>, kOnes2<T>);
  }
}

// attend_tile for the key tile at j0 of a layer, masked only where some key may be out: past S,
// (causal) past the warp's first row, row[0] of lane 0, or where the layer's mask takes some key
// out. A key padding mask (binary, KeyTileMask) is read once a tile: a tile it takes wholly out is
// skipped (it would add p == 0 everywhere), one it keeps whole takes the unmasked path, and the
// tile that holds a sequence's end tests the bits instead of loading the mask per score.
template <class T, int E>
__device__ __forceinline__ void attend_key_tile(FlashRows<E>& st, const T* q_rows, const T* kt,
                                                const T* vt, int j0, const FlashArgs& a,
                                                const int (&row)[2], int64_t mask_base) {
  const int valid = a.S - j0 < kKeyTile ? a.S - j0 : kKeyTile;
  const int warp_row0 = row[0] - static_cast<int>(threadIdx.x) % kWarp / 4;
  bool masked = a.mask != nullptr;
  KeyTileMask keys{~0ull, false};
  if (masked && a.mask_row == 0) {
    keys = key_padding_of(a, mask_base, j0, valid);
    if (keys.binary) {
      const uint64_t all = valid == kKeyTile ? ~0ull : (1ull << valid) - 1;
      if ((keys.keep & all) == 0) return;
      masked = (keys.keep & all) != all;
    }
  }
  if (masked || valid < kKeyTile || (a.causal && j0 + kKeyTile - 1 > warp_row0)) {
    attend_tile<T, E, true>(st, q_rows, kt, vt, j0, valid, row, a, mask_base, keys);
  } else {
    attend_tile<T, E, false>(st, q_rows, kt, vt, j0, valid, row, a, mask_base, keys);
  }
}

// Where the mask's elements for matrix pair bh start (0 without a mask).
__device__ __forceinline__ int64_t mask_base_of(const FlashArgs& a, int64_t bh) {
  return a.mask ? offset_of(a.md, bh * a.L * a.S) : 0;
}

// o / l into rows `row` of the output matrix `om` (rows `ld` apart); l == 0 only when S == 0
// (zeros, like the simple kernel); rows past L are not stored.
template <class T, int E>
__device__ __forceinline__ void store_rows(const FlashRows<E>& st, T* om, const int (&row)[2],
                                           int L, int64_t ld) {
  const int quad = static_cast<int>(threadIdx.x) % 4;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    if (row[rr] >= L) continue;
    const float sum = st.l[2 * rr];
    const float inv = sum > 0 ? 1.0f / sum : 0.0f;
    T* const orow = om + row[rr] * ld + 2 * quad;
#pragma unroll
    for (int f = 0; f < E / 8; ++f) {
      if constexpr (std::is_same_v<T, float>) {
        *reinterpret_cast<float2*>(orow + f * 8) =
            make_float2(st.o[f][2 * rr] * inv, st.o[f][2 * rr + 1] * inv);
      } else {
        *reinterpret_cast<uint32_t*>(orow + f * 8) =
            pack2<T>(st.o[f][2 * rr] * inv, st.o[f][2 * rr + 1] * inv);
      }
    }
  }
}

// Where matrix pair bh (batch b = bh / heads, head h = bh % heads) of q, k, v and out starts.
template <class T>
__device__ __forceinline__ void matrices_of(const FlashArgs& a, int64_t bh, const T*& q,
                                            const T*& k, const T*& v, T*& out) {
  const int64_t b = bh / a.heads, h = bh % a.heads, kvh = h / a.kv_group;
  q = static_cast<const T*>(a.q) + b * a.qo.batch + h * a.qo.head;
  k = static_cast<const T*>(a.k) + b * a.ko.batch + kvh * a.ko.head;
  v = static_cast<const T*>(a.v) + b * a.vo.batch + kvh * a.vo.head;
  out = static_cast<T*>(a.out) + b * a.oo.batch + h * a.oo.head;
}

// The streaming kernel (S > 256, or keys and values too large to hold): one block of 4 warps takes
// 64 query rows (16 a warp) and streams 64-row key/value tiles through two shared-memory stages.
template <class T, int E>
__global__ void __launch_bounds__(kFlashThreads) flash_attention_kernel(FlashArgs a) {
  allow_dependents();        // the projection after it may start streaming its weights
  wait_for_prerequisites();  // launched early (programmatic_launch): q, k, v are earlier kernels'
  using Smem = FlashSmem<T, E>;
  constexpr int kLd = Smem::kLd;
  extern __shared__ __align__(128) unsigned char smem[];
  T* const kv = reinterpret_cast<T*>(smem);
  T* const q_tile = reinterpret_cast<T*>(smem + Smem::kQuery);
  const int warp = static_cast<int>(threadIdx.x) / kWarp,
            lane = static_cast<int>(threadIdx.x) % kWarp;
  const T* const q_rows = q_tile + warp * kMma * kLd;  // the warp's 16 rows

  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kQueryTile;
  const int64_t key_tiles = (a.S + kKeyTile - 1) / kKeyTile;
  // Causal: keys past the block's last query row are masked in every row of the block.
  const int64_t last_tile = (q0 + kQueryTile - 1) / kKeyTile;
  const int64_t tiles = a.causal && last_tile + 1 < key_tiles ? last_tile + 1 : key_tiles;
  const int row[2] = {static_cast<int>(q0) + warp * kMma + lane / 4,
                      static_cast<int>(q0) + warp * kMma + lane / 4 + 8};
  // A warp whose 16 rows are all past L computes nothing (it still copies and waits with the
  // block): the last query tile of L = 197 has one active warp of four.
  const bool active = q0 + warp * kMma < a.L;

  for (int64_t bh = blockIdx.y; bh < a.batch; bh += gridDim.y) {
    const T *qm, *km, *vm;
    T* om;
    matrices_of(a, bh, qm, km, vm, om);
    const int64_t mask_base = mask_base_of(a, bh);
    __syncthreads();  // no warp still reads the previous matrix's tiles
    if (tiles > 0) {  // (else nothing is read: the rows are zeros)
      load_tile_async<E>(q_tile, qm, q0, a.L, a.qo.ld);
      load_tile_async<E>(kv, km, 0, a.S, a.ko.ld);
      load_tile_async<E>(kv + Smem::kTile, vm, 0, a.S, a.vo.ld);
      commit_async();
    }
    FlashRows<E> st;
    st.reset();
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
      if (!active) continue;  // (after the barrier and the next tile's copy, which it shares)
      const int j0 = static_cast<int>(t) * kKeyTile;
      attend_key_tile<T, E>(st, q_rows, kt, kt + Smem::kTile, j0, a, row, mask_base);
    }
    store_rows<T, E>(st, om, row, a.L, a.oo.ld);
  }
}

// Words of a warp's FlashRows<E> per lane: o, l and m.
template <int E>
constexpr int kRowsWords = E / 2 + 6;

// A warp's FlashRows as words ex[i * 32 + lane] (conflict-free), for the warp that merges them.
template <int E>
__device__ __forceinline__ void put_rows(const FlashRows<E>& st, float* ex, int lane) {
#pragma unroll
  for (int f = 0; f < E / 8; ++f) {
#pragma unroll
    for (int j = 0; j < 4; ++j) ex[(f * 4 + j) * kWarp + lane] = st.o[f][j];
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) ex[(E / 2 + j) * kWarp + lane] = st.l[j];
  ex[(E / 2 + 4) * kWarp + lane] = st.m[0];
  ex[(E / 2 + 5) * kWarp + lane] = st.m[1];
}

// Merges into `st` the rows another warp computed for the same query rows over other keys
// (put_rows' words): both accumulators rescaled to the larger running max, as attend_tile rescales
// across key tiles; `scale` is attend_tile's (1 when the scores were prescaled).
template <int E>
__device__ __forceinline__ void merge_rows(FlashRows<E>& st, const float* ex, int lane,
                                           float scale) {
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const float m_other = ex[(E / 2 + 4 + rr) * kWarp + lane];
    const float m_new = fmaxf(st.m[rr], m_other);
    const float base = m_new == -INFINITY ? 0.0f : m_new * scale;  // nothing kept: o and l stay 0
    const float mine = fast_exp2(fmaf(st.m[rr], scale, -base));
    const float theirs = fast_exp2(fmaf(m_other, scale, -base));
    st.m[rr] = m_new;
#pragma unroll
    for (int f = 0; f < E / 8; ++f) {
#pragma unroll
      for (int j = 2 * rr; j < 2 * rr + 2; ++j) {
        st.o[f][j] = fmaf(st.o[f][j], mine, ex[(f * 4 + j) * kWarp + lane] * theirs);
      }
    }
#pragma unroll
    for (int j = 2 * rr; j < 2 * rr + 2; ++j) {
      st.l[j] = fmaf(st.l[j], mine, ex[(E / 2 + j) * kWarp + lane] * theirs);
    }
  }
}

// The resident kernel (S <= 256): a block copies all of a matrix's keys and values into shared
// memory once, as one cp.async group per 64-key tile, and its W warps (4 to 8, resident_shape)
// take the block's query rows 16 at a time, each through its own query stage. With `splits` = 1
// warp w takes row tiles w, w + W, ... over all keys; with 2 or 4 (few matrices: BERT's 12 heads
// at batch 1, where one warp's chain over all key tiles is the layer's time) the warps
// w = slot * splits + part share row tiles slot, slot + W / splits, ..., part p attending key tiles
// p, p + splits, ..., and part 0 merges the others' rows (through shared memory, between two block
// barriers) before storing. The first round computes tile t as soon as group t has landed; later
// rounds run without block barriers but for the merges. Keys and values are read once per block
// instead of once per 64 query rows, and no warp waits on another's step (the streaming kernel's
// latency, NOTES.md G17). Shared memory: keys [S16, kLd], values [S16, kLd], W query stages [16,
// kLd], S16 = S rounded up to 16 (rows past S zero-filled), then kRowsWords<E> x 32 words for each
// warp of part > 0. 128 registers a thread keep 2 blocks of 8 warps on an SM up to E = 64 (larger
// heads would spill at 128); f32's p takes twice the registers (one element each), and its
// blocks ask twice the shared memory: 2 blocks up to E = 32 (ptxas: 20 bytes of spills there, 108
// at E = 64).
template <class T>
constexpr int kResidentMaxHead2 = sizeof(T) == 4 ? 32 : 64;
template <class T, int E>
__global__ void __launch_bounds__(kResidentMaxThreads, E <= kResidentMaxHead2<T> ? 2 : 1)
    flash_attention_resident_kernel(FlashArgs a, int64_t block_rows, int splits) {
  allow_dependents();        // the projection after it may start streaming its weights
  wait_for_prerequisites();  // launched early (programmatic_launch): q, k, v are earlier kernels'
  constexpr int kLd = FlashSmem<T, E>::kLd;
  constexpr int kChunks = E / kPiece<T>;  // 16-byte pieces per row
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = static_cast<int>(threadIdx.x) / kWarp,
            lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  const int part = warp % splits, slot = warp / splits, slots = warps / splits;
  const int s16 = static_cast<int>((a.S + 15) / 16 * 16);
  T* const ks = reinterpret_cast<T*>(smem);
  T* const vs = ks + s16 * kLd;
  T* const q_rows = vs + s16 * kLd + warp * kMma * kLd;  // the warp's query stage
  // Where the parts of slot `slot` past 0 leave their rows for part 0.
  float* const exchange = reinterpret_cast<float*>(vs + s16 * kLd + warps * kMma * kLd) +
                          slot * (splits - 1) * kRowsWords<E> * kWarp;
  const float merge_scale = a.scale_log2 < 0 ? 1.0f : a.scale_log2;         // attend_tile's `scale`
  const int key_tiles = static_cast<int>((a.S + kKeyTile - 1) / kKeyTile);  // 0..4

  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * block_rows;
  const int64_t q_end = q0 + block_rows < a.L ? q0 + block_rows : a.L;
  const int row_tiles = static_cast<int>((q_end - q0 + kMma - 1) / kMma);

  for (int64_t bh = blockIdx.y; bh < a.batch; bh += gridDim.y) {
    const T *qm, *km, *vm;
    T* om;
    matrices_of(a, bh, qm, km, vm, om);
    const int64_t mask_base = mask_base_of(a, bh);
    // Copies the warp's query tile `rt` (rows past L zero-filled) into its stage.
    const auto load_query = [&](int rt) {
      const int64_t r0 = q0 + static_cast<int64_t>(rt) * kMma;
#pragma unroll
      for (int it = 0; it < kMma * kChunks / kWarp; ++it) {
        const int c = it * kWarp + lane;
        const int r = c / kChunks, e = (c % kChunks) * kPiece<T>;
        const bool inside = r0 + r < a.L;
        copy16_async(q_rows + r * kLd + e, inside ? qm + (r0 + r) * a.qo.ld + e : qm,
                     inside ? 16 : 0);
      }
    };
    __syncthreads();  // no warp still reads the previous matrix's keys, values or queries
    // Groups: the warp's first query tile, then keys and values of each 64-key tile (none when
    // S == 0: the rows are zeros).
    if (slot < row_tiles && key_tiles > 0) load_query(slot);
    commit_async();
    for (int t = 0; t < key_tiles; ++t) {
      const int r_end = (t + 1) * kKeyTile < s16 ? (t + 1) * kKeyTile : s16;
      for (int c = static_cast<int>(threadIdx.x) + t * kKeyTile * kChunks; c < r_end * kChunks;
           c += static_cast<int>(blockDim.x)) {
        const int r = c / kChunks, e = (c % kChunks) * kPiece<T>;
        const bool inside = r < a.S;
        copy16_async(ks + r * kLd + e, inside ? km + r * a.ko.ld + e : km, inside ? 16 : 0);
        copy16_async(vs + r * kLd + e, inside ? vm + r * a.vo.ld + e : vm, inside ? 16 : 0);
      }
      commit_async();
    }

    // With splits, every warp runs every round (rounds of the block's first slot), so that the
    // merges' barriers are the block's: a barrier whose id depends on the warp would reserve all
    // 16 of the block's barriers, and with them 2 blocks an SM at most.
    const int rounds = (row_tiles + slots - 1) / slots;
    for (int rt = slot, round = 0; round == 0 || (splits > 1 ? round < rounds : rt < row_tiles);
         rt += slots, ++round) {
      const bool active = rt < row_tiles;
      const int first = static_cast<int>(q0) + rt * kMma;
      const int row[2] = {first + lane / 4, first + lane / 4 + 8};
      // Causal: keys past the tile's last row are masked in all of its rows.
      const int last_tile = (first + kMma - 1) / kKeyTile;
      const int tiles = a.causal && last_tile + 1 < key_tiles ? last_tile + 1 : key_tiles;
      if (round > 0 && key_tiles > 0) {
        __syncwarp();  // every lane is done with the stage's previous rows
        load_query(rt);
        commit_async();
        wait_async<0>();
        __syncwarp();
      }
      FlashRows<E> st;
      st.reset();
      for (int t = 0; t < key_tiles; ++t) {
        if (round == 0) {
          // Group t + 1 (and the query's, before it) has landed for this thread ...
          switch (key_tiles - 1 - t) {
            case 0:
              wait_async<0>();
              break;
            case 1:
              wait_async<1>();
              break;
            case 2:
              wait_async<2>();
              break;
            default:
              wait_async<3>();
              break;
          }
          __syncthreads();  // ... and for every thread
        } else if (t >= tiles) {
          break;
        }
        if (!active || t >= tiles || t % splits != part) continue;
        const int j0 = t * kKeyTile;
        attend_key_tile<T, E>(st, q_rows, ks + j0 * kLd, vs + j0 * kLd, j0, a, row, mask_base);
      }
      if (splits > 1) {  // (every warp of the block)
        if (active && part > 0) {
          put_rows<E>(st, exchange + (part - 1) * kRowsWords<E> * kWarp, lane);
        }
        __syncthreads();
        if (active && part == 0) {
          for (int p = 1; p < splits; ++p) {
            merge_rows<E>(st, exchange + (p - 1) * kRowsWords<E> * kWarp, lane, merge_scale);
          }
        }
        __syncthreads();  // read before the next round's rows replace them
      }
      if (active && part == 0) store_rows<T, E>(st, om, row, a.L, a.oo.ld);
    }
  }
}

// Blocks of `kernel` (`threads` threads, `bytes` of shared memory) the device holds at once.
inline int resident_blocks(const void* kernel, int threads, size_t bytes, int device) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, size_t, int>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(kernel, threads, bytes, device);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int per_sm = 0;
  KILN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes));
  return cache[key] = std::max(1, multiprocessors(device) * per_sm);
}

// The resident kernel's shared memory for S keys: keys and values of S rounded up to 16 rows, a
// 16-row query stage per warp, and the rows of every warp past part 0 of its row tiles.
template <class T, int E>
constexpr size_t resident_bytes(int64_t S, int warps, int splits) {
  return static_cast<size_t>(2 * ((S + kMma - 1) / kMma * kMma) + warps * kMma) *
             FlashSmem<T, E>::kLd * sizeof(T) +
         static_cast<size_t>(warps - warps / splits) * kRowsWords<E> * kWarp * sizeof(float);
}
constexpr int64_t kResidentKeys = 4 * kKeyTile;  // four cp.async groups of keys and values
// Above this (with 4 warps) the resident kernel fits fewer than two blocks on an SM (E = 128 past
// 160 keys), and the streaming kernel runs instead; key splits stay under it too.
constexpr size_t kResidentMaxBytes = 110 * 1024;

struct ResidentShape {
  int warps, block_rows, splits;
};

// The resident kernel's warps per block, query rows per block (whole 16-row tiles, split evenly
// into chunks) and key splits for a layer of `pairs` matrices. The cost of a choice is its waves
// (blocks over the blocks the device holds at once) times its rounds (a block's row tiles over
// its warps' row slots) times a warp's key tiles in a round (with splits, one step more for the
// merge, counted as half a tile); the cheapest wins, then, in one wave, the fewest warps an SM
// (blocks spread evenly: warps sharing an SM's four schedulers stretch each other's chains;
// several waves are bound by throughput, where the old order stands), then the fewest chunks
// (each block copies all keys and values), then the fewest splits, then the fewest warps.
// ViT's 13 tiles a matrix at b32: 4 warps are one wave of 4 rounds (the last with one warp
// working), 5 warps one wave of 3, 8 warps two waves of 2 (NOTES.md G27). BERT at b1 (12 matrices
// of 8 row tiles, 2 key tiles): 24 blocks of 4 warps, one warp an SM scheduler (16 us a layer
// against 22 us for 12 blocks of 8 warps, G60); with `max_splits` 4 (the switch
// attention_key_split=on) 48 blocks of 4 warps, each row tile's keys split in 2.
// Blocks above `max_bytes` of shared memory are not considered.
template <class T, int E>
ResidentShape resident_shape(int L, int S, int64_t pairs, int device, int max_splits,
                             size_t max_bytes) {
  const auto kernel = reinterpret_cast<const void*>(flash_attention_resident_kernel<T, E>);
  const int row_tiles = (L + kMma - 1) / kMma;
  const int key_tiles = (S + kKeyTile - 1) / kKeyTile;
  const int sms = multiprocessors(device);
  ResidentShape best{0, 0, 1};
  std::tuple<int64_t, int64_t, int> best_key;  // cost, crowding, chunks
  for (int splits = 1; splits <= max_splits && (splits == 1 || splits <= key_tiles); splits *= 2) {
    // A warp's key tiles in a round, in half tiles, the merge included.
    const int64_t steps = 2 * ((key_tiles + splits - 1) / splits) + (splits > 1 ? 1 : 0);
    for (int warps = std::max(kResidentMinWarps, splits); warps <= kResidentMaxWarps; ++warps) {
      if (warps % splits != 0) continue;
      const size_t bytes = resident_bytes<T, E>(S, warps, splits);
      if ((splits > 1 && bytes > kResidentMaxBytes) || bytes > max_bytes) continue;
      const int64_t slots = resident_blocks(kernel, warps * kWarp, bytes, device);
      const int row_slots = warps / splits;
      for (int chunks = 1;; ++chunks) {
        const int per_chunk = (row_tiles + chunks - 1) / chunks;
        const int64_t blocks = pairs * ((row_tiles + per_chunk - 1) / per_chunk);
        const int64_t waves = (blocks + slots - 1) / slots;
        const int64_t cost = waves * ((per_chunk + row_slots - 1) / row_slots) * steps;
        // In one wave, the warps an SM runs (blocks spread evenly); several waves are bound by
        // throughput, where this says nothing (and one wave is preferred).
        const int64_t crowding =
            waves == 1 ? warps * ((blocks + sms - 1) / sms) : std::numeric_limits<int64_t>::max();
        const std::tuple<int64_t, int64_t, int> key{cost, crowding, chunks};
        if (best.warps == 0 || key < best_key)
          best = {warps, per_chunk * kMma, splits}, best_key = key;
        if (per_chunk <= row_slots) break;  // (more chunks only leave warps idle)
      }
    }
  }
  return best;
}

// The resident kernel's shape for a layer, or warps = 0 where the streaming kernel runs it. The
// kernel's shared-memory limit is raised first: the occupancy the shape is chosen by counts no
// block past the limit.
template <class T, int E>
ResidentShape flash_shape(int64_t L, int64_t S, int64_t pairs, int device, bool key_split) {
  if (S > kResidentKeys || resident_bytes<T, E>(S, kResidentMinWarps, 1) > kResidentMaxBytes) {
    return {0, kQueryTile, 1};
  }
  // (f32 keys and values of E = 128 for 256 keys and 8 warps would pass any device's limit.)
  const size_t max_bytes = std::min(
      std::max(resident_bytes<T, E>(kResidentKeys, kResidentMaxWarps, 1), kResidentMaxBytes),
      optin_shared_bytes(device));
  static std::atomic<uint64_t> configured{0};
  allow_shared_bytes(reinterpret_cast<const void*>(flash_attention_resident_kernel<T, E>),
                     max_bytes, device, configured);
  return resident_shape<T, E>(static_cast<int>(L), static_cast<int>(S), pairs, device,
                              key_split ? 4 : 1, max_bytes);
}

template <class T, int E>
void launch_head(KernelArgs& args, const FlashArgs& a) {
  const int device = args.res.device();
  const bool early = args.res.options().programmatic_launch;  // device_util.cuh
  const unsigned pairs = static_cast<unsigned>(std::min<int64_t>(a.batch, 65535));
  const ResidentShape shape =
      flash_shape<T, E>(a.L, a.S, pairs, device, args.res.options().attention_key_split);
  if (shape.warps > 0) {
    const auto kernel = flash_attention_resident_kernel<T, E>;
    const dim3 grid(static_cast<unsigned>((a.L + shape.block_rows - 1) / shape.block_rows), pairs);
    launch_kernel({grid, shape.warps * kWarp, resident_bytes<T, E>(a.S, shape.warps, shape.splits),
                   args.stream(), early},
                  kernel, a, shape.block_rows, shape.splits);
  } else {
    const auto kernel = flash_attention_kernel<T, E>;
    static std::atomic<uint64_t> configured{0};
    allow_shared_bytes(reinterpret_cast<const void*>(kernel), FlashSmem<T, E>::kBytes, device,
                       configured);
    const dim3 grid(static_cast<unsigned>((a.L + kQueryTile - 1) / kQueryTile), pairs);
    launch_kernel({grid, kFlashThreads, FlashSmem<T, E>::kBytes, args.stream(), early}, kernel, a);
  }
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

// Calls f(std::integral_constant<int, E>{}) for a head size the flash kernels take; false for
// any other.
template <class F>
bool with_head_size(int64_t E, F&& f) {
  switch (E) {
    case 16:
      return f(std::integral_constant<int, 16>{}), true;
    case 32:
      return f(std::integral_constant<int, 32>{}), true;
    case 48:
      return f(std::integral_constant<int, 48>{}), true;
    case 64:
      return f(std::integral_constant<int, 64>{}), true;
    case 80:
      return f(std::integral_constant<int, 80>{}), true;
    case 96:
      return f(std::integral_constant<int, 96>{}), true;
    case 112:
      return f(std::integral_constant<int, 112>{}), true;
    case 128:
      return f(std::integral_constant<int, 128>{}), true;
  }
  return false;
}

// Launches the flash kernel of element type T for head size E (attention_flash_<type>.cu
// instantiate it, one file a type, so that the three compile side by side).
template <class T>
void launch(KernelArgs& args, const FlashArgs& a, int64_t E) {
  const bool launched =
      with_head_size(E, [&](auto e) { launch_head<T, decltype(e)::value>(args, a); });
  KILN_CHECK(launched, InternalError, "layer `", args.layer.name,
             "`: no flash attention kernel for E=", E);
}

// How launch<T> runs a layer of head size E (kernels.h's flash_launch); false for a head size
// the flash kernels do not take.
template <class T>
bool launch_shape(int64_t E, int64_t L, int64_t S, int64_t pairs, int device, bool key_split,
                  FlashLaunch* launch) {
  return with_head_size(E, [&](auto e) {
    const ResidentShape shape = flash_shape<T, decltype(e)::value>(L, S, pairs, device, key_split);
    launch->warps = shape.warps, launch->block_rows = shape.block_rows,
    launch->splits = shape.splits;
  });
}

// Instantiated in attention_flash_f16.cu, _bf16.cu and _f32.cu only.
#define KILN_FLASH_TYPE(T, how)                                        \
  how template void launch<T>(KernelArgs&, const FlashArgs&, int64_t); \
  how template bool launch_shape<T>(int64_t, int64_t, int64_t, int64_t, int, bool, FlashLaunch*);
KILN_FLASH_TYPE(__half, extern)
KILN_FLASH_TYPE(__nv_bfloat16, extern)
KILN_FLASH_TYPE(float, extern)

}  // namespace kiln::engine::cuda::flash
