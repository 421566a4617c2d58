// CUDA kernel of the matmul family: cuBLASLt (row-major operands seen as transposed column-major
// ones) in f32, f16 or bf16 with fp32 accumulation (plain fp32 math for f32 unless the layer
// allows TF32: then CUBLAS_COMPUTE_32F_FAST_TF32), batched by strides (broadcast batches
// materialized in the workspace), with bias and ReLU/GELU(tanh) fused as cuBLASLt epilogues and
// a full-shape residual added as the C operand (beta = 1); the post-op kernel does the rest.
// GEMMs of few rows may run skinny_gemm.cu instead, every post-op in its epilogue (gemm_skinny).
// Integer products (i64, i32) run our own kernel (matmul_integer.cu).
#include <cublasLt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/replay_timing.h"

namespace kiln::engine::cuda {
namespace {

#define KILN_CUBLAS_CHECK(call)                                                               \
  do {                                                                                        \
    const cublasStatus_t kiln_status_ = (call);                                               \
    KILN_CHECK(kiln_status_ == CUBLAS_STATUS_SUCCESS, DeviceError, #call, " failed: status ", \
               static_cast<int>(kiln_status_));                                               \
  } while (0)

constexpr size_t kCublasWorkspace = size_t{32} << 20;
// The heuristic's first candidates that a large GEMM times on its first run (G32), and room for
// the split-K forms of the first that a GEMM of few output tiles times too (add_split_k).
constexpr int kCandidates = 8;
constexpr int kSplitCandidates = 15;

// A matmul configuration chosen once per shape (and pointer alignment) and cached.
struct MatMulState : KernelState {
  std::vector<int64_t> key;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t algo_workspace = 0;
  bool tuned = false;  // the algorithm was chosen for this shape (not kept from another's)
  bool fused_bias = false, fused_activation = false, fused_residual = false,
       fused_activation2 = false;
  int skinny_form = 0;  // > 0: skinny_gemm.cu runs it in this form (kernels.h), not cuBLASLt
  ~MatMulState() override {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
};

// What timing the heuristic's candidates needs: the operands of the GEMM's first run.
struct TimingRun {
  cublasLtHandle_t lt;
  const void *a, *b, *residual;
  size_t d_bytes;
  void* workspace;
  cudaStream_t stream;
};

// Whether two GEMM keys (below) are the same operation at other sizes: dtype, TF32, transposes,
// bias, activations and residual alike (an algorithm chosen for one may serve the other).
bool same_operation(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  constexpr size_t kOperation[] = {0, 1, 2, 3, 10, 11, 12, 17, 18, 19};
  if (a.size() != b.size()) return false;
  for (size_t i : kOperation) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

// A GEMM key's multiply-adds (rows x n x k x matrices).
double gemm_size(const std::vector<int64_t>& key) {
  double v = 1;
  for (size_t i = 4; i < 8; ++i) v *= static_cast<double>(std::max<int64_t>(key[i], 1));
  return v;
}

// Whether the first run of a GEMM this large times the heuristic's candidates (where the run's
// shapes are worth tuning for: Resources::tune): at 2 GFLOP or
// more (b32 transformer and 1x1-convolution GEMMs) a candidate 5% faster saves more than the
// timing costs; smaller ones are latency-bound, where the candidates differ little (but see
// split_k_worth). The switch gemm_timing=off keeps the heuristic's first.
bool worth_timing(const KernelOptions& options, int64_t m, int64_t n, int64_t k, int64_t batches) {
  return options.gemm_timing && 2.0 * static_cast<double>(m) * n * k * batches >= 2e9;
}

// Output tiles of a GEMM of `rows` x n (per matrix) at cuBLASLt's common 128 x 128 tile.
int64_t output_tiles(int64_t rows, int64_t n, int64_t mats) {
  return mats * ((rows + 127) / 128) * ((n + 127) / 128);
}

// Whether a GEMM's first run also times split-K forms of the heuristic's first candidate: its
// output tiles keep at most half the SMs busy and each split still has 256 or more of K (BERT's
// linear layers at batch 1: 128 rows, 6 to 24 tiles on 132 SMs, each tile a long K loop on one SM).
// The switch gemm_split_k=off leaves them out.
bool split_k_worth(const KernelOptions& options, int64_t rows, int64_t n, int64_t k, int64_t mats,
                   int sms) {
  return options.gemm_timing && options.gemm_split_k && k >= 512 &&
         2 * output_tiles(rows, n, mats) <= sms;
}

// Split-K forms of `base` (the heuristic's first candidate) that cuBLASLt accepts for the GEMM of
// `state`, appended to `results` from `found` up to `capacity`: K unsplit (where the heuristic
// split it: BERT's FFN2 at batch 1 comes split in 2 with a reduction kernel after it, G60) and
// split 2 to 16 ways while the splits' tiles fit on the SMs and each split keeps 256 of K, each
// with the reduction schemes the algorithm offers of in-place (serialized in the output) and f32
// partials in the workspace; the heuristic's own form is not repeated.
int add_split_k(cublasLtHandle_t lt, const MatMulState& state, const cublasLtMatmulAlgo_t& base,
                int64_t tiles, int64_t k, int sms, cublasLtMatmulHeuristicResult_t* results,
                int found, int capacity) {
  int32_t support = 0, base_splits = 1;
  uint32_t schemes = 0, base_scheme = 0;
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support,
                                        sizeof(support), &bytes) != CUBLAS_STATUS_SUCCESS ||
      support == 0 ||
      cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes,
                                        sizeof(schemes), &bytes) != CUBLAS_STATUS_SUCCESS) {
    return found;
  }
  cublasLtMatmulAlgoConfigGetAttribute(&base, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &base_splits,
                                       sizeof(base_splits), &bytes);
  cublasLtMatmulAlgoConfigGetAttribute(&base, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &base_scheme,
                                       sizeof(base_scheme), &bytes);
  for (int32_t splits : {1, 2, 3, 4, 6, 8, 12, 16}) {
    if (splits > 1 && (tiles * splits > sms || k / splits < 256)) break;
    for (uint32_t scheme : {static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE),
                            static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_INPLACE),
                            static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)}) {
      // Unsplit takes no reduction; a split takes one the algorithm offers.
      if ((splits == 1) != (scheme == CUBLASLT_REDUCTION_SCHEME_NONE) ||
          (splits > 1 && (schemes & scheme) == 0) || found >= capacity) {
        continue;
      }
      if (splits == std::max(base_splits, 1) && (splits == 1 || scheme == base_scheme)) continue;
      cublasLtMatmulAlgo_t algo = base;
      if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                               sizeof(splits)) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                               &scheme, sizeof(scheme)) != CUBLAS_STATUS_SUCCESS) {
        continue;
      }
      cublasLtMatmulHeuristicResult_t checked{};
      if (cublasLtMatmulAlgoCheck(lt, state.desc, state.b, state.a, state.d, state.d, &algo,
                                  &checked) != CUBLAS_STATUS_SUCCESS ||
          checked.workspaceSize > kCublasWorkspace) {
        continue;
      }
      checked.algo = algo;
      results[found++] = checked;
    }
  }
  return found;
}

