// trellis under a real Slurm. Debian's slurm-wlm runs here as a one-node
// cluster — munged, slurmctld and slurmd, started by this test from a
// slurm.conf it writes into a directory of its own, on ports nobody holds —
// and examples/slurm/train.sbatch is submitted to it as a user would:
// a 4-rank job (dp 2 x pp 2) trained to its end; then a job preempted with
// `scancel --signal=TERM`, which must stop after the step in progress with a
// checkpoint and end COMPLETED with exit code 0, and the same script
// submitted again, which must go on from that checkpoint and end bit for bit
// where the uninterrupted run ends.
//
// Then the same across two hosts: two emulated nodes (tools/cluster.sh, a
// network namespace and hostname each, the link shaped to 1 Gbit/s), a
// slurmd in each with its own NodeName and NodeAddr, slurmctld in the
// first; `sbatch --nodes=2` trains to the end with two ranks on each node,
// and a job preempted and resubmitted across the two nodes ends bit for bit
// on the uninterrupted run.
//
// Skipped, saying why, only where the daemons are not installed or cannot
// run: not root (slurmd starts job steps as their user), no cgroup
// filesystem (slurmd will not start without one: a chroot), or (two nodes)
// no network namespaces. A daemon that is there and will not start fails
// the test with its log.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/launcher/subprocess.h"

