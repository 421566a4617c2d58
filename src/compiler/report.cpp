// CompileReport as JSON (kilnc --report) and as the one-screen summary kilnc prints.
#include <nlohmann/json.hpp>

#include <iomanip>
#include <set>
#include <sstream>

#include "kiln/kiln.h"

namespace kiln {

std::string CompileReport::to_json() const {
  nlohmann::json j;
  j["engine_ops"] = engine_ops;
  j["torch_ops"] = torch_ops;
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& [name, ms] : phase_ms) phases.push_back({{"phase", name}, {"ms", ms}});
  j["phases"] = phases;
  nlohmann::json segs = nlohmann::json::array();
  for (const SegmentReport& s : segments) {
    nlohmann::json js = {{"target", s.target},
                         {"device", s.device},
                         {"ops", s.ops},
                         {"input_shapes", s.input_shapes_opt},
                         {"output_shapes", s.output_shapes_opt}};
    if (!s.engine_name.empty()) {
      js["engine"] = s.engine_name;
      js["build_ms"] = s.build_ms;
      js["plan"] = s.plan;
      if (s.plan == "cache hit") js["build_saved_ms"] = s.build_saved_ms;
      js["layers"] = s.layers;
      js["shuffles"] = s.shuffles;
      js["generated_kernels"] = s.generated_kernels;
    }
    if (!s.fallback_reason.empty()) js["fallback_reason"] = s.fallback_reason;
    segs.push_back(js);
  }
  j["segments"] = segs;
  j["fallback"] = fallback;
  return j.dump(1);
}

std::string CompileReport::summary() const {
  std::ostringstream os;
  size_t engines = 0;
  for (const auto& s : segments) engines += s.target == "engine";
  os << "segments: " << segments.size() << " (" << engines << " engine, "
     << segments.size() - engines << " torch)\n";
  const size_t total = engine_ops + torch_ops;
  os << "ops: " << engine_ops << " in engines, " << torch_ops << " in PyTorch";
  if (total) {
    os << " (" << std::fixed << std::setprecision(1) << 100.0 * engine_ops / total
       << "% in engines)";
  }
  os << "\n";
  // Devices are named when there are several (backend_priority).
  std::set<std::string> devices;
  for (const auto& s : segments) devices.insert(s.device);
  for (size_t i = 0; i < segments.size(); ++i) {
    const SegmentReport& s = segments[i];
    os << "  " << std::setw(2) << i << " " << std::setw(6) << s.target;
    if (devices.size() > 1) os << " " << std::setw(6) << s.device;
    os << " " << std::setw(4) << s.ops.size() << " ops";
    if (!s.engine_name.empty()) {
      os << "  " << s.engine_name << "  " << s.plan << " in " << std::fixed << std::setprecision(0)
         << s.build_ms << " ms";
      if (s.plan == "cache hit") {
        os << " (a build of " << s.build_saved_ms << " ms saved)";
      }
      os << ": " << s.layers << " layers, " << s.shuffles << " shuffles";
      if (s.generated_kernels) os << ", " << s.generated_kernels << " generated kernels";
    }
    if (!s.fallback_reason.empty()) os << "  (" << s.fallback_reason << ")";
    os << "\n";
  }
  double total_ms = 0;
  os << "time:";
  for (const auto& [name, ms] : phase_ms) {
    os << " " << name << " " << std::fixed << std::setprecision(0) << ms << " ms,";
    total_ms += ms;
  }
  os << " total " << std::fixed << std::setprecision(0) << total_ms << " ms\n";
  return os.str();
}

}  // namespace kiln