// The index of the fastest of the heuristic's `found` candidates for `state`'s GEMM and the
// `extra` launches after them (skinny_gemm.cu's forms, each writing the GEMM's output to the
// pointer it is given), timed as
// replays of CUDA graphs of their launches into a scratch output (replay_timing.h): a GEMM of a few
// microseconds (BERT's at batch 1) launched back to back would time the host's cuBLASLt calls
// instead (G60). Candidates slower than kKeep times the fastest after the first round drop out (a
// candidate 1.15x the best does not come within 5% of it in four more rounds: rounds agree within
// ~2%). The first candidate wins unless another's median is at least 5% faster. Chosen once per
// GEMM key and device in the process; 0 while the stream is being captured.
int fastest_candidate(const MatMulState& state, const cublasLtMatmulHeuristicResult_t* results,
                      int found, const TimingRun& run, int device,
                      const std::vector<std::function<bool(cudaStream_t, void*)>>& extra) {
  const int count = found + static_cast<int>(extra.size());
  static std::mutex mutex;
  static std::map<std::vector<int64_t>, int> chosen;
  std::vector<int64_t> key = state.key;
  key.push_back(device);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = chosen.find(key); it != chosen.end() && it->second < count) return it->second;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(run.stream, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return 0;
  }
  count_algorithm_search();
  const auto clock_start = std::chrono::steady_clock::now();
  void* scratch = nullptr;
  if (cudaMalloc(&scratch, run.d_bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  constexpr float kKeep = 1.15f;
  const float one = 1.f, zero = 0.f;
  // KILN_CUDA_TUNING_LOG=1: each timing's host milliseconds by phase and every candidate's
  // median replay on stderr (what a repeated shape's choosing costs, NOTES.md G68); no candidate
  // drops out early then, so each has its time.
  static const bool log = [] {
    const char* env = std::getenv("KILN_CUDA_TUNING_LOG");
    return env != nullptr && std::string(env) == "1";
  }();
  ReplayTiming how;
  how.keep = log ? std::numeric_limits<float>::infinity() : kKeep;
  ReplayPhases phases;
  std::vector<float> ms;
  try {
    ms = time_replays(
        run.stream, count,
        [&](int i, cudaStream_t stream) {
          if (i >= found) return extra[i - found](stream, scratch);
          return cublasLtMatmul(run.lt, state.desc, &one, run.b, state.b, run.a, state.a,
                                run.residual ? &one : &zero, run.residual ? run.residual : scratch,
                                state.d, scratch, state.d, &results[i].algo, run.workspace,
                                results[i].workspaceSize, stream) == CUBLAS_STATUS_SUCCESS;
        },
        how, &phases);
  } catch (...) {
    cudaFree(scratch);
    throw;
  }
  KILN_CUDA_CHECK(cudaFree(scratch));
  int best = 0;
  if (std::isfinite(ms[0])) {
    float best_time = ms[0];
    for (int i = 1; i < count; ++i) {
      if (ms[i] < best_time && ms[i] < 0.95f * ms[0]) best = i, best_time = ms[i];
    }
  }
  if (log) {
    std::ostringstream line;
    line << "[kiln] gemm timing: " << count << " candidates (" << extra.size() << " skinny), "
         << phases.survivors << " after the first round, chose " << best << "; ms set-up "
         << phases.setup << " first launches " << phases.first_launches << " captures "
         << phases.captures << " rounds " << phases.rounds << " total "
         << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                      clock_start)
                .count()
         << " (key";
    for (int64_t v : state.key) line << ' ' << v;
    line << "); us";
    for (int i = 0; i < count; ++i) line << (i == found ? " | " : " ") << ms[i] * 1000.f;
    line << "\n";
    std::cerr << line.str();
  }
  std::lock_guard<std::mutex> lock(mutex);
  chosen[key] = best;
  return best;
}