namespace {

const char* kTrellis = "launcher/trellis";
const char* kScript = "examples/slurm/train.sbatch";
const char* kDaemons[] = {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd"};
const char* kClients[] = {"sbatch", "scancel", "scontrol", "sinfo", "squeue"};
const char* kCluster = "tools/cluster.sh";

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool OnPath(const std::string& name) {
  const char* path = getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string d;
  while (std::getline(dirs, d, ':'))
    if (!d.empty() && access((d + "/" + name).c_str(), X_OK) == 0) return true;
  return false;
}

std::string Absolute(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? buf : path;
}

double Now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// A TCP port on the loopback that nobody holds now.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (sockaddr*)&a, sizeof a) == 0 && getsockname(fd, (sockaddr*)&a, &n) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

// A Slurm cluster for the tests of a fixture: this host as one node
// (nodes 0), or `nodes` emulated nodes named PREFIX0.. (tools/cluster.sh).
struct Cluster {
  int nodes = 0;
  std::string prefix;
  std::string dir, conf, why_not;  // why_not: the reason to skip, when set
  std::vector<pid_t> daemons;
  std::vector<std::string> logs;

  std::string Node(int i) const { return prefix + std::to_string(i); }

  // A Slurm client command, run where slurmctld is reachable (on emulated
  // nodes: inside the first).
  std::vector<std::string> Client(std::vector<std::string> argv) const {
    if (nodes) argv.insert(argv.begin(), {"ip", "netns", "exec", Node(0)});
    return argv;
  }

  std::string Logs() const {
    std::string s;
    for (const std::string& l : logs) {
      std::string text = ReadFile(l);
      if (text.size() > 3000) text = "..." + text.substr(text.size() - 3000);
      s += "== " + l + "\n" + text + "\n";
    }
    return s;
  }

  // A daemon in the foreground, as a child of this test: it dies with the
  // test (PDEATHSIG), whatever ends it.
  void Start(const std::vector<std::string>& argv, const std::string& log) {
    logs.push_back(log);
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the test died before prctl
      setpgid(0, 0);
      int in = open("/dev/null", O_RDONLY),
          fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (in < 0 || fd < 0 || dup2(in, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      fprintf(stderr, "cannot run %s: %s\n", args[0], strerror(errno));
      _exit(127);
    }
    daemons.push_back(pid);
  }

  bool Up(std::string* error) {
    for (const char* d : kDaemons)
      if (access(d, X_OK) != 0) {
        why_not = std::string(d) +
                  " is not installed (Debian's slurmctld, slurmd, slurm-client and munge "
                  "packages; tools/setup.sh installs them)";
        return false;
      }
    for (const char* c : kClients)
      if (!OnPath(c)) {
        why_not = std::string(c) + " is not on PATH (Debian's slurm-client package)";
        return false;
      }
    if (geteuid() != 0) {
      why_not = "not root: slurmd must run as root to start job steps";
      return false;
    }
    if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) != 0 &&
        access("/sys/fs/cgroup/cpuset", F_OK) != 0) {
      why_not =
          "slurmd (22.05) needs the cgroup filesystem at /sys/fs/cgroup, and none is mounted "
          "here (a chroot or container without /sys)";
      return false;
    }
    if (nodes) {
      setenv("TL_CLUSTER_PREFIX", prefix.c_str(), 1);
      RunResult u = RunProcess({kCluster, "up", std::to_string(nodes), "1gbit"}, {}, 60, true);
      if (u.status != 0) {
        why_not = "emulated nodes cannot be made here (tools/cluster.sh up): " + u.output;
        return false;
      }
    }
    // 1. a directory of its own, short enough for munged's socket path
    char tmpl[] = "/tmp/trellis-slurm-XXXXXX";
    if (!mkdtemp(tmpl)) return *error = "mkdtemp: " + std::string(strerror(errno)), false;
    dir = tmpl;
    chmod(dir.c_str(), 0755);
    for (const char* sub : {"/munge", "/state", "/spool", "/log"}) mkdir((dir + sub).c_str(), 0755);
    // 2. munge's key and daemon
    std::string key = dir + "/munge/munge.key";
    {
      std::string bytes(1024, '\0');
      std::ifstream r("/dev/urandom", std::ios::binary);
      r.read(&bytes[0], (std::streamsize)bytes.size());
      std::ofstream(key, std::ios::binary) << bytes;
      chmod(key.c_str(), 0400);
    }
    const std::string sock = dir + "/munge/munge.socket";
    Start({kDaemons[0], "--foreground", "--force", "--socket=" + sock, "--key-file=" + key,
           "--log-file=" + dir + "/log/munged.log", "--pid-file=" + dir + "/munge/munged.pid",
           "--seed-file=" + dir + "/munge/munged.seed"},
          dir + "/log/munged.out");
    for (double t0 = Now(); !Exists(sock); usleep(50000))
      if (Now() - t0 > 20) return *error = "munged did not create its socket in 20 s", false;
    // 3. slurm.conf: one node of 4 CPUs, named trellis0, on this host; or
    // each emulated node, of 2 CPUs, at its own address (its slurmd's
    // spool, pid and log named after it)
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    if (char* dot = strchr(host, '.')) *dot = '\0';
    int ctld_port = nodes ? 6817 : FreePort(), d_port = nodes ? 6818 : FreePort();
    if (ctld_port < 0 || d_port < 0 || ctld_port == d_port)
      return *error = "no free loopback port for slurmctld and slurmd", false;
    conf = dir + "/slurm.conf";
    std::ofstream c(conf);
    c << "ClusterName=trellistest\n";
    if (nodes)
      c << "SlurmctldHost=" << Node(0) << "(10.77.0.10)\n";
    else
      c << "SlurmctldHost=" << host << "(127.0.0.1)\n";
    c << "SlurmctldPort=" << ctld_port << "\nSlurmdPort=" << d_port << "\n"
      << "SlurmUser=root\nSlurmdUser=root\n"
      << "AuthType=auth/munge\nCredType=cred/munge\n"
      << "AuthInfo=socket=" << sock << "\n"
      << "StateSaveLocation=" << dir << "/state\n"
      << "SlurmdSpoolDir=" << dir << (nodes ? "/spool/%n\n" : "/spool\n")
      << "SlurmctldPidFile=" << dir << "/slurmctld.pid\n"
      << "SlurmdPidFile=" << dir << (nodes ? "/slurmd.%n.pid\n" : "/slurmd.pid\n")
      << "SlurmctldLogFile=" << dir << "/log/slurmctld.log\n"
      << "SlurmdLogFile=" << dir << (nodes ? "/log/slurmd.%n.log\n" : "/log/slurmd.log\n")
      << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
      << "JobAcctGatherType=jobacct_gather/none\n"
      << "AccountingStorageType=accounting_storage/none\n"
      << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
      << "MpiDefault=pmi2\n"
      // the CPUs as declared, whatever this machine has
      << "SlurmdParameters=config_overrides\nReturnToService=2\n";
    std::string names;
    if (nodes) {
      for (int i = 0; i < nodes; i++) {
        c << "NodeName=" << Node(i) << " NodeAddr=10.77.0." << 10 + i
          << " CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1000 "
             "State=UNKNOWN\n";
        names += (i ? "," : "") + Node(i);
        mkdir((dir + "/spool/" + Node(i)).c_str(), 0755);
      }
    } else {
      c << "NodeName=trellis0 NodeHostname=" << host
        << " NodeAddr=127.0.0.1 CPUs=4 Sockets=1 CoresPerSocket=4 "
           "ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN\n";
      names = "trellis0";
    }
    c << "PartitionName=test Nodes=" << names << " Default=YES MaxTime=INFINITE State=UP\n";
    c.close();
    setenv("SLURM_CONF", conf.c_str(), 1);
    logs.push_back(dir + "/log/slurmctld.log");
    if (!nodes) {
      logs.push_back(dir + "/log/slurmd.log");
      Start({kDaemons[1], "-D", "-f", conf}, dir + "/log/slurmctld.out");
      Start({kDaemons[2], "-D", "-f", conf, "-N", "trellis0"}, dir + "/log/slurmd.out");
    } else {
      // slurmctld in the first node; a slurmd in each, which sees the
      // host's cgroup filesystem again (entering a node gives it a sysfs
      // of its own without it)
      const std::string cluster = Absolute(kCluster);
      Start({cluster, "enter", Node(0), "exec " + std::string(kDaemons[1]) + " -D -f " + conf},
            dir + "/log/slurmctld.out");
      for (int i = 0; i < nodes; i++) {
        logs.push_back(dir + "/log/slurmd." + Node(i) + ".log");
        Start({cluster, "enter", Node(i),
               cluster + " mount-cgroups && exec " + kDaemons[2] + " -D -f " + conf + " -N " +
                   Node(i)},
              dir + "/log/slurmd." + Node(i) + ".out");
      }
    }
    // 4. every node idle, or the daemons' words
    const size_t want = nodes ? (size_t)nodes : 1;
    for (double t0 = Now();; usleep(200000)) {
      RunResult st = RunProcess(Client({"sinfo", "-h", "-N", "-o", "%T"}), {}, 10);
      size_t idle = 0;
      for (size_t at = st.output.find("idle"); at != std::string::npos;
           at = st.output.find("idle", at + 4))
        idle++;
      if (st.status == 0 && idle == want) return true;
      for (pid_t p : daemons)
        if (waitpid(p, nullptr, WNOHANG) == p)
          return *error = "a Slurm daemon exited while starting:\n" + Logs(), false;
      if (Now() - t0 > 40)
        return *error = "the nodes are not idle after 40 s (sinfo: " + st.output + ")\n" + Logs(),
               false;
    }
  }

  void Down() {
    // 1. every job still running (a test that failed mid-way) killed, and
    // gone, before the daemons: its step daemon and ranks are not our
    // children and would outlive them
    if (!conf.empty()) {
      RunProcess(Client({"scancel", "--full", "--signal=KILL", "--partition=test"}), {}, 20);
      RunProcess(Client({"scancel", "--partition=test"}), {}, 20);
      for (double t0 = Now(); Now() - t0 < 30; usleep(200000)) {
        RunResult q =
            RunProcess(Client({"squeue", "-h", "-p", "test", "-t", "RUNNING,COMPLETING"}), {}, 10);
        if (q.status != 0 || q.output.find_first_not_of(" \n") == std::string::npos) break;
      }
    }
    // 2. the daemons and what they started in their groups
    for (auto it = daemons.rbegin(); it != daemons.rend(); ++it) kill(-*it, SIGTERM);
    for (pid_t p : daemons) {
      double t0 = Now();
      while (waitpid(p, nullptr, WNOHANG) == 0) {
        if (Now() - t0 > 10) {
          kill(-p, SIGKILL);
          waitpid(p, nullptr, 0);
          break;
        }
        usleep(50000);
      }
    }
    daemons.clear();
    if (nodes) RunProcess({kCluster, "down"}, {}, 60, true);
    if (!dir.empty() && !getenv("TRELLIS_KEEP_SLURM")) RunProcess({"rm", "-rf", dir});
  }
};

// A job directory's checkpoint of `step`.
std::string Ckpt(const std::string& dir, int step) {
  char name[32];
  snprintf(name, sizeof name, "/ckpt/step_%06d.ckpt", step);
  return dir + name;
}

Cluster* g_cluster = nullptr;
std::string g_error;

// The tests' helpers; each fixture below brings its cluster up for its
// tests (the suites run one after the other) and takes it down.
class SlurmBase : public testing::Test {
 protected:
  static void UpCluster(int nodes) {
    g_cluster = new Cluster;
    g_cluster->nodes = nodes;
    g_cluster->prefix = "tlsl";
    g_error.clear();
    if (!g_cluster->Up(&g_error) && g_error.empty() && g_cluster->why_not.empty())
      g_error = "the cluster did not start";
  }
  static void DownCluster() {
    g_cluster->Down();
    delete g_cluster;
    g_cluster = nullptr;
  }
  void SetUp() override {
    if (!g_cluster->why_not.empty()) GTEST_SKIP() << "Slurm: " << g_cluster->why_not;
    ASSERT_TRUE(g_error.empty()) << g_error;
  }

