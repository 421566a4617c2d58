// Shape inference of the elementwise family: binary, unary, activation, select, cast, fused.
#include "engine/layers/elementwise_rules.h"
#include "engine/layers/infer.h"
#include "util/errors.h"

namespace kiln::engine {

bool is_comparison(BinaryOp op) {
  return op >= BinaryOp::kEq && op <= BinaryOp::kGe;
}
bool is_logical(BinaryOp op) {
  return op >= BinaryOp::kAnd && op <= BinaryOp::kXor;
}
namespace {
// The special functions, the polynomials and copysign: of floats only.
bool is_special(BinaryOp op) {
  return op >= BinaryOp::kZeta;
}
}  // namespace

DataType binary_result_dtype(const std::string& layer, BinaryOp op, DataType a, DataType b) {
  KILN_CHECK(a == b, InvalidArgument, "layer `", layer, "` (", binary_op_name(op),
             "): operand dtypes differ (", dtype_name(a), " vs ", dtype_name(b),
             "); insert a cast");
  if (is_comparison(op)) return DataType::kBool;
  if (is_logical(op)) {
    KILN_CHECK(a == DataType::kBool || is_integer(a), InvalidArgument, "layer `", layer, "` (",
               binary_op_name(op), "): needs bool or integer operands, got ", dtype_name(a));
    return a;
  }
  KILN_CHECK(a != DataType::kBool, InvalidArgument, "layer `", layer, "` (", binary_op_name(op),
             "): arithmetic on bool operands");
  KILN_CHECK(op != BinaryOp::kDiv || is_floating(a), InvalidArgument, "layer `", layer,
             "` (div): true division needs floating operands, got ", dtype_name(a),
             " (use floor_div, or cast)");
  KILN_CHECK(!is_special(op) || is_floating(a), InvalidArgument, "layer `", layer, "` (",
             binary_op_name(op), "): needs floating operands, got ", dtype_name(a));
  return a;
}

DataType unary_result_dtype(const std::string& layer, UnaryOp op, DataType a) {
  switch (op) {
    case UnaryOp::kNot:
      KILN_CHECK(a == DataType::kBool, InvalidArgument, "layer `", layer,
                 "` (not): needs bool, got ", dtype_name(a));
      return a;
    case UnaryOp::kIsNan:
      KILN_CHECK(is_floating(a), InvalidArgument, "layer `", layer,
                 "` (isnan): needs floating, got ", dtype_name(a));
      return DataType::kBool;
    case UnaryOp::kNeg:
    case UnaryOp::kAbs:
    case UnaryOp::kSign:
      KILN_CHECK(a != DataType::kBool, InvalidArgument, "layer `", layer, "` (", unary_op_name(op),
                 "): not defined for bool");
      return a;
    case UnaryOp::kFloor:
    case UnaryOp::kCeil:
    case UnaryOp::kRound:
    case UnaryOp::kTrunc:
      KILN_CHECK(a != DataType::kBool, InvalidArgument, "layer `", layer, "` (", unary_op_name(op),
                 "): not defined for bool");
      return a;
    default:
      KILN_CHECK(is_floating(a), InvalidArgument, "layer `", layer, "` (", unary_op_name(op),
                 "): needs a floating input, got ", dtype_name(a));
      return a;
  }
}

std::vector<InferOutput> infer(const std::string& layer, const ElementwiseParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 2, 2);
  return {{binary_result_dtype(layer, p.op, in[0].dtype, in[1].dtype),
           broadcast_shapes(in[0].shape, in[1].shape, "layer `" + layer + "`")}};
}

std::vector<InferOutput> infer(const std::string& layer, const UnaryParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  return {{unary_result_dtype(layer, p.op, in[0].dtype), in[0].shape}};
}

