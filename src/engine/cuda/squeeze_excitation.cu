// CUDA squeeze-excitation (SqueezeExcitationParams) on channels-last data, x [N, spatial..., C]
// viewed as [N, P, C]; two launches where torch's form takes five (pool, two 1x1 convolutions,
// multiply; bench/NOTES.md G21):
// 1. squeeze (blocks of 1024 threads): block (chunk, n) sums its chunk of sample n's P pixels
//    for every channel (threads across 16-byte words of channels and rows of pixels; the rows
//    combined in shared memory in a fixed order) and writes the sums to a partials buffer. The
//    last block of sample n to finish (a per-sample counter, incremented after a fence) adds the
//    chunks' sums in chunk order into the means and computes the two small products: hidden =
//    act1(w1 . mean + b1), threads per hidden value over runs of channels, then scale =
//    act2(w2 . hidden + b2) from w2 transposed to [S, C] once (coalesced: threads across channel
//    words and parts of S), into a float buffer. It resets the counter, so a replayed CUDA graph
//    finds it at zero. Results do not depend on which block finishes last.
// 2. excite: y = x * scale[n, c] in 16-byte words.
// With a projection (SqueezeExcitationParams::project: the 1x1 convolution after the excitation,
// bench/NOTES.md G29) the last block writes the projection's weights scaled per sample,
// wp[o, c] * scale[n, c], in place of the scale, and the projection runs as one batched cuBLASLt
// GEMM of x itself: the excite pass (a read and a write of x) is gone.
// Everything accumulates in fp32 (torch rounds the pool, hidden and scale to the dtype).
#include <algorithm>
#include <atomic>