  // A directory for one job's files, with its config: a 2-layer GPT on
  // dp 2 x pp 2 over a token file of its own, train.steps = `steps`,
  // checkpoints in dir/ckpt resumed from the latest.
  static std::string Job(const std::string& name, int steps) {
    std::string dir = g_cluster->dir + "/" + name;
    mkdir(dir.c_str(), 0755);
    std::string text = dir + "/text.txt", tokens = dir + "/tokens.bin";
    std::ofstream(text) << std::string(20000, 'a') << "the quick brown fox jumps\n";
    RunResult d = RunProcess({kTrellis, "data", text, tokens});
    EXPECT_EQ(d.status, 0) << d.output;
    std::ofstream(dir + "/config.json")
        << R"({"model": {"n_layers": 2, "n_heads": 2, "n_embd": 16, "max_seq_len": 16},
  "mesh": {"dp": 2, "pp": 2}, "schedule": {"kind": "1f1b", "micro_batches": 2},
  "train": {"steps": )"
        << steps << R"(, "batch_size": 4, "seq_len": 16, "sample_tokens": 0, "warmup_steps": 2},
  "device": {"threads": 1}, "data": {"train": ")"
        << tokens << R"("},
  "checkpoint": {"dir": ")"
        << dir << R"(/ckpt", "resume": "latest"}})";
    return dir;
  }

  // sbatch OPTS train.sbatch config.json ARGS in dir; the job's id. On
  // emulated nodes MPI's bytes go through shared memory inside a node and
  // over TCP between them (UCX held to those, as tools/cluster.sh does for
  // hydra) and each rank says where it runs.
  static std::string Submit(const std::string& dir, const std::vector<std::string>& args,
                            const std::string& out, const std::vector<std::string>& opts = {}) {
    std::vector<std::string> argv = {"sbatch", "--parsable", "--chdir=" + dir,
                                     "--output=" + dir + "/" + out};
    argv.insert(argv.end(), opts.begin(), opts.end());
    argv.push_back(Absolute(kScript));
    argv.push_back("config.json");
    argv.insert(argv.end(), args.begin(), args.end());
    std::map<std::string, std::string> env = {{"TRELLIS", Absolute(kTrellis)}};
    if (g_cluster->nodes)
      env.insert({{"UCX_TLS", "sm,tcp,self"},
                  {"TRELLIS_LOG_LEVEL", "debug"},
                  {"TRELLIS_LOG_RANKS", "all"}});
    RunResult r = RunProcess(g_cluster->Client(argv), env, 30, true);
    EXPECT_EQ(r.status, 0) << r.output;
    std::string id = r.output.substr(0, r.output.find_first_of(";\n"));
    EXPECT_FALSE(id.empty()) << r.output;
    return id;
  }

  // The job's "JobState ExitCode" once it has ended ("" after timeout_s).
  static std::string WaitEnd(const std::string& id, double timeout_s) {
    for (double t0 = Now(); Now() - t0 < timeout_s; usleep(200000)) {
      RunResult r = RunProcess(g_cluster->Client({"scontrol", "-o", "show", "job", id}), {}, 10);
      auto field = [&](const std::string& k) {
        size_t at = r.output.find(" " + k + "=");
        if (at == std::string::npos) return std::string();
        at += k.size() + 2;
        return r.output.substr(at, r.output.find(' ', at) - at);
      };
      std::string state = field("JobState");
      if (state.empty() || state == "PENDING" || state == "RUNNING" || state == "CONFIGURING" ||
          state == "COMPLETING")
        continue;
      return state + " " + field("ExitCode");
    }
    return "";
  }

  // Preemption, with sbatch options `opts` (see the tests below).
  static void PreemptedAndResubmitted(const std::vector<std::string>& opts) {
    std::string cut = Job("preempted", 5000);
    std::string id = Submit(cut, {}, "first.out", opts);
    ASSERT_FALSE(id.empty());
    ASSERT_TRUE(WaitFor(cut + "/first.out", "step    3/5000", 60))
        << ReadFile(cut + "/first.out") << g_cluster->Logs();
    RunResult c = RunProcess(g_cluster->Client({"scancel", "--signal=TERM", id}), {}, 30);
    ASSERT_EQ(c.status, 0) << c.output;
    EXPECT_EQ(WaitEnd(id, 60), "COMPLETED 0:0") << ReadFile(cut + "/first.out");
    std::string first = ReadFile(cut + "/first.out");
    const char* said = "SIGTERM: stopped after step ";
    size_t at = first.find(said);
    ASSERT_NE(at, std::string::npos) << first;
    EXPECT_EQ(CountOf(first, said), 1) << first;
    int k = atoi(first.c_str() + at + strlen(said));
    ASSERT_GE(k, 3) << first;
    ASSERT_LT(k, 4990) << first;
    ASSERT_TRUE(Exists(Ckpt(cut, k))) << first;
    // the last step printed is the one saved
    char line[32];
    snprintf(line, sizeof line, "step %4d/5000", k + 1);
    EXPECT_EQ(first.find(line), std::string::npos) << first;
    std::printf("scancel --signal=TERM: job %s stopped after step %d\n", id.c_str(), k);

    // resubmitted: goes on from step k
    const std::string stop = std::to_string(k + 3);
    std::string again = Submit(cut, {"--steps", stop}, "second.out", opts);
    ASSERT_FALSE(again.empty());
    EXPECT_EQ(WaitEnd(again, 60), "COMPLETED 0:0") << ReadFile(cut + "/second.out");
    std::string second = ReadFile(cut + "/second.out");
    EXPECT_NE(second.find("at step " + std::to_string(k) + "\n"), std::string::npos) << second;
    snprintf(line, sizeof line, "step %4d/5000", k);
    EXPECT_EQ(second.find(line), std::string::npos) << "step " << k << " ran again\n" << second;
    ASSERT_TRUE(Exists(Ckpt(cut, k + 3))) << second;

    // the run never preempted, stopped at the same step
    std::string whole = Job("unpreempted", 5000);
    std::string ref = Submit(whole, {"--steps", stop}, "job.out", opts);
    ASSERT_FALSE(ref.empty());
    EXPECT_EQ(WaitEnd(ref, 60), "COMPLETED 0:0") << ReadFile(whole + "/job.out");
    std::string a = ReadFile(Ckpt(whole, k + 3)), b = ReadFile(Ckpt(cut, k + 3));
    ASSERT_GT(a.size(), 1024u);
    EXPECT_TRUE(a == b) << "the preempted and resubmitted run is not the uninterrupted run";
  }

  // Waits until `path` holds `text`.
  static bool WaitFor(const std::string& path, const std::string& text, double timeout_s) {
    for (double t0 = Now(); Now() - t0 < timeout_s; usleep(20000))
      if (ReadFile(path).find(text) != std::string::npos) return true;
    return false;
  }
};

