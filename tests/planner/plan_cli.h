// plan_cli.h — running `trellis plan` from a test: a temporary path, the
// command's exit status and output, a token file to train on, and the
// example model and spec.
#ifndef TL_TESTS_PLANNER_PLAN_CLI_H
#define TL_TESTS_PLANNER_PLAN_CLI_H

#include <gtest/gtest.h>
#include <jansson.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace {

inline std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

struct PlanRun {
  int status;
  std::string output;
};

// Runs the shell command `line` (stdout and stderr together).
inline PlanRun Shell(const std::string& line) {
  // Some runs start MPI jobs: under ASan, MPICH's run-time-loaded modules
  // leak at MPI_Finalize (see tests/mpi_run.sh), so no leak checking here.
  std::string cmd =
      "export ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\"; " + line + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  PlanRun r{-1, ""};
  if (!f) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) r.output.append(buf, n);
  int st = pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// A byte-level token file of `lines` numbered copies of `line`.
inline std::string WriteTokens(const std::string& name, const std::string& line, int lines) {
  std::string text = TempPath(name + ".txt"), tokens = TempPath(name + ".bin");
  {
    std::ofstream f(text);
    for (int i = 0; i < lines; i++) f << line << ", line " << i << ".\n";
  }
  std::string cmd = "launcher/trellis data " + text + " " + tokens + " > /dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return tokens;
}

// Runs `trellis plan ARGS`.
inline PlanRun Plan(const std::string& args) {
  return Shell("launcher/trellis plan " + args);
}

// The document `trellis plan --json` printed (from the output's first '{':
// stderr's lines come first), or nullptr; the caller json_decrefs it.
inline json_t* PlanJson(const PlanRun& r) {
  size_t brace = r.output.find('{');
  if (brace == std::string::npos) return nullptr;
  return json_loads(r.output.c_str() + brace, JSON_DISABLE_EOF_CHECK, nullptr);
}

const char* kSmall = "examples/gpt_small.json";
const char* kThisMachine = "examples/clusters/this_machine.json";

}  // namespace

#endif
