// The algorithm choices of cuDNN convolutions (convolution_algorithms.h).
#include "engine/cuda/convolution_algorithms.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "engine/bytes.h"
#include "util/errors.h"

namespace kiln::engine::cuda {
namespace {

class HeuristicAnswers {
 public:
  std::optional<HeuristicAnswer> find(const std::vector<int64_t>& query) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = answers_.find(query);
    if (it == answers_.end()) return std::nullopt;
    return it->second;
  }
  void add(const std::vector<int64_t>& query, HeuristicAnswer answer) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (answers_.size() >= kAnswers) answers_.clear();
    answers_[query] = std::move(answer);
  }

 private:
  static constexpr size_t kAnswers = 4096;
  std::mutex mutex_;
  std::map<std::vector<int64_t>, HeuristicAnswer> answers_;
};

HeuristicAnswers& heuristic_answers() {
  static HeuristicAnswers answers;
  return answers;
}

}  // namespace

ConvState* nearest_tuned(ConvStates& states, const std::vector<int64_t>& key, size_t rank) {
  const auto input_volume = [rank](const std::vector<int64_t>& k) {
    double v = 1;
    for (size_t d = 3; d < 3 + rank; ++d) v *= static_cast<double>(std::max<int64_t>(k[d], 1));
    return v;
  };
  const double volume = input_volume(key);
  return states.nearest(
      [&](const ConvState& s) {
        return s.tuned && s.key.size() == key.size() &&
               std::equal(key.begin(), key.begin() + 3, s.key.begin()) &&
               std::equal(key.begin() + 3 + static_cast<long>(rank), key.end(),
                          s.key.begin() + 3 + static_cast<long>(rank));
      },
      [&](const ConvState& s) { return std::abs(std::log(input_volume(s.key) / volume)); });
}

bool heuristic_forward(cudnnHandle_t handle, ConvState& s, bool strict_f32) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int found = 0;
  KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
      handle, s.x, s.w, s.conv, s.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
  bool chosen = false;
  s.fallbacks.clear();
  for (int i = 0; i < found; ++i) {
    if (!usable(perf[i], strict_f32)) continue;
    if (!chosen) {
      s.fwd_algo = perf[i].algo;
      s.algo_workspace = perf[i].memory;
      chosen = true;
    } else {
      s.fallbacks.push_back(perf[i]);
    }
  }
  return chosen;
}

std::vector<uint8_t> encode_choice(const ConvState& s) {
  ByteWriter w;
  w.put<int32_t>(static_cast<int32_t>(s.fwd_algo));
  w.put<int32_t>(static_cast<int32_t>(s.bwd_algo));
  w.put<uint8_t>(s.fusion_failed ? 1 : 0);
  w.put<uint32_t>(static_cast<uint32_t>(s.fallbacks.size()));
  for (const auto& f : s.fallbacks) {
    w.put<int32_t>(static_cast<int32_t>(f.algo));
    w.put<uint64_t>(f.memory);
  }
  return std::move(w.bytes());
}

bool adopt_choice(Resources& res, cudnnHandle_t handle, ConvState& s, bool transposed) {
  const std::optional<std::vector<uint8_t>> choice = res.kept_choice(s.key);
  if (!choice) return false;
  try {
    ByteReader r(choice->data(), choice->size(), "kernel choice");
    const auto fwd = static_cast<cudnnConvolutionFwdAlgo_t>(r.get<int32_t>("forward algorithm"));
    const auto bwd =
        static_cast<cudnnConvolutionBwdDataAlgo_t>(r.get<int32_t>("backward algorithm"));
    const bool fusion_failed = r.get<uint8_t>("fusion flag") != 0;
    std::vector<cudnnConvolutionFwdAlgoPerf_t> fallbacks(r.get<uint32_t>("fallbacks"));
    KILN_CHECK(fallbacks.size() <= CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CorruptInput,
               "kernel choice: ", fallbacks.size(), " fallbacks");
    for (auto& f : fallbacks) {
      f = {};
      f.algo = static_cast<cudnnConvolutionFwdAlgo_t>(r.get<int32_t>("fallback algorithm"));
      f.memory = static_cast<size_t>(r.get<uint64_t>("fallback workspace"));
      f.status = CUDNN_STATUS_SUCCESS;
    }
    size_t bytes = 0;
    const cudnnStatus_t status = transposed ? cudnnGetConvolutionBackwardDataWorkspaceSize(
                                                  handle, s.w, s.y, s.conv, s.x, bwd, &bytes)
                                            : cudnnGetConvolutionForwardWorkspaceSize(
                                                  handle, s.x, s.w, s.conv, s.y, fwd, &bytes);
    if (status != CUDNN_STATUS_SUCCESS || bytes > kMaxAlgoWorkspace) return false;
    s.fwd_algo = fwd;
    s.bwd_algo = bwd;
    s.fusion_failed = fusion_failed;
    s.fallbacks = std::move(fallbacks);
    s.algo_workspace = bytes;
    return true;
  } catch (const Error&) {
    return false;  // bytes another kiln wrote: choose again
  }
}

std::vector<int64_t> heuristic_query(int device, bool transposed, bool strict_f32,
                                     cudnnMathType_t math, cudnnDataType_t type, bool cl,
                                     std::initializer_list<const std::vector<int64_t>*> lists,
                                     int64_t groups) {
  std::vector<int64_t> q = {device, transposed, strict_f32, math, type, cl, groups};
  for (const auto* l : lists) {
    q.push_back(static_cast<int64_t>(l->size()));
    q.insert(q.end(), l->begin(), l->end());
  }
  return q;
}

std::optional<HeuristicAnswer> find_heuristic_answer(const std::vector<int64_t>& query) {
  return heuristic_answers().find(query);
}

void keep_heuristic_answer(const std::vector<int64_t>& query, HeuristicAnswer answer) {
  heuristic_answers().add(query, std::move(answer));
}

}  // namespace kiln::engine::cuda