std::vector<InferOutput> infer(const std::string& layer, const ActivationParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  KILN_CHECK(is_floating(in[0].dtype), InvalidArgument, "layer `", layer, "` (",
             activation_name(p.kind), "): needs a floating input, got ", dtype_name(in[0].dtype));
  KILN_CHECK(p.kind != ActivationKind::kNone, InvalidArgument, "layer `", layer,
             "`: activation kind none");
  return {{in[0].dtype, in[0].shape}};
}

std::vector<InferOutput> infer(const std::string& layer, const SelectParams&,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 3, 3);
  KILN_CHECK(in[0].dtype == DataType::kBool, InvalidArgument, "layer `", layer,
             "` (select): condition must be bool, got ", dtype_name(in[0].dtype));
  KILN_CHECK(in[1].dtype == in[2].dtype, InvalidArgument, "layer `", layer,
             "` (select): branch dtypes differ (", dtype_name(in[1].dtype), " vs ",
             dtype_name(in[2].dtype), ")");
  const std::string what = "layer `" + layer + "`";
  return {{in[1].dtype,
           broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape, what), in[2].shape, what)}};
}

std::vector<InferOutput> infer(const std::string& layer, const CastParams& p,
                               const std::vector<InferInput>& in) {
  expect_input_count(layer, in, 1, 1);
  return {{p.to, in[0].shape}};
}

std::vector<FusedOp> decode_program(const std::string& layer, const FusedElementwiseParams& p,
                                    size_t num_inputs) {
  KILN_CHECK(
      p.program.size() % 4 == 0 && p.constants.size() == p.program.size() / 2 && !p.program.empty(),
      InvalidArgument, "layer `", layer, "`: malformed fused program (", p.program.size(),
      " ints, ", p.constants.size(), " constants)");
  std::vector<FusedOp> ops;
  const int64_t kNumOps[] = {kNumBinaryOps, kNumUnaryOps, kNumActivationKinds, kNumDataTypes};
  for (size_t i = 0; i < p.program.size(); i += 4) {
    FusedOp op{p.program[i],     p.program[i + 1],   p.program[i + 2],
               p.program[i + 3], p.constants[i / 2], p.constants[i / 2 + 1]};
    const int64_t regs = static_cast<int64_t>(num_inputs + ops.size());
    // b is checked for every kind (the builder writes 0 where it is unused): kernels form its
    // register address unconditionally. Op codes are bounded by their kind's number of ops.
    KILN_CHECK(op.kind >= 0 && op.kind <= 3 && op.a >= 0 && op.a < regs && op.b >= 0 &&
                   op.b < regs && op.op >= 0 && op.op < kNumOps[op.kind],
               InvalidArgument, "layer `", layer, "`: fused op ", ops.size(),
               " reads a register that is not yet written, or has unknown kind ", op.kind,
               " or op ", op.op);
    ops.push_back(op);
  }
  return ops;
}

size_t fused_registers(const std::string& layer, const FusedElementwiseParams& p,
                       size_t num_inputs) {
  KILN_CHECK(p.gathers.size() % 3 == 0 && p.gathers.size() / 3 < num_inputs, InvalidArgument,
             "layer `", layer, "`: malformed gathers (", p.gathers.size(), " ints for ", num_inputs,
             " inputs)");
  return num_inputs - p.gathers.size() / 3;
}

