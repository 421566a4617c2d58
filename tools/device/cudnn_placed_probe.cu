// Whether cuDNN writes a convolution's NHWC output placed in a wider tensor (a concat's: each
// pixel's C channels `pitch` elements after the last pixel's), and at what cost against a dense
// output: issue #28 item 4, bench/NOTES.md G82. The legacy API's heuristic offers no algorithm
// for such an output, so this asks both APIs directly:
//  - legacy: every forward algorithm, its workspace query and its run, dense and placed;
//  - graph (cuDNN frontend): the plans of heuristic modes A and FALLBACK, each built and run,
//    dense and placed.
// Every placed run is checked against the dense result of the same API, and the bytes around its
// slice against a sentinel (nothing written outside it). f16, tensor-op math, fp32 accumulation.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -DCUDNN_FRONTEND_SKIP_JSON_LIB -I<frontend>/include \
//        tools/device/cudnn_placed_probe.cu -lcudnn -o probe && ./probe
// (tools/device/cudnn-placed-probe.sh does this on the device machine.)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

#include "probe_check.h"

namespace fe = cudnn_frontend;

namespace {

#define CK_DNN(x)                                                                              \
  do {                                                                                         \
    cudnnStatus_t s_ = (x);                                                                    \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

// A convolution of inception_v3, googlenet or densenet121 at batch 32, its output placed at
// channel `offset` of rows of `pitch` channels.
struct Case {
  const char* name;
  int n, c, h, w, k, r, pad, offset, pitch;
};

constexpr uint16_t kSentinel = 0x7bff;  // f16 65504: no convolution here gives it

// Median of `reps` timed runs of `run` after 3 untimed ones, in microseconds; -1 where a run
// fails.
float median_us(cudaStream_t stream, const std::function<bool()>& run, int reps = 20) {
  for (int i = 0; i < 3; ++i) {
    if (!run()) return -1.f;
  }
  CHECK(cudaStreamSynchronize(stream));
  std::vector<float> t;
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(a, stream));
    run();
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.f);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Buffers {
  size_t pixels = 0, out_pixels = 0;
  __half *x = nullptr, *w = nullptr, *dense = nullptr, *placed = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = size_t{256} << 20;
};

// Fills `placed` with the sentinel (so a run that writes outside its slice shows).
void reset_placed(const Buffers& b, const Case& c) {
  std::vector<uint16_t> host(b.out_pixels * c.pitch, kSentinel);
  CHECK(cudaMemcpy(b.placed, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
}

// The placed result against the dense one: the largest difference over the slice, and how many
// elements outside the slice changed.
std::string compare(const Buffers& b, const Case& c) {
  std::vector<uint16_t> d(b.out_pixels * c.k), p(b.out_pixels * c.pitch);
  CHECK(cudaMemcpy(d.data(), b.dense, d.size() * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(p.data(), b.placed, p.size() * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  size_t outside = 0;
  for (size_t i = 0; i < b.out_pixels; ++i) {
    for (int ch = 0; ch < c.pitch; ++ch) {
      const uint16_t v = p[i * c.pitch + ch];
      if (ch < c.offset || ch >= c.offset + c.k) {
        outside += v != kSentinel;
        continue;
      }
      __half hv, hd;
      std::memcpy(&hv, &v, 2);
      std::memcpy(&hd, &d[i * c.k + (ch - c.offset)], 2);
      worst = std::max(worst, std::fabs(double(__half2float(hv)) - double(__half2float(hd))));
    }
  }
  char line[96];
  std::snprintf(line, sizeof(line), "max diff %.3g, %zu written outside", worst, outside);
  return line;
}

void legacy(cudnnHandle_t handle, cudaStream_t stream, const Case& c, const Buffers& b) {
  const int oh = c.h + 2 * c.pad - c.r + 1, ow = c.w + 2 * c.pad - c.r + 1;
  cudnnTensorDescriptor_t xd, yd, pd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  CK_DNN(cudnnCreateTensorDescriptor(&xd));
  CK_DNN(cudnnCreateTensorDescriptor(&yd));
  CK_DNN(cudnnCreateTensorDescriptor(&pd));
  CK_DNN(cudnnCreateFilterDescriptor(&wd));
  CK_DNN(cudnnCreateConvolutionDescriptor(&cd));
  CK_DNN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, c.n, c.c, c.h, c.w));
  CK_DNN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, c.n, c.k, oh, ow));
  CK_DNN(cudnnSetTensor4dDescriptorEx(pd, CUDNN_DATA_HALF, c.n, c.k, oh, ow, oh * ow * c.pitch, 1,
                                      ow * c.pitch, c.pitch));
  CK_DNN(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, c.k, c.c, c.r, c.r));
  CK_DNN(cudnnSetConvolution2dDescriptor(cd, c.pad, c.pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                         CUDNN_DATA_FLOAT));
  CK_DNN(cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH));
  // What the heuristic says for each output.
  for (auto [label, d] : {std::pair{"dense", yd}, std::pair{"placed", pd}}) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    CK_DNN(cudnnGetConvolutionForwardAlgorithm_v7(handle, xd, wd, cd, d,
                                                  CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
    std::printf("  legacy heuristic, %s:", label);
    for (int i = 0; i < found; ++i) {
      std::printf(" %d(%s)", static_cast<int>(perf[i].algo),
                  perf[i].status == CUDNN_STATUS_SUCCESS ? "ok" : "refused");
    }
    std::printf("\n");
  }
  const float one = 1.f, zero = 0.f;
  for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) {
    const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(a);
    size_t need_dense = 0, need_placed = 0;
    const bool ok_dense = cudnnGetConvolutionForwardWorkspaceSize(
                              handle, xd, wd, cd, yd, algo, &need_dense) == CUDNN_STATUS_SUCCESS &&
                          need_dense <= b.ws_bytes;
    const bool ok_placed =
        cudnnGetConvolutionForwardWorkspaceSize(handle, xd, wd, cd, pd, algo, &need_placed) ==
            CUDNN_STATUS_SUCCESS &&
        need_placed <= b.ws_bytes;
    const auto run = [&](cudnnTensorDescriptor_t d, void* y, size_t need) {
      return [&, d, y, need] {
        return cudnnConvolutionForward(handle, &one, xd, b.x, wd, b.w, cd, algo, b.ws, need, &zero,
                                       d, y) == CUDNN_STATUS_SUCCESS;
      };
    };
    const float dense_us = ok_dense ? median_us(stream, run(yd, b.dense, need_dense)) : -1.f;
    reset_placed(b, c);
    const float placed_us =
        ok_placed ? median_us(stream, run(pd, b.placed + c.offset, need_placed)) : -1.f;
    std::printf("  legacy algo %d: dense %s, placed %s", a,
                dense_us < 0 ? "refused" : (std::to_string(dense_us) + " us").c_str(),
                placed_us < 0 ? "refused" : (std::to_string(placed_us) + " us").c_str());
    if (dense_us >= 0 && placed_us >= 0) std::printf(" (%s)", compare(b, c).c_str());
    std::printf("\n");
  }
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyTensorDescriptor(pd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
}

enum Uid : int64_t { kX = 1, kW, kY };

// The graph API's plans for the convolution with an output of `pitch` channels a pixel (c.k:
// dense), each built and timed; returns the fastest plan's time (-1: none ran).
float graph(cudnnHandle_t handle, cudaStream_t stream, const Case& c, const Buffers& b, int pitch,
            void* y) {
  const int64_t oh = c.h + 2 * c.pad - c.r + 1, ow = c.w + 2 * c.pad - c.r + 1;
  const char* label = pitch == c.k ? "dense" : "placed";
  fe::graph::Graph g;
  g.set_io_data_type(fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const auto x = g.tensor(fe::graph::Tensor_attributes()
                              .set_uid(kX)
                              .set_name("x")
                              .set_dim({c.n, c.c, c.h, c.w})
                              .set_stride({int64_t{c.h} * c.w * c.c, 1, int64_t{c.w} * c.c, c.c}));
  const auto w = g.tensor(fe::graph::Tensor_attributes()
                              .set_uid(kW)
                              .set_name("w")
                              .set_dim({c.k, c.c, c.r, c.r})
                              .set_stride({int64_t{c.r} * c.r * c.c, 1, int64_t{c.r} * c.c, c.c}));
  const auto out = g.conv_fprop(x, w,
                                fe::graph::Conv_fprop_attributes()
                                    .set_name("conv")
                                    .set_padding({c.pad, c.pad})
                                    .set_stride({1, 1})
                                    .set_dilation({1, 1}));
  out->set_output(true)
      .set_uid(kY)
      .set_dim({c.n, c.k, oh, ow})
      .set_stride({oh * ow * pitch, 1, ow * pitch, pitch})
      .set_data_type(fe::DataType_t::HALF);
  fe::error_t e = g.validate();
  if (e.is_good()) e = g.build_operation_graph(handle);
  if (e.is_good()) e = g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
  if (e.is_good()) e = g.check_support(handle);
  if (e.is_good()) e = g.build_plans(handle, fe::BuildPlanPolicy_t::ALL);
  if (e.is_bad()) {
    std::printf("  graph, %s: no plan (%s)\n", label, e.err_msg.c_str());
    return -1.f;
  }
  const int64_t plans = g.get_execution_plan_count();
  std::unordered_map<int64_t, void*> pack = {{kX, b.x}, {kW, b.w}, {kY, y}};
  float best = -1.f;
  for (int64_t i = 0; i < plans; ++i) {
    int64_t need = 0;
    if (g.get_workspace_size_plan_at_index(i, need).is_bad() ||
        need > static_cast<int64_t>(b.ws_bytes)) {
      continue;
    }
    if (pitch != c.k) reset_placed(b, c);
    const float us =
        median_us(stream, [&] { return g.execute_plan_at_index(handle, pack, b.ws, i).is_good(); });
    std::printf("  graph, %s, plan %lld of %lld: %s", label, static_cast<long long>(i),
                static_cast<long long>(plans),
                us < 0 ? "failed" : (std::to_string(us) + " us").c_str());
    if (pitch != c.k && us >= 0) std::printf(" (%s)", compare(b, c).c_str());
    std::printf("\n");
    if (us >= 0 && (best < 0 || us < best)) best = us;
  }
  return best;
}

}  // namespace

int main() {
  const Case cases[] = {
      {"inception_v3 Mixed_5b 5x5", 32, 48, 35, 35, 64, 5, 2, 64, 256},
      {"googlenet inception3a 3x3", 32, 96, 28, 28, 128, 3, 1, 64, 256},
      {"densenet121 block1 3x3", 32, 128, 56, 56, 32, 3, 1, 64, 256},
  };
  cudnnHandle_t handle;
  CK_DNN(cudnnCreate(&handle));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CK_DNN(cudnnSetStream(handle, stream));
  std::printf("cuDNN %zu\n", cudnnGetVersion());
  for (const Case& c : cases) {
    const int oh = c.h + 2 * c.pad - c.r + 1, ow = c.w + 2 * c.pad - c.r + 1;
    Buffers b;
    b.pixels = size_t(c.n) * c.h * c.w;
    b.out_pixels = size_t(c.n) * oh * ow;
    std::vector<__half> hx(b.pixels * c.c), hw(size_t(c.k) * c.c * c.r * c.r);
    uint32_t s = 12345;
    const auto next = [&] {
      s = s * 1664525u + 1013904223u;
      return float(s >> 8) / float(1 << 24) - 0.5f;
    };
    for (auto& v : hx) v = __float2half(next());
    for (auto& v : hw) v = __float2half(next() * 0.2f);
    CHECK(cudaMalloc(&b.x, hx.size() * 2));
    CHECK(cudaMalloc(&b.w, hw.size() * 2));
    CHECK(cudaMalloc(&b.dense, b.out_pixels * c.k * 2));
    CHECK(cudaMalloc(&b.placed, b.out_pixels * c.pitch * 2));
    CHECK(cudaMalloc(&b.ws, b.ws_bytes));
    CHECK(cudaMemcpy(b.x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b.w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
    std::printf("%s: x [%d, %d, %d, %d] NHWC, w [%d, %d, %d, %d], output at channel %d of %d\n",
                c.name, c.n, c.c, c.h, c.w, c.k, c.c, c.r, c.r, c.offset, c.pitch);
    legacy(handle, stream, c, b);
    const float dense = graph(handle, stream, c, b, c.k, b.dense);
    const float placed =
        graph(handle, stream, c, b, c.pitch, static_cast<void*>(b.placed + c.offset));
    std::printf("  graph best: dense %.2f us, placed %.2f us\n", dense, placed);
    cudaFree(b.x);
    cudaFree(b.w);
    cudaFree(b.dense);
    cudaFree(b.placed);
    cudaFree(b.ws);
  }
  cudnnDestroy(handle);
  return 0;
}
