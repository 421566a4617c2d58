// CPU kernels of the elementwise family. Binary, unary and activation layers run as one-op
// programs of the same block evaluator that runs the builder's fused elementwise chains: inputs
// are loaded (broadcast, converted) into blocks of registers, ops run over whole blocks (so they
// vectorize), and the last register is stored.
#include <omp.h>

#include <array>
#include <cstring>

#include "engine/cpu/block_ops.h"
#include "engine/cpu/convert.h"
#include "engine/layers/elementwise_rules.h"
#include "util/errors.h"

namespace kiln::engine::cpu {

BroadcastMap::BroadcastMap(const Shape& in, const std::vector<int64_t>& in_strides,
                           const Shape& out) {
  identity_ = in == out && in_strides == contiguous_strides(in);
  scalar_ = volume(in) == 1;
  const size_t offset = out.size() - in.size();
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;  // contributes nothing to any offset
    const int64_t stride = d < offset || in[d - offset] == 1 ? 0 : in_strides[d - offset];
    if (!out_.empty() && strides_.back() == stride * out[d]) {
      out_.back() *= out[d];  // steps through the input as one dim with the inner stride
      strides_.back() = stride;
    } else {
      out_.push_back(out[d]);
      strides_.push_back(stride);
    }
  }
}

void BroadcastMap::offsets(int64_t start, int64_t n, int64_t* dst) const {
  for_runs(start, n, [dst](int64_t i, int64_t off, int64_t len, int64_t stride) {
    for (int64_t j = 0; j < len; ++j) dst[i + j] = off + j * stride;
  });
}

namespace {

constexpr int64_t kBlock = 512;

template <class C>
C apply_binary(BinaryOp op, C a, C b, MathError& err) {
  if constexpr (std::is_same_v<C, float>) {
    return binary_float(op, a, b);
  } else {
    return binary_int(op, a, b, err);
  }
}

// Rounds a float register to the precision of `t`, as an unfused cast would.
inline float round_to(DataType t, float x) {
  if (t == DataType::kF16) return half_to_float(float_to_half(x));
  if (t == DataType::kBF16) return bf16_to_float(float_to_bf16(x));
  if (is_integer(t)) return std::trunc(x);
  if (t == DataType::kBool) return x != 0.f;
  return x;
}

template <class C>
void run_program(const std::string& layer, const std::vector<FusedOp>& ops,
                 const std::vector<TensorView>& inputs, const TensorView& out) {
  const int64_t total = out.numel();
  std::vector<BroadcastMap> maps;
  for (const auto& in : inputs) maps.emplace_back(in.shape, in.strides(), out.shape);
  const size_t num_regs = inputs.size() + ops.size();
  const int64_t blocks = (total + kBlock - 1) / kBlock;
  int error = 0;
#pragma omp parallel if (total > 32 * 1024)
  {
    std::vector<C> regs(num_regs * kBlock);
    std::vector<int64_t> scratch(kBlock);
    MathError local = MathError::kNone;
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t start = blk * kBlock, n = std::min(kBlock, total - start);
      for (size_t i = 0; i < inputs.size(); ++i) {
        load_block<C>(inputs[i], maps[i], start, n, regs.data() + i * kBlock, scratch.data());
      }
      for (size_t k = 0; k < ops.size(); ++k) {
        const FusedOp& op = ops[k];
        C* dst = regs.data() + (inputs.size() + k) * kBlock;
        const C* a = regs.data() + op.a * kBlock;
        const C* b = regs.data() + op.b * kBlock;
        switch (op.kind) {
          case 0: {
            const auto bop = static_cast<BinaryOp>(op.op);
            for (int64_t i = 0; i < n; ++i) dst[i] = apply_binary<C>(bop, a[i], b[i], local);
            break;
          }
          case 1: {
            const auto uop = static_cast<UnaryOp>(op.op);
            if constexpr (std::is_same_v<C, float>) {
              for (int64_t i = 0; i < n; ++i) dst[i] = unary_float(uop, a[i]);
            } else {
              for (int64_t i = 0; i < n; ++i) dst[i] = unary_int(uop, a[i]);
            }
            break;
          }
          case 2: {
            const auto act = static_cast<ActivationKind>(op.op);
            for (int64_t i = 0; i < n; ++i) {
              dst[i] = static_cast<C>(activate(act, static_cast<float>(a[i]), op.alpha, op.beta));
            }
            break;
          }
          default: {
            const auto to = static_cast<DataType>(op.op);
            if constexpr (std::is_same_v<C, float>) {
              for (int64_t i = 0; i < n; ++i) dst[i] = round_to(to, a[i]);
            } else {
              for (int64_t i = 0; i < n; ++i) dst[i] = to == DataType::kBool ? a[i] != 0 : a[i];
            }
            break;
          }
        }
      }
      store_block<C>(out, start, n, regs.data() + (num_regs - 1) * kBlock);
    }
    if (local != MathError::kNone) {
#pragma omp atomic write
      error = static_cast<int>(local);
    }
  }
  KILN_CHECK(error != static_cast<int>(MathError::kIntegerDivisionByZero), InvalidArgument,
             "layer `", layer, "`: integer division by zero");
}

