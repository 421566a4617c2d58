// Where a block of the GEMM of few rows (skinny_gemm.cuh) spends its time inside BERT's replay
// (G73: a fixed ~6 us a launch inside the blocks, not the products). Runs BERT-base's 48 GEMMs at
// 128 rows (12 layers of QKV 2304x768, O 768x768 + residual, FFN1 3072x768 + GELU, FFN2
// 768x3072 + residual; f16; every layer its own weights, 170 MB, so they come from memory as in
// the model) as one captured chain, replays it, and from the last replay's marks (thread 0 of each
// block, KILN_SKINNY_MARK: %globaltimer at entry and exit, clock64 at each phase) prints per GEMM:
// the replay's time a launch, the kernel's span (first block in to last block out) and the gap
// before it, how late blocks start after the first, and the medians of each phase of a block:
// prologue (entry to the first stages issued), main loop, the cluster barrier after the partials
// are written (waiting for the slowest block of the cluster), the sums and post-ops, the last
// barrier. Build and run on the device:
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -Isrc -gencode arch=compute_90a,code=sm_90a \
//     tools/device/skinny_phases.cu -o /tmp/skinny_phases && /tmp/skinny_phases [wgmma|mma]
//     [splits of QKV,O,FFN1,FFN2 (default 3,8,2,8: the forms that fill the SMs)]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// Each block's record: clock64 at marks 0-5, %globaltimer at entry (6) and exit (7), the SM (8).
constexpr int kSlots = 10;
__device__ unsigned long long* g_log;
__device__ const char* g_y_base;
__device__ long long g_y_stride;
__device__ int g_max_blocks;

template <class T>
__device__ __forceinline__ void skinny_probe_mark(const T* y, int phase) {
  if (threadIdx.x != 0) return;
  const long long launch = (reinterpret_cast<const char*>(y) - g_y_base) / g_y_stride;
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned long long* rec = g_log + (launch * g_max_blocks + block) * kSlots;
  unsigned long long t;
  if (phase == 0 || phase == 5) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    rec[phase == 0 ? 6 : 7] = t;
  }
  if (phase == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    rec[8] = sm;
  }
  rec[phase] = clock64();
}
#define KILN_SKINNY_MARK(phase) skinny_probe_mark(y, phase)

#include "engine/cuda/skinny_gemm.cuh"
#include "probe_check.h"

using kiln::engine::ActivationKind;
namespace sk = kiln::engine::cuda::skinny;