#include "engine/cuda/device_math.cuh"
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {
namespace {

// The squeeze kernel's threads: its last block per sample is a chain of dependent L2 round trips
// (partials, then each product's weights), and more threads make each link shorter: at 256 the
// 7x7x1152 layer of efficientnet_b0 took about 30 us whatever the batch (bench/NOTES.md G25, G28).
constexpr int kSeThreads = 1024;
constexpr int kExciteThreads = 256;
// Loads each thread of the last block has in flight before using any (partial sums, weight
// words): with `#pragma unroll` alone the compiler reused registers so that two loads were in
// flight (batched, efficientnet_b0's 7x7x1152 layer went 33.7 -> 30.0 us at b1 fp32,
// bench/NOTES.md G25). Words of 8 elements take 4 (8 spill at 1024 threads' 64 registers).
constexpr int kSeBatch = 8;

struct SeArgs {
  const void *x, *w1, *b1, *w2t, *b2;  // w2t: w2 transposed, [S, C]
  void* y;
  float* partials;     // [N, chunks, C]
  float* scale;        // [N, C]
  const void* wp;      // projection weights [O, C], or null (no projection)
  void* scaled_wp;     // [N, O, C]: wp scaled per sample (with wp)
  int out_channels;    // O
  unsigned* counters;  // [N], zero between launches
  int pixels, channels, squeeze, chunk_pixels;
  ActivationKind act1, act2;
  float alpha1, beta1, alpha2, beta2;
};

// Shared memory: rows x C sums (the pixel rows of the block), later C means, S hidden values and
// a partial sum per thread or the second product's parts x C sums.
template <class T, int V>
__global__ void __launch_bounds__(kSeThreads) se_squeeze(SeArgs a) {
  constexpr int kWordBatch = V == 8 ? 4 : kSeBatch;
  extern __shared__ float smem[];
  __shared__ bool is_last;
  const int n = blockIdx.y, chunk = blockIdx.x, chunks = gridDim.x;
  const int c_total = a.channels, words = c_total / V;
  const int lanes = min(words, kSeThreads), rows = kSeThreads / lanes;
  const int t = threadIdx.x, lane = t % lanes, row = t / lanes;
  const int p0 = chunk * a.chunk_pixels, p1 = min(a.pixels, p0 + a.chunk_pixels);
  const T* x = static_cast<const T*>(a.x) + static_cast<int64_t>(n) * a.pixels * c_total;
  {
    // The blocks share out L2 prefetches of the weights and biases, which a network's activations
    // may have evicted, for the last blocks' products (7x7x1152 in efficientnet_b0 b32: 37.3 ->
    // 34.8 us, bench/NOTES.md G25).
    const int64_t lines_w =
        (int64_t{a.squeeze} * c_total * static_cast<int>(sizeof(T)) + 127) / 128;
    const int64_t lines_b = (int64_t{c_total} * static_cast<int>(sizeof(T)) + 127) / 128;
    const int64_t first = (int64_t{blockIdx.y} * chunks + chunk) * kSeThreads + t;
    const int64_t stride = int64_t{chunks} * gridDim.y * kSeThreads;
    const int64_t lines = 2 * lines_w + (a.b2 ? lines_b : 0);
    for (int64_t l = first; l < lines; l += stride) {
      if (l < lines_w) {
        prefetch_l2(static_cast<const char*>(a.w1) + l * 128);
      } else if (l < 2 * lines_w) {
        prefetch_l2(static_cast<const char*>(a.w2t) + (l - lines_w) * 128);
      } else {
        prefetch_l2(static_cast<const char*>(a.b2) + (l - 2 * lines_w) * 128);
      }
    }
  }
  if (row < rows) {
    for (int w = lane; w < words; w += lanes) {
      float acc[V];
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] = 0.f;
#pragma unroll 4
      for (int p = p0 + row; p < p1; p += rows) {
        const Pack<T, V> v =
            *reinterpret_cast<const Pack<T, V>*>(x + static_cast<int64_t>(p) * c_total + w * V);
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] += static_cast<float>(v.v[k]);
      }
#pragma unroll
      for (int k = 0; k < V; ++k) smem[row * c_total + w * V + k] = acc[k];
    }
  }
  __syncthreads();
  float* partial = a.partials + (static_cast<int64_t>(n) * chunks + chunk) * c_total;
  for (int c = t; c < c_total; c += kSeThreads) {
    float s = 0.f;
    for (int r = 0; r < rows; ++r) s += smem[r * c_total + c];
    partial[c] = s;
  }
  __threadfence();  // the partials are visible device-wide before the counter moves
  __syncthreads();
  if (t == 0) is_last = atomicAdd(&a.counters[n], 1u) == static_cast<unsigned>(chunks - 1);
  __syncthreads();
  if (!is_last) return;
  __threadfence();

  // The last block's products are latency-bound (one block per sample streams both weight
  // matrices from L2), so every loop keeps several independent loads in flight.
  float* mean = smem;
  float* hidden = smem + c_total;
  const float inv = 1.f / static_cast<float>(a.pixels);
  const float* sums = a.partials + static_cast<int64_t>(n) * chunks * c_total;
  for (int c = t; c < c_total; c += kSeThreads) {
    // kSeBatch loads in flight, summed in chunk order (a fixed order: the result does not
    // depend on which block finished last).
    float total = 0.f;
    for (int k = 0; k < chunks; k += kSeBatch) {
      float v[kSeBatch];
#pragma unroll
      for (int u = 0; u < kSeBatch; ++u) {
        v[u] = k + u < chunks ? __ldcg(sums + static_cast<int64_t>(k + u) * c_total + c) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kSeBatch; ++u) total += v[u];
    }
    mean[c] = total * inv;
  }
  if (t == 0) a.counters[n] = 0;
  __syncthreads();
  // hidden[s] = act1(b1[s] + w1[s, :] . mean): `parts` threads per row, each over a contiguous
  // run of channel words, combined in shared memory (after the hidden values).
  const T* w1 = static_cast<const T*>(a.w1);
  const T* b1 = static_cast<const T*>(a.b1);
  float* part_sums = hidden + a.squeeze;
  const int parts = max(1, kSeThreads / a.squeeze),
            row_threads = parts * min(a.squeeze, kSeThreads);
  const int run = (words + parts - 1) / parts;  // words per part
  for (int s0 = 0; s0 < a.squeeze; s0 += kSeThreads / parts) {
    const int s = s0 + t / parts, part = t % parts;
    float acc = 0.f;
    if (t < row_threads && s < a.squeeze) {
      const T* w = w1 + static_cast<int64_t>(s) * c_total;
      const int w_end = min(words, (part + 1) * run);
      for (int wd = part * run; wd < w_end; wd += kWordBatch) {
        Pack<T, V> v[kWordBatch];  // all loads in flight before the products
#pragma unroll
        for (int u = 0; u < kWordBatch; ++u) {
          if (wd + u < w_end) v[u] = *reinterpret_cast<const Pack<T, V>*>(w + (wd + u) * V);
        }
#pragma unroll
        for (int u = 0; u < kWordBatch; ++u) {
          if (wd + u >= w_end) break;
#pragma unroll
          for (int k = 0; k < V; ++k) {
            acc += static_cast<float>(v[u].v[k]) * mean[(wd + u) * V + k];
          }
        }
      }
    }
    part_sums[t] = acc;
    __syncthreads();
    if (t < kSeThreads / parts && s0 + t < a.squeeze) {
      float z = b1 ? static_cast<float>(b1[s0 + t]) : 0.f;
      for (int q = 0; q < parts; ++q) z += part_sums[t * parts + q];
      hidden[s0 + t] = activate(a.act1, z, a.alpha1, a.beta1);
    }
    __syncthreads();
  }
  // scale[c] = act2(b2[c] + w2t[:, c] . hidden) from w2 transposed to [S, C] (coalesced): thread
  // (lane, part) takes channel word `lane` over part `part` of the squeezed values, the parts
  // combined in shared memory (after the hidden values) in a fixed order.
  const T* w2t = static_cast<const T*>(a.w2t);
  const T* b2 = static_cast<const T*>(a.b2);
  float* red = hidden + a.squeeze;  // [parts2, C]
  const int lanes2 = min(words, kSeThreads), parts2 = kSeThreads / lanes2;
  const int s_run = (a.squeeze + parts2 - 1) / parts2;
  const int part = t / lanes2;
  if (part < parts2) {
    const int s_begin = part * s_run, s_end = min(a.squeeze, s_begin + s_run);
    for (int w = t % lanes2; w < words; w += lanes2) {
      float acc[V];
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] = 0.f;
      const T* col = w2t + w * V;
      for (int s = s_begin; s < s_end; s += kWordBatch) {
        Pack<T, V> v[kWordBatch];
#pragma unroll
        for (int u = 0; u < kWordBatch; ++u) {
          if (s + u < s_end) {
            v[u] =
                *reinterpret_cast<const Pack<T, V>*>(col + static_cast<int64_t>(s + u) * c_total);
          }
        }
#pragma unroll
        for (int u = 0; u < kWordBatch; ++u) {
          if (s + u >= s_end) break;
          const float hs = hidden[s + u];
#pragma unroll
          for (int k = 0; k < V; ++k) acc[k] += static_cast<float>(v[u].v[k]) * hs;
        }
      }
#pragma unroll
      for (int k = 0; k < V; ++k) red[part * c_total + w * V + k] = acc[k];
    }
  }
  __syncthreads();
  // The scale: to the excite pass, or (a projection) kept in shared memory (in place of the
  // means, which the first product was the last to read) for the scaled weights.
  for (int c = t; c < c_total; c += kSeThreads) {
    float z = b2 ? static_cast<float>(b2[c]) : 0.f;
    for (int q = 0; q < parts2; ++q) z += red[q * c_total + c];
    z = activate(a.act2, z, a.alpha2, a.beta2);
    if (a.wp) {
      mean[c] = z;
    } else {
      a.scale[static_cast<int64_t>(n) * c_total + c] = z;
    }
  }
  if (!a.wp) return;
  __syncthreads();
  // scaled_wp[n, o, c] = wp[o, c] * scale[c] in words of V channels.
  const int64_t total = int64_t{a.out_channels} * words;
  const auto* wp = static_cast<const Pack<T, V>*>(a.wp);
  auto* dst = static_cast<Pack<T, V>*>(a.scaled_wp) + static_cast<int64_t>(n) * total;
  for (int64_t i = t; i < total; i += kSeThreads) {
    const int c = static_cast<int>(i % words) * V;
    const Pack<T, V> v = wp[i];
    Pack<T, V> r;
#pragma unroll
    for (int k = 0; k < V; ++k) r.v[k] = T(static_cast<float>(v.v[k]) * mean[c + k]);
    dst[i] = r;
  }
}

