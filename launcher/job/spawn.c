/* spawn.c — start the job's ranks when a person started one process.
 *
 * The decision is made from the environment alone: every launcher leaves
 * its mark (PMI_RANK from MPICH's hydra, PMIX_RANK, OMPI_COMM_WORLD_SIZE,
 * SLURM_STEP_ID inside an srun step), and the copies trellis starts carry
 * TRELLIS_SPAWNED=1 so that nothing can spawn twice. The parent does no MPI
 * at all: it only runs the launcher and passes its exit status on. */
#include "launcher/job/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

static int option_len(const char* arg, const char* name) {
  size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0) return 0;
  if (arg[n] == '\0') return 2;
  if (arg[n] == '=') return 1;
  return 0;
}

int tl_launch_option_args(int argc, char** argv) {
  if (argc < 1) return 0;
  int n = option_len(argv[0], "--hosts");
  if (!n) n = option_len(argv[0], "--hostfile");
  if (n == 2 && argc < 2) return 1; /* value missing: tl_launch_command says so */
  return n;
}

/* Inside a job step (not the batch script, extern or interactive step,
 * whose ids are the top values of a 32-bit unsigned). */
static int in_slurm_step(const char** id) {
  const char* s = getenv("SLURM_STEP_ID");
  if (!s || !*s) s = getenv("SLURM_STEPID");
  if (!s || !*s) return 0;
  *id = s;
  return strtoul(s, NULL, 10) < 4294967290ul;
}

const char* tl_launch_detected(char* buf, size_t size) {
  static const char* const marks[][2] = {
      {"PMI_RANK", "mpiexec"},          {"PMI_SIZE", "mpiexec"},
      {"PMIX_RANK", "a PMIx launcher"}, {"OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"},
      {"TRELLIS_SPAWNED", "trellis"},
  };
  for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
    const char* v = getenv(marks[i][0]);
    if (v && *v) {
      snprintf(buf, size, "%s (%s=%s)", marks[i][1], marks[i][0], v);
      return buf;
    }
  }
  const char* step;
  if (in_slurm_step(&step) && getenv("SLURM_PROCID")) {
    snprintf(buf, size, "srun (SLURM_STEP_ID=%s)", step);
    return buf;
  }
  return NULL;
}

/* The hosts a hydra hostfile names (a line "host" or "host:slots", '#'
 * starting a comment), and whether any line gives its slots. */
static tl_status hostfile_hosts(const char* path, int* n_hosts, bool* slots) {
  FILE* f = fopen(path, "r");
  if (!f) return TL_ERRF(TL_ERR_IO, "--hostfile %s: cannot open: %s", path, strerror(errno));
  char line[1024];
  *n_hosts = 0, *slots = false;
  while (fgets(line, sizeof line, f)) {
    char* hash = strchr(line, '#');
    if (hash) *hash = '\0';
    const char* c = line;
    while (*c == ' ' || *c == '\t') c++;
    if (*c == '\0' || *c == '\n' || *c == '\r') continue;
    (*n_hosts)++;
    if (strchr(c, ':')) *slots = true;
  }
  const int err = ferror(f) ? (errno ? errno : EIO) : 0; /* a directory: EISDIR */
  fclose(f);
  if (err) return TL_ERRF(TL_ERR_IO, "--hostfile %s: cannot read: %s", path, strerror(err));
  if (*n_hosts == 0) return TL_ERRF(TL_ERR_INVALID, "--hostfile %s: names no host", path);
  return TL_OK;
}

void tl_launch_command_free(char** cmd) {
  if (!cmd) return;
  for (char** p = cmd; *p; p++) free(*p);
  free(cmd);
}

