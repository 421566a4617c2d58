// Candidates timed as replays of CUDA graphs (replay_timing.h).
#include "engine/cuda/replay_timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/cuda/cuda_check.h"
#include "util/errors.h"

namespace kiln::engine::cuda {

std::vector<float> time_replays(cudaStream_t after, int count,
                                const std::function<bool(int, cudaStream_t)>& launch,
                                const ReplayTiming& how, ReplayPhases* phases) {
  const size_t n = static_cast<size_t>(std::max(count, 0));
  auto clock = std::chrono::steady_clock::now();
  const auto lap = [&](double* into) {
    const auto now = std::chrono::steady_clock::now();
    if (phases) *into = std::chrono::duration<double, std::milli>(now - clock).count();
    clock = now;
  };
  ReplayPhases unused;
  ReplayPhases& ph = phases ? *phases : unused;
  // An event before each candidate's replay and one after the round's last.
  struct Scratch {
    cudaStream_t stream = nullptr;
    std::vector<cudaEvent_t> events;
    std::vector<cudaGraphExec_t> graphs;
    ~Scratch() {
      if (stream) cudaStreamSynchronize(stream);
      for (cudaGraphExec_t g : graphs) {
        if (g) cudaGraphExecDestroy(g);
      }
      for (cudaEvent_t e : events) {
        if (e) cudaEventDestroy(e);
      }
      if (stream) cudaStreamDestroy(stream);
    }
  } x;
  x.events.assign(n + 1, nullptr);
  x.graphs.assign(n, nullptr);
  for (cudaEvent_t& e : x.events) KILN_CUDA_CHECK(cudaEventCreate(&e));
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&x.stream, cudaStreamNonBlocking));
  KILN_CUDA_CHECK(cudaEventRecord(x.events[0], after));
  KILN_CUDA_CHECK(cudaStreamWaitEvent(x.stream, x.events[0], 0));
  const auto run = [&](size_t i) {
    try {
      return launch(static_cast<int>(i), x.stream);
    } catch (const Error&) {
      return false;
    }
  };
  lap(&ph.setup);
  // Each candidate launched once (its kernels loaded), then its launches captured.
  std::vector<bool> running(n);
  for (size_t i = 0; i < n; ++i) running[i] = run(i);
  cudaGetLastError();
  KILN_CUDA_CHECK(cudaStreamSynchronize(x.stream));
  lap(&ph.first_launches);
  for (size_t i = 0; i < n; ++i) {
    if (!running[i] ||
        cudaStreamBeginCapture(x.stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    bool launched = true;
    for (int l = 0; l < how.launches; ++l) launched = run(i) && launched;
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(x.stream, &graph) != cudaSuccess || !launched || graph == nullptr ||
        cudaGraphInstantiate(&x.graphs[i], graph, 0) != cudaSuccess) {
      x.graphs[i] = nullptr;
    }
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
  lap(&ph.captures);
  std::vector<std::vector<float>> times(n);
  for (int round = 0; round < how.rounds; ++round) {
    std::vector<size_t> timed;
    for (size_t i = 0; i < n; ++i) {
      if (!running[i]) continue;
      KILN_CUDA_CHECK(cudaEventRecord(x.events[timed.size()], x.stream));
      if (x.graphs[i] != nullptr && cudaGraphLaunch(x.graphs[i], x.stream) != cudaSuccess) {
        cudaGetLastError();  // (not sticky) from here on this candidate is timed as launched
        cudaGraphExecDestroy(x.graphs[i]);
        x.graphs[i] = nullptr;
      }
      if (x.graphs[i] == nullptr) {
        bool launched = true;
        for (int l = 0; l < how.launches; ++l) launched = run(i) && launched;
        if (!launched) running[i] = false;
      }
      timed.push_back(i);
    }
    if (timed.empty()) break;
    KILN_CUDA_CHECK(cudaEventRecord(x.events[timed.size()], x.stream));
    KILN_CUDA_CHECK(cudaEventSynchronize(x.events[timed.size()]));
    for (size_t t = 0; t < timed.size(); ++t) {
      float ms = 0;
      KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, x.events[t], x.events[t + 1]));
      times[timed[t]].push_back(ms);
    }
    if (round == 0) {
      float fastest = std::numeric_limits<float>::infinity();
      for (size_t i : timed) {
        if (running[i]) fastest = std::min(fastest, times[i][0]);
      }
      for (size_t i : timed) {
        running[i] =
            running[i] && (i == 0 || !std::isfinite(how.keep) || times[i][0] <= how.keep * fastest);
        ph.survivors += running[i] ? 1 : 0;
      }
    }
  }
  lap(&ph.rounds);
  std::vector<float> medians(n, std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < n; ++i) {
    if (!running[i] || times[i].empty()) continue;
    std::vector<float>& t = times[i];
    std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
    medians[i] = t[t.size() / 2];
  }
  return medians;
}

}  // namespace kiln::engine::cuda