// wt[s, c] = w[c, s]: the second product's weights, transposed once into the layer's state.
template <class T>
__global__ void se_transpose(const T* w, T* wt, int channels, int squeeze) {
  const int64_t total = static_cast<int64_t>(channels) * squeeze;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = i / channels, c = i % channels;
    wt[i] = w[c * squeeze + s];
  }
}

// y[n, p, c] = x[n, p, c] * scale[n, c]; block (word chunk, n), words of V channels.
template <class T, int V>
__global__ void __launch_bounds__(kExciteThreads)
    se_excite(const T* x, const float* scale, T* y, int samples, int sample_words, int words_c,
              int channels) {
  for (int n = blockIdx.y; n < samples; n += gridDim.y) {
    const int64_t base = static_cast<int64_t>(n) * sample_words;
    const float* s = scale + static_cast<int64_t>(n) * channels;
    for (int j = blockIdx.x * kExciteThreads + threadIdx.x; j < sample_words;
         j += gridDim.x * kExciteThreads) {
      const int c = (j % words_c) * V;
      const Pack<T, V> v = reinterpret_cast<const Pack<T, V>*>(x)[base + j];
      Pack<T, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] = T(static_cast<float>(v.v[k]) * s[c + k]);
      reinterpret_cast<Pack<T, V>*>(y)[base + j] = out;
    }
  }
}

