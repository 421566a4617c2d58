// Searches cuBLASLt's whole configuration space (algorithm id x tile x stages x cluster shape x
// split-K x reduction x swizzle) for the f16 GEMMs of the transformer models, and times each
// valid configuration against the heuristic's first answer. A measurement tool for issue #8
// (bench/NOTES.md): it answers whether a tactic search beyond the heuristic can pay.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 tools/device/gemm_search.cu -lcublasLt -o gemm_search
//   ./gemm_search [--heuristic ROUNDS] [M N K epilogue]...
//   (epilogue: bias | gelu | residual; default: BERT's and ViT's four GEMMs at b32; ALIGN16=1 asks
//   the heuristic for 16-byte aligned operands, as kiln does)
#include <cublasLt.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
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

struct Shape {
  int m, n, k;
  std::string epi;
};

struct Result {
  cublasLtMatmulAlgo_t algo;
  size_t ws;
  float us;
  std::string what;
};

constexpr size_t kWorkspace = size_t{64} << 20;

__global__ void fill(half* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = __float2half((static_cast<float>(h & 0xffff) / 65535.f - 0.5f) * 0.25f);
  }
}

struct Problem {
  Shape s;
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  half *a, *b, *bias, *c, *d;
  void* ws;
  cudaStream_t stream;
  cudaEvent_t e0, e1;

  // Row-major activations A (M x K) and weights W (N x K): D^T (N x M) = W (N x K, op T) * A^T.
  Problem(cublasLtHandle_t h, const Shape& shape) : s(shape), lt(h) {
    CK(cudaStreamCreate(&stream));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMalloc(&a, size_t(s.m) * s.k * 2));
    CK(cudaMalloc(&b, size_t(s.n) * s.k * 2));
    CK(cudaMalloc(&bias, size_t(s.n) * 2));
    CK(cudaMalloc(&c, size_t(s.m) * s.n * 2));
    CK(cudaMalloc(&d, size_t(s.m) * s.n * 2));
    CK(cudaMalloc(&ws, kWorkspace));
    fill<<<256, 256>>>(a, size_t(s.m) * s.k, 1);
    fill<<<256, 256>>>(b, size_t(s.n) * s.k, 2);
    fill<<<256, 256>>>(bias, s.n, 3);
    fill<<<256, 256>>>(c, size_t(s.m) * s.n, 4);
    CK(cudaDeviceSynchronize());
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
    cublasLtEpilogue_t e = s.epi == "gelu" ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                      sizeof(bias)));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, s.k, s.n, s.k));
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, s.k, s.m, s.k));
    CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16F, s.n, s.m, s.n));
  }

  cublasStatus_t run(const cublasLtMatmulAlgo_t& algo, size_t ws_bytes) {
    const float one = 1.f, zero = 0.f;
    const bool res = s.epi == "residual";
    return cublasLtMatmul(lt, desc, &one, b, lb, a, la, res ? &one : &zero, res ? c : d, ld, d, ld,
                          &algo, ws, ws_bytes, stream);
  }

  // Mean microseconds of `iters` launches, the median of `reps` repetitions; < 0 if it fails.
  float time(const cublasLtMatmulAlgo_t& algo, size_t ws_bytes, int iters, int reps) {
    for (int i = 0; i < 2; ++i) {
      if (run(algo, ws_bytes) != CUBLAS_STATUS_SUCCESS) {
        cudaGetLastError();
        return -1;
      }
    }
    std::vector<float> t;
    for (int r = 0; r < reps; ++r) {
      CK(cudaEventRecord(e0, stream));
      for (int i = 0; i < iters; ++i) run(algo, ws_bytes);
      CK(cudaEventRecord(e1, stream));
      if (cudaEventSynchronize(e1) != cudaSuccess) return -1;
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      t.push_back(ms * 1000.f / iters);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

template <typename T>
std::vector<T> cap_list(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t a) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, a, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS ||
      bytes == 0) {
    return {T{}};
  }
  std::vector<T> v(bytes / sizeof(T));
  CK(cublasLtMatmulAlgoCapGetAttribute(&algo, a, v.data(), bytes, &bytes));
  if (v.empty()) v.push_back(T{});
  return v;
}

