// CUDA kernels of the elementwise family. Binary, unary and activation layers run as one-op
// programs of the interpreter kernel that also runs the builder's fused elementwise chains: each
// thread loads its element of every (broadcast) input into registers, runs the program and
// stores the last register. Also cast, select and the conv/matmul post-op epilogue.
#include "engine/cuda/codegen.h"
#include "engine/cuda/device_math.cuh"
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"
#include "engine/layers/elementwise_rules.h"

namespace kiln::engine::cuda {
namespace {

constexpr int kMaxInputs = kFusedMaxInputs;
constexpr int kMaxOps = kFusedMaxOps;

struct Op {
  int kind, op, a, b;
  float alpha, beta;
};

struct Program {
  int num_inputs = 0, num_ops = 0, rank = 0;
  int64_t n = 0;
  int64_t size[kMaxRank] = {};
  int64_t stride[kMaxInputs][kMaxRank] = {};
  const void* in[kMaxInputs] = {};
  DataType in_dtype[kMaxInputs] = {};
  void* out = nullptr;
  DataType out_dtype = DataType::kF32;
  Op ops[kMaxOps] = {};
  // Gathered inputs (PointwiseArgs' fields of the same names): gaxis -1 for the others.
  const int32_t* gidx[kMaxInputs] = {};
  int64_t gsize[kMaxInputs] = {};
  int gaxis[kMaxInputs] = {};
};

template <class C>
__device__ __forceinline__ C apply(const Op& op, C a, C b) {
  if constexpr (std::is_same_v<C, float>) {
    switch (op.kind) {
      case 0:
        return binary_float(static_cast<BinaryOp>(op.op), a, b);
      case 1:
        return unary_float(static_cast<UnaryOp>(op.op), a);
      case 2:
        return activate(static_cast<ActivationKind>(op.op), a, op.alpha, op.beta);
      default:
        return round_to(static_cast<DataType>(op.op), a);
    }
  } else {
    switch (op.kind) {
      case 0: {
        MathError ignored = MathError::kNone;  // the device writes 0 where the CPU would throw
        return binary_int(static_cast<BinaryOp>(op.op), a, b, ignored);
      }
      case 1:
        return unary_int(static_cast<UnaryOp>(op.op), a);
      case 2:
        return static_cast<C>(
            activate(static_cast<ActivationKind>(op.op), static_cast<float>(a), op.alpha, op.beta));
      default:
        return static_cast<DataType>(op.op) == DataType::kBool ? C(a != 0) : a;
    }
  }
}

// I: the index type (32-bit division is several times faster than 64-bit; used when every
// offset fits). kFlat: the broadcast merged into one dim, so element i of input j is at
// i * stride (1, or 0 for a scalar): no division at all.
template <class C, class I, bool kFlat>
__global__ void program_kernel(const Program p) {
  C regs[kMaxInputs + kMaxOps];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (kFlat) {
      for (int j = 0; j < p.num_inputs; ++j) {
        regs[j] = load_as<C>(p.in_dtype[j], p.in[j], p.stride[j][0] ? i : 0);
      }
    } else {
      I idx[kMaxRank];
      I rem = static_cast<I>(i);
#pragma unroll
      for (int k = kMaxRank - 1; k >= 0; --k) {
        if (k < p.rank) {
          const I size = static_cast<I>(p.size[k]);
          idx[k] = rem % size;
          rem /= size;
        }
      }
      for (int j = 0; j < p.num_inputs; ++j) {
        I off = 0;
        bool ok = true;
#pragma unroll
        for (int k = 0; k < kMaxRank; ++k) {
          if (k >= p.rank) continue;
          I at = idx[k];
          if (k == p.gaxis[j]) {
            const int32_t g = p.gidx[j][at];
            ok = g >= 0 && g < p.gsize[j];
            at = static_cast<I>(g);
          }
          off += at * static_cast<I>(p.stride[j][k]);
        }
        regs[j] = ok ? load_as<C>(p.in_dtype[j], p.in[j], off) : C(0);
      }
    }
    for (int k = 0; k < p.num_ops; ++k) {
      const Op& op = p.ops[k];
      regs[p.num_inputs + k] = apply<C>(op, regs[op.a], regs[op.b]);
    }
    store_as<C>(p.out_dtype, p.out, i, regs[p.num_inputs + p.num_ops - 1]);
  }
}

template <class C>
void launch_program(const Program& p, cudaStream_t stream) {
  bool flat = p.rank <= 1;
  for (int j = 0; flat && j < p.num_inputs; ++j) {
    flat = p.gaxis[j] < 0 && (p.rank == 0 || p.stride[j][0] <= 1);
  }
  const unsigned grid = grid_for(p.n);
  if (flat) {
    program_kernel<C, int64_t, true><<<grid, kThreads, 0, stream>>>(p);
  } else if (p.n < (int64_t{1} << 31)) {  // inputs are no larger than the output
    program_kernel<C, int32_t, false><<<grid, kThreads, 0, stream>>>(p);
  } else {
    program_kernel<C, int64_t, false><<<grid, kThreads, 0, stream>>>(p);
  }
}

// One op (binary, unary or activation) over inputs and output of one float dtype T, V = 16
// bytes of elements per thread: an input whose innermost (merged) dim is contiguous is read as
// vectors, one broadcast along it (stride 0) as a scalar per vector. 32-bit index math.
struct VecOp {
  Op op;
  int num_inputs = 0, rank = 0;
  int32_t nvec = 0;
  int32_t size[kMaxRank] = {};  // of the output, innermost divided by V
  int32_t stride[2][kMaxRank] = {};
  bool contiguous[2] = {};  // innermost stride 1 (else 0)
  const void* in[2] = {};
  void* out = nullptr;
};

template <class T>
__global__ void vec_op_kernel(const VecOp p) {
  constexpr int V = Vec16<T>::kN;
  for (int32_t iv = blockIdx.x * blockDim.x + threadIdx.x; iv < p.nvec;
       iv += gridDim.x * blockDim.x) {
    int32_t off[2] = {0, 0};
    int32_t rem = iv;
#pragma unroll
    for (int k = kMaxRank - 1; k >= 0; --k) {
      if (k < p.rank) {
        const int32_t idx = rem % p.size[k];
        rem /= p.size[k];
        // The innermost index counts vectors: V elements of a contiguous input.
        const int32_t scale = k == p.rank - 1 ? V : 1;
        off[0] += idx * scale * p.stride[0][k];
        off[1] += idx * scale * p.stride[1][k];
      }
    }
    float a[V], b[V];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (j >= p.num_inputs) break;
      float* dst = j == 0 ? a : b;
      const T* src = static_cast<const T*>(p.in[j]) + off[j];
      if (p.contiguous[j]) {
        const Vec16<T> v = *reinterpret_cast<const Vec16<T>*>(src);
#pragma unroll
        for (int k = 0; k < V; ++k) dst[k] = static_cast<float>(v.v[k]);
      } else {
        const float one = static_cast<float>(*src);
#pragma unroll
        for (int k = 0; k < V; ++k) dst[k] = one;
      }
    }
    Vec16<T> o;
#pragma unroll
    for (int k = 0; k < V; ++k)
      o.v[k] = T(apply<float>(p.op, a[k], p.num_inputs > 1 ? b[k] : a[k]));
    reinterpret_cast<Vec16<T>*>(p.out)[iv] = o;
  }
}

