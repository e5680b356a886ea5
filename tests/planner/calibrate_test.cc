// trellis plan --calibrate: this machine measured into a cluster spec the
// planner loads and plans with; --device cuda without a GPU says why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

extern "C" {
#include "kernels/backend.h"
#include "planner/cluster.h"
}

#include "tests/planner/plan_cli.h"

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
  // the all-gather's, reduce-scatter's and a send's bus bandwidth, as shares
  // of the all-reduce's (measured: not the parser's default of exactly 1)
  for (double share : {c.bw_all_gather, c.bw_reduce_scatter, c.bw_send_recv}) {
    EXPECT_GT(share, 0);
    EXPECT_NE(share, 1);
  }
  EXPECT_GT(c.efficiency, 0);
  EXPECT_LE(c.efficiency, 1);
  // and the planner plans with it
  EXPECT_EQ(Plan(std::string("--model ") + kSmall + " --cluster " + out + " --top 1").status, 0);
}

// --device cuda measures the GPUs; without one it says why before any rank
// starts and writes nothing.
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
  r = Plan("--calibrate " + out + " --device tpu");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--device tpu: expected cpu or cuda"), std::string::npos) << r.output;
  r = Plan(std::string("--model ") + kSmall + " --cluster " + kThisMachine + " --device cuda");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--device is --calibrate's"), std::string::npos) << r.output;
}