// The per-sample counters of the last block's election, zeroed once per size, the device's
// multiprocessor count, and w2 transposed (made at the first run, remade if the weights move;
// a plan's weights do not change after upload).
struct SeState : KernelState {
  unsigned* counters = nullptr;
  int64_t capacity = 0;
  int sms = 0;
  void* w2t = nullptr;
  const void* w2_source = nullptr;
  size_t w2t_bytes = 0;
  std::unique_ptr<KernelState> gemm;  // the projection's (the matmul kernel's state)
  ~SeState() override {
    if (counters) cudaFree(counters);
    if (w2t) cudaFree(w2t);
  }
};

// The matmul kernel's workspace need (cuBLASLt's 32 MiB) with room to spare, after the scaled
// weights.
constexpr size_t kProjectionGemmWorkspace = size_t{64} << 20;

// The projection as one batched GEMM: out[n] = x[n] . scaled_wp[n]^T + post-ops, x[n] [P, C].
void project(KernelArgs& args, const SeArgs& a, int samples, void* base, size_t slot) {
  const auto& p = std::get<SqueezeExcitationParams>(args.layer.params);
  const TensorView& x = args.inputs[0];
  const TensorView& out = args.outputs[0];
  const int64_t n = samples, pixels = a.pixels, c = a.channels, o = a.out_channels;
  MatMulParams mp;
  mp.transpose_b = true;
  mp.post = p.projection;
  mp.tf32 = p.tf32;
  Layer gemm{args.layer.name, mp, {}, {}};
  size_t next = p.excitation_inputs() + 1;
  std::vector<TensorView> inputs = {{x.dtype, {n, pixels, c}, x.data},
                                    {x.dtype, {n, o, c}, a.scaled_wp}};
  if (p.projection.has_bias) inputs.push_back(args.inputs[next++]);
  if (p.projection.has_residual) {
    inputs.push_back({args.inputs[next].dtype, {n, pixels, o}, args.inputs[next].data});
  }
  const std::vector<TensorView> outputs = {{out.dtype, {n, pixels, o}, out.data}};
  auto* state = dynamic_cast<SeState*>(args.state.get());
  WorkspaceAfter res(args.res, slot, base);
  KernelArgs gemm_args{gemm, inputs, outputs, state->gemm, res};
  run_matmul(gemm_args);
}