template <class T>
bool try_vec_op(KernelArgs& args, const std::vector<Dims>& dims, const Op& op) {
  constexpr int V = Vec16<T>::kN;
  const TensorView& out = args.outputs[0];
  const Dims& od = dims[0];
  if (od.rank == 0 || od.size[od.rank - 1] % V != 0 || out.numel() >= (int64_t{1} << 31) ||
      !aligned16(out.data)) {
    return false;
  }
  VecOp p;
  p.op = op;
  p.num_inputs = static_cast<int>(args.inputs.size());
  p.rank = od.rank;
  p.nvec = static_cast<int32_t>(out.numel() / V);
  p.out = out.data;
  for (int k = 0; k < od.rank; ++k) {
    p.size[k] = static_cast<int32_t>(k == od.rank - 1 ? od.size[k] / V : od.size[k]);
  }
  int64_t max_offset = 0;
  for (int j = 0; j < p.num_inputs; ++j) {
    const Dims& d = dims[static_cast<size_t>(j) + 1];
    const int64_t inner = d.stride[d.rank - 1];
    if (inner != 0 && inner != 1) return false;
    p.contiguous[j] = inner == 1;
    p.in[j] = args.inputs[static_cast<size_t>(j)].data;
    if (p.contiguous[j] && !aligned16(p.in[j])) return false;
    for (int k = 0; p.contiguous[j] && k + 1 < d.rank; ++k) {
      if (d.stride[k] % V != 0) return false;  // (a placed input's pitch)
    }
    for (int k = 0; k < d.rank; ++k) {
      // A contiguous input's outer strides are whole vectors (they are multiples of the
      // innermost size); offsets of the innermost dim are scaled by V in the kernel.
      p.stride[j][k] = static_cast<int32_t>(d.stride[k]);
      max_offset += (d.size[k] - 1) * d.stride[k];
    }
  }
  if (max_offset >= (int64_t{1} << 31)) return false;
  vec_op_kernel<T><<<grid_for(p.nvec), kThreads, 0, args.stream()>>>(p);
  return true;
}

