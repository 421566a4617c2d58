// Log level (API or KILN_LOG_LEVEL) and the sink messages go to.
#include "util/logging.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <mutex>

namespace kiln {
namespace {

LogLevel level_from_environment() {
  const char* env = std::getenv("KILN_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return LogLevel::kWarning;
  if (auto parsed = parse_log_level(env)) return *parsed;
  std::cerr << "[kiln] WARNING: ignoring KILN_LOG_LEVEL=\"" << env
            << "\" (expected error, warning, info, debug, graph or 0-4)\n";
  return LogLevel::kWarning;
}

std::atomic<int>& level_slot() {
  static std::atomic<int> level{static_cast<int>(level_from_environment())};
  return level;
}

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

LogSink& sink_slot() {
  static LogSink sink;
  return sink;
}

}  // namespace

LogLevel log_level() {
  return static_cast<LogLevel>(level_slot().load(std::memory_order_relaxed));
}

void set_log_level(LogLevel level) {
  level_slot().store(static_cast<int>(level), std::memory_order_relaxed);
}

std::optional<LogLevel> parse_log_level(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const std::pair<const char*, LogLevel> kNames[] = {{"error", LogLevel::kError},
                                                            {"warning", LogLevel::kWarning},
                                                            {"info", LogLevel::kInfo},
                                                            {"debug", LogLevel::kDebug},
                                                            {"graph", LogLevel::kGraph}};
  for (int i = 0; i < 5; ++i) {
    if (lower == kNames[i].first || lower == std::to_string(i)) return kNames[i].second;
  }
  if (lower == "warn") return LogLevel::kWarning;
  return std::nullopt;
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "ERROR";
    case LogLevel::kWarning:
      return "WARNING";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kGraph:
      return "GRAPH";
  }
  return "?";
}

void set_log_sink(LogSink sink) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  sink_slot() = std::move(sink);
}

namespace detail {
void emit_log(LogLevel level, const std::string& message) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  if (sink_slot()) {
    sink_slot()(level, message);
  } else {
    std::cerr << "[kiln] " << log_level_name(level) << ": " << message << '\n';
  }
}
}  // namespace detail

}  // namespace kiln