tl_status tl_launch_command(int argc, char** argv, int world_size, const char* self, char*** out) {
  *out = NULL;
  const char *hosts = NULL, *hostfile = NULL;
  /* 1. pull the launcher options out of the arguments */
  for (int i = 1; i < argc; i++) {
    int n = tl_launch_option_args(argc - i, argv + i);
    if (!n) continue;
    const char* eq = strchr(argv[i], '=');
    const char* value = n == 2 ? argv[i + 1] : eq ? eq + 1 : NULL;
    bool is_file = strncmp(argv[i], "--hostfile", 10) == 0;
    if (!value || !*value)
      return TL_ERRF(TL_ERR_INVALID, "%s needs a value: %s", is_file ? "--hostfile" : "--hosts",
                     is_file ? "--hostfile FILE" : "--hosts host1,host2");
    if (is_file)
      hostfile = value;
    else
      hosts = value;
    i += n - 1;
  }
  if (hosts && hostfile)
    return TL_ERRF(TL_ERR_INVALID, "--hosts and --hostfile both given: name the hosts one way");
  int file_hosts = 0; /* the hostfile's hosts, where it gives no slot counts (below) */
  if (hostfile) {
    bool slots = false;
    TL_CHECK(hostfile_hosts(hostfile, &file_hosts, &slots));
    if (slots) file_hosts = 0;
  }

  /* 2. the launcher, its options, then this program and its own arguments */
  const char* step;
  bool srun = getenv("SLURM_JOB_ID") && !in_slurm_step(&step);
  const char* ntasks = getenv("SLURM_NTASKS");
  if (srun && ntasks && *ntasks && !hosts && !hostfile && atoi(ntasks) < world_size)
    /* srun would refuse with its own words, or wait for resources that never come */
    return TL_ERRF(TL_ERR_INVALID,
                   "the Slurm allocation (job %s) has %s tasks (SLURM_NTASKS) and the config's "
                   "mesh needs %d ranks: submit with --ntasks=%d",
                   getenv("SLURM_JOB_ID"), ntasks, world_size, world_size);
  char** cmd = (char**)calloc((size_t)argc + 8, sizeof *cmd);
  if (!cmd) return TL_ERRF(TL_ERR_NOMEM, "no memory for the launch command");
  int k = 0;
  char buf[PATH_MAX + 32];
  if (srun) {
    cmd[k++] = strdup("srun");
    snprintf(buf, sizeof buf, "--ntasks=%d", world_size);
    cmd[k++] = strdup(buf);
    if (hosts || hostfile) {
      /* srun reads a node list from a file when the name contains a '/' */
      char path[PATH_MAX];
      const char* list = hosts;
      if (hostfile) list = realpath(hostfile, path) ? path : hostfile;
      snprintf(buf, sizeof buf, "--nodelist=%s", list);
      cmd[k++] = strdup(buf);
    }
  } else {
    cmd[k++] = strdup("mpiexec");
    cmd[k++] = strdup("-n");
    snprintf(buf, sizeof buf, "%d", world_size);
    cmd[k++] = strdup(buf);
    if (hosts) cmd[k++] = strdup("-hosts"), cmd[k++] = strdup(hosts);
    if (hostfile) cmd[k++] = strdup("-hostfile"), cmd[k++] = strdup(hostfile);
    /* hosts without slot counts: hydra would deal the ranks out one a host
     * in turn, and tensor-parallel neighbours land on different nodes:
     * fill each host in turn instead */
    int fill = file_hosts;
    if (hosts && !strchr(hosts, ':')) {
      for (const char* c = hosts; *c; c++) /* the list's non-empty names */
        fill += *c != ',' && (c == hosts || c[-1] == ',');
      if (fill < 1) fill = 1;
    }
    if (fill > 0) {
      snprintf(buf, sizeof buf, "%d", (world_size + fill - 1) / fill);
      cmd[k++] = strdup("-ppn"), cmd[k++] = strdup(buf);
    }
  }
  cmd[k++] = strdup(self);
  for (int i = 1; i < argc; i++) {
    int n = tl_launch_option_args(argc - i, argv + i);
    if (n) {
      i += n - 1;
      continue;
    }
    cmd[k++] = strdup(argv[i]);
  }
  for (int i = 0; i < k; i++)
    if (!cmd[i]) {
      tl_launch_command_free(cmd);
      return TL_ERRF(TL_ERR_NOMEM, "no memory for the launch command");
    }
  *out = cmd;
  return TL_OK;
}

static volatile sig_atomic_t g_child = 0, g_own_group = 0, g_second = 0;
static volatile sig_atomic_t g_rank_ended = 0; /* a rank ended the job (TL_LAUNCH_RANK_ENDED) */
static struct timespec g_rank_ended_at;
static struct timespec g_first_at; /* when the first signal was passed on */
static volatile sig_atomic_t g_forwarded = 0;

