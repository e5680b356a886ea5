// trellis plan --calibrate: this machine measured into a cluster spec the
// planner loads and plans with; --device cuda without a GPU says why.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

extern "C" {
#include "kernels/backend.h"
#include "planner/cluster.h"
}

#include "tests/planner/plan_cli.h"

namespace {

// The cores this test may run on (its affinity), counted here apart from
// trellis's own count.
int Cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

}  // namespace

TEST(PlanCli, CalibrateMeasuresThisMachineIntoALoadableClusterSpec) {
  std::string out = TempPath("calibrated.json");
  PlanRun r = Plan("--calibrate " + out + " --ranks 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("calibrated 2 ranks"), std::string::npos) << r.output;
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load(out.c_str(), &c), TL_OK) << tl_last_error();
  EXPECT_EQ(tl_cluster_devices(&c), 2);
  EXPECT_EQ(c.device, TL_DEVICE_CPU);
  EXPECT_GT(c.peak_fp32, 1e9);  // a CPU core's sgemm: tens of GFLOP/s
  EXPECT_GT(c.intra.bandwidth, 1e6);
  EXPECT_GT(c.intra.latency, 0);
  // one node: its ranks' link is the only one measured
  EXPECT_EQ(c.nodes, 1);
  EXPECT_EQ(c.devices_per_node, 2);
  EXPECT_EQ(c.inter.bandwidth, c.intra.bandwidth);
  EXPECT_EQ(c.inter.latency, c.intra.latency);
  // the matmul's rate over a grid of shapes, its best the peak; attention
  // and the element-wise ops as fractions of it
  ASSERT_EQ(c.gemm.n_m, 4);
  ASSERT_EQ(c.gemm.n_k, 4);
  EXPECT_EQ(c.gemm.m[0], 32);
  EXPECT_EQ(c.gemm.k[3], 2048);
  double best = 0;
  for (int i = 0; i < 64; i++) best = std::max(best, c.gemm.eff[i]);
  EXPECT_NEAR(best, 1.0, 1e-3);
  EXPECT_GT(c.attention_efficiency, 0);
  EXPECT_LE(c.attention_efficiency, 1);
  // attention by head dimension (8 to 64) and sequence length (64 to 1024)
  ASSERT_EQ(c.attention.n_m, 4);
  ASSERT_EQ(c.attention.n_n, 3);
  EXPECT_EQ(c.attention.m[0], 8);
  EXPECT_EQ(c.attention.n[2], 1024);
  for (int i = 0; i < 12; i++) {
    EXPECT_GT(c.attention.eff[i], 1e-6) << i;
    EXPECT_LE(c.attention.eff[i], 1) << i;
  }
  EXPECT_EQ(c.allocator_overhead, 0);
  // the optimizer's memory traffic: AdamW's bytes a second, every rank at
  // once (a CPU core moves GB/s; no machine here moves a TB/s a rank)
  EXPECT_GT(c.memory_bandwidth, 1e8);
  EXPECT_LT(c.memory_bandwidth, 1e12);
  // the all-gather's, reduce-scatter's and a send's bus bandwidth, as shares
  // of the all-reduce's, written (not the parser's default). A share may
  // round to 1 when the machine is busy enough that every collective takes
  // the same few scheduler slices, so what is asserted is a sanity range: a
  // share outside it is a unit or a ratio taken upside down (bytes a second
  // where a share belongs, 0 where nothing was measured), not a slow link
  std::ifstream spec(out);
  const std::string text((std::istreambuf_iterator<char>(spec)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"collective_bandwidth\": {\"all_gather\": "), std::string::npos) << text;
  for (double share : {c.bw_all_gather, c.bw_reduce_scatter, c.bw_send_recv}) {
    EXPECT_GT(share, 0.01);
    EXPECT_LT(share, 100);
  }
  // the cores the node's ranks share
  EXPECT_EQ(c.cores_per_node, Cores());
  EXPECT_EQ(c.rated_ranks_per_node, 2);
  // a core (or more) a rank: no sharing measured
  if (Cores() >= 2) {
    EXPECT_EQ(c.n_shared_speed, 0);
  }
  EXPECT_GT(c.efficiency, 0);
  EXPECT_LE(c.efficiency, 1);
  // and the planner plans with it
  EXPECT_EQ(Plan(std::string("--model ") + kSmall + " --cluster " + out + " --top 1").status, 0);
}

// More ranks than cores: how fast one of 1, 2, ... computing ranks runs
// while the others wait on a receive, against all computing, one figure a
// count, the last 1 (the rates measured), which the planner reads. The job
// is held to one core (its affinity, as a Slurm step's --cpus-per-task or
// taskset leaves it), so two ranks share it on a machine of any size.
TEST(PlanCli, CalibrateOnMoreRanksThanCoresMeasuresTheSharedSpeed) {
  const int cores = 1, ranks = 2;
  std::string out = TempPath("shared.json");
  PlanRun r = Shell("taskset -c 0 launcher/trellis plan --calibrate " + out + " --ranks 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("2 ranks on 1 core: one computing alone runs x"), std::string::npos)
      << r.output;
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load(out.c_str(), &c), TL_OK) << tl_last_error();
  EXPECT_EQ(c.cores_per_node, cores);
  ASSERT_EQ(c.n_shared_speed, ranks);
  EXPECT_EQ(c.shared_speed[ranks - 1], 1);
  // a rank alone: about ranks / cores times as fast (2 here), but tests
  // running beside this one on a busy machine can take it below 1; a sanity
  // range, as the speed is a ratio of two rates measured side by side: out
  // of it, the ratio is inverted or a rate is missing
  EXPECT_GT(c.shared_speed[0], 0.2);
  EXPECT_LT(c.shared_speed[0], 4.0 * ranks);
  EXPECT_EQ(Plan(std::string("--model ") + kSmall + " --cluster " + out + " --top 1").status, 0);
}