namespace {

struct Gemm {
  const char* name;
  int n, k, splits;
  ActivationKind act;
  bool residual;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <sk::Products P>
void run(const std::vector<Gemm>& gemms) {
  constexpr int kRows = 128, kLayers = 12;
  const auto kernel = sk::skinny_gemm_kernel<__half, 128, false, P>;
  constexpr int smem = sk::smem_bytes<128>();
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int max_k = 0, max_n = 0, max_blocks = 0;
  size_t weight_elems = 0;
  for (const Gemm& g : gemms) {
    max_k = std::max(max_k, g.k), max_n = std::max(max_n, g.n);
    max_blocks = std::max(max_blocks, g.splits * g.n / sk::kTileN);
    weight_elems += static_cast<size_t>(g.n) * g.k;
  }
  const int launches = kLayers * static_cast<int>(gemms.size());
  const size_t y_stride = static_cast<size_t>(kRows) * max_n * sizeof(__half);
  __half *a, *w, *bias, *res;
  char* y;
  unsigned long long* log;
  CHECK(cudaMalloc(&a, static_cast<size_t>(kRows) * max_k * sizeof(__half)));
  CHECK(cudaMalloc(&w, weight_elems * kLayers * sizeof(__half)));
  CHECK(cudaMalloc(&bias, max_n * sizeof(__half)));
  CHECK(cudaMalloc(&res, y_stride));
  CHECK(cudaMalloc(&y, y_stride * launches));
  CHECK(cudaMalloc(&log, sizeof(unsigned long long) * kSlots * max_blocks * launches));
  // Small values (0x1000: ~6e-5), so nothing overflows; what they are does not change the time.
  CHECK(cudaMemset(a, 0x10, static_cast<size_t>(kRows) * max_k * sizeof(__half)));
  CHECK(cudaMemset(w, 0x10, weight_elems * kLayers * sizeof(__half)));
  CHECK(cudaMemset(bias, 0, max_n * sizeof(__half)));
  CHECK(cudaMemset(res, 0, y_stride));
  CHECK(cudaMemcpyToSymbol(g_log, &log, sizeof(log)));
  const char* y_base = y;
  const long long stride = static_cast<long long>(y_stride);
  CHECK(cudaMemcpyToSymbol(g_y_base, &y_base, sizeof(y_base)));
  CHECK(cudaMemcpyToSymbol(g_y_stride, &stride, sizeof(stride)));
  CHECK(cudaMemcpyToSymbol(g_max_blocks, &max_blocks, sizeof(max_blocks)));

  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  size_t w_off = 0;
  for (int l = 0; l < kLayers; ++l) {
    for (size_t i = 0; i < gemms.size(); ++i) {
      const Gemm& g = gemms[i];
      __half* out = reinterpret_cast<__half*>(y + (l * gemms.size() + i) * y_stride);
      const kiln::engine::cuda::KernelLaunch how{
          dim3(g.splits, g.n / sk::kTileN, 1), sk::kBlockThreads, smem, s, false,
          static_cast<unsigned>(g.splits)};
      kiln::engine::cuda::launch_kernel(
          how, kernel, static_cast<const __half*>(a), static_cast<const __half*>(w + w_off), out,
          kRows, g.n, g.k, g.k / g.splits, static_cast<const __half*>(bias), g.act, 0.f, 0.f,
          static_cast<const __half*>(g.residual ? res : nullptr), ActivationKind::kNone, 0.f, 0.f,
          false);
      CHECK(cudaGetLastError());
      w_off += static_cast<size_t>(g.n) * g.k;
    }
  }
  CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<double> replay;
  for (int r = 0; r < 40; ++r) {
    CHECK(cudaMemset(log, 0, sizeof(unsigned long long) * kSlots * max_blocks * launches));
    CHECK(cudaEventRecord(e0, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 10) replay.push_back(ms * 1000.0);
  }
  std::vector<unsigned long long> h(static_cast<size_t>(kSlots) * max_blocks * launches);
  CHECK(cudaMemcpy(h.data(), log, h.size() * sizeof(h[0]), cudaMemcpyDeviceToHost));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const double ns_per_cycle = 1e6 / clock_khz;

  std::printf(
      "\n%s: replay of %d launches %.1f us (median of 30), %.2f us a launch; phases in ns "
      "at the SM's max clock (%d MHz), medians over the blocks of 12 launches\n",
      P == sk::Products::kWgmma ? "wgmma" : "mma.sync", launches, median(replay),
      median(replay) / launches, clock_khz / 1000);
  std::printf(
      "| GEMM | splits | blocks | span | gap before | start skew med / max | prologue | "
      "main loop | cluster wait | sums + post-ops | last barrier | block life |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  unsigned long long prev_exit = 0;
  std::vector<std::vector<double>> span(gemms.size()), gap(gemms.size()), skew(gemms.size()),
      skew_max(gemms.size());
  // ph[gemm][p]: phases 0-4 (between marks p and p + 1), then the block's whole life.
  std::vector<std::vector<std::vector<double>>> ph(gemms.size(),
                                                   std::vector<std::vector<double>>(6));
  for (int l = 0; l < kLayers; ++l) {
    for (size_t i = 0; i < gemms.size(); ++i) {
      const int launch = l * static_cast<int>(gemms.size()) + static_cast<int>(i);
      const int blocks = gemms[i].splits * gemms[i].n / sk::kTileN;
      unsigned long long first_in = ~0ull, last_out = 0;
      for (int b = 0; b < blocks; ++b) {
        const unsigned long long* rec = &h[(static_cast<size_t>(launch) * max_blocks + b) * kSlots];
        first_in = std::min(first_in, rec[6]);
        last_out = std::max(last_out, rec[7]);
      }
      std::vector<double> starts;
      for (int b = 0; b < blocks; ++b) {
        const unsigned long long* rec = &h[(static_cast<size_t>(launch) * max_blocks + b) * kSlots];
        starts.push_back(static_cast<double>(rec[6] - first_in));
        for (int p = 0; p < 5; ++p) {
          ph[i][p].push_back(static_cast<double>(rec[p + 1] - rec[p]) * ns_per_cycle);
        }
        ph[i][5].push_back(static_cast<double>(rec[5] - rec[0]) * ns_per_cycle);
      }
      span[i].push_back(static_cast<double>(last_out - first_in));
      if (prev_exit)
        gap[i].push_back(static_cast<double>(first_in) - static_cast<double>(prev_exit));
      skew[i].push_back(median(starts));
      skew_max[i].push_back(*std::max_element(starts.begin(), starts.end()));
      prev_exit = last_out;
    }
  }
  for (size_t i = 0; i < gemms.size(); ++i) {
    const Gemm& g = gemms[i];
    std::printf("| %s %dx%d | %d | %d | %.0f | %.0f | %.0f / %.0f |", g.name, g.n, g.k, g.splits,
                g.splits * g.n / sk::kTileN, median(span[i]), median(gap[i]), median(skew[i]),
                median(skew_max[i]));
    for (int p = 0; p < 6; ++p) std::printf(" %.0f |", median(ph[i][p]));
    std::printf("\n");
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(s));
  for (void* p : {static_cast<void*>(a), static_cast<void*>(w), static_cast<void*>(bias),
                  static_cast<void*>(res), static_cast<void*>(y), static_cast<void*>(log)}) {
    CHECK(cudaFree(p));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool wgmma = argc < 2 || std::strcmp(argv[1], "mma") != 0;
  int splits[4] = {3, 8, 2, 8};
  if (argc >= 3 &&
      std::sscanf(argv[2], "%d,%d,%d,%d", &splits[0], &splits[1], &splits[2], &splits[3]) != 4) {
    std::fprintf(stderr, "splits: four numbers, e.g. 3,8,2,8\n");
    return 2;
  }
  const std::vector<Gemm> gemms = {
      {"QKV", 2304, 768, splits[0], ActivationKind::kNone, false},
      {"O", 768, 768, splits[1], ActivationKind::kNone, true},
      {"FFN1", 3072, 768, splits[2], ActivationKind::kGelu, false},
      {"FFN2", 768, 3072, splits[3], ActivationKind::kNone, true},
  };
  for (const Gemm& g : gemms) {
    if (g.splits < 1 || g.splits > sk::kMaxSplits || (g.k / sk::kTileK) % g.splits != 0) {
      std::fprintf(stderr, "%s: %d splits do not divide K / 32 = %d (1 to 8)\n", g.name, g.splits,
                   g.k / sk::kTileK);
      return 2;
    }
  }
  if (wgmma) {
    run<sk::Products::kWgmma>(gemms);
  } else {
    run<sk::Products::kMmaSync>(gemms);
  }
  return 0;
}