class Slurm : public SlurmBase {
 protected:
  static void SetUpTestSuite() { UpCluster(0); }
  static void TearDownTestSuite() { DownCluster(); }
};

class SlurmTwoNodes : public SlurmBase {
 protected:
  static void SetUpTestSuite() { UpCluster(2); }
  static void TearDownTestSuite() { DownCluster(); }
};

}  // namespace

// The script as shipped, submitted with sbatch: trellis sees the
// allocation, starts its 4 ranks with srun (MPICH over Slurm's PMI-2) and
// trains to the end; the job ends COMPLETED, exit code 0.
TEST_F(Slurm, TheBatchScriptTrainsFourRanksToTheEnd) {
  std::string dir = Job("whole", 12);
  std::string id = Submit(dir, {}, "job.out");
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(WaitEnd(id, 60), "COMPLETED 0:0") << ReadFile(dir + "/job.out");
  std::string out = ReadFile(dir + "/job.out");
  EXPECT_NE(out.find("4 tasks"), std::string::npos) << out;
  EXPECT_NE(out.find("starting 4 ranks: srun --ntasks=4 "), std::string::npos) << out;
  EXPECT_NE(out.find("4 ranks (dp 2, tp 1, pp 2)"), std::string::npos) << out;
  EXPECT_NE(out.find("step 12/12"), std::string::npos) << out;
  EXPECT_NE(out.find("done: 12 steps"), std::string::npos) << out;
  EXPECT_TRUE(Exists(Ckpt(dir, 12))) << out;
}

