// What launching a grid in thread-block clusters costs inside a CUDA graph (G73): a chain of 20
// dependent launches of one small kernel (each block reads `kb` KiB, then syncs its cluster when
// it has one), captured and replayed; prints the median replay time per launch for grids of 96
// and 108 blocks of 256 threads, without clusters and in clusters of 1, 2, 3 and 8 blocks, with
// no dynamic shared memory and with 96 KiB (opted into). The skinny GEMM's forms (clusters of
// 2-8, 96-108 blocks) took 7.6-12 us a launch in BERT's replay where the work is ~1 us.
// Build and run on the device: nvcc -O3 -arch=sm_90 cluster_probe.cu -o cluster_probe &&
// ./cluster_probe
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.h"

__global__ void reader(const float4* in, float* out, int per_block, int sync_cluster) {
  float s = 0.f;
  const float4* mine = in + static_cast<size_t>(blockIdx.x) * per_block;
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) {
    const float4 v = mine[i];
    s += v.x + v.y + v.z + v.w;
  }
  if (sync_cluster) cooperative_groups::this_cluster().sync();
  if (s == 12345.f) out[blockIdx.x] = s;  // never, but the loads stay
}

static float time_chain(int blocks, int cluster, size_t smem, int per_block, const float4* in,
                        float* out, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = blocks;
  cfg.blockDim = 256;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  if (cluster > 0) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  const int chain = 20;
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < chain; ++i) {
    CHECK(cudaLaunchKernelEx(&cfg, reader, in, out, per_block, cluster > 1 ? 1 : 0));
  }
  CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int r = 0; r < 60; ++r) {
    CHECK(cudaEventRecord(a, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    if (r >= 10) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return ms[ms.size() / 2] * 1000.f / chain;
}

int main() {
  const int kb_max = 64;
  const size_t floats = static_cast<size_t>(108) * kb_max * 1024 / 4;
  float4* in;
  float* out;
  CHECK(cudaMalloc(&in, floats * 4));
  CHECK(cudaMemset(in, 0, floats * 4));
  CHECK(cudaMalloc(&out, 4096));
  CHECK(cudaFuncSetAttribute(reader, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  std::printf("| blocks | KiB a block | smem KiB | no cluster | cluster 1 | 2 | 3 | 8 |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int blocks : {96, 108}) {
    for (int kb : {0, 32}) {
      for (size_t smem : {size_t{0}, size_t{96 * 1024}}) {
        std::printf("| %d | %d | %zu |", blocks, kb, smem / 1024);
        for (int cluster : {0, 1, 2, 3, 8}) {
          if (cluster > 1 && blocks % cluster != 0) {
            std::printf(" - |");
            continue;
          }
          std::printf(" %.2f |", time_chain(blocks, cluster, smem, kb * 1024 / 16, in, out, s));
        }
        std::printf("\n");
      }
    }
  }
  return 0;
}
