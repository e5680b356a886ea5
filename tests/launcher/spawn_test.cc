// The launcher's decisions, without running anything: which launcher
// started this process, which options belong to the launcher, and the
// command that starts a job (mpiexec, or srun inside a Slurm allocation).
#include "launcher/job/spawn.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>

#include <string>
#include <vector>

namespace {

const char* const kVars[] = {
    "PMI_RANK",      "PMI_SIZE",     "PMIX_RANK",    "OMPI_COMM_WORLD_SIZE", "SLURM_JOB_ID",
    "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_PROCID", "TRELLIS_SPAWNED",      "SLURM_NTASKS"};

class Spawn : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
  }
  // A file of `text` in the test's temporary directory.
  std::string File(const std::string& name, const std::string& text) {
    const char* dir = getenv("TEST_TMPDIR");
    std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
    FILE* f = fopen(path.c_str(), "w");
    if (f) fputs(text.c_str(), f), fclose(f);
    return path;
  }
  // The command for `args` (args[0] is the program) as one string, or the error.
  std::string Command(std::vector<std::string> args, int world) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    char** cmd = nullptr;
    if (tl_launch_command((int)argv.size(), argv.data(), world, "/opt/trellis", &cmd) != TL_OK)
      return std::string("error: ") + tl_last_error();
    std::string s;
    for (char** p = cmd; *p; p++) s += (s.empty() ? "" : " ") + std::string(*p);
    tl_launch_command_free(cmd);
    return s;
  }
};

}  // namespace

TEST_F(Spawn, LauncherOptionsAreRecognisedWithTheirValues) {
  std::vector<std::string> a = {"--hosts", "h1,h2"};
  std::vector<char*> v = {a[0].data(), a[1].data()};
  EXPECT_EQ(tl_launch_option_args(2, v.data()), 2);
  EXPECT_EQ(tl_launch_option_args(1, v.data()), 1);  // value missing
  std::string eq = "--hostfile=hosts.txt", other = "--hostsfile", plain = "train";
  char* e[] = {eq.data()};
  char* o[] = {other.data()};
  char* p[] = {plain.data()};
  EXPECT_EQ(tl_launch_option_args(1, e), 1);
  EXPECT_EQ(tl_launch_option_args(1, o), 0);
  EXPECT_EQ(tl_launch_option_args(1, p), 0);
  EXPECT_EQ(tl_launch_option_args(0, p), 0);
}

TEST_F(Spawn, StartedByHandNoLauncherIsDetected) {
  char buf[128];
  EXPECT_EQ(tl_launch_detected(buf, sizeof buf), nullptr);
}

TEST_F(Spawn, EachLauncherLeavesAMarkThatIsRecognised) {
  char buf[128];
  setenv("PMI_RANK", "3", 1);
  ASSERT_NE(tl_launch_detected(buf, sizeof buf), nullptr);
  EXPECT_STREQ(buf, "mpiexec (PMI_RANK=3)");
  unsetenv("PMI_RANK");
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_NE(tl_launch_detected(buf, sizeof buf), nullptr);
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("TRELLIS_SPAWNED", "1", 1);
  EXPECT_NE(tl_launch_detected(buf, sizeof buf), nullptr);
  unsetenv("TRELLIS_SPAWNED");
  // srun's step: a worker. The batch script's step id is not a job step.
  setenv("SLURM_JOB_ID", "77", 1);
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_STEP_ID", "4294967291", 1);
  EXPECT_EQ(tl_launch_detected(buf, sizeof buf), nullptr);
  setenv("SLURM_STEP_ID", "0", 1);
  ASSERT_NE(tl_launch_detected(buf, sizeof buf), nullptr);
  EXPECT_STREQ(buf, "srun (SLURM_STEP_ID=0)");
}

TEST_F(Spawn, ByHandTheCommandIsMpiexecWithTheSameArguments) {
  EXPECT_EQ(Command({"trellis", "train", "cfg.json", "--steps", "5"}, 4),
            "mpiexec -n 4 /opt/trellis train cfg.json --steps 5");
}

TEST_F(Spawn, HostsGoToMpiexecAndAreRemovedFromTheRanksArguments) {
  EXPECT_EQ(Command({"trellis", "train", "--hosts", "a:8,b:8", "cfg.json"}, 16),
            "mpiexec -n 16 -hosts a:8,b:8 /opt/trellis train cfg.json");
  const std::string nodes = File("nodes", "a:1\nb:1\n");
  EXPECT_EQ(Command({"trellis", "train", "cfg.json", "--hostfile=" + nodes}, 2),
            "mpiexec -n 2 -hostfile " + nodes + " /opt/trellis train cfg.json");
}

