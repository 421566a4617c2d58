// Measures what a kernel boundary costs inside a CUDA graph, with and without programmatic
// dependent launch (PDL): a chain of N dependent kernels, each adding 1 to every element of a
// buffer, captured into a graph and replayed. Prints the median replay time per kernel for each
// buffer size, and checks the buffer's final value (a PDL chain that raced would miss updates).
// Build and run on the device: nvcc -O3 -arch=sm_90 pdl_probe.cu -o pdl_probe && ./pdl_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.h"

template <bool kWait>
__global__ void add_one(float* x, int n) {
  if (kWait) asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] += 1.0f;
  }
}

static void launch(bool pdl, float* x, int n, cudaStream_t s) {
  const int threads = 256;
  const int blocks = std::min((n + threads - 1) / threads, 132 * 8);
  if (!pdl) {
    add_one<false><<<blocks, threads, 0, s>>>(x, n);
    return;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = blocks;
  cfg.blockDim = threads;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&cfg, add_one<true>, x, n));
}

int main() {
  const int chain = 100;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::printf("%10s %14s %14s %8s\n", "elements", "plain us/kern", "pdl us/kern", "check");
  for (int n : {1024, 32768, 262144, 1 << 20, 1 << 22}) {
    float med[2];
    bool ok = true;
    for (int pdl = 0; pdl < 2; ++pdl) {
      float* x;
      CHECK(cudaMalloc(&x, n * sizeof(float)));
      CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), s));
      cudaGraph_t g;
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int k = 0; k < chain; ++k) launch(pdl, x, n, s);
      CHECK(cudaStreamEndCapture(s, &g));
      cudaGraphExec_t e;
      CHECK(cudaGraphInstantiate(&e, g, 0));
      std::vector<float> ms;
      const int reps = 30;
      for (int r = 0; r < reps; ++r) {
        CHECK(cudaEventRecord(a, s));
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaEventRecord(b, s));
        CHECK(cudaEventSynchronize(b));
        float t;
        CHECK(cudaEventElapsedTime(&t, a, b));
        if (r >= 5) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      med[pdl] = ms[ms.size() / 2] * 1000.0f / chain;
      std::vector<float> h(n);
      CHECK(cudaMemcpy(h.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
      const float want = static_cast<float>(chain * reps);
      for (int i = 0; i < n; ++i) ok = ok && h[i] == want;
      CHECK(cudaGraphExecDestroy(e));
      CHECK(cudaGraphDestroy(g));
      CHECK(cudaFree(x));
    }
    std::printf("%10d %14.3f %14.3f %8s\n", n, med[0], med[1], ok ? "ok" : "WRONG");
  }
  return 0;
}