template <class T, int V>
void launch(KernelArgs& args, SeArgs a, int samples, int sms) {
  const int words = a.channels / V;
  const int lanes = std::min(words, kSeThreads), rows = kSeThreads / lanes;
  // Chunks of pixels so that up to 2 blocks per multiprocessor run (all the threads an SM holds)
  // in one wave (rounding up put 288 blocks on 264 places at b32), each thread summing at least 4
  // pixels.
  const int64_t want = int64_t{2} * sms / samples;
  const int64_t most = std::max<int64_t>(1, a.pixels / (int64_t{rows} * 4));
  int64_t chunks = std::clamp<int64_t>(want, 1, std::min<int64_t>(most, 65535));
  a.chunk_pixels = static_cast<int>((a.pixels + chunks - 1) / chunks);
  chunks = (a.pixels + a.chunk_pixels - 1) / a.chunk_pixels;
  const size_t partial_floats = static_cast<size_t>(samples) * chunks * a.channels;
  const size_t scale_floats = static_cast<size_t>(samples) * a.channels;
  // With a projection: the scaled weights after the partials (no scale), then the GEMM's own
  // workspace (WorkspaceAfter).
  const size_t scaled_bytes =
      a.wp ? static_cast<size_t>(samples) * a.out_channels * a.channels * sizeof(T) : 0;
  const size_t own_bytes = a.wp ? (partial_floats * 4 + 255) / 256 * 256 + scaled_bytes
                                : (partial_floats + scale_floats) * 4;
  const size_t slot = (own_bytes + 255) / 256 * 256;
  void* base = args.res.workspace(a.wp ? slot + kProjectionGemmWorkspace : own_bytes);
  auto* ws = static_cast<float*>(base);
  a.partials = ws;
  if (a.wp) {
    a.scaled_wp = static_cast<char*>(base) + (partial_floats * 4 + 255) / 256 * 256;
  } else {
    a.scale = ws + partial_floats;
  }
  const int parts2 = kSeThreads / lanes;  // the second product's (see se_squeeze)
  const size_t smem =
      sizeof(float) *
      static_cast<size_t>(std::max(
          rows * a.channels, a.channels + a.squeeze + std::max(kSeThreads, parts2 * a.channels)));
  // At most rows x C <= max(C, kSeThreads V) floats, or C + S + max(kSeThreads, parts2 C) with
  // parts2 C <= max(C, kSeThreads V), for C and S up to 4096 (squeeze_excitation_applies): 64 KiB
  // in 16-bit types, past the 48 KiB a launch gets without asking.
  constexpr size_t kMostSmem = sizeof(float) * (2 * 4096 + std::max(4096, kSeThreads * V));
  static std::atomic<uint64_t> configured{0};
  allow_shared_bytes(reinterpret_cast<const void*>(se_squeeze<T, V>), kMostSmem, args.res.device(),
                     configured);
  se_squeeze<T, V><<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(samples)),
                     kSeThreads, smem, args.stream()>>>(a);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
  if (a.wp) {
    project(args, a, samples, base, slot);
    return;
  }
  const int sample_words = a.pixels * words;
  const int blocks_x =
      std::max(1, std::min(65535, (sample_words + kExciteThreads * 4 - 1) / (kExciteThreads * 4)));
  se_excite<T, V>
      <<<dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(std::min(samples, 65535))),
         kExciteThreads, 0, args.stream()>>>(static_cast<const T*>(a.x), a.scale,
                                             static_cast<T*>(a.y), samples, sample_words, words,
                                             a.channels);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

template <class T>
void launch_t(KernelArgs& args, const SeArgs& a, int samples, int sms) {
  constexpr int V = Vec16<T>::kN;
  const bool vec = a.channels % V == 0 && aligned16(a.x) && aligned16(a.y) && aligned16(a.w1) &&
                   aligned16(a.w2t) && (!a.wp || aligned16(a.wp));
  if (vec) {
    launch<T, V>(args, a, samples, sms);
  } else {
    launch<T, 1>(args, a, samples, sms);
  }
}

