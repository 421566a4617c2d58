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
// switches. 7: the target's generated kernels. 8: the source network's key and refit slots. Plans
// of older versions are refused (rebuilding them is the supported upgrade path).
constexpr uint32_t kPlanFormatVersion = 8;

// What a plan knows of the network it was built from, for refit and the engine cache.
struct PlanSource {
  // network_key() of the network the builder took.
  std::string key;
  // Built with BuilderConfig::refittable: every weight of the source network is still in the plan
  // under its name (or was removed as unused), never folded into another.
  bool refittable = false;
  // constant_slots() of the source network: slot k's weight name.
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
// Writes the weights of `source` (a network with plan.source.key, e.g. the conversion of the same
// architecture with new weights) into the refittable plan, slot by slot. Throws InvalidArgument
// when the plan is not refittable or `source` has another key, naming `what` and, where a weight
// differs, the weight with both dtypes and shapes. Changes nothing when it throws.
void refit_plan(Plan& plan, const Network& source, const std::string& what);

std::vector<uint8_t> serialize_plan(const Plan& plan, bool include_weights = true);
// Throws CorruptInput naming the check that failed (magic, version, checksum, a field, ...).
Plan deserialize_plan(const uint8_t* data, size_t size);

void save_plan(const Plan& plan, const std::string& path, bool include_weights = true);
Plan load_plan(const std::string& path);

}  // namespace kiln::engine