/* Passes a signal on to the launcher, which passes it to the ranks
 * (job/stop.h): mpiexec runs in a process group of its own, so that a
 * Ctrl-C reaches it once, through here — from the terminal it would also
 * reach hydra's proxies, which kill the ranks on it. srun shares ours: a
 * signal the terminal sent reached it already. */
static void forward(int sig, siginfo_t* info, void* ctx) {
  (void)ctx;
  if (!g_own_group && info && info->si_code == SI_KERNEL) return;
  /* a second signal a second or more after the first ends the ranks at
   * once (job/stop.h); the job's status then says so even where mpiexec
   * reports 0 for ranks that ended on a signal it passed on */
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (!g_forwarded) {
    g_first_at = now, g_forwarded = 1;
  } else if ((double)(now.tv_sec - g_first_at.tv_sec) + (now.tv_nsec - g_first_at.tv_nsec) * 1e-9 >=
             1.0) {
    g_second = sig;
  }
  if (g_child > 0) kill((pid_t)g_child, sig);
}

static void rank_ended(int sig) {
  (void)sig;
  if (!g_rank_ended) clock_gettime(CLOCK_MONOTONIC, &g_rank_ended_at), g_rank_ended = 1;
}

static double seconds_since(const struct timespec* t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - t->tv_sec) + (double)(now.tv_nsec - t->tv_nsec) * 1e-9;
}

int tl_launch_notify_target(void) {
  const char* v = getenv("TRELLIS_LAUNCHER");
  int pid = 0;
  char host[256], mine[256] = "";
  if (!v || sscanf(v, "%d %255s", &pid, host) != 2 || pid <= 1) return 0;
  if (gethostname(mine, sizeof mine - 1) != 0 || strcmp(host, mine) != 0) return 0;
  /* the same program: not a process that took a dead launcher's pid */
  char path[64], theirs[64] = "", ours[64] = "";
  snprintf(path, sizeof path, "/proc/%d/comm", pid);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  const int got = fgets(theirs, sizeof theirs, f) != NULL;
  fclose(f);
  f = fopen("/proc/self/comm", "r");
  if (!f) return 0;
  const int got2 = fgets(ours, sizeof ours, f) != NULL;
  fclose(f);
  return got && got2 && strcmp(theirs, ours) == 0 ? pid : 0;
}

/* Runs cmd, waits; the child's exit status, or -1 with errno_out set when
 * it could not be started (exec's errno comes back through a pipe). A
 * launcher still running TL_LAUNCH_GRACE_S after a rank said it ended the
 * job is stopped (spawn.h). */