// A job across nodes measures each link on its own: inside a node over the
// node's ranks, between nodes over the rails (rank i of every node), every
// group of a kind at once. Two nodes of two ranks are made on this machine
// by hydra's fork launcher, which starts every rank here but keeps each
// named host a node of its own (MPI_COMM_TYPE_SHARED splits by them).
TEST(PlanCli, CalibrateAcrossNodesMeasuresEachLink) {
  std::string out = TempPath("calibrated_nodes.json");
  const std::string job = "TRELLIS_NUM_THREADS=1 mpiexec -launcher fork ";
  PlanRun r = Shell(job + "-hosts nodeA,nodeB -ppn 2 -n 4 launcher/trellis plan --calibrate " +
                    out + " --ranks 4");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("calibrated 4 ranks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 nodes of 2: all-reduce"), std::string::npos) << r.output;
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load(out.c_str(), &c), TL_OK) << tl_last_error();
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.devices_per_node, 2);
  EXPECT_GT(c.intra.bandwidth, 1e6);
  EXPECT_GT(c.inter.bandwidth, 1e6);
  EXPECT_GT(c.inter.latency, 0);
  // two measurements, not one figure written twice
  EXPECT_FALSE(c.intra.bandwidth == c.inter.bandwidth && c.intra.latency == c.inter.latency)
      << c.intra.bandwidth << " " << c.intra.latency;
  std::ifstream f(out);
  std::string spec((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(spec.find("intra_node: all-reduce over each node's ranks"), std::string::npos);
  EXPECT_NE(spec.find("inter_node: all-reduce over each rail"), std::string::npos);
  // the memory assumed is the machine's half shared by its node's ranks
  const double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  EXPECT_NEAR(c.device_memory_bytes, ram / 4, 1.0);

  // nodes of unlike sizes: said once, by rank 0, and nothing written
  std::string uneven = TempPath("calibrated_uneven.json");
  std::remove(uneven.c_str());
  r = Shell(job + "-hosts nodeA:1,nodeB:2 -n 3 launcher/trellis plan --calibrate " + uneven +
            " --ranks 3");
  EXPECT_NE(r.status, 0) << r.output;
  const std::string said = "the job's 2 nodes run 1 to 2 ranks each";
  size_t at = r.output.find(said);
  EXPECT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(said, at + 1), std::string::npos) << "said once: " << r.output;
  std::ifstream g(uneven);
  EXPECT_FALSE(g.good()) << "nothing written";

  // --hosts names where --calibrate measures, with the job's ranks
  r = Plan("--calibrate " + uneven + " --hosts nodeA,nodeB");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--hosts and --hostfile need --ranks N"), std::string::npos) << r.output;
  r = Plan(std::string("--model ") + kSmall + " --cluster " + kThisMachine + " --hosts nodeA");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--hosts and --hostfile are --calibrate's"), std::string::npos)
      << r.output;
}

// --device cuda measures the GPUs; without one it says why before any rank
// starts and writes nothing.
// Rates measured with other than the trainer's automatic threads (cores /
// ranks) say nothing of how the ranks share the cores: no cores_per_node,
// and the comment says why.
TEST(PlanCli, CalibrateWithOtherThreadsWritesNoCores) {
  std::string out = TempPath("calibrated_threads.json");
  const int cores = Cores();
  PlanRun r = Shell("TRELLIS_NUM_THREADS=" + std::to_string(cores + 1) +
                    " launcher/trellis plan --calibrate " + out + " --ranks 1");
  ASSERT_EQ(r.status, 0) << r.output;
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load(out.c_str(), &c), TL_OK) << tl_last_error();
  EXPECT_EQ(c.cores_per_node, 0);
  std::ifstream f(out);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("No cores_per_node: the ranks ran " + std::to_string(cores + 1) +
                      " threads each, not the automatic " + std::to_string(cores)),
            std::string::npos)
      << text;
}

// --device's other mistakes, GPU or not
TEST(PlanCli, CalibrateRefusesAnUnknownDeviceAndDeviceWithoutCalibrate) {
  PlanRun r = Plan("--calibrate " + TempPath("calibrated_tpu.json") + " --device tpu");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--device tpu: expected cpu or cuda"), std::string::npos) << r.output;
  r = Plan(std::string("--model ") + kSmall + " --cluster " + kThisMachine + " --device cuda");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--device is --calibrate's"), std::string::npos) << r.output;
}

TEST(PlanCli, CalibrateOnCudaWithoutAGpuSaysWhy) {
  const char* why = nullptr;
  if (tl_cuda_device_count(&why) > 0) GTEST_SKIP() << "this machine has a GPU (gpu_check.sh)";
  std::string out = TempPath("calibrated_cuda.json");
  std::remove(out.c_str());
  PlanRun r = Plan("--calibrate " + out + " --device cuda");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--device cuda: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(why), std::string::npos) << r.output;
  std::ifstream f(out);
  EXPECT_FALSE(f.good()) << "nothing written";
}