// Preemption: `scancel --signal=TERM` reaches the job step's tasks (the
// ranks). Every rank finishes the step in progress, the checkpoint is
// written, the job ends COMPLETED with exit code 0. The script submitted
// again goes on from that checkpoint ("latest"), and at step K+3 its
// checkpoint is byte for byte the one a run never preempted writes there.
TEST_F(Slurm, PreemptedWithScancelAndResubmittedIsTheUninterruptedRun) {
  PreemptedAndResubmitted({});
}

// Across two hosts: a slurmd on each emulated node; `sbatch --nodes=2`
// places two ranks on each (as each rank says), trains to the end, and a
// job preempted and resubmitted there ends on the uninterrupted run.
TEST_F(SlurmTwoNodes, TheBatchScriptTrainsAcrossTwoNodes) {
  std::string dir = Job("whole", 12);
  std::string id = Submit(dir, {}, "job.out", {"--nodes=2", "--ntasks-per-node=2"});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(WaitEnd(id, 90), "COMPLETED 0:0") << ReadFile(dir + "/job.out") << g_cluster->Logs();
  std::string out = ReadFile(dir + "/job.out");
  EXPECT_NE(out.find("starting 4 ranks: srun --ntasks=4 "), std::string::npos) << out;
  EXPECT_NE(out.find("done: 12 steps"), std::string::npos) << out;
  const std::string n0 = g_cluster->Node(0), n1 = g_cluster->Node(1);
  const std::string want[4][2] = {{"0", n0}, {"1", n0}, {"2", n1}, {"3", n1}};
  for (const auto& w : want)
    EXPECT_NE(out.find("rank " + w[0] + " on " + w[1] + ": "), std::string::npos)
        << "rank " << w[0] << " should run on " << w[1] << "\n"
        << out;
  EXPECT_TRUE(Exists(Ckpt(dir, 12))) << out;
}

TEST_F(SlurmTwoNodes, PreemptedAndResubmittedAcrossTwoNodesIsTheUninterruptedRun) {
  PreemptedAndResubmitted({"--nodes=2", "--ntasks-per-node=2"});
}
