// Jobs started the way people start them: by hand (the program spawns
// mpiexec itself), under mpiexec (each process is a rank), with the wrong
// rank count, without mpiexec on PATH, and with a rank that fails or is
// killed in the middle of a collective — the job must end, non-zero, within
// 30 seconds, never hang. Every rank checks an all-reduce over each of its
// groups (tests/launcher/mesh_job.c).
#include <gtest/gtest.h>

#include <string>

#include "tests/launcher/subprocess.h"

namespace {

const char* kJob = "tests/launcher/mesh_job";

std::string Config(const std::string& json) {
  return WriteTempFile(json);
}

std::string Describe(const RunResult& r) {
  return "exit " + std::to_string(r.status) + " after " + std::to_string(r.seconds) + " s" +
         (r.timed_out ? " (timed out)" : "") + "; output:\n" + r.output;
}

}  // namespace

TEST(Launch, ByHandTheFourDeviceExampleSpawnsItsFourRanks) {
  RunResult r = RunProcess({kJob, "examples/four_device.json"}, {}, 50, true);
  ASSERT_EQ(r.status, 0) << Describe(r);
  EXPECT_EQ(CountOf(r.output, "groups ok"), 4) << r.output;
  EXPECT_NE(r.output.find("starting 4 ranks: mpiexec -n 4 "), std::string::npos) << r.output;
  // pipeline innermost: rank 1 is replica 0's second stage
  EXPECT_NE(r.output.find("rank 1 of 4: dp 0 tp 0 pp 1, local rank"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank 2 of 4: dp 1 tp 0 pp 0"), std::string::npos) << r.output;
}

TEST(Launch, ByHandEightRanksOfAThreeAxisMesh) {
  std::string cfg = Config(R"({"mesh": {"dp": 2, "tp": 2, "pp": 2}, "device": {"threads": 1}})");
  RunResult r = RunProcess({kJob, cfg}, {}, 50, true);
  ASSERT_EQ(r.status, 0) << Describe(r);
  EXPECT_EQ(CountOf(r.output, "groups ok"), 8) << r.output;
  EXPECT_NE(r.output.find("rank 5 of 8: dp 0 tp 1 pp 1"), std::string::npos) << r.output;
  EXPECT_EQ(CountOf(r.output, "cpu, 1 threads"), 8) << r.output;
}

TEST(Launch, UnderMpiexecEveryProcessIsARankAndNothingSpawnsTwice) {
  std::string cfg = Config(R"({"model": {"kind": "mlp", "mlp_sizes": [4, 6, 2], "vocab_size": 2},
                               "mesh": {"tp": 3}})");
  RunResult r = RunProcess({"mpiexec", "-n", "3", kJob, cfg}, {}, 50, true);
  ASSERT_EQ(r.status, 0) << Describe(r);
  EXPECT_EQ(CountOf(r.output, "groups ok"), 3) << r.output;
  EXPECT_EQ(r.output.find("starting"), std::string::npos) << r.output;
  // Threads default to the node's cores divided by its three ranks (at least 1).
  EXPECT_EQ(CountOf(r.output, "local rank"), 3) << r.output;
}

TEST(Launch, TheWrongNumberOfRanksIsRefusedWithBothSizes) {
  std::string cfg = Config(R"({"mesh": {"dp": 2}})");
  RunResult r = RunProcess({"mpiexec", "-n", "3", kJob, cfg}, {}, 30, true);
  EXPECT_NE(r.status, 0) << Describe(r);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.output.find("dp * tp * pp * cp = 2 * 1 * 1 * 1 = 2 ranks, but this job has 3 ranks"),
            std::string::npos)
      << r.output;
}

// A failing rank ends the job: the other ranks, waiting in a collective,
// do not hang. The 45 s timeout is the hang guard (the job normally ends in
// a second or two); how long it takes is not asserted, as no test here
// asserts a wall-clock time.
TEST(Launch, ARankThatFailsEndsTheWholeJob) {
  std::string cfg = Config(R"({"mesh": {"dp": 3}, "train": {"batch_size": 3}})");
  RunResult r = RunProcess({kJob, cfg, "--fail-rank", "1", "--fail-how", "abort"}, {}, 45, true);
  EXPECT_FALSE(r.timed_out) << Describe(r);
  EXPECT_NE(r.status, 0) << Describe(r);
  EXPECT_NE(r.output.find("rank 1 of 3 failed: injected failure"), std::string::npos) << r.output;
}

