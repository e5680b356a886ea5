// subprocess.cc — fork, exec with the output in a file, poll with a deadline.
#include "tests/launcher/subprocess.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

extern char** environ;

namespace {

double Now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

const char* const kLauncherVars[] = {"PMI_RANK",     "PMI_SIZE",        "PMI_FD",
                                     "PMI_PORT",     "PMIX_RANK",       "OMPI_COMM_WORLD_SIZE",
                                     "SLURM_JOB_ID", "SLURM_STEP_ID",   "SLURM_STEPID",
                                     "SLURM_PROCID", "TRELLIS_SPAWNED", "MPI_LOCALNRANKS"};

}  // namespace

std::string WriteTempFile(const std::string& text, const std::string& suffix) {
  const char* dir = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(dir ? dir : "/tmp") + "/fileXXXXXX" + suffix;
  std::vector<char> path(tmpl.begin(), tmpl.end());
  path.push_back('\0');
  int fd = mkstemps(path.data(), (int)suffix.size());
  if (fd < 0) return "";
  ssize_t n = write(fd, text.data(), text.size());
  (void)n;
  close(fd);
  return path.data();
}

int CountOf(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) n++;
  return n;
}

RunResult RunProcess(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env, double timeout_s, bool mpi) {
  return RunProcessSignalled(argv, Signals(), env, timeout_s, mpi);
}

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A process as /proc/PID/stat shows it.
struct Proc {
  pid_t parent = 0;
  char state = 0;
  int threads = 0;
  std::string name;
};

// The processes descended from `root` (and root), by pid.
std::map<pid_t, Proc> Descendants(pid_t root) {
  std::map<pid_t, Proc> all, mine;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      long pid = strtol(e->d_name, &end, 10);
      if (*end || pid <= 0) continue;
      std::string stat = ReadAll("/proc/" + std::string(e->d_name) + "/stat");
      size_t open = stat.find('('), close = stat.rfind(')');  // the name may hold spaces
      if (open == std::string::npos || close == std::string::npos || close + 4 > stat.size())
        continue;
      Proc p;
      p.name = stat.substr(open + 1, close - open - 1);
      p.state = stat[close + 2];
      std::istringstream rest(stat.substr(close + 4));
      std::vector<std::string> f;  // from field 4 (ppid) on
      for (std::string w; rest >> w;) f.push_back(w);
      if (f.size() < 17) continue;
      p.parent = (pid_t)atol(f[0].c_str());
      p.threads = atoi(f[16].c_str());  // field 20, num_threads
      all[(pid_t)pid] = p;
    }
    closedir(d);
  }
  for (const auto& [pid, p] : all)
    for (pid_t q = pid; q > 1; q = all.count(q) ? all[q].parent : 0)
      if (q == root) {
        mine[pid] = p;
        break;
      }
  return mine;
}

// Whether a process descended from `root` is stopped (state T).
bool DescendantStopped(pid_t root) {
  for (const auto& [pid, p] : Descendants(root))
    if (pid != root && p.state == 'T') return true;
  return false;
}

}  // namespace

RunResult RunProcessSignalled(const std::vector<std::string>& argv, const Signals& sig,
                              const std::map<std::string, std::string>& env, double timeout_s,
                              bool mpi, double* sent_at) {
  RunResult r;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
  // The deadline catches hangs; it does not time the program. Instrumented
  // builds beside another test on a loaded CI machine run several times
  // slower (trellis check's self-check: 13 s here, past 50 s in CI).
  timeout_s *= 4;
#endif
  std::string out = WriteTempFile("", ".out");
  double start = Now();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);  // a group of its own: a timeout kills everything it started
    for (const char* v : kLauncherVars) unsetenv(v);
    if (mpi) {
      const char* asan = getenv("ASAN_OPTIONS");
      // no check at exit (MPI_Finalize's leaks); the ranks check their own
      // memory before it (tl_alloc_leak_check)
      std::string opts = std::string(asan ? asan : "") + (asan ? ":" : "") + "leak_check_at_exit=0";
      setenv("ASAN_OPTIONS", opts.c_str(), 1);
    }
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    // Explicit descriptors: a test may run with stdin closed, and the
    // launcher's proxies must see ordinary 0, 1 and 2.
    int in = open("/dev/null", O_RDONLY), fd = open(out.c_str(), O_WRONLY | O_TRUNC);
    if (in < 0 || fd < 0 || dup2(in, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
    if (in > 2) close(in);
    if (fd > 2) close(fd);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    fprintf(stderr, "cannot run %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  int status = 0, sent = 0;
  double last_sent = 0;
  for (;;) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (sig.sig && sent < sig.times &&
        (sent                ? Now() - last_sent >= sig.gap_s
         : sig.after_stopped ? DescendantStopped(pid)
                             : ReadAll(out).find(sig.after) != std::string::npos)) {
      kill(sig.group ? -pid : pid, sig.sig);
      last_sent = Now();
      if (!sent && sent_at) *sent_at = last_sent - start;
      sent++;
    }
    if (sig.count_threads) {
      std::string name = argv[0].substr(argv[0].rfind('/') + 1).substr(0, 15);
      for (const auto& [p, proc] : Descendants(pid))
        if (proc.name == name) r.max_threads = std::max(r.max_threads, proc.threads);
    }
    if (Now() - start > timeout_s) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    usleep(20000);
  }
  r.seconds = Now() - start;
  // Whatever the job left running in its group goes too.
  kill(-pid, SIGKILL);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.output = ReadAll(out);
  unlink(out.c_str());
  return r;
}