// A kept choice of skinny_gemm.cu: a tag no cuBLASLt algorithm (64 bytes) has, then the form
// (kernels.h: a plain split count, as plans before 64-row blocks kept it, is that split in the
// kernel's default blocks).
constexpr char kSkinnyTag[4] = {'k', 's', 'g', '1'};

std::vector<uint8_t> skinny_choice_bytes(int32_t form) {
  std::vector<uint8_t> bytes(sizeof(kSkinnyTag) + sizeof(form));
  std::memcpy(bytes.data(), kSkinnyTag, sizeof(kSkinnyTag));
  std::memcpy(bytes.data() + sizeof(kSkinnyTag), &form, sizeof(form));
  return bytes;
}

bool skinny_choice(const std::vector<uint8_t>& bytes, int32_t* form) {
  if (bytes.size() != sizeof(kSkinnyTag) + sizeof(*form) ||
      std::memcmp(bytes.data(), kSkinnyTag, sizeof(kSkinnyTag)) != 0) {
    return false;
  }
  std::memcpy(form, bytes.data() + sizeof(kSkinnyTag), sizeof(*form));
  return true;
}

int64_t alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int64_t a = 1;
  while (a < 16 && (v % static_cast<uintptr_t>(a * 2)) == 0) a *= 2;
  return a;
}