// Float programs: registers are pointers, so f32 inputs read in place need no copy and the last
// op writes straight into an f32 output; only broadcast/converted inputs and intermediates are
// materialized in per-thread blocks.
void run_float_program(const std::vector<FusedOp>& ops, const std::vector<TensorView>& inputs,
                       const TensorView& out) {
  const int64_t total = out.numel();
  std::vector<BroadcastMap> maps;
  for (const auto& in : inputs) maps.emplace_back(in.shape, in.strides(), out.shape);
  const size_t num_in = inputs.size(), num_regs = num_in + ops.size();
  const bool direct_out = out.dtype == DataType::kF32 && !ops.empty() && out.dense();
  const int64_t blocks = (total + kBlock - 1) / kBlock;
#pragma omp parallel if (total > 32 * 1024)
  {
    std::vector<float> storage(num_regs * kBlock);
    std::vector<int64_t> scratch(kBlock);
    std::vector<const float*> reg(num_regs);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t start = blk * kBlock, n = std::min(kBlock, total - start);
      for (size_t i = 0; i < num_in; ++i) {
        if (maps[i].contiguous() && inputs[i].dtype == DataType::kF32) {
          reg[i] = inputs[i].as<const float>() + start;
        } else {
          float* dst = storage.data() + i * kBlock;
          load_block<float>(inputs[i], maps[i], start, n, dst, scratch.data());
          reg[i] = dst;
        }
      }
      for (size_t k = 0; k < ops.size(); ++k) {
        const FusedOp& op = ops[k];
        const bool last = k + 1 == ops.size();
        float* dst =
            last && direct_out ? out.as<float>() + start : storage.data() + (num_in + k) * kBlock;
        const float* a = reg[static_cast<size_t>(op.a)];
        const float* b = reg[static_cast<size_t>(op.b)];
        switch (op.kind) {
          case 0:
            binary_block(static_cast<BinaryOp>(op.op), dst, a, b, n);
            break;
          case 1:
            unary_block(static_cast<UnaryOp>(op.op), dst, a, n);
            break;
          case 2:
            activation_block(static_cast<ActivationKind>(op.op), op.alpha, op.beta, dst, a, n);
            break;
          default: {
            const auto to = static_cast<DataType>(op.op);
            if (to == DataType::kF32) {
              std::copy(a, a + n, dst);
            } else {
              for (int64_t i = 0; i < n; ++i) dst[i] = round_to(to, a[i]);
            }
            break;
          }
        }
        reg[num_in + k] = dst;
      }
      if (!direct_out) store_block<float>(out, start, n, reg[num_regs - 1]);
    }
  }
}

// Programs whose inputs are all floating compute in float; all others in int64.
void run(const std::string& layer, const std::vector<FusedOp>& ops,
         const std::vector<TensorView>& inputs, const TensorView& out) {
  if (out.numel() == 0) return;
  bool floating = true;
  for (const auto& in : inputs) floating = floating && is_floating(in.dtype);
  if (floating) {
    run_float_program(ops, inputs, out);
  } else {
    run_program<int64_t>(layer, ops, inputs, out);
  }
}

void elementwise_kernel(KernelArgs& args) {
  const auto& p = std::get<ElementwiseParams>(args.layer.params);
  run(args.layer.name, {{0, static_cast<int64_t>(p.op), 0, 1, 0, 0}}, args.inputs, args.outputs[0]);
}

void unary_kernel(KernelArgs& args) {
  const auto& p = std::get<UnaryParams>(args.layer.params);
  run(args.layer.name, {{1, static_cast<int64_t>(p.op), 0, 0, 0, 0}}, args.inputs, args.outputs[0]);
}

void activation_kernel(KernelArgs& args) {
  const auto& p = std::get<ActivationParams>(args.layer.params);
  run(args.layer.name, {{2, static_cast<int64_t>(p.kind), 0, 0, p.alpha, p.beta}}, args.inputs,
      args.outputs[0]);
}