// One value of an algorithm's capability (cap) or configuration (config) attribute.
template <typename T, typename Attribute, typename Get>
T attribute(Get get, const cublasLtMatmulAlgo_t& algo, Attribute a) {
  T v{};
  size_t bytes = 0;
  get(&algo, a, &v, sizeof(v), &bytes);
  return v;
}
template <typename T>
T cap(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t a) {
  return attribute<T>(cublasLtMatmulAlgoCapGetAttribute, algo, a);
}
template <typename T>
T config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t a) {
  return attribute<T>(cublasLtMatmulAlgoConfigGetAttribute, algo, a);
}

std::string describe(const cublasLtMatmulAlgo_t& algo) {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "id %d tile %u stages %u cluster %u splitk %d red %u swz %u opt %u",
                config<int>(algo, CUBLASLT_ALGO_CONFIG_ID),
                config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                config<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                config<int>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
  return buf;
}

// The heuristic's first `count` candidates for p's GEMM, with the workspace kiln allows; with
// ALIGN16 set, for operands aligned to 16 bytes as kiln asks (the default assumes 256).
std::vector<cublasLtMatmulHeuristicResult_t> heuristic(const Problem& p, int count) {
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t max_ws = kWorkspace;
  CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                          sizeof(max_ws)));
  if (std::getenv("ALIGN16")) {
    const uint32_t align = 16;
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      CK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
  }
  std::vector<cublasLtMatmulHeuristicResult_t> heur(static_cast<size_t>(count));
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(p.lt, p.desc, p.lb, p.la, p.ld, p.ld, pref, count, heur.data(),
                                    &found));
  cublasLtMatmulPreferenceDestroy(pref);
  heur.resize(static_cast<size_t>(found));
  return heur;
}

void search(cublasLtHandle_t lt, const Shape& s) {
  Problem p(lt, s);
  const double flop = 2.0 * s.m * s.n * s.k;
  const auto heur = heuristic(p, 32);
  const int found = static_cast<int>(heur.size());
  std::vector<Result> results;
  const int iters = 20;
  for (int i = 0; i < found; ++i) {
    float us = p.time(heur[i].algo, heur[i].workspaceSize, iters, 3);
    if (us > 0)
      results.push_back(
          {heur[i].algo, heur[i].workspaceSize, us, "heuristic #" + std::to_string(i)});
  }
  const Result first = results.empty() ? Result{} : results[0];

  int ids[256];
  int n_ids = 0;
  CK(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F, CUDA_R_16F,
                              CUDA_R_16F, CUDA_R_16F, 256, ids, &n_ids));
  const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO,  CUBLASLT_CLUSTER_SHAPE_1x1x1,
                               CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                               CUBLASLT_CLUSTER_SHAPE_2x2x1, CUBLASLT_CLUSTER_SHAPE_4x1x1,
                               CUBLASLT_CLUSTER_SHAPE_1x4x1};
  const int splits[] = {1, 2, 3, 4, 6};
  int checked = 0, valid = 0;
  for (int id_i = 0; id_i < n_ids; ++id_i) {
    cublasLtMatmulAlgo_t base;
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F, CUDA_R_16F,
                               CUDA_R_16F, CUDA_R_16F, ids[id_i], &base) != CUBLAS_STATUS_SUCCESS) {
      continue;
    }
    const auto tiles = cap_list<uint32_t>(base, CUBLASLT_ALGO_CAP_TILE_IDS);
    const auto stages = cap_list<uint32_t>(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    const int splitk = cap<int>(base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT);
    const uint32_t red_mask = cap<uint32_t>(base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
    const uint32_t swz = cap<uint32_t>(base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT);
    const int custom_max = cap<int>(base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX);
    for (uint32_t tile : tiles)
      for (uint32_t stage : stages)
        for (uint16_t cl : clusters)
          for (int sk : splits) {
            if (sk > 1 && !splitk) continue;
            for (uint32_t red = 0; red <= (sk > 1 ? 4u : 0u); red = red ? red << 1 : 1) {
              if (sk > 1 && !(red & red_mask)) continue;
              for (uint32_t sw = 0; sw <= (swz ? 1u : 0u); ++sw)
                for (int opt = 0; opt <= std::min(custom_max, 0); ++opt) {
                  cublasLtMatmulAlgo_t algo = base;
                  cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                                       sizeof(tile));
                  cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                                       &stage, sizeof(stage));
                  cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                                       &cl, sizeof(cl));
                  cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk,
                                                       sizeof(sk));
                  if (sk > 1)
                    cublasLtMatmulAlgoConfigSetAttribute(
                        &algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red));
                  cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                                                       &sw, sizeof(sw));
                  cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                                       &opt, sizeof(opt));
                  cublasLtMatmulHeuristicResult_t r{};
                  ++checked;
                  if (cublasLtMatmulAlgoCheck(lt, p.desc, p.lb, p.la, p.ld, p.ld, &algo, &r) !=
                          CUBLAS_STATUS_SUCCESS ||
                      r.workspaceSize > kWorkspace) {
                    continue;
                  }
                  ++valid;
                  float us = p.time(algo, r.workspaceSize, 5, 1);
                  if (us > 0) results.push_back({algo, r.workspaceSize, us, "search"});
                }
            }
          }
  }
  std::sort(results.begin(), results.end(),
            [](const Result& x, const Result& y) { return x.us < y.us; });
  if (results.size() > 12) results.resize(12);
  // Re-time the leaders and the heuristic's first answer with more launches, interleaved.
  std::vector<float> best(results.size(), 1e9f);
  float first_us = 1e9f;
  for (int round = 0; round < 3; ++round) {
    first_us = std::min(first_us, p.time(first.algo, first.ws, 200, 3));
    for (size_t i = 0; i < results.size(); ++i)
      best[i] = std::min(best[i], p.time(results[i].algo, results[i].ws, 200, 3));
  }
  std::printf("\n== M=%d N=%d K=%d %s: %d configurations checked, %d valid, %d heuristic\n", s.m,
              s.n, s.k, s.epi.c_str(), checked, valid, found);
  std::printf("heuristic #0: %.2f us %.0f TFLOP/s  [%s]\n", first_us, flop / first_us * 1e-6,
              describe(first.algo).c_str());
  for (size_t i = 0; i < results.size(); ++i) {
    std::printf("%2zu: %.2f us %.0f TFLOP/s (%+.1f%%) %s [%s] ws %zu\n", i, best[i],
                flop / best[i] * 1e-6, 100.0 * (first_us - best[i]) / first_us,
                results[i].what.c_str(), describe(results[i].algo).c_str(), results[i].ws);
  }
}

