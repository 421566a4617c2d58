// Process runner for tool tests: fork/exec with stdout and stderr redirected to temp files.
#include "harness/process.h"

#include <ftw.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace kiln::testing {
namespace {

// One directory per test process, removed when that process exits normally (a forked child
// leaves through _exit and never runs this destructor). Tool tests write models and plans of
// hundreds of MB; left behind, they filled the CI machine's disk.
class TempDir {
 public:
  TempDir() : owner_(getpid()) {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp ? tmp : "/tmp") + "/kiln_tests_" + std::to_string(owner_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    if (getpid() != owner_ || std::getenv("KILN_KEEP_TEST_FILES")) return;
    // nftw, not std::filesystem::remove_all: the torch wheel's libtorch.so exports its own
    // std::filesystem symbols, and its remove_all jumps to null when called at exit.
    nftw(
        path_.c_str(),
        [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  const std::string& path() const { return path_; }

 private:
  pid_t owner_;
  std::string path_;
};

std::string temp_dir() {
  static const TempDir dir;
  return dir.path();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace

std::string write_temp_file(const std::string& name, const std::string& text) {
  const std::string path = temp_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

ProcessResult run_process(const std::vector<std::string>& argv) {
  static int counter = 0;
  const std::string base = temp_dir() + "/proc" + std::to_string(counter++);
  const std::string out_path = base + ".out", err_path = base + ".err";
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(out_path.c_str(), "w", stdout) || !freopen(err_path.c_str(), "w", stderr)) {
      _exit(127);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  ProcessResult result;
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0) {
    ADD_FAILURE() << "could not run " << argv[0];
    return result;
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  return result;
}

}  // namespace kiln::testing