// A hostfile without slot counts is filled host by host as --hosts is
// (comments and blank lines are no hosts); one with them is left to hydra;
// one that cannot be read, or names no host, is refused by name.
TEST_F(Spawn, AHostfileWithoutSlotCountsIsFilledInTurn) {
  const std::string bare = File("bare", "# the nodes\na\n\n  b  # the second\n");
  EXPECT_EQ(Command({"trellis", "train", "--hostfile", bare, "cfg.json"}, 16),
            "mpiexec -n 16 -hostfile " + bare + " -ppn 8 /opt/trellis train cfg.json");
  const std::string some = File("some", "a:8\nb\n");
  EXPECT_EQ(Command({"trellis", "train", "--hostfile", some, "cfg.json"}, 16),
            "mpiexec -n 16 -hostfile " + some + " /opt/trellis train cfg.json");
  EXPECT_NE(Command({"trellis", "train", "--hostfile", "/no/such/hosts", "cfg.json"}, 2)
                .find("--hostfile /no/such/hosts: cannot open: No such file or directory"),
            std::string::npos);
  const std::string empty = File("empty", "# none yet\n\n");
  EXPECT_NE(Command({"trellis", "train", "--hostfile", empty, "cfg.json"}, 2)
                .find("--hostfile " + empty + ": names no host"),
            std::string::npos);
}

// Hosts named without slot counts: hydra would deal the ranks out one a
// host in turn (tensor-parallel neighbours on different nodes); each host
// is filled in turn instead.
TEST_F(Spawn, HostsWithoutSlotCountsAreFilledInTurn) {
  EXPECT_EQ(Command({"trellis", "train", "--hosts", "a,b", "cfg.json"}, 16),
            "mpiexec -n 16 -hosts a,b -ppn 8 /opt/trellis train cfg.json");
  EXPECT_EQ(Command({"trellis", "train", "--hosts", "a,b,c", "cfg.json"}, 4),
            "mpiexec -n 4 -hosts a,b,c -ppn 2 /opt/trellis train cfg.json");
  EXPECT_EQ(Command({"trellis", "train", "--hosts=a", "cfg.json"}, 2),
            "mpiexec -n 2 -hosts a -ppn 2 /opt/trellis train cfg.json");
  EXPECT_EQ(Command({"trellis", "train", "--hosts", "a,,b,", "cfg.json"}, 4),
            "mpiexec -n 4 -hosts a,,b, -ppn 2 /opt/trellis train cfg.json");
}

TEST_F(Spawn, BadLauncherOptionsAreNamed) {
  EXPECT_EQ(Command({"trellis", "train", "cfg.json", "--hosts"}, 2).rfind("error: ", 0), 0u);
  EXPECT_NE(Command({"trellis", "train", "cfg.json", "--hosts"}, 2).find("--hosts needs a value"),
            std::string::npos);
  EXPECT_NE(Command({"trellis", "--hostfile=", "x"}, 2).find("--hostfile needs a value"),
            std::string::npos);
  EXPECT_NE(Command({"trellis", "--hosts", "a", "--hostfile", "f"}, 2).find("both given"),
            std::string::npos);
}

TEST_F(Spawn, InsideASlurmAllocationTheCommandIsSrun) {
  setenv("SLURM_JOB_ID", "1234", 1);
  EXPECT_EQ(Command({"trellis", "train", "cfg.json"}, 8),
            "srun --ntasks=8 /opt/trellis train cfg.json");
  EXPECT_EQ(Command({"trellis", "train", "cfg.json", "--hosts", "n1,n2"}, 8),
            "srun --ntasks=8 --nodelist=n1,n2 /opt/trellis train cfg.json");
  // an allocation too small for the mesh: said before srun runs
  setenv("SLURM_NTASKS", "4", 1);
  EXPECT_NE(Command({"trellis", "train", "cfg.json"}, 8)
                .find("the Slurm allocation (job 1234) has 4 tasks (SLURM_NTASKS) and the "
                      "config's mesh needs 8 ranks: submit with --ntasks=8"),
            std::string::npos);
  EXPECT_EQ(Command({"trellis", "train", "cfg.json"}, 4),
            "srun --ntasks=4 /opt/trellis train cfg.json");
}

TEST_F(Spawn, UnderALauncherMaybeSpawnLeavesTheCallerToWork) {
  setenv("PMI_RANK", "0", 1);
  std::string a0 = "trellis", a1 = "cfg.json";
  char* argv[] = {a0.data(), a1.data()};
  int status = -1;
  EXPECT_EQ(tl_launch_maybe_spawn(2, argv, 4, &status), 0);
  EXPECT_EQ(status, 0);
  unsetenv("PMI_RANK");
  // By hand, one rank, no hosts: no launcher either.
  EXPECT_EQ(tl_launch_maybe_spawn(2, argv, 1, &status), 0);
}
