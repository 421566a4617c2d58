// The GEMM of few rows (kernels.h: launch_skinny_gemm): the host side, and the kernel's
// mma.sync form for every architecture kiln builds (skinny_gemm.cuh).
#include "engine/cuda/skinny_gemm.cuh"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <type_traits>
#include <vector>

namespace kiln::engine::cuda {
using namespace skinny;

namespace {
std::atomic<int64_t> launches{0};
}  // namespace

bool skinny_gemm_takes(DataType t, int64_t rows, int64_t n, int64_t k, const void* a, const void* w,
                       const void* y, const SkinnyPostOps& post) {
  return (t == DataType::kF16 || t == DataType::kBF16) && rows >= 1 && rows <= kSkinnyMaxRows &&
         n >= kTileN && n % kTileN == 0 && n / kTileN <= 65535 && k >= kTileK && k % kTileK == 0 &&
         rows * std::max(n, k) < (int64_t{1} << 31) && aligned16(a) && aligned16(w) &&
         aligned16(y) &&
         reinterpret_cast<uintptr_t>(post.residual) % 8 == 0;  // read 4 elements at a time
}

bool skinny_gemm_form_valid(int64_t k, bool w_kn, int form) {
  const int splits = skinny_form_splits(form), block_rows = skinny_form_rows(form);
  return form == skinny_form(splits, block_rows, skinny_form_wgmma(form)) && splits >= 1 &&
         splits <= kMaxSplits && k % kTileK == 0 && (k / kTileK) % splits == 0 &&
         (block_rows == 0 || block_rows == 64 || block_rows == 128) &&
         !(skinny_form_wgmma(form) && w_kn);
}

bool skinny_wgmma_available(int device) {
  // wgmma is sm_90a's: compute capability 9.0 exactly (a later architecture runs none of it).
  static std::mutex mutex;
  static std::vector<int> answers;  // by device: -1 unknown, 0 no, 1 yes
  std::lock_guard<std::mutex> lock(mutex);
  if (device < 0) return false;
  if (answers.size() <= static_cast<size_t>(device)) answers.resize(device + 1, -1);
  if (answers[device] < 0) {
    int major = 0, minor = 0;
    const bool ok =
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess;
    answers[device] = ok && major == 9 && minor == 0 ? 1 : 0;
  }
  return answers[device] == 1;
}

std::vector<int> skinny_gemm_forms(int64_t rows, int64_t n, int64_t k, int sms, bool wgmma) {
  // The valid splits, fewest first, and among them the largest whose blocks (`tiles` of them a
  // split) fit `wave` blocks.
  const auto splits_for = [&](int64_t tiles, int64_t cap, int64_t wave) {
    std::vector<int> valid;
    for (int s : {1, 2, 3, 4, 6, 8}) {
      if ((k / kTileK) % s == 0 && (s == 1 || tiles * s <= cap)) valid.push_back(s);
    }
    int fill = 0;
    for (size_t i = 0; i < valid.size(); ++i) {
      if (tiles * valid[i] <= wave) fill = static_cast<int>(i);
    }
    return std::make_pair(valid, fill);
  };
  const int64_t sm = sms;
  const int64_t tiles = (n / kTileN) * (rows <= 64 ? 1 : (rows + 127) / 128);
  const auto [valid, fill] = splits_for(tiles, 2 * sm, sm);
  // The split that fills the SMs best in one wave first, then its neighbours among the valid.
  std::vector<int> out;
  for (int i : {fill, fill - 1, fill + 1}) {
    if (i >= 0 && i < static_cast<int>(valid.size())) out.push_back(skinny_form(valid[i]));
  }
  // Above 64 rows, blocks of 64 rows too: twice the blocks, two an SM, and so twice the warps a
  // scheduler to hide their latencies behind each other's.
  if (rows > 64) {
    const int64_t tiles64 = (n / kTileN) * ((rows + 63) / 64);
    const auto [valid64, fill64] = splits_for(tiles64, 2 * sm, 2 * sm);
    out.push_back(skinny_form(valid64[fill64], 64));
  }
  // Where wgmma runs, its form of each first: the same blocks, fewer instructions (G73).
  if (wgmma) {
    std::vector<int> both;
    for (int f : out) both.push_back(skinny_form(skinny_form_splits(f), skinny_form_rows(f), true));
    both.insert(both.end(), out.begin(), out.end());
    return both;
  }
  return out;
}

int64_t skinny_gemm_launches() {
  return launches.load();
}

void launch_skinny_gemm(cudaStream_t stream, const std::string& layer, DataType t, int64_t rows,
                        int64_t n, int64_t k, int form, const void* a, const void* w, bool w_kn,
                        void* y, const SkinnyPostOps& post, bool early) {
  KILN_CHECK(skinny_gemm_form_valid(k, w_kn, form), InvalidArgument, "layer `", layer,
             "`: ", skinny_form_splits(form), " K splits (1 to 8, dividing K / 32 = ", k / kTileK,
             ") in blocks of ", skinny_form_rows(form), " rows (0: by the rows, 64 or 128)",
             skinny_form_wgmma(form) ? " with wgmma" : "", w_kn ? " of a [k, n] weight" : "",
             " is not a form of the GEMM of few rows (form ", form, ")");
  const int splits = skinny_form_splits(form);
  const int block_rows = skinny_form_rows(form) > 0 ? skinny_form_rows(form)
                         : rows <= 64               ? 64
                                                    : 128;
  if (skinny_form_wgmma(form)) {
    int device = -1;
    KILN_CHECK(cudaGetDevice(&device) == cudaSuccess && skinny_wgmma_available(device), Unsupported,
               "layer `", layer, "`: the GEMM of few rows with wgmma runs only on a GPU of ",
               "compute capability 9.0 (device ", device, ")");
    launch_wgmma(stream, t, rows, n, k, splits, block_rows, a, w, y, post, early);
  } else {
    const auto launch = [&](auto type, auto kn) {
      using T = decltype(type);
      constexpr bool KN = decltype(kn)::value;
      block_rows == 64 ? launch_typed<T, 64, KN, Products::kMmaSync>(stream, rows, n, k, splits, a,
                                                                     w, y, post, early)
                       : launch_typed<T, 128, KN, Products::kMmaSync>(stream, rows, n, k, splits, a,
                                                                      w, y, post, early);
    };
    const auto by_layout = [&](auto type) {
      w_kn ? launch(type, std::true_type{}) : launch(type, std::false_type{});
    };
    t == DataType::kF16 ? by_layout(__half{}) : by_layout(__nv_bfloat16{});
  }
  KILN_CUDA_CHECK_LAUNCH(layer);
  ++launches;
}

}  // namespace kiln::engine::cuda