cudaDataType_t cuda_type(DataType t) {
  return t == DataType::kF16 ? CUDA_R_16F : (t == DataType::kBF16 ? CUDA_R_16BF : CUDA_R_32F);
}

cublasLtMatrixLayout_t layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld,
                              int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld));
  const int32_t count = static_cast<int32_t>(batch);
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                     sizeof(count)));
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                     &stride, sizeof(stride)));
  return l;
}

// An operand's batch dims padded to `rank` - 2 (leading 1s).
Shape batch_of(const Shape& s, size_t rank) {
  Shape b(rank - s.size(), 1);
  b.insert(b.end(), s.begin(), s.end() - 2);
  return b;
}

void matmul_kernel(KernelArgs& args) {
  const auto& p = std::get<MatMulParams>(args.layer.params);
  const std::string& name = args.layer.name;
  const TensorView &a = args.inputs[0], &b = args.inputs[1], &out = args.outputs[0];
  if (!is_floating(out.dtype)) {
    launch_integer_matmul(args.stream(), name, p, args.inputs, out);
    return;
  }
  const bool a_vec = a.shape.size() == 1, b_vec = b.shape.size() == 1;
  const bool ta = p.transpose_a && !a_vec, tb = p.transpose_b && !b_vec;
  const Shape as = a_vec ? Shape{1, a.shape[0]} : a.shape;
  const Shape bs = b_vec ? Shape{b.shape[0], 1} : b.shape;
  const size_t rank = std::max(as.size(), bs.size());
  const int64_t m = ta ? as.back() : as[as.size() - 2];
  const int64_t k = ta ? as[as.size() - 2] : as.back();
  const int64_t n = tb ? bs[bs.size() - 2] : bs.back();
  const Shape a_batch = batch_of(as, rank), b_batch = batch_of(bs, rank);
  Shape batch(rank - 2);
  for (size_t d = 0; d < batch.size(); ++d) batch[d] = std::max(a_batch[d], b_batch[d]);
  const int64_t batches = volume(batch);

  size_t in_idx = 2;
  const TensorView* bias = p.post.has_bias ? &args.inputs[in_idx++] : nullptr;
  const TensorView* residual = p.post.has_residual ? &args.inputs[in_idx++] : nullptr;
  void* y = out.data;
  const size_t es = dtype_size(out.dtype);
  const cudaDataType_t type = cuda_type(out.dtype);
  cudaStream_t stream = args.stream();

  bool fused_bias = false, fused_activation = false, fused_residual = false,
       fused_activation2 = false;
  if (k == 0) {
    KILN_CUDA_CHECK(cudaMemsetAsync(y, 0, static_cast<size_t>(out.numel()) * es, stream));
  } else {
    // Operands whose batch is neither the full batch nor a single matrix are expanded.
    const int64_t a_mat = m * k, b_mat = k * n;
    const bool expand_a = volume(a_batch) != 1 && a_batch != batch;
    const bool expand_b = volume(b_batch) != 1 && b_batch != batch;
    const size_t a_bytes = expand_a ? static_cast<size_t>(batches * a_mat) * es : 0;
    const size_t b_bytes = expand_b ? static_cast<size_t>(batches * b_mat) * es : 0;
    const size_t a_off = 0, b_off = (a_bytes + 255) / 256 * 256;
    const size_t ws_off = b_off + (b_bytes + 255) / 256 * 256;
    auto* ws = static_cast<uint8_t*>(args.res.workspace(ws_off + kCublasWorkspace));
    const void* a_ptr = a.data;
    const void* b_ptr = b.data;
    auto expand = [&](const TensorView& t, const Shape& t_shape, const Shape& t_batch, void* dst) {
      Shape full = batch;
      full.push_back(t_shape[t_shape.size() - 2]);
      full.push_back(t_shape.back());
      const auto cs = contiguous_strides(Shape(t_batch.begin(), t_batch.end()));
      std::vector<int64_t> strides(full.size(), 0);
      const int64_t mat = t_shape[t_shape.size() - 2] * t_shape.back();
      for (size_t d = 0; d < t_batch.size(); ++d) strides[d] = t_batch[d] == 1 ? 0 : cs[d] * mat;
      strides[full.size() - 2] = t_shape.back();
      strides[full.size() - 1] = 1;
      launch_strided_copy(stream, name, es, t.data, 0, strides, full, dst);
    };
    if (expand_a) {
      expand(a, as, a_batch, ws + a_off);
      a_ptr = ws + a_off;
    }
    if (expand_b) {
      expand(b, bs, b_batch, ws + b_off);
      b_ptr = ws + b_off;
    }
    const int64_t b_stride = volume(b_batch) == 1 && !expand_b ? 0 : b_mat;
    // Row-major A matrices one after another against one shared B (a linear layer over a
    // batch of sequences) are one GEMM of batches * m rows: cuBLASLt then tiles the rows
    // across the batch instead of padding each matrix's last tile (ViT's 197 tokens); the switch
    // gemm_fold=off keeps them batched.
    const bool fold = batches > 1 && !ta && b_stride == 0 && (volume(a_batch) != 1 || expand_a) &&
                      args.res.options().gemm_fold;
    const int64_t rows = fold ? batches * m : m, mats = fold ? 1 : batches;
    const int64_t a_stride = fold || (volume(a_batch) == 1 && !expand_a) ? 0 : a_mat;
    const bool bias_epilogue = bias && bias->numel() == n && bias->dtype == out.dtype;
    const ActivationKind act = p.post.activation, act2 = p.post.activation2;
    const auto epilogue_act = [](ActivationKind a) {
      return a == ActivationKind::kRelu || a == ActivationKind::kGeluTanh;
    };
    const bool act_epilogue = (bias_epilogue || !bias) && epilogue_act(act);
    // cuBLASLt computes act(A B + beta C + bias): a residual of the output's shape and dtype is C
    // when nothing is applied between the bias and the residual; act2 then is the epilogue's.
    const bool residual_c = residual && (bias_epilogue || !bias) && act == ActivationKind::kNone &&
                            residual->dtype == out.dtype && residual->shape == out.shape;
    const bool act2_epilogue = residual_c && epilogue_act(act2);
    const ActivationKind epi_act =
        act_epilogue ? act : (act2_epilogue ? act2 : ActivationKind::kNone);
    const bool tf32 = p.tf32 && out.dtype == DataType::kF32;
    // Whether skinny_gemm.cu takes the GEMM with all of its post-ops (gemm_skinny, kernels.h):
    // one row-major A (or A's matrices folded) against one weight, [n, k] (tb) or [k, n].
    const SkinnyGemm skinny_mode = args.res.options().gemm_skinny;
    SkinnyPostOps skinny_post;
    bool skinny = false;
    if (skinny_mode != SkinnyGemm::kOff && !ta && mats == 1 && b_stride == 0 &&
        (!bias || (bias->numel() == n && bias->dtype == out.dtype)) &&
        (!residual || (residual->dtype == out.dtype && residual->shape == out.shape))) {
      const PostOps& post = p.post;
      skinny_post.bias = bias ? bias->data : nullptr;
      skinny_post.act = act;
      skinny_post.alpha = static_cast<float>(post.alpha);
      skinny_post.beta = static_cast<float>(post.beta);
      skinny_post.residual = residual ? residual->data : nullptr;
      skinny_post.act2 = act2;
      skinny_post.alpha2 = static_cast<float>(post.alpha2);
      skinny_post.beta2 = static_cast<float>(post.beta2);
      skinny = skinny_gemm_takes(out.dtype, rows, n, k, a_ptr, b_ptr, y, skinny_post);
    }
    std::vector<int64_t> key = {static_cast<int64_t>(out.dtype),
                                tf32,
                                ta,
                                tb,
                                rows,
                                n,
                                k,
                                mats,
                                a_stride,
                                b_stride,
                                bias_epilogue,
                                act_epilogue,
                                static_cast<int64_t>(act),
                                alignment(a_ptr),
                                alignment(b_ptr),
                                alignment(y),
                                bias_epilogue ? alignment(bias->data) : 0,
                                residual_c,
                                act2_epilogue,
                                static_cast<int64_t>(act2),
                                residual_c ? alignment(residual->data) : 0};
    auto& states = state_of<StatesByShape<MatMulState>>(args.state);
    MatMulState* state = states.find(key);
    // Tuning is asked for only where this shape's choice is still to be made (Resources::tune).
    const bool tune = (!state || !state->tuned) && args.res.tune();
    if (!state || (tune && !state->tuned)) {
      auto fresh = std::make_unique<MatMulState>();
      fresh->key = key;
      KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(
          &fresh->desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
      // D^T (N x M, column-major) = op(B) (N x K) * op(A) (K x M).
      const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
      const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
      KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(fresh->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                       &op_b, sizeof(op_b)));
      KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(fresh->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                       &op_a, sizeof(op_a)));
      cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
      if (epi_act == ActivationKind::kRelu) {
        epilogue = bias_epilogue ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
      } else if (epi_act == ActivationKind::kGeluTanh) {
        epilogue = bias_epilogue ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
      } else if (bias_epilogue) {
        epilogue = CUBLASLT_EPILOGUE_BIAS;
      }
      KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(fresh->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                       &epilogue, sizeof(epilogue)));
      fresh->b = tb ? layout(type, k, n, k, mats, b_stride) : layout(type, n, k, n, mats, b_stride);
      fresh->a =
          ta ? layout(type, m, k, m, mats, a_stride) : layout(type, k, rows, k, mats, a_stride);
      fresh->d = layout(type, n, rows, n, mats, rows * n);
      cublasLtMatmulPreference_t pref = nullptr;
      KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      const uint64_t max_ws = kCublasWorkspace;
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                           sizeof(max_ws));
      const uint32_t align_a = static_cast<uint32_t>(alignment(b_ptr));
      const uint32_t align_b = static_cast<uint32_t>(alignment(a_ptr));
      const uint32_t align_d = static_cast<uint32_t>(alignment(y));
      const uint32_t align_c =
          residual_c ? static_cast<uint32_t>(alignment(residual->data)) : align_d;
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                           &align_a, sizeof(align_a));
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                           &align_b, sizeof(align_b));
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                           &align_c, sizeof(align_c));
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                           &align_d, sizeof(align_d));
      const int sms = multiprocessors(args.res.device());
      const bool split_k = split_k_worth(args.res.options(), rows, n, k, mats, sms);
      const bool worth = worth_timing(args.res.options(), rows, n, k, mats) || split_k;
      const bool timed = tune && worth;
      cublasLtMatmulHeuristicResult_t results[kCandidates + kSplitCandidates]{};
      int found = 0;
      const auto lt = static_cast<cublasLtHandle_t>(args.res.cublaslt());
      cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;
      // The engine's choice for this shape where it has one (made at the plan's build or by
      // another context) and cuBLASLt (or skinny_gemm.cu) takes it for these descriptors: no
      // heuristic query, no timing, whether or not this call may choose.
      bool adopted = false;
      int skinny_form = 0;
      // A form of the GEMM of few rows this weight and this GPU run (a plan's choice made on an
      // H100 names a wgmma form, which a later architecture does not run).
      const bool wgmma = skinny && tb && skinny_wgmma_available(args.res.device());
      const auto runs_here = [&](int form) {
        return skinny && skinny_gemm_form_valid(k, !tb, form) &&
               (wgmma || !skinny_form_wgmma(form));
      };
      {
        const std::optional<std::vector<uint8_t>> choice = args.res.kept_choice(key);
        cublasLtMatmulAlgo_t algo{};
        int32_t form = 0;
        if (choice && skinny_choice(*choice, &form)) {
          if (runs_here(form)) {
            skinny_form = form;
            adopted = true;
          }
        } else if (choice && choice->size() == sizeof(algo)) {
          std::memcpy(&algo, choice->data(), sizeof(algo));
          adopted = cublasLtMatmulAlgoCheck(lt, fresh->desc, fresh->b, fresh->a, fresh->d, fresh->d,
                                            &algo, &results[0]) == CUBLAS_STATUS_SUCCESS &&
                    results[0].workspaceSize <= kCublasWorkspace;
          if (adopted) {
            results[0].algo = algo;
            found = 1;
            status = CUBLAS_STATUS_SUCCESS;
          }
        }
      }
      // gemm_skinny=only: the kernel wherever it takes the GEMM, at the split that fills the SMs.
      if (!adopted && skinny && skinny_mode == SkinnyGemm::kOnly) {
        skinny_form = skinny_gemm_forms(rows, n, k, sms, wgmma).at(0);
      }
      // Where this shape is not to be tuned now, the algorithm chosen at the nearest shape that
      // was (same operation, dtypes and epilogue: only sizes, strides and alignments differ; the
      // nearest in multiply-adds), where it takes this one.
      MatMulState* kept =
          !adopted && skinny_form == 0 && !tune && args.res.options().reuse_algorithms
              ? states.nearest(
                    [&](const MatMulState& s) { return s.tuned && same_operation(s.key, key); },
                    [&](const MatMulState& s) {
                      return std::abs(std::log(gemm_size(s.key) / gemm_size(key)));
                    })
              : nullptr;
      if (kept && kept->skinny_form > 0) {
        if (runs_here(kept->skinny_form)) {
          skinny_form = kept->skinny_form;
        }
      } else if (kept &&
                 cublasLtMatmulAlgoCheck(lt, fresh->desc, fresh->b, fresh->a, fresh->d, fresh->d,
                                         &kept->algo, &results[0]) == CUBLAS_STATUS_SUCCESS &&
                 results[0].workspaceSize <= kCublasWorkspace) {
        results[0].algo = kept->algo;
        found = 1;
        status = CUBLAS_STATUS_SUCCESS;
      }
      if (skinny_form > 0) {
        // Chosen without cuBLASLt: kept (adopted), forced (only) or the nearest shape's.
        fresh->tuned = adopted || (skinny_mode == SkinnyGemm::kOnly && (tune || !worth));
        cublasLtMatmulPreferenceDestroy(pref);
      } else {
        // Chosen as a tuning run would choose: by the heuristic, timed where that is worth it.
        fresh->tuned = adopted || (found == 0 && (timed || !worth));
        if (found == 0) {
          count_algorithm_search();
          status = cublasLtMatmulAlgoGetHeuristic(lt, fresh->desc, fresh->b, fresh->a, fresh->d,
                                                  fresh->d, pref, timed ? kCandidates : 1, results,
                                                  &found);
        }
        cublasLtMatmulPreferenceDestroy(pref);
        KILN_CHECK(status == CUBLAS_STATUS_SUCCESS && found > 0, Unsupported, "layer `", name,
                   "` (matmul): cuBLASLt has no algorithm for M=", m, " N=", n, " K=", k,
                   " batch=", batches, " (status ", static_cast<int>(status), ")");
        if (timed && split_k && fresh->tuned && !adopted) {
          found = add_split_k(lt, *fresh, results[0].algo, output_tiles(rows, n, mats), k, sms,
                              results, found, kCandidates + kSplitCandidates);
        }
        // gemm_skinny=on: the kernel's forms are timed after cuBLASLt's.
        std::vector<int> skinny_forms;
        std::vector<std::function<bool(cudaStream_t, void*)>> extra;
        if (timed && fresh->tuned && !adopted && skinny && skinny_mode == SkinnyGemm::kOn) {
          skinny_forms = skinny_gemm_forms(rows, n, k, sms, wgmma);
          for (int form : skinny_forms) {
            extra.push_back([&, form](cudaStream_t on, void* to) {
              try {  // a form that cannot launch here drops out of the timing
                launch_skinny_gemm(on, name, out.dtype, rows, n, k, form, a_ptr, b_ptr, !tb, to,
                                   skinny_post);
                return true;
              } catch (const DeviceError&) {
                cudaGetLastError();
                return false;
              }
            });
          }
        }
        int chosen = 0;
        if (found + static_cast<int>(extra.size()) > 1) {
          if (bias_epilogue) {
            const void* bias_ptr = bias->data;
            KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                fresh->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
          }
          const TimingRun run{lt,
                              a_ptr,
                              b_ptr,
                              residual_c ? residual->data : nullptr,
                              static_cast<size_t>(batches * m * n) * es,
                              ws + ws_off,
                              stream};
          chosen = fastest_candidate(*fresh, results, found, run, args.res.device(), extra);
        }
        if (chosen >= found) {
          skinny_form = skinny_forms.at(chosen - found);
        } else {
          fresh->algo = results[chosen].algo;
          fresh->algo_workspace = results[chosen].workspaceSize;
        }
      }
      fresh->skinny_form = skinny_form;
      // A choice made for this shape is the engine's for every context (and the plan's when
      // building).
      if (fresh->tuned && !adopted) {
        std::vector<uint8_t> bytes;
        if (skinny_form > 0) {
          bytes = skinny_choice_bytes(skinny_form);
        } else {
          bytes.resize(sizeof(fresh->algo));
          std::memcpy(bytes.data(), &fresh->algo, sizeof(fresh->algo));
        }
        args.res.keep_choice(key, std::move(bytes));
      }
      // skinny_gemm.cu applies every post-op itself.
      fresh->fused_bias = skinny_form > 0 ? bias != nullptr : bias_epilogue;
      fresh->fused_activation = skinny_form > 0 || act_epilogue;
      fresh->fused_residual = skinny_form > 0 ? residual != nullptr : residual_c;
      fresh->fused_activation2 = skinny_form > 0 || act2_epilogue;
      state = states.add(std::move(fresh));
    }
    if (state->skinny_form > 0) {
      KILN_CHECK(skinny, InternalError, "layer `", name,
                 "` (matmul): the skinny GEMM chosen for this key does not take the operands");
      // programmatic_launch: a constant weight streams in while the kernel ahead finishes.
      const bool early = args.res.options().programmatic_launch && b.constant && !expand_b;
      launch_skinny_gemm(stream, name, out.dtype, rows, n, k, state->skinny_form, a_ptr, b_ptr, !tb,
                         y, skinny_post, early);
    } else {
      if (state->fused_bias) {
        const void* bias_ptr = bias->data;
        KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            state->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
      }
      const float one = 1.f, zero = 0.f;
      const void* c_ptr = state->fused_residual ? residual->data : y;
      KILN_CUBLAS_CHECK(cublasLtMatmul(
          static_cast<cublasLtHandle_t>(args.res.cublaslt()), state->desc, &one, b_ptr, state->b,
          a_ptr, state->a, state->fused_residual ? &one : &zero, c_ptr, state->d, y, state->d,
          &state->algo, ws + ws_off, state->algo_workspace, stream));
    }
    fused_bias = state->fused_bias;
    fused_activation = state->fused_activation;
    fused_residual = state->fused_residual;
    fused_activation2 = state->fused_activation2;
  }
  const PostOps& post = p.post;
  PostOpArgs rest;
  rest.bias = bias && !fused_bias ? bias : nullptr;
  rest.channels = rest.bias ? rest.bias->numel() : 1;
  rest.act = fused_activation ? ActivationKind::kNone : post.activation;
  rest.alpha = post.alpha, rest.beta = post.beta;
  rest.residual = fused_residual ? nullptr : residual;
  rest.act2 = fused_activation2 ? ActivationKind::kNone : post.activation2;
  rest.alpha2 = post.alpha2, rest.beta2 = post.beta2;
  if (rest.bias || rest.act != ActivationKind::kNone || rest.residual ||
      rest.act2 != ActivationKind::kNone) {
    launch_post_ops(stream, name, out, rest);
  }
}

std::string matmul_support(const Layer&, const std::vector<DataType>& in,
                           const std::vector<DataType>& out) {
  if (in.at(0) != out.at(0) || in.at(1) != out.at(0)) {
    return std::string("operands must have the output's dtype, got ") + dtype_name(in[0]) +
           " and " + dtype_name(in[1]);
  }
  return "";
}

}  // namespace

void run_matmul(KernelArgs& args) {
  matmul_kernel(args);
}

void register_matmul(KernelTable& t) {
  t.set<MatMulParams>(matmul_kernel,
                      kFloatTypes | dtype_bit(DataType::kI64) | dtype_bit(DataType::kI32),
                      matmul_support);
}

}  // namespace kiln::engine::cuda