// The heuristic's candidates only, timed interleaved (round-robin, `rounds` rounds of 50
// launches each) so that clock and thermal drift fall on all of them alike; medians printed.
void compare_heuristic(cublasLtHandle_t lt, const Shape& s, int rounds) {
  Problem p(lt, s);
  const double flop = 2.0 * s.m * s.n * s.k;
  const auto heur = heuristic(p, 16);
  const int found = static_cast<int>(heur.size());
  std::vector<std::vector<float>> t(found);
  for (int r = 0; r < rounds; ++r)
    for (int i = 0; i < found; ++i)
      t[i].push_back(p.time(heur[i].algo, heur[i].workspaceSize, 50, 1));
  std::printf("\n== M=%d N=%d K=%d %s: heuristic candidates, median of %d interleaved rounds\n",
              s.m, s.n, s.k, s.epi.c_str(), rounds);
  float first = 0;
  for (int i = 0; i < found; ++i) {
    std::sort(t[i].begin(), t[i].end());
    const float med = t[i][t[i].size() / 2];
    if (i == 0) first = med;
    std::printf("#%-2d %.2f us %.0f TFLOP/s (%+.1f%%) min %.2f max %.2f [%s]\n", i, med,
                flop / med * 1e-6, 100.0 * (first - med) / first, t[i].front(), t[i].back(),
                describe(heur[i].algo).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Shape> shapes;
  int rounds = 0;  // --heuristic ROUNDS: compare the heuristic's candidates only
  if (argc > 2 && std::string(argv[1]) == "--heuristic") {
    rounds = std::atoi(argv[2]);
    argv += 2;
    argc -= 2;
  }
  for (int i = 1; i + 3 < argc; i += 4)
    shapes.push_back(
        {std::atoi(argv[i]), std::atoi(argv[i + 1]), std::atoi(argv[i + 2]), argv[i + 3]});
  if (shapes.empty()) {
    for (int m : {4096, 6304}) {
      shapes.push_back({m, 2304, 768, "bias"});
      shapes.push_back({m, 768, 768, "residual"});
      shapes.push_back({m, 3072, 768, "gelu"});
      shapes.push_back({m, 768, 3072, "residual"});
    }
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  for (const Shape& s : shapes) rounds > 0 ? compare_heuristic(lt, s, rounds) : search(lt, s);
  return 0;
}
