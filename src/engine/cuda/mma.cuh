// Tensor-core primitives (PTX mma.sync and ldmatrix, sm_80+) shared by the kernels that run their
// own matrix products: the flash attention kernels (attention_flash.cuh) and the GEMM of few rows
// (skinny_gemm.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace kiln::engine::cuda {

// f32 rounded to TF32 (to nearest, ties away from zero; the low 13 bits of the result are zero),
// as an mma operand.
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t y;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t to_tf32(uint32_t bits) {
  return to_tf32(__uint_as_float(bits));
}

// D += A B for one k-step of element type T (16 elements of k for f16 and bf16, 8 for f32), D a
// 16x8 float fragment whose lane l holds rows g = l / 4 and g + 8 at columns 2t + {0, 1}, t = l %
// 4. f16 and bf16 (m16n8k16): a 16x16 A (row-major, four 32-bit registers of two elements) at the
// same rows, columns 2t + {0, 1} and + 8; B's column g at rows 2t + {0, 1} and + 8 (two
// registers). f32 (m16n8k8 on TF32, operands rounded by to_tf32): a 16x8 A of one element a
// register, (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B's column g at rows t and t + 4.
template <class T>
__device__ __forceinline__ void mma_step(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (std::is_same_v<T, float>) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (std::is_same_v<T, __half>) {
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
// column-major B, B's) fragment layout. On rows of f32 (8 rows of 4 elements a matrix) lane l
// gets element l % 4 of row l / 4: the TF32 fragments' layout too.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

}  // namespace kiln::engine::cuda