std::vector<FusedGather> decode_gathers(const std::string& layer, const FusedElementwiseParams& p,
                                        const std::vector<size_t>& ranks) {
  const size_t regs = fused_registers(layer, p, ranks.size());
  std::vector<FusedGather> out;
  for (size_t k = 0; k < p.gathers.size(); k += 3) {
    const int64_t reg = p.gathers[k], run = p.gathers[k + 2];
    KILN_CHECK(reg >= 0 && static_cast<size_t>(reg) < regs, InvalidArgument, "layer `", layer,
               "`: gather ", k / 3, " reads register ", reg, " of ", regs, " inputs");
    for (const FusedGather& g : out) {
      KILN_CHECK(g.reg != reg, InvalidArgument, "layer `", layer, "`: input ", reg,
                 " is gathered twice");
    }
    const int64_t rank = static_cast<int64_t>(ranks[static_cast<size_t>(reg)]);
    const int64_t axis = p.gathers[k + 1] < 0 ? p.gathers[k + 1] + rank : p.gathers[k + 1];
    KILN_CHECK(axis >= 0 && axis < rank, InvalidArgument, "layer `", layer, "`: gather ", k / 3,
               " axis ", p.gathers[k + 1], " is outside input ", reg, "'s ", rank, " dims");
    KILN_CHECK(run == 1 || run == 2 || run == 4 || run == 8 || run == 16, InvalidArgument,
               "layer `", layer, "`: gather ", k / 3, " run ", run, " is not 1, 2, 4, 8 or 16");
    out.push_back({reg, axis, run, regs + k / 3});
  }
  return out;
}

std::vector<InferOutput> infer(const std::string& layer, const FusedElementwiseParams& p,
                               const std::vector<InferInput>& in) {
  KILN_CHECK(!in.empty(), InvalidArgument, "layer `", layer, "`: fused layer without inputs");
  std::vector<size_t> ranks;
  for (const auto& i : in) ranks.push_back(i.shape.size());
  const auto gathers = decode_gathers(layer, p, ranks);
  const size_t regs = fused_registers(layer, p, in.size());
  const auto ops = decode_program(layer, p, regs);
  std::vector<Shape> shapes;
  for (size_t j = 0; j < regs; ++j) shapes.push_back(in[j].shape);
  for (const FusedGather& g : gathers) {
    const InferInput& idx = in[g.index_input];
    Shape& s = shapes[static_cast<size_t>(g.reg)];
    const int64_t d = s[static_cast<size_t>(g.axis)];
    // At least two: the CUDA kernels merge a dim of size 1 away, and the gathered one with it.
    KILN_CHECK(idx.dtype == DataType::kI32 && idx.shape.size() == 1 && idx.shape[0] >= 2,
               InvalidArgument, "layer `", layer, "`: the indices of input ", g.reg,
               " must be a 1-D i32 list of at least 2, got ", dtype_name(idx.dtype),
               shape_to_string(idx.shape));
    KILN_CHECK(
        d != kDynamic && idx.shape[0] != kDynamic && d % g.run == 0 && idx.shape[0] % g.run == 0,
        InvalidArgument, "layer `", layer, "`: input ", g.reg, " gathered along axis ", g.axis,
        " of size ", d, " by ", idx.shape[0], " indices in runs of ", g.run,
        " (static sizes, multiples of the run)");
    s[static_cast<size_t>(g.axis)] = idx.shape[0];
  }
  std::vector<DataType> reg;
  Shape shape = shapes[0];
  for (size_t j = 0; j < regs; ++j) {
    reg.push_back(in[j].dtype);
    shape = broadcast_shapes(shape, shapes[j], "layer `" + layer + "`");
  }
  for (const FusedGather& g : gathers) {
    KILN_CHECK(is_floating(reg[static_cast<size_t>(g.reg)]), InvalidArgument, "layer `", layer,
               "`: gathered input ", g.reg, " is ", dtype_name(reg[static_cast<size_t>(g.reg)]),
               ", not a float");
  }
  for (const FusedOp& op : ops) {
    const DataType a = reg[static_cast<size_t>(op.a)];
    switch (op.kind) {
      case 0:
        reg.push_back(binary_result_dtype(layer, static_cast<BinaryOp>(op.op), a,
                                          reg[static_cast<size_t>(op.b)]));
        break;
      case 1:
        reg.push_back(unary_result_dtype(layer, static_cast<UnaryOp>(op.op), a));
        break;
      case 2:
        reg.push_back(a);
        break;
      default:
        reg.push_back(static_cast<DataType>(op.op));
        break;
    }
  }
  return {{reg.back(), shape}};
}

}  // namespace kiln::engine
