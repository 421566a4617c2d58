// Converter coverage (seed 002 "Checking Converter Coverage"): how much of a graph the engine
// takes, per op, with the reasons for the rest.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "partitioning/segment.h"

namespace kiln::partitioning {

struct OpCoverage {
  size_t total = 0;
  size_t supported = 0;
  std::map<std::string, size_t> reasons;  // "no converter: no converter ... for aten::lgamma" -> n
};

struct CoverageReport {
  size_t total = 0;                       // non-constant nodes, nested blocks included
  size_t supported = 0;                   // of those, the ones that run in the engine
  std::map<std::string, OpCoverage> ops;  // by overload name, e.g. "aten::add.Tensor"
  // With several engine backends (backend_priority): the supported ops each one takes.
  std::map<std::string, size_t> backends;
};

// From the final decisions of a partition (so boundary and block-size fallbacks count too).
CoverageReport coverage(const PartitionedGraph& partitioned);

// "7/10 ops supported by the engine" (", by backend: cuda 5, cpu 2" with several), then one
// line per op, unsupported ops first.
std::string to_text(const CoverageReport& report);

// {"supported": n, "total": n, "ops": {"aten::lgamma": {"supported": 0, "total": 3,
//   "reasons": {"no converter: ...": 3}}, ...}, "backends": {"cuda": 5, "cpu": 2}}
nlohmann::json to_json(const CoverageReport& report);

}  // namespace kiln::partitioning
