// The GEMM of few rows with wgmma (skinny_gemm.cuh, Products::kWgmma): built for sm_90a alone,
// the only architecture that has wgmma; skinny_gemm.cu offers these forms only on a GPU of
// compute capability 9.0 (skinny_wgmma_available).
#include "engine/cuda/skinny_gemm.cuh"

namespace kiln::engine::cuda::skinny {

void launch_wgmma(cudaStream_t stream, DataType t, int64_t rows, int64_t n, int64_t k, int splits,
                  int block_rows, bool push, const void* a, const void* w, void* y,
                  const SkinnyPostOps& post, bool early) {
  const auto launch = [&](auto type, auto pushed) {
    using T = decltype(type);
    constexpr bool Push = decltype(pushed)::value;
    block_rows == 64 ? launch_typed<T, 64, false, Products::kWgmma, Push>(stream, rows, n, k,
                                                                          splits, a, w, y, post,
                                                                          early)
                     : launch_typed<T, 128, false, Products::kWgmma, Push>(stream, rows, n, k,
                                                                           splits, a, w, y, post,
                                                                           early);
  };
  const auto by_reduction = [&](auto type) {
    push ? launch(type, std::true_type{}) : launch(type, std::false_type{});
  };
  t == DataType::kF16 ? by_reduction(__half{}) : by_reduction(__nv_bfloat16{});
}

}  // namespace kiln::engine::cuda::skinny
