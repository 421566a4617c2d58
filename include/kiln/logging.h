// Public control of kiln's log output: the level, settable here or with KILN_LOG_LEVEL.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace kiln {

// Ordered from quietest to loudest; a message prints when its level <= the current level.
enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3, kGraph = 4 };

// The level in force: the last set_log_level(), else KILN_LOG_LEVEL at first use, else kWarning.
LogLevel log_level();
void set_log_level(LogLevel level);

// Parses "error", "warning", "info", "debug", "graph" (any case) or "0".."4".
std::optional<LogLevel> parse_log_level(std::string_view text);
const char* log_level_name(LogLevel level);

// Where messages go; the default writes "[kiln] LEVEL: message" lines to stderr.
// Passing an empty function restores the default.
using LogSink = std::function<void(LogLevel, const std::string&)>;
void set_log_sink(LogSink sink);

}  // namespace kiln