// Gathered inputs (FusedElementwiseParams::gathers) are gathered into per-call buffers, then the
// program runs as over any inputs: the CPU's fused loop has no index maps (the gather kernel
// it replaces did the same work).
void fused_kernel(KernelArgs& args) {
  const auto& p = std::get<FusedElementwiseParams>(args.layer.params);
  const std::string& name = args.layer.name;
  const size_t regs = fused_registers(name, p, args.inputs.size());
  std::vector<TensorView> inputs(args.inputs.begin(), args.inputs.begin() + regs);
  std::vector<size_t> ranks;
  for (const auto& in : args.inputs) ranks.push_back(in.shape.size());
  std::vector<std::vector<float>> gathered;
  for (const FusedGather& g : decode_gathers(name, p, ranks)) {
    const TensorView& src = args.inputs[static_cast<size_t>(g.reg)];
    const TensorView& idx = args.inputs[g.index_input];
    const auto axis = static_cast<size_t>(g.axis);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < src.shape.size(); ++d) {
      if (d < axis) outer *= src.shape[d];
      if (d > axis) inner *= src.shape[d];
    }
    const int64_t d = src.shape[axis], n = idx.numel();
    const int32_t* ix = idx.as<const int32_t>();
    for (int64_t k = 0; k < n; ++k) {
      KILN_CHECK(ix[k] >= 0 && ix[k] < d, InvalidArgument, "layer `", name, "`: index ", ix[k],
                 " of input ", g.reg, " is outside its axis ", g.axis, " of size ", d);
    }
    std::vector<float>& buf = gathered.emplace_back(static_cast<size_t>(outer * n * inner));
#pragma omp parallel for if (outer * n * inner > 64 * 1024)
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t k = 0; k < n; ++k) {
        const int64_t from = (o * d + ix[k]) * inner, to = (o * n + k) * inner;
        for (int64_t r = 0; r < inner; ++r) {
          buf[static_cast<size_t>(to + r)] = load_as<float>(src.dtype, src.data, from + r);
        }
      }
    }
    Shape shape = src.shape;
    shape[axis] = n;
    inputs[static_cast<size_t>(g.reg)] = TensorView{DataType::kF32, shape, buf.data()};
  }
  run(name, decode_program(name, p, regs), inputs, args.outputs[0]);
}

void cast_kernel(KernelArgs& args) {
  const TensorView& in = args.inputs[0];
  const TensorView& out = args.outputs[0];
  const int64_t n = out.numel();
  if (in.dtype == out.dtype) {
    std::memcpy(out.data, in.data, static_cast<size_t>(n) * dtype_size(in.dtype));
    return;
  }
  // Float sources go through float (f32 -> f16 rounds once); integer sources through int64 so
  // large i64 values survive; float -> integer truncates toward zero as torch does.
  if (is_floating(in.dtype)) {
#pragma omp parallel for if (n > 64 * 1024)
    for (int64_t i = 0; i < n; ++i) {
      const float x = load_as<float>(in.dtype, in.data, i);
      if (is_integer(out.dtype)) {
        store_as<int64_t>(out.dtype, out.data, i, std::isfinite(x) ? static_cast<int64_t>(x) : 0);
      } else {
        store_as<float>(out.dtype, out.data, i, x);
      }
    }
  } else {
#pragma omp parallel for if (n > 64 * 1024)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t x = load_as<int64_t>(in.dtype, in.data, i);
      if (is_floating(out.dtype)) {
        store_as<float>(out.dtype, out.data, i, static_cast<float>(x));
      } else {
        store_as<int64_t>(out.dtype, out.data, i, x);
      }
    }
  }
}

template <class C>
void select_typed(const std::vector<TensorView>& in, const TensorView& out) {
  const int64_t total = out.numel();
  BroadcastMap mc(in[0].shape, out.shape), ma(in[1].shape, out.shape), mb(in[2].shape, out.shape);
  const int64_t blocks = (total + kBlock - 1) / kBlock;
#pragma omp parallel if (total > 32 * 1024)
  {
    std::vector<C> c(kBlock), a(kBlock), b(kBlock);
    std::vector<int64_t> scratch(kBlock);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t start = blk * kBlock, n = std::min(kBlock, total - start);
      load_block<C>(in[0], mc, start, n, c.data(), scratch.data());
      load_block<C>(in[1], ma, start, n, a.data(), scratch.data());
      load_block<C>(in[2], mb, start, n, b.data(), scratch.data());
      for (int64_t i = 0; i < n; ++i) a[i] = c[i] != C{} ? a[i] : b[i];
      store_block<C>(out, start, n, a.data());
    }
  }
}

void select_kernel(KernelArgs& args) {
  if (args.outputs[0].numel() == 0) return;
  if (is_floating(args.inputs[1].dtype)) {
    select_typed<float>(args.inputs, args.outputs[0]);
  } else {
    select_typed<int64_t>(args.inputs, args.outputs[0]);
  }
}

}  // namespace

bool writes_placed(const Layer& layer, const std::vector<TensorDesc>&, const TensorDesc&,
                   const Placement&) {
  const LayerParams& p = layer.params;
  return std::holds_alternative<ElementwiseParams>(p) || std::holds_alternative<UnaryParams>(p) ||
         std::holds_alternative<ActivationParams>(p) ||
         std::holds_alternative<FusedElementwiseParams>(p);
}

void register_elementwise(KernelTable& t) {
  t.set<ElementwiseParams>(elementwise_kernel);
  t.set<UnaryParams>(unary_kernel);
  t.set<ActivationParams>(activation_kernel);
  t.set<FusedElementwiseParams>(fused_kernel);
  t.set<CastParams>(cast_kernel);
  t.set<SelectParams>(select_kernel);
}

}  // namespace kiln::engine::cpu