void squeeze_excitation_kernel(KernelArgs& args) {
  const auto& p = std::get<SqueezeExcitationParams>(args.layer.params);
  const TensorView& x = args.inputs[0];
  const TensorView& out = args.outputs[0];
  const std::string& name = args.layer.name;
  KILN_CHECK(p.channels_last, Unsupported, "layer `", name,
             "` (squeeze_excitation): the CUDA kernel takes channels-last data only");
  if (out.numel() == 0) return;
  const int64_t samples = x.shape[0], channels = x.shape.back();
  const int64_t squeeze = args.inputs[1].shape[0];
  const int64_t pixels = x.numel() / (samples * channels);
  KILN_CHECK(squeeze_excitation_applies(channels, squeeze, true), Unsupported, "layer `", name,
             "` (squeeze_excitation): ", channels, " channels squeezed to ", squeeze,
             " (the CUDA kernel takes at most 4096 of each)");
  KILN_CHECK(samples <= 65535 && pixels * channels < (int64_t{1} << 31), Unsupported, "layer `",
             name, "` (squeeze_excitation): ", shape_to_string(x.shape),
             " is past the CUDA kernel's limits (65535 samples of < 2^31 elements)");
  auto* state = dynamic_cast<SeState*>(args.state.get());
  if (!state || state->capacity < samples) {
    auto fresh = std::make_unique<SeState>();
    KILN_CUDA_CHECK(cudaMalloc(&fresh->counters, static_cast<size_t>(samples) * sizeof(unsigned)));
    KILN_CUDA_CHECK(cudaMemsetAsync(
        fresh->counters, 0, static_cast<size_t>(samples) * sizeof(unsigned), args.stream()));
    fresh->capacity = samples;
    KILN_CUDA_CHECK(
        cudaDeviceGetAttribute(&fresh->sms, cudaDevAttrMultiProcessorCount, args.res.device()));
    if (state) args.res.device_memory_moved();  // the old counters are freed
    state = fresh.get();
    args.state = std::move(fresh);
  }
  const TensorView& w2 = args.inputs[p.has_bias1 ? 3 : 2];
  const size_t w2_bytes = static_cast<size_t>(w2.numel()) * dtype_size(w2.dtype);
  if (state->w2_source != w2.data || state->w2t_bytes != w2_bytes) {
    if (state->w2t_bytes != w2_bytes) {
      if (state->w2t) args.res.device_memory_moved();
      if (state->w2t) KILN_CUDA_CHECK(cudaFree(state->w2t));
      state->w2t = nullptr;
      KILN_CUDA_CHECK(cudaMalloc(&state->w2t, w2_bytes));
      state->w2t_bytes = w2_bytes;
    }
    const int64_t total = channels * squeeze;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(4096, (total + 255) / 256));
    const int c = static_cast<int>(channels), s = static_cast<int>(squeeze);
    switch (w2.dtype) {
      case DataType::kF16:
        se_transpose<<<blocks, 256, 0, args.stream()>>>(static_cast<const __half*>(w2.data),
                                                        static_cast<__half*>(state->w2t), c, s);
        break;
      case DataType::kBF16:
        se_transpose<<<blocks, 256, 0, args.stream()>>>(static_cast<const __nv_bfloat16*>(w2.data),
                                                        static_cast<__nv_bfloat16*>(state->w2t), c,
                                                        s);
        break;
      default:
        se_transpose<<<blocks, 256, 0, args.stream()>>>(static_cast<const float*>(w2.data),
                                                        static_cast<float*>(state->w2t), c, s);
        break;
    }
    KILN_CUDA_CHECK_LAUNCH(name);
    state->w2_source = w2.data;
  }
  SeArgs a{};
  a.x = x.data, a.y = out.data;
  a.w1 = args.inputs[1].data;
  a.b1 = p.has_bias1 ? args.inputs[2].data : nullptr;
  a.w2t = state->w2t;
  a.b2 = p.has_bias2 ? args.inputs[p.excitation_inputs() - 1].data : nullptr;
  if (p.project) {
    a.wp = args.inputs[p.excitation_inputs()].data;
    a.out_channels = static_cast<int>(args.inputs[p.excitation_inputs()].shape[0]);
  }
  a.counters = state->counters;
  a.pixels = static_cast<int>(pixels);
  a.channels = static_cast<int>(channels);
  a.squeeze = static_cast<int>(squeeze);
  a.act1 = p.activation1, a.act2 = p.activation2;
  a.alpha1 = static_cast<float>(p.alpha1), a.beta1 = static_cast<float>(p.beta1);
  a.alpha2 = static_cast<float>(p.alpha2), a.beta2 = static_cast<float>(p.beta2);
  switch (out.dtype) {
    case DataType::kF16:
      launch_t<__half>(args, a, static_cast<int>(samples), state->sms);
      break;
    case DataType::kBF16:
      launch_t<__nv_bfloat16>(args, a, static_cast<int>(samples), state->sms);
      break;
    default:
      launch_t<float>(args, a, static_cast<int>(samples), state->sms);
      break;
  }
}

std::string squeeze_excitation_support(const Layer& layer, const std::vector<DataType>& in,
                                       const std::vector<DataType>& out) {
  const auto& p = std::get<SqueezeExcitationParams>(layer.params);
  if (!p.channels_last) return "channels-first data (the kernel takes channels-last)";
  for (DataType t : in) {
    if (t != out.at(0)) return "inputs of different dtypes";
  }
  return "";
}

}  // namespace

void register_squeeze_excitation(KernelTable& t) {
  t.set<SqueezeExcitationParams>(squeeze_excitation_kernel, kFloatTypes,
                                 squeeze_excitation_support);
}

}  // namespace kiln::engine::cuda