TEST(Launch, ARankKilledMidCollectiveEndsTheWholeJob) {
  std::string cfg = Config(R"({"mesh": {"dp": 3}, "train": {"batch_size": 3}})");
  RunResult r = RunProcess({kJob, cfg, "--fail-rank", "1", "--fail-how", "kill"}, {}, 45, true);
  EXPECT_FALSE(r.timed_out) << Describe(r);
  EXPECT_NE(r.status, 0) << Describe(r);
}

TEST(Launch, OneRankNeedsNoLauncher) {
  std::string cfg = Config("{}");
  RunResult r = RunProcess({kJob, cfg}, {{"PATH", "/nonexistent"}}, 30, true);
  ASSERT_EQ(r.status, 0) << Describe(r);
  EXPECT_NE(r.output.find("rank 0 of 1: dp 0 tp 0 pp 0"), std::string::npos) << r.output;
}

TEST(Launch, AMissingMpiexecIsReportedNotHidden) {
  RunResult r =
      RunProcess({kJob, "examples/four_device.json"}, {{"PATH", "/nonexistent"}}, 30, true);
  EXPECT_EQ(r.status, 127) << Describe(r);
  EXPECT_NE(r.output.find("cannot run 'mpiexec': No such file or directory"), std::string::npos)
      << r.output;
}

TEST(Launch, HostsAreHandedToMpiexecAndNotToTheRanks) {
  std::string cfg = Config(R"({"mesh": {"pp": 2}})");
  RunResult r = RunProcess({kJob, cfg, "--hosts", "localhost:2"}, {}, 50, true);
  ASSERT_EQ(r.status, 0) << Describe(r);
  EXPECT_NE(r.output.find("mpiexec -n 2 -hosts localhost:2 "), std::string::npos) << r.output;
  EXPECT_EQ(CountOf(r.output, "groups ok"), 2) << r.output;

  std::string hostfile = WriteTempFile("localhost:2\n", ".hosts");
  r = RunProcess({kJob, "--hostfile=" + hostfile, cfg}, {}, 50, true);
  ASSERT_EQ(r.status, 0) << Describe(r);
  EXPECT_NE(r.output.find("-hostfile " + hostfile), std::string::npos) << r.output;
}

// Tensor-parallel neighbours dealt out to different nodes: the job runs and
// rank 0 says so once. Two nodes are made on this machine by hydra's fork
// launcher (each named host a node of its own); without -ppn it deals the
// ranks out one a host in turn, with it fills each host in turn.
TEST(Launch, TensorParallelGroupsAcrossNodesAreSaidOnce) {
  std::string cfg = Config(R"({"mesh": {"dp": 2, "tp": 2}, "device": {"threads": 1}})");
  const std::string warning = "tensor-parallel groups that span nodes";
  RunResult r =
      RunProcess({"mpiexec", "-launcher", "fork", "-hosts", "nodeA,nodeB", "-n", "4", kJob, cfg},
                 {}, 50, true);
  ASSERT_EQ(r.status, 0) << Describe(r);
  EXPECT_EQ(CountOf(r.output, "groups ok"), 4) << r.output;
  EXPECT_EQ(CountOf(r.output, warning), 1) << r.output;
  EXPECT_NE(r.output.find("4 of the job's ranks are in"), std::string::npos) << r.output;
  r = RunProcess(
      {"mpiexec", "-launcher", "fork", "-hosts", "nodeA,nodeB", "-ppn", "2", "-n", "4", kJob, cfg},
      {}, 50, true);
  ASSERT_EQ(r.status, 0) << Describe(r);
  EXPECT_EQ(CountOf(r.output, warning), 0) << r.output;
}

TEST(Launch, ALauncherOptionWithoutItsValueIsAUsageError) {
  std::string cfg = Config(R"({"mesh": {"pp": 2}})");
  RunResult r = RunProcess({kJob, cfg, "--hosts"}, {}, 30, true);
  EXPECT_EQ(r.status, 2) << Describe(r);
  EXPECT_NE(r.output.find("--hosts needs a value"), std::string::npos) << r.output;
}
