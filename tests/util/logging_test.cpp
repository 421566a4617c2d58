// Logging: level parsing, filtering by level, the sink, and KILN_LOG_LEVEL.
#include "util/logging.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

namespace kiln {
namespace {

struct CapturedLog {
  std::vector<std::pair<LogLevel, std::string>> lines;
  CapturedLog() {
    set_log_sink([this](LogLevel l, const std::string& m) { lines.emplace_back(l, m); });
  }
  ~CapturedLog() { set_log_sink(nullptr); }
};

TEST(Logging, ParsesNamesAndNumbers) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("WARNING"), LogLevel::kWarning);
  EXPECT_EQ(parse_log_level("warn"), LogLevel::kWarning);
  EXPECT_EQ(parse_log_level("0"), LogLevel::kError);
  EXPECT_EQ(parse_log_level("4"), LogLevel::kGraph);
  EXPECT_FALSE(parse_log_level("loud").has_value());
  EXPECT_FALSE(parse_log_level("5").has_value());
}

TEST(Logging, FiltersByLevel) {
  const LogLevel saved = log_level();
  CapturedLog log;
  set_log_level(LogLevel::kInfo);
  KILN_LOG(kInfo, "built ", 3, " layers");
  KILN_LOG(kDebug, "hidden");
  KILN_LOG(kError, "shown");
  set_log_level(saved);
  ASSERT_EQ(log.lines.size(), 2u);
  EXPECT_EQ(log.lines[0].first, LogLevel::kInfo);
  EXPECT_EQ(log.lines[0].second, "built 3 layers");
  EXPECT_EQ(log.lines[1].second, "shown");
}

TEST(Logging, ArgumentsAreNotEvaluatedWhenFiltered) {
  const LogLevel saved = log_level();
  set_log_level(LogLevel::kError);
  int calls = 0;
  auto expensive = [&] { return ++calls; };
  KILN_LOG(kDebug, expensive());
  set_log_level(saved);
  EXPECT_EQ(calls, 0);
}

// KILN_LOG_LEVEL is read once per process, so it is checked in a child process.
TEST(Logging, EnvironmentVariableSetsTheLevel) {
  ASSERT_EQ(setenv("KILN_LOG_LEVEL", "debug", 1), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(log_level() == LogLevel::kDebug ? 0 : 1);
  int status = 0;
  waitpid(pid, &status, 0);
  unsetenv("KILN_LOG_LEVEL");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "child did not see KILN_LOG_LEVEL=debug";
}

}  // namespace
}  // namespace kiln