// The vectorized path for one-op programs whose inputs and output share a float dtype.
bool run_vec_op(KernelArgs& args, const std::vector<Dims>& dims, const Op& op) {
  const DataType t = args.outputs[0].dtype;
  if (args.inputs.size() > 2) return false;
  for (const auto& in : args.inputs) {
    if (in.dtype != t) return false;
  }
  switch (t) {
    case DataType::kF16:
      return try_vec_op<__half>(args, dims, op);
    case DataType::kBF16:
      return try_vec_op<__nv_bfloat16>(args, dims, op);
    case DataType::kF32:
      return try_vec_op<float>(args, dims, op);
    default:
      return false;
  }
}

// The layer's generated kernel (codegen.h), resolved from the plan on the layer's first run.
struct GeneratedPointwise : KernelState {
  const void* vec = nullptr;
  const void* nd32 = nullptr;
  const void* nd64 = nullptr;
  int width = 0;
};

GeneratedPointwise* generated_for(KernelArgs& args) {
  if (!args.res.options().codegen) return nullptr;
  if (!args.state) {
    auto g = std::make_unique<GeneratedPointwise>();
    std::vector<DataType> in;
    for (const auto& t : args.inputs) in.push_back(t.dtype);
    if (const auto spec = pointwise_spec(args.layer, in, args.outputs[0].dtype)) {
      const std::string key = pointwise_key(*spec);
      g->nd64 = args.res.generated_kernel(key, "kiln_pw_nd64");
      if (g->nd64) {
        g->nd32 = args.res.generated_kernel(key, "kiln_pw_nd32");
        g->vec = args.res.generated_kernel(key, "kiln_pw_vec");
        g->width = pointwise_vector_width(*spec);
      }
    }
    args.state = std::move(g);
  }
  auto* g = static_cast<GeneratedPointwise*>(args.state.get());
  return g->nd64 ? g : nullptr;
}

bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The dims of a program's output and register inputs, and its gathered inputs: a gathered
// input's dims are its source's strides over the output with the gathered dim as long as its
// index list, a dim never merged with its neighbours (a marker row of strides sees to it), so
// that gaxis names the merged dim it became.
struct ProgramDims {
  std::vector<Dims> dims;  // the output's, then each register input's
  std::vector<int> gaxis;  // per register input: the merged dim it is gathered along, or -1
  std::vector<const int32_t*> gidx;
  std::vector<int64_t> gsize, run;
};

