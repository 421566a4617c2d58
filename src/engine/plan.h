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
// switches. 7: the target's generated kernels. Plans of older versions are refused (rebuilding them
// is the supported upgrade path).
constexpr uint32_t kPlanFormatVersion = 7;

struct Plan {
  Network network;
  EngineTarget target;
};

std::vector<uint8_t> serialize_plan(const Plan& plan, bool include_weights = true);
// Throws CorruptInput naming the check that failed (magic, version, checksum, a field, ...).
Plan deserialize_plan(const uint8_t* data, size_t size);

void save_plan(const Plan& plan, const std::string& path, bool include_weights = true);
Plan load_plan(const std::string& path);

}  // namespace kiln::engine
