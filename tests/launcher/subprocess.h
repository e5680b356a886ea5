// subprocess.h — run a program from a test: its exit status, its output
// (stdout and stderr together), how long it took; killed (with everything
// it started) after a timeout.
#ifndef TL_TESTS_LAUNCHER_SUBPROCESS_H
#define TL_TESTS_LAUNCHER_SUBPROCESS_H

#include <map>
#include <string>
#include <vector>

struct RunResult {
  int status = -1;  // exit status; 128 + N when killed by signal N
  std::string output;
  double seconds = 0;
  bool timed_out = false;
  // with Signals::count_threads: the most threads any one process of the
  // program's named as the program was (a rank) was seen to run, polled
  // every 20 ms
  int max_threads = 0;
};

// Runs argv with this process's environment minus every MPI / Slurm
// launcher variable (as if typed by hand), plus `env`. `mpi`: the program
// runs MPI ranks, so LeakSanitizer's check at exit is turned off in it
// (MPICH's network modules leak at MPI_Finalize; see tests/mpi_run.sh) and
// each rank checks before MPI_Finalize instead (tl_alloc_leak_check).
// `timeout_s` catches a hang (the process group is killed, timed_out set);
// under ASan/UBSan it is four times longer, as instrumented code is slower.
RunResult RunProcess(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env = {}, double timeout_s = 60,
                     bool mpi = false);

// Signals sent to a program while it runs: once its output holds `after`
// (with `after_stopped`: once a process it started is stopped, SIGSTOPped,
// instead), `times` signals `sig`, `gap_s` apart, to its process alone (as
// `kill PID` or a scheduler does) or with `group` to its whole process
// group (as a terminal's Ctrl-C does).
struct Signals {
  std::string after;
  bool after_stopped = false;
  bool count_threads = false;  // RunResult::max_threads
  int sig = 0;
  bool group = false;
  int times = 1;
  double gap_s = 0;
};

// RunProcess, signalled as `s` says; *sent_at (if given) is when the first
// signal went, in seconds from the start.
RunResult RunProcessSignalled(const std::vector<std::string>& argv, const Signals& s,
                              const std::map<std::string, std::string>& env = {},
                              double timeout_s = 60, bool mpi = false, double* sent_at = nullptr);

// A new file under TEST_TMPDIR holding `text`; its path.
std::string WriteTempFile(const std::string& text, const std::string& suffix = ".json");

// Occurrences of `needle` in `hay`.
int CountOf(const std::string& hay, const std::string& needle);

#endif
