// CUDA kernel of the matmul family's integer products (i64, i32; cuBLASLt has none that wrap
// around as torch's do): shared-memory tiles of a and b, each thread accumulating a 4 x 4 block of
// the output in int64 with scalar_math.h's wrapping arithmetic, and the bias and residual
// post-ops added in the same pass.
#include <algorithm>

#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"
#include "engine/layers/setup.h"

namespace kiln::engine::cuda {
namespace {

// Output tile kTile x kTile per block of kSide x kSide threads (each kPer x kPer elements, kSide
// apart), over depth slices of kDepth.
constexpr int kSide = 16, kPer = 4, kTile = kSide * kPer, kDepth = 16;

template <class T>
struct IntegerGemm {
  const T *a, *b, *bias, *residual;
  T* y;
  int64_t m, n, k, batches, bias_size;
  int64_t a_row, a_col, b_row, b_col;
  Dims a_batch, b_batch;  // batch matrix t's offset in a and b: offset_of(t)
  Dims res;               // output element e's offset in the residual: offset_of(e)
};

template <class T>
__global__ void __launch_bounds__(kSide* kSide) integer_gemm_kernel(IntegerGemm<T> g) {
  __shared__ int64_t as[kDepth][kTile];  // as[p][i]: a's element (i, p) of the tile
  __shared__ int64_t bs[kDepth][kTile];  // bs[p][j]: b's element (p, j) of the tile
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kSide + tx;
  const int64_t row_tiles = (g.m + kTile - 1) / kTile, col_tiles = (g.n + kTile - 1) / kTile;
  // Every thread of a block walks the same tiles (the barriers need it).
  for (int64_t t = blockIdx.z; t < g.batches; t += gridDim.z) {
    const T* a = g.a + offset_of(g.a_batch, t);
    const T* b = g.b + offset_of(g.b_batch, t);
    for (int64_t rt = blockIdx.x; rt < row_tiles; rt += gridDim.x) {
      for (int64_t ct = blockIdx.y; ct < col_tiles; ct += gridDim.y) {
        const int64_t i0 = rt * kTile, j0 = ct * kTile;
        int64_t acc[kPer][kPer] = {};
        for (int64_t p0 = 0; p0 < g.k; p0 += kDepth) {
          for (int e = tid; e < kDepth * kTile; e += kSide * kSide) {
            const int p = e / kTile, x = e % kTile;
            const int64_t i = i0 + x, j = j0 + x, pp = p0 + p;
            as[p][x] =
                i < g.m && pp < g.k ? static_cast<int64_t>(a[i * g.a_row + pp * g.a_col]) : 0;
            bs[p][x] =
                j < g.n && pp < g.k ? static_cast<int64_t>(b[pp * g.b_row + j * g.b_col]) : 0;
          }
          __syncthreads();
#pragma unroll
          for (int p = 0; p < kDepth; ++p) {
            int64_t av[kPer], bv[kPer];
#pragma unroll
            for (int r = 0; r < kPer; ++r) av[r] = as[p][ty + r * kSide];
#pragma unroll
            for (int c = 0; c < kPer; ++c) bv[c] = bs[p][tx + c * kSide];
#pragma unroll
            for (int r = 0; r < kPer; ++r) {
#pragma unroll
              for (int c = 0; c < kPer; ++c) {
                acc[r][c] = wrapping_add(acc[r][c], wrapping_mul(av[r], bv[c]));
              }
            }
          }
          __syncthreads();
        }
#pragma unroll
        for (int r = 0; r < kPer; ++r) {
          const int64_t i = i0 + ty + r * kSide;
          if (i >= g.m) continue;
#pragma unroll
          for (int c = 0; c < kPer; ++c) {
            const int64_t j = j0 + tx + c * kSide;
            if (j >= g.n) continue;
            int64_t v = acc[r][c];
            if (g.bias) v = wrapping_add(v, g.bias[g.bias_size == 1 ? 0 : j]);
            const int64_t e = (t * g.m + i) * g.n + j;
            if (g.residual) v = wrapping_add(v, g.residual[offset_of(g.res, e)]);
            g.y[e] = static_cast<T>(v);
          }
        }
      }
    }
  }
}

template <class T>
void launch(cudaStream_t stream, const std::string& layer, const MatMulParams& p,
            const std::vector<TensorView>& inputs, const TensorView& out) {
  const TensorView &a = inputs[0], &b = inputs[1];
  const MatMulGeometry geo = matmul_geometry(p, a.shape, b.shape);
  IntegerGemm<T> g{};
  g.a = static_cast<const T*>(a.data);
  g.b = static_cast<const T*>(b.data);
  g.y = static_cast<T*>(out.data);
  g.m = geo.m, g.n = geo.n, g.k = geo.k, g.batches = geo.batches();
  g.a_row = geo.a_row, g.a_col = geo.a_col, g.b_row = geo.b_row, g.b_col = geo.b_col;
  g.a_batch = strided_dims(layer, geo.batch, geo.a_batch_strides);
  g.b_batch = strided_dims(layer, geo.batch, geo.b_batch_strides);
  size_t next = 2;
  if (p.post.has_bias) {
    g.bias = static_cast<const T*>(inputs[next].data);
    g.bias_size = inputs[next++].numel();
  }
  if (p.post.has_residual) {
    const TensorView& residual = inputs[next++];
    g.residual = static_cast<const T*>(residual.data);
    g.res = broadcast_dims(layer, out.shape, {residual.shape})[1];
  }
  const int64_t row_tiles = (g.m + kTile - 1) / kTile, col_tiles = (g.n + kTile - 1) / kTile;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(row_tiles, 1 << 30)),
                  static_cast<unsigned>(std::min<int64_t>(col_tiles, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(g.batches, 65535)));
  integer_gemm_kernel<T><<<grid, dim3(kSide, kSide), 0, stream>>>(g);
  KILN_CUDA_CHECK_LAUNCH(layer);
}

}  // namespace

void launch_integer_matmul(cudaStream_t stream, const std::string& layer, const MatMulParams& p,
                           const std::vector<TensorView>& inputs, const TensorView& out) {
  if (out.numel() == 0) return;
  if (out.dtype == DataType::kI64) {
    launch<int64_t>(stream, layer, p, inputs, out);
  } else if (out.dtype == DataType::kI32) {
    launch<int32_t>(stream, layer, p, inputs, out);
  } else {
    KILN_THROW(InternalError, "layer `", layer, "` (matmul): no integer kernel for ",
               dtype_name(out.dtype));
  }
}

}  // namespace kiln::engine::cuda