ProgramDims program_dims(const KernelArgs& args, size_t regs,
                         const std::vector<FusedGather>& gathers) {
  const std::string& layer = args.layer.name;
  const Shape& out = args.outputs[0].shape;
  ProgramDims r;
  r.gaxis.assign(regs, -1);
  r.gidx.assign(regs, nullptr);
  r.gsize.assign(regs, 0);
  r.run.assign(regs, 1);
  std::vector<Shape> shapes;
  bool dense = true;
  for (size_t j = 0; j < regs; ++j) {
    shapes.push_back(args.inputs[j].shape);
    dense = dense && args.inputs[j].dense();
  }
  if (gathers.empty() && dense) {
    r.dims = broadcast_dims(layer, out, shapes);
    return r;
  }
  // Gathered inputs, or inputs placed in wider tensors (in-place concats): strides per input.
  std::vector<std::vector<int64_t>> rows = {contiguous_strides(out)};
  for (size_t j = 0; j < regs; ++j) {
    const Shape& real = shapes[j];
    const auto cs = args.inputs[j].strides();
    const size_t offset = out.size() - real.size();
    Shape seen = real;  // the shape broadcasting sees: gathered dims as long as their lists
    for (const FusedGather& g : gathers) {
      if (static_cast<size_t>(g.reg) == j) {
        seen[static_cast<size_t>(g.axis)] = args.inputs[g.index_input].numel();
      }
    }
    std::vector<int64_t> row(out.size(), 0);
    for (size_t d = offset; d < out.size(); ++d)
      row[d] = seen[d - offset] == 1 ? 0 : cs[d - offset];
    rows.push_back(std::move(row));
  }
  for (const FusedGather& g : gathers) {
    const size_t j = static_cast<size_t>(g.reg);
    const size_t d = out.size() - shapes[j].size() + static_cast<size_t>(g.axis);
    std::vector<int64_t> marker(out.size(), 0);
    marker[d] = 1;
    rows.push_back(std::move(marker));
    r.gidx[j] = args.inputs[g.index_input].as<const int32_t>();
    r.gsize[j] = shapes[j][static_cast<size_t>(g.axis)];
    r.run[j] = g.run;
  }
  std::vector<Dims> merged = merge_dims(layer, out, rows);
  for (size_t k = 0; k < gathers.size(); ++k) {
    const Dims& m = merged[regs + 1 + k];
    for (int d = 0; d < m.rank; ++d) {
      if (m.stride[d] == 1) r.gaxis[static_cast<size_t>(gathers[k].reg)] = d;
    }
    KILN_CHECK(r.gaxis[static_cast<size_t>(gathers[k].reg)] >= 0, InternalError, "layer `", layer,
               "`: gathered input ", gathers[k].reg, "'s dim was merged away");
  }
  merged.resize(regs + 1);
  r.dims = std::move(merged);
  return r;
}

