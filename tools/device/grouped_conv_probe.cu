// Times every cuDNN forward algorithm (legacy API, as src/engine/cuda/convolution.cpp uses it) on
// the grouped 3x3 convolutions of the regnets, f16 with tensor-op math, in NHWC and NCHW, against
// the heuristic's first usable answer (what kiln runs). A measurement tool for issue #28 item 7
// (bench/NOTES.md): it answers whether the regnet rows lose on the algorithm, on the layout, or on
// cuDNN itself (then a kernel of our own is the way).
//
//   nvcc -O2 -std=c++17 -arch=sm_90 tools/device/grouped_conv_probe.cu -lcudnn -o probe
//   ./probe [N C H stride groups]...   (default: regnet_x_3_2gf's and regnet_y_1_6gf's at N=32)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                    \
  do {                                                                           \
    auto s_ = (x);                                                               \
    if (static_cast<int>(s_) != 0) {                                             \
      std::fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, (int)s_); \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

namespace {

struct Case {
  int n, c, h, stride, groups;
};

float time_us(cudnnHandle_t h, cudnnTensorDescriptor_t xd, const void* x,
              cudnnFilterDescriptor_t wd, const void* w, cudnnConvolutionDescriptor_t cd,
              cudnnConvolutionFwdAlgo_t algo, void* ws, size_t ws_bytes, cudnnTensorDescriptor_t yd,
              void* y) {
  const float one = 1.f, zero = 0.f;
  for (int i = 0; i < 5; ++i)
    if (cudnnConvolutionForward(h, &one, xd, x, wd, w, cd, algo, ws, ws_bytes, &zero, yd, y) !=
        CUDNN_STATUS_SUCCESS)
      return -1.f;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < 21; ++r) {
    CK(cudaEventRecord(a));
    for (int i = 0; i < 10; ++i)
      cudnnConvolutionForward(h, &one, xd, x, wd, w, cd, algo, ws, ws_bytes, &zero, yd, y);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 100.f);  // us per call
  }
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return t[t.size() / 2];
}

void run(cudnnHandle_t h, const Case& k, bool nhwc) {
  const int oh = (k.h + 2 - 3) / k.stride + 1;
  const int cg = k.c / k.groups;
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  CK(cudnnCreateTensorDescriptor(&xd));
  CK(cudnnCreateTensorDescriptor(&yd));
  CK(cudnnCreateFilterDescriptor(&wd));
  CK(cudnnCreateConvolutionDescriptor(&cd));
  const auto fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  CK(cudnnSetTensor4dDescriptor(xd, fmt, CUDNN_DATA_HALF, k.n, k.c, k.h, k.h));
  CK(cudnnSetTensor4dDescriptor(yd, fmt, CUDNN_DATA_HALF, k.n, k.c, oh, oh));
  CK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_HALF, fmt, k.c, cg, 3, 3));
  CK(cudnnSetConvolution2dDescriptor(cd, 1, 1, k.stride, k.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                     CUDNN_DATA_FLOAT));
  CK(cudnnSetConvolutionGroupCount(cd, k.groups));
  CK(cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH));
  const size_t xb = size_t(k.n) * k.c * k.h * k.h * 2, yb = size_t(k.n) * k.c * oh * oh * 2,
               wb = size_t(k.c) * cg * 9 * 2;
  void *x, *y, *w, *ws;
  CK(cudaMalloc(&x, xb));
  CK(cudaMalloc(&y, yb));
  CK(cudaMalloc(&w, wb));
  CK(cudaMemset(x, 0, xb));
  CK(cudaMemset(w, 0, wb));
  const size_t ws_max = size_t{512} << 20;
  CK(cudaMalloc(&ws, ws_max));
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int found = 0;
  CK(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                            &found, perf));
  // Bytes moved at least once: input, output, weights; at 4.8 TB/s.
  const double floor_us = double(xb + yb + wb) / 4.8e6;
  std::printf("N%d C%d H%d s%d g%d (%d/group) %s  memory floor %.1f us\n", k.n, k.c, k.h, k.stride,
              k.groups, cg, nhwc ? "NHWC" : "NCHW", floor_us);
  bool first = true;
  for (int i = 0; i < found; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > ws_max) continue;
    const float us = time_us(h, xd, x, wd, w, cd, perf[i].algo, ws, ws_max, yd, y);
    std::printf("  rank %d algo %d math %d ws %zu: %s%.1f us\n", i, int(perf[i].algo),
                int(perf[i].mathType), perf[i].memory, first ? "(kiln) " : "", us);
    first = false;
  }
  CK(cudaFree(x));
  CK(cudaFree(y));
  CK(cudaFree(w));
  CK(cudaFree(ws));
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Case> cases;
  for (int i = 1; i + 4 < argc; i += 5)
    cases.push_back({std::atoi(argv[i]), std::atoi(argv[i + 1]), std::atoi(argv[i + 2]),
                     std::atoi(argv[i + 3]), std::atoi(argv[i + 4])});
  if (cases.empty())
    cases = {// regnet_x_3_2gf (48 channels a group)
             {32, 96, 112, 2, 2},
             {32, 96, 56, 1, 2},
             {32, 192, 56, 2, 4},
             {32, 192, 28, 1, 4},
             {32, 432, 28, 2, 9},
             {32, 432, 14, 1, 9},
             {32, 1008, 14, 2, 21},
             {32, 1008, 7, 1, 21},
             // regnet_y_1_6gf (24 channels a group)
             {32, 48, 112, 2, 2},
             {32, 120, 28, 1, 5},
             {32, 336, 14, 1, 14},
             {32, 888, 7, 1, 37}};
  cudnnHandle_t h;
  CK(cudnnCreate(&h));
  std::printf("cuDNN %zu\n", cudnnGetVersion());
  for (const auto& k : cases) {
    run(h, k, true);
    run(h, k, false);
  }
  cudnnDestroy(h);
  return 0;
}
