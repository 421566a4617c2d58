// Coverage report: counts the partition's final decisions per op, as text and JSON.
#include "partitioning/coverage.h"

#include <algorithm>
#include <sstream>
#include <vector>

namespace kiln::partitioning {

CoverageReport coverage(const PartitionedGraph& partitioned) {
  CoverageReport report;
  for (const auto& [node, decision] : partitioned.decisions) {
    OpCoverage& op = report.ops[overload_name(node)];
    ++op.total;
    ++report.total;
    if (decision.supported) {
      ++op.supported;
      ++report.supported;
      if (!decision.backend.empty()) ++report.backends[decision.backend];
    } else {
      ++op.reasons[std::string(reason_name(decision.reason)) + ": " + decision.detail];
    }
  }
  return report;
}

std::string to_text(const CoverageReport& report) {
  std::ostringstream os;
  os << report.supported << '/' << report.total << " ops supported by the engine";
  const char* sep = ", by backend: ";
  for (const auto& [backend, n] : report.backends) {
    os << sep << backend << ' ' << n;
    sep = ", ";
  }
  os << '\n';
  // Unsupported ops first: they are what a reader of this report wants to act on.
  std::vector<const std::pair<const std::string, OpCoverage>*> rows;
  for (const auto& row : report.ops) rows.push_back(&row);
  std::stable_sort(rows.begin(), rows.end(), [](const auto* a, const auto* b) {
    return (a->second.supported < a->second.total) > (b->second.supported < b->second.total);
  });
  for (const auto* row : rows) {
    const OpCoverage& op = row->second;
    os << "  " << row->first << ": " << op.supported << '/' << op.total << '\n';
    for (const auto& [reason, count] : op.reasons) os << "    " << count << "x " << reason << '\n';
  }
  return os.str();
}

nlohmann::json to_json(const CoverageReport& report) {
  nlohmann::json ops = nlohmann::json::object();
  for (const auto& [name, op] : report.ops) {
    ops[name] = {{"supported", op.supported}, {"total", op.total}, {"reasons", op.reasons}};
  }
  nlohmann::json out = {{"supported", report.supported}, {"total", report.total}, {"ops", ops}};
  if (!report.backends.empty()) out["backends"] = report.backends;
  return out;
}

}  // namespace kiln::partitioning
