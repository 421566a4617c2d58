// The GEMM of few rows with wgmma (skinny_gemm.cuh, Products::kWgmma): built for sm_90a alone,
// the only architecture that has wgmma; skinny_gemm.cu offers these forms only on a GPU of
// compute capability 9.0 (skinny_wgmma_available).
#include "engine/cuda/skinny_gemm.cuh"

namespace kiln::engine::cuda::skinny {

void launch_wgmma(cudaStream_t stream, DataType t, int64_t rows, int64_t n, int64_t k, int splits,
                  int block_rows, const void* a, const void* w, void* y, const SkinnyPostOps& post,
                  bool early) {
  const auto launch = [&](auto type) {
    using T = decltype(type);
    block_rows == 64 ? launch_typed<T, 64, false, Products::kWgmma>(stream, rows, n, k, splits, a,
                                                                    w, y, post, early)
                     : launch_typed<T, 128, false, Products::kWgmma>(stream, rows, n, k, splits, a,
                                                                     w, y, post, early);
  };
  t == DataType::kF16 ? launch(__half{}) : launch(__nv_bfloat16{});
}

}  // namespace kiln::engine::cuda::skinny