// Runs the layer on its generated kernel: V elements per thread where the innermost dim is a
// multiple of V and every input is contiguous or broadcast along it (a gathered one along it in
// runs of V), else one per thread.
bool run_generated(KernelArgs& args, const ProgramDims& pd) {
  const std::vector<Dims>& dims = pd.dims;
  GeneratedPointwise* g = generated_for(args);
  if (!g) return false;
  const TensorView& out = args.outputs[0];
  const int rank = dims[0].rank;
  KILN_CHECK(rank <= kPointwiseMaxRank, InternalError, "layer `", args.layer.name, "`: ", rank,
             " dims after merging");
  PointwiseArgs p;
  p.n = out.numel();
  p.rank = rank;
  for (int k = 0; k < rank; ++k) p.size[k] = dims[0].size[k];
  p.out = out.data;
  const int V = g->width;
  constexpr int64_t kInt32 = int64_t{1} << 31;
  bool vec = rank > 0 && dims[0].size[rank - 1] % V == 0 && p.n < kInt32 &&
             aligned_to(out.data, static_cast<size_t>(V) * dtype_size(out.dtype));
  int64_t max_offset = 0;
  for (size_t j = 0; j + 1 < dims.size(); ++j) {
    const Dims& d = dims[j + 1];
    const TensorView& in = args.inputs[j];
    p.in[j] = in.data;
    p.gidx[j] = pd.gidx[j];
    p.gsize[j] = pd.gsize[j];
    p.gaxis[j] = pd.gaxis[j];
    if (pd.gaxis[j] == rank - 1 && pd.run[j] % V != 0) vec = false;
    int64_t last = 0;  // the offset of this input's last element read
    for (int k = 0; k < rank; ++k) {
      p.stride[j][k] = d.stride[k];
      const int64_t size = k == pd.gaxis[j] ? pd.gsize[j] : d.size[k];
      last += (size - 1) * d.stride[k];
    }
    max_offset = std::max(max_offset, last);
    const int64_t inner = rank > 0 ? d.stride[rank - 1] : 0;
    p.contiguous[j] = inner == 1;
    vec = vec && (inner == 0 || (inner == 1 && aligned_to(in.data, V * dtype_size(in.dtype))));
    // Vectors start at whole vectors of a contiguous input: its outer strides must be multiples
    // of V (they are for dense ones, whose innermost size is; a placed one's pitch may not be).
    for (int k = 0; vec && inner == 1 && k + 1 < rank; ++k) vec = d.stride[k] % V == 0;
  }
  const void* fn = g->nd64;
  int64_t work = p.n;
  if (vec && max_offset < kInt32) {
    fn = g->vec;
    p.nvec = static_cast<int32_t>(p.n / V);
    work = p.nvec;
  } else if (p.n < kInt32 && max_offset < kInt32) {
    fn = g->nd32;
  }
  if (work == 0) return true;
  void* params[] = {&p};
  KILN_CUDA_CHECK(
      cudaLaunchKernel(fn, dim3(grid_for(work)), dim3(kThreads), params, 0, args.stream()));
  return true;
}

// Runs a program over the layer's first `regs` inputs (the registers), the rest being the index
// lists of `gathers`.
void run_program(KernelArgs& args, const std::vector<FusedOp>& ops, size_t regs,
                 const std::vector<FusedGather>& gathers = {}) {
  const std::string& layer = args.layer.name;
  const TensorView& out = args.outputs[0];
  KILN_CHECK(args.inputs.size() <= kMaxInputs && ops.size() <= kMaxOps, Unsupported, "layer `",
             layer, "`: fused elementwise program too large for the CUDA kernel (",
             args.inputs.size(), " inputs, ", ops.size(), " ops)");
  bool floating = true;
  for (size_t j = 0; j < regs; ++j) floating = floating && is_floating(args.inputs[j].dtype);
  const ProgramDims pd = program_dims(args, regs, gathers);
  const std::vector<Dims>& dims = pd.dims;
  Program p;
  p.num_inputs = static_cast<int>(regs);
  p.num_ops = static_cast<int>(ops.size());
  p.n = out.numel();
  p.rank = dims[0].rank;
  for (int k = 0; k < p.rank; ++k) p.size[k] = dims[0].size[k];
  for (int j = 0; j < p.num_inputs; ++j) {
    for (int k = 0; k < p.rank; ++k) p.stride[j][k] = dims[static_cast<size_t>(j) + 1].stride[k];
    p.in[j] = args.inputs[static_cast<size_t>(j)].data;
    p.in_dtype[j] = args.inputs[static_cast<size_t>(j)].dtype;
    p.gidx[j] = pd.gidx[static_cast<size_t>(j)];
    p.gsize[j] = pd.gsize[static_cast<size_t>(j)];
    p.gaxis[j] = pd.gaxis[static_cast<size_t>(j)];
  }
  p.out = out.data;
  p.out_dtype = out.dtype;
  for (size_t k = 0; k < ops.size(); ++k) {
    p.ops[k] = Op{static_cast<int>(ops[k].kind),    static_cast<int>(ops[k].op),
                  static_cast<int>(ops[k].a),       static_cast<int>(ops[k].b),
                  static_cast<float>(ops[k].alpha), static_cast<float>(ops[k].beta)};
  }
  if (floating && is_floating(out.dtype) && run_generated(args, pd)) {
    KILN_CUDA_CHECK_LAUNCH(layer);
    return;
  }
  if (p.num_ops == 1 && gathers.empty() && run_vec_op(args, dims, p.ops[0])) {
    KILN_CUDA_CHECK_LAUNCH(layer);
    return;
  }
  if (floating) {
    launch_program<float>(p, args.stream());
  } else {
    launch_program<int64_t>(p, args.stream());
  }
  KILN_CUDA_CHECK_LAUNCH(layer);
}