static int run(char** cmd, int* errno_out) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return *errno_out = errno, -1;
  fflush(NULL);
  const bool own_group = strcmp(cmd[0], "mpiexec") == 0;
  const pid_t parent = getpid();
  char launcher[300], host[256] = "?";
  gethostname(host, sizeof host - 1);
  snprintf(launcher, sizeof launcher, "%d %s", (int)parent, host);
  g_rank_ended = 0;
  struct sigaction ended, old_ended;
  memset(&ended, 0, sizeof ended);
  ended.sa_handler = rank_ended;
  sigemptyset(&ended.sa_mask);
  sigaction(TL_LAUNCH_RANK_ENDED, &ended, &old_ended);
  pid_t pid = fork();
  if (pid < 0) {
    *errno_out = errno;
    close(pipefd[0]);
    close(pipefd[1]);
    sigaction(TL_LAUNCH_RANK_ENDED, &old_ended, NULL);
    return -1;
  }
  if (pid == 0) {
    setenv("TRELLIS_SPAWNED", "1", 1);
    setenv("TRELLIS_LAUNCHER", launcher, 1);
    signal(TL_LAUNCH_RANK_ENDED, SIG_DFL);
    if (own_group) {
      /* a group of its own, which dies with this process (whoever kills
       * trellis's group kills the job), and reads no terminal (a
       * background group reading one would be stopped; training reads no
       * input) */
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      int in = open("/dev/null", O_RDONLY);
      if (in >= 0 && in != 0) dup2(in, 0), close(in);
    }
    execvp(cmd[0], cmd);
    int e = errno;
    ssize_t ignored = write(pipefd[1], &e, sizeof e);
    (void)ignored;
    _exit(127);
  }
  close(pipefd[1]);
  int e = 0;
  ssize_t got;
  do got = read(pipefd[0], &e, sizeof e);
  while (got < 0 && errno == EINTR);
  close(pipefd[0]);

  struct sigaction sa, old[4];
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = forward;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  const int sigs[4] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
  if (own_group) setpgid(pid, pid); /* the child does too: whichever runs first */
  g_own_group = own_group;
  g_child = pid;
  for (int i = 0; i < 4; i++) sigaction(sigs[i], &sa, &old[i]);
  int status = 0, stopped = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    if (g_rank_ended && seconds_since(&g_rank_ended_at) > TL_LAUNCH_GRACE_S) {
      fprintf(stderr,
              "trellis: a rank ended the job (its message is above), but %s has not ended %d s "
              "later: a node it started ranks on is not answering (a link down, say); stopping "
              "it here — what it started on other nodes may be left running there\n",
              cmd[0], TL_LAUNCH_GRACE_S);
      kill(own_group ? -pid : pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      stopped = 1;
      break;
    }
    struct timespec nap = {0, 100 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  for (int i = 0; i < 4; i++) sigaction(sigs[i], &old[i], NULL);
  sigaction(TL_LAUNCH_RANK_ENDED, &old_ended, NULL);
  g_child = 0;
  if (stopped) return 124;
  if (got == (ssize_t)sizeof e) return *errno_out = e, -1;
  /* hydra's own failure (255), not a rank's: it lost a proxy — a node
   * whose processes died, or one it could not reach — and says so only in
   * its internals' terms */
  if (own_group && !g_rank_ended && !g_forwarded && WIFEXITED(status) &&
      WEXITSTATUS(status) == 255) {
    const char* hosts = NULL;
    for (char** p = cmd; *p && p[1]; p++)
      if (strcmp(*p, "-hosts") == 0 || strcmp(*p, "-f") == 0) hosts = p[1];
    fprintf(stderr,
            "trellis: mpiexec ended with status 255 and no rank ended the job: it lost a node it "
            "started ranks on (the node or its processes gone) or could not reach one; hosts: "
            "%s\n",
            hosts ? hosts : "this one");
  }
  if (g_second && WIFEXITED(status) && WEXITSTATUS(status) == 0) return 128 + g_second;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

int tl_launch_maybe_spawn(int argc, char** argv, int world_size, int* exit_status) {
  *exit_status = 0;
  bool named_hosts = false;
  for (int i = 1; i < argc; i++) named_hosts |= tl_launch_option_args(argc - i, argv + i) > 0;
  char why[128];
  if (tl_launch_detected(why, sizeof why)) {
    if (named_hosts) TL_LOG_WARN("--hosts/--hostfile ignored: this process was started by %s", why);
    return 0;
  }
  if (world_size <= 1 && !named_hosts) return 0;

  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0)
    self[n] = '\0';
  else
    snprintf(self, sizeof self, "%s", argv[0]);
  char** cmd = NULL;
  if (tl_launch_command(argc, argv, world_size, self, &cmd) != TL_OK) {
    fprintf(stderr, "trellis: %s\n",
            tl_log_enabled(TL_LOG_DEBUG) ? tl_last_error() : tl_last_error_message());
    *exit_status = 2;
    return 1;
  }
  char line[2048];
  size_t len = 0;
  for (char** p = cmd; *p && len < sizeof line; p++)
    len += (size_t)snprintf(line + len, sizeof line - len, "%s%s", p == cmd ? "" : " ", *p);
  TL_LOG_INFO("starting %d rank%s: %s", world_size, world_size == 1 ? "" : "s", line);
  int err = 0;
  int status = run(cmd, &err);
  if (status < 0) {
    fprintf(stderr,
            "trellis: cannot run '%s': %s (it starts the job's %d ranks; install MPICH's mpiexec "
            "or put it on PATH)\n",
            cmd[0], strerror(err), world_size);
    status = 127;
  }
  tl_launch_command_free(cmd);
  *exit_status = status;
  return 1;
}
