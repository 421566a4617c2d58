// Runs a program and captures its exit code, stdout and stderr (for testing the tools).
#pragma once

#include <string>
#include <vector>

namespace kiln::testing {

struct ProcessResult {
  int exit_code = -1;  // -1 when the process did not exit normally (signal)
  std::string out;
  std::string err;
};

ProcessResult run_process(const std::vector<std::string>& argv);

// Writes `text` to a fresh file in the test's temporary folder and returns its path.
std::string write_temp_file(const std::string& name, const std::string& text);

}  // namespace kiln::testing