void elementwise_kernel(KernelArgs& args) {
  const auto& p = std::get<ElementwiseParams>(args.layer.params);
  run_program(args, {{0, static_cast<int64_t>(p.op), 0, 1, 0, 0}}, args.inputs.size());
}

void unary_kernel(KernelArgs& args) {
  const auto& p = std::get<UnaryParams>(args.layer.params);
  run_program(args, {{1, static_cast<int64_t>(p.op), 0, 0, 0, 0}}, args.inputs.size());
}

void activation_kernel(KernelArgs& args) {
  const auto& p = std::get<ActivationParams>(args.layer.params);
  run_program(args, {{2, static_cast<int64_t>(p.kind), 0, 0, p.alpha, p.beta}}, args.inputs.size());
}

void fused_kernel(KernelArgs& args) {
  const auto& p = std::get<FusedElementwiseParams>(args.layer.params);
  const std::string& name = args.layer.name;
  const size_t regs = fused_registers(name, p, args.inputs.size());
  std::vector<size_t> ranks;
  for (const auto& in : args.inputs) ranks.push_back(in.shape.size());
  run_program(args, decode_program(name, p, regs), regs, decode_gathers(name, p, ranks));
}

std::string fused_support(const Layer& layer, const std::vector<DataType>& in,
                          const std::vector<DataType>&) {
  const auto& p = std::get<FusedElementwiseParams>(layer.params);
  if (in.size() > kMaxInputs || p.program.size() / 4 > kMaxOps) {
    return "fused program of " + std::to_string(in.size()) + " inputs and " +
           std::to_string(p.program.size() / 4) + " ops is over the kernel's limits";
  }
  return "";
}

__global__ void convert_kernel(const void* src, DataType from, void* dst, DataType to, int64_t n) {
  const bool float_src =
      from == DataType::kF32 || from == DataType::kF16 || from == DataType::kBF16;
  const bool float_dst = to == DataType::kF32 || to == DataType::kF16 || to == DataType::kBF16;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (float_src) {
      const float x = load_as<float>(from, src, i);
      if (float_dst || to == DataType::kBool) {
        store_as<float>(to, dst, i, x);
      } else {  // float -> integer truncates toward zero, as torch does
        store_as<int64_t>(to, dst, i, isfinite(x) ? static_cast<int64_t>(x) : 0);
      }
    } else {
      const int64_t x = load_as<int64_t>(from, src, i);
      if (float_dst) {
        store_as<float>(to, dst, i, static_cast<float>(x));
      } else {
        store_as<int64_t>(to, dst, i, x);
      }
    }
  }
}

void cast_kernel(KernelArgs& args) {
  const TensorView &in = args.inputs[0], &out = args.outputs[0];
  launch_convert(args.stream(), args.layer.name, in.data, in.dtype, out.data, out.dtype,
                 out.numel());
}

