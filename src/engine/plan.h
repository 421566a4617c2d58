// The plan: a built engine in a versioned binary format (magic, version, target, tensors, io,
// layers, 64-byte aligned weights or none, xxHash checksum). Loading validates every field.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/network.h"
#include "engine/runtime.h"

namespace kiln::engine {

constexpr char kPlanMagic[8] = {'K', 'I', 'L', 'N', 'P', 'L', 'A', 'N'};
// 2: channels_last in convolution and pooling parameters. 3: packed heads in attention
// parameters. 4: tf32 in convolution and matmul parameters. 5: the projection of
// squeeze-excitation parameters, the cast of shuffle parameters. 6: the target's measurement
// switches. 7: the target's generated kernels. 8: the source network's key and refit slots. 9: the
// source's weights and the key of the network the passes made. 10: the scan layer (the cumsum layer
// with an op: sum, prod, max, min, logsumexp), multiply/max/min scatter reductions. 11: packed
// attention's key/value heads (grouped-query attention). 12: RMS normalization. 13: masked and
// causal softmax. 14: gathered inputs of fused elementwise layers. 15: the nonzero layer. 16:
// tf32 in attention parameters. 17: the kernels' choices made while building. 18: in-place concats.
// Plans of older versions are refused (rebuilding them is the supported upgrade path).
constexpr uint32_t kPlanFormatVersion = 18;

// A weight of the network a plan was built from: its name there, dtype and shape.
struct SourceWeight {
  std::string name;
  DataType dtype = DataType::kF32;
  Shape shape;
};

// What a plan knows of the network it was built from, for refit and the engine cache. A refit
// (builder.h) runs the builder's passes again over the same architecture with new weights: every
// weight the passes derive (folded batch norms, casts to f16, channels-last and transposed
// copies, fused projections) is derived again from the new ones, and the plan takes the result
// slot by slot, without choosing or compiling kernels again.
struct PlanSource {
  // network_key() of the network the builder took.
  std::string key;
  // Built with BuilderConfig::refittable: no rewrite depended on a weight's values, so the passes
  // rewrite any weights of this architecture into the plan's network.
  bool refittable = false;
  // constant_slots() of the source network, with dtypes and shapes (refittable plans).
  std::vector<SourceWeight> weights;
  // network_key() of the network the passes made, and its constant_slots(): slot k of a refit.
  std::string built_key;
  std::vector<std::string> slots;
};

struct Plan {
  Network network;
  EngineTarget target;
  PlanSource source;
};

// A key of a network's structure without its weights' data: layers, parameters, tensor dtypes,
// shapes and known values, profiles, and each weight's dtype and shape, with every name replaced by
// its position, so that two conversions of one architecture give one key whatever their weights
// and value names. Hex digits.
std::string network_key(const Network& net);
// The weights of a network's Constant layers, in layer order: slot k of a refit.
std::vector<std::string> constant_slots(const Network& net);
// Throws InvalidArgument unless the refittable plan was built from a network like `source` (the
// conversion of the same architecture with new weights): names `what` and, where a weight differs,
// the weight with both dtypes and shapes.
void check_refit_source(const Plan& plan, const Network& source, const std::string& what);

std::vector<uint8_t> serialize_plan(const Plan& plan, bool include_weights = true);
// Throws CorruptInput naming the check that failed (magic, version, checksum, a field, ...).
// With `keepalive`, the weights are views of `data` (which must stay valid while `keepalive`
// lives) instead of copies. Without `verify_checksum`, the checksum is not computed: for bytes a
// caller has checked otherwise (a cache entry's digests), never for bytes from outside.
Plan deserialize_plan(const uint8_t* data, size_t size,
                      std::shared_ptr<const void> keepalive = nullptr, bool verify_checksum = true);
// The plan in `bytes`, its weights views of them.
Plan deserialize_plan(const std::shared_ptr<const Bytes>& bytes, bool verify_checksum = true);

void save_plan(const Plan& plan, const std::string& path, bool include_weights = true);
Plan load_plan(const std::string& path);

}  // namespace kiln::engine
