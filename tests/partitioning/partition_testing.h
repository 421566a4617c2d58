// Helpers for partitioning tests: partition IR text and print the segments.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "harness/ir_testing.h"
#include "kiln_test_paths.h"
#include "partitioning/partitioning.h"

namespace kiln::partitioning::testing {

inline std::string read_test_data(const std::string& name) {
  std::ifstream in(std::string(KILN_TEST_DATA_DIR) + "/" + name);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

inline PartitionSettings with_min_block(size_t min_block_size) {
  PartitionSettings settings;
  settings.min_block_size = min_block_size;
  return settings;
}

// The graph must outlive the result's node pointers, so the result holds it.
inline PartitionedGraph partition_ir(const std::string& ir, const Capability& capability,
                                     const PartitionSettings& settings = {}) {
  return partition(kiln::testing::parse(ir), capability, settings);
}

inline std::string segments_of(const std::string& ir, const Capability& capability,
                               const PartitionSettings& settings = {}) {
  return format_segments(partition_ir(ir, capability, settings));
}

}  // namespace kiln::partitioning::testing