template <class C>
__global__ void select_kernel_t(Dims c, const void* cond, DataType ct, Dims a, const void* av,
                                DataType at, Dims b, const void* bv, DataType bt, void* out,
                                DataType ot, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const bool take_a = load_as<int64_t>(ct, cond, offset_of(c, i)) != 0;
    const C v = take_a ? load_as<C>(at, av, offset_of(a, i)) : load_as<C>(bt, bv, offset_of(b, i));
    store_as<C>(ot, out, i, v);
  }
}

void select_kernel(KernelArgs& args) {
  const auto& in = args.inputs;
  const TensorView& out = args.outputs[0];
  const auto d =
      broadcast_dims(args.layer.name, out.shape, {in[0].shape, in[1].shape, in[2].shape});
  const int64_t n = out.numel();
  auto kernel = is_floating(out.dtype) ? select_kernel_t<float> : select_kernel_t<int64_t>;
  kernel<<<grid_for(n), kThreads, 0, args.stream()>>>(d[1], in[0].data, in[0].dtype, d[2],
                                                      in[1].data, in[1].dtype, d[3], in[2].data,
                                                      in[2].dtype, out.data, out.dtype, n);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

__global__ void post_ops_kernel(void* y, DataType yt, int64_t n, int64_t channels, int64_t inner,
                                const void* bias, DataType bt, ActivationKind act, float alpha,
                                float beta, const void* res, DataType rt, ActivationKind act2,
                                float alpha2, float beta2) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = load_as<float>(yt, y, i);
    if (bias) v += load_as<float>(bt, bias, (i / inner) % channels);
    v = activate(act, v, alpha, beta);
    if (res) v += load_as<float>(rt, res, i);
    v = activate(act2, v, alpha2, beta2);
    store_as<float>(yt, y, i, v);
  }
}

// The post-ops on 16-byte vectors when the output, bias and residual share a float dtype T:
// with inner == 1 (matmul) a vector covers consecutive channels (channels % V == 0), otherwise
// one channel (inner % V == 0). 32-bit index math. A1 and A2 are the activations when known at
// compile time (dispatch_activation), -1 for the runtime ones.
template <class T, int A1, int A2>
__global__ void post_ops_vec_kernel(T* y, int32_t nvec, int32_t channels, int32_t inner,
                                    const T* bias, ActivationKind act, float alpha, float beta,
                                    const T* res, ActivationKind act2, float alpha2, float beta2) {
  constexpr int V = Vec16<T>::kN;
  for (int32_t iv = blockIdx.x * blockDim.x + threadIdx.x; iv < nvec;
       iv += gridDim.x * blockDim.x) {
    const int32_t i0 = iv * V;
    Vec16<T> yv = reinterpret_cast<const Vec16<T>*>(y)[iv];
    Vec16<T> rv{};
    if (res) rv = reinterpret_cast<const Vec16<T>*>(res)[iv];
    float b[V];
    if (bias && inner == 1) {
      const Vec16<T> bv = *reinterpret_cast<const Vec16<T>*>(bias + i0 % channels);
#pragma unroll
      for (int k = 0; k < V; ++k) b[k] = static_cast<float>(bv.v[k]);
    } else {
      const float one = bias ? static_cast<float>(bias[(i0 / inner) % channels]) : 0.f;
#pragma unroll
      for (int k = 0; k < V; ++k) b[k] = one;
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float v = static_cast<float>(yv.v[k]) + b[k];
      v = activate_as<A1>(act, v, alpha, beta);
      if (res) v += static_cast<float>(rv.v[k]);
      v = activate_as<A2>(act2, v, alpha2, beta2);
      yv.v[k] = T(v);
    }
    reinterpret_cast<Vec16<T>*>(y)[iv] = yv;
  }
}

template <class T>
bool launch_post_ops_vec(cudaStream_t stream, const TensorView& out, const PostOpArgs& p,
                         int64_t channels, int64_t inner) {
  constexpr int V = Vec16<T>::kN;
  const int64_t n = out.numel();
  const bool ok =
      n % V == 0 && n < (int64_t{1} << 31) && aligned16(out.data) &&
      (!p.bias || (p.bias->dtype == out.dtype &&
                   (inner == 1 ? channels % V == 0 && aligned16(p.bias->data) : inner % V == 0))) &&
      (!p.residual || (p.residual->dtype == out.dtype && aligned16(p.residual->data)));
  if (!ok) return false;
  const int64_t nvec = n / V;
  const auto launch = [&](auto a1, auto a2) {
    post_ops_vec_kernel<T, decltype(a1)::value, decltype(a2)::value>
        <<<grid_for(nvec), kThreads, 0, stream>>>(
            static_cast<T*>(out.data), static_cast<int32_t>(nvec), static_cast<int32_t>(channels),
            static_cast<int32_t>(inner), p.bias ? static_cast<const T*>(p.bias->data) : nullptr,
            p.act, static_cast<float>(p.alpha), static_cast<float>(p.beta),
            p.residual ? static_cast<const T*>(p.residual->data) : nullptr, p.act2,
            static_cast<float>(p.alpha2), static_cast<float>(p.beta2));
  };
  // The second activation is almost always none (or ReLU after a residual).
  dispatch_activation(p.act, [&](auto a1) {
    if (p.act2 == ActivationKind::kNone) {
      launch(a1, std::integral_constant<int, static_cast<int>(ActivationKind::kNone)>{});
    } else {
      launch(a1, std::integral_constant<int, -1>{});
    }
  });
  return true;
}

}  // namespace

void launch_post_ops(cudaStream_t stream, const std::string& layer, const TensorView& out,
                     const PostOpArgs& p) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int64_t channels = p.channels > 0 ? p.channels : 1, inner = p.inner > 0 ? p.inner : 1;
  bool vec = false;
  switch (out.dtype) {
    case DataType::kF16:
      vec = launch_post_ops_vec<__half>(stream, out, p, channels, inner);
      break;
    case DataType::kBF16:
      vec = launch_post_ops_vec<__nv_bfloat16>(stream, out, p, channels, inner);
      break;
    case DataType::kF32:
      vec = launch_post_ops_vec<float>(stream, out, p, channels, inner);
      break;
    default:
      break;
  }
  if (vec) {
    KILN_CUDA_CHECK_LAUNCH(layer);
    return;
  }
  post_ops_kernel<<<grid_for(n), kThreads, 0, stream>>>(
      out.data, out.dtype, n, p.channels > 0 ? p.channels : 1, p.inner > 0 ? p.inner : 1,
      p.bias ? p.bias->data : nullptr, p.bias ? p.bias->dtype : DataType::kF32, p.act,
      static_cast<float>(p.alpha), static_cast<float>(p.beta),
      p.residual ? p.residual->data : nullptr, p.residual ? p.residual->dtype : DataType::kF32,
      p.act2, static_cast<float>(p.alpha2), static_cast<float>(p.beta2));
  KILN_CUDA_CHECK_LAUNCH(layer);
}

void launch_convert(cudaStream_t stream, const std::string& layer, const void* src, DataType from,
                    void* dst, DataType to, int64_t n) {
  if (n == 0) return;
  if (from == to) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(from),
                                    cudaMemcpyDeviceToDevice, stream));
    return;
  }
  convert_kernel<<<grid_for(n), kThreads, 0, stream>>>(src, from, dst, to, n);
  KILN_CUDA_CHECK_LAUNCH(layer);
}

void register_elementwise(KernelTable& t) {
  t.set<ElementwiseParams>(elementwise_kernel, kAllTypes);
  t.set<UnaryParams>(unary_kernel, kAllTypes);
  t.set<ActivationParams>(activation_kernel, kAllTypes);
  t.set<FusedElementwiseParams>(fused_kernel, kFloatTypes, fused_support);
  t.set<CastParams>(cast_kernel, kAllTypes);
  t.set<SelectParams>(select_kernel, kAllTypes);
}

}  // namespace kiln::engine::cuda
