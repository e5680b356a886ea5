// A rank's start-up on 4 ranks: coordinates, node-local rank, groups,
// device and threads from the config; the job's size checked against the
// mesh; CUDA refused with the reason where there is no GPU.
#include "launcher/job/worker.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "core/env.h"
#include "kernels/backend.h"

namespace {

// examples/four_device.json's mesh: dp 2, pp 2, pipeline innermost.
struct tl_config FourDevice() {
  struct tl_config c;
  EXPECT_EQ(tl_config_parse(R"({"model": {"kind": "mlp", "mlp_sizes": [16, 32, 4], "vocab_size": 4},
                                "mesh": {"dp": 2, "pp": 2, "order": ["pp", "dp", "tp"]}})",
                            "four_device", &c),
            TL_OK)
      << tl_last_error();
  return c;
}

}  // namespace

TEST(Worker, ComesUpOnTheFourDeviceMeshWithItsGroups) {
  struct tl_config cfg = FourDevice();
  struct tl_worker w;
  ASSERT_EQ(tl_worker_init(&cfg, &w), TL_OK) << tl_last_error();
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_EQ(w.rank, rank);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_FALSE(w.started_mpi);  // the test's main() started it
  // pipeline innermost: rank = dp_i * 2 + pp_i
  EXPECT_EQ(w.coord[TL_AXIS_PP], rank % 2);
  EXPECT_EQ(w.coord[TL_AXIS_DP], rank / 2);
  EXPECT_EQ(w.coord[TL_AXIS_TP], 0);
  EXPECT_EQ(w.local_size, 4);  // one node
  EXPECT_GE(w.local_rank, 0);
  EXPECT_LT(w.local_rank, 4);
  EXPECT_EQ(w.device.type, TL_DEVICE_CPU);
  EXPECT_GE(w.threads, 1);
  EXPECT_EQ(tl_env()->num_threads, w.threads);
  for (int a = 0; a < TL_N_AXES; a++) {
    EXPECT_EQ(w.groups[a], w.host_groups[a]);  // CPU: one set of groups
    EXPECT_EQ(tl_group_rank(w.groups[a]), w.coord[a]);
  }
  // The dp all-reduce pairs are {0, 2} and {1, 3}.
  float x = (float)rank;
  ASSERT_EQ(tl_group_all_reduce(w.groups[TL_AXIS_DP], &x, &x, 1, TL_F32, TL_REDUCE_SUM, nullptr),
            TL_OK);
  EXPECT_EQ(x, rank % 2 == 0 ? 2.0f : 4.0f);
  tl_worker_finalize(&w);
  EXPECT_EQ(w.world, nullptr);
  int finalized = 1;
  MPI_Finalized(&finalized);
  EXPECT_FALSE(finalized);  // not ours to finalise
}

TEST(Worker, ThreadsComeFromTheConfigWhenItNamesThem) {
  struct tl_config cfg = FourDevice();
  cfg.device.threads = 3;
  struct tl_worker w;
  ASSERT_EQ(tl_worker_init(&cfg, &w), TL_OK) << tl_last_error();
  EXPECT_EQ(w.threads, 3);
  EXPECT_EQ(tl_env()->num_threads, 3);
  tl_worker_finalize(&w);
}

TEST(Worker, AJobOfTheWrongSizeIsRefusedWithBothSizes) {
  struct tl_config cfg = FourDevice();
  cfg.mesh.dp = 1;
  struct tl_worker w;
  EXPECT_EQ(tl_worker_init(&cfg, &w), TL_ERR_CONFIG);
  EXPECT_NE(std::string(tl_last_error()).find("= 2 ranks, but this job has 4 ranks"),
            std::string::npos)
      << tl_last_error();
  EXPECT_EQ(w.world, nullptr);
}

TEST(Worker, CudaWithoutEnoughGpusIsRefusedWithTheReason) {
  const char* why = nullptr;
  int gpus = tl_cuda_device_count(&why);
  if (gpus >= 4) GTEST_SKIP() << "this node has a GPU per rank";
  struct tl_config cfg = FourDevice();
  cfg.device.type = TL_DEVICE_CUDA;
  struct tl_worker w;
  EXPECT_EQ(tl_worker_init(&cfg, &w), TL_ERR_NO_DEVICE);
  std::string msg = tl_last_error();
  if (gpus == 0) {
    EXPECT_NE(msg.find(std::string("device.type is \"cuda\" but ") + why), std::string::npos)
        << msg;
  }
  EXPECT_EQ(w.world, nullptr);
}

// One node of four ranks: the node's group holds them all, each rail (rank
// i of every node) one.
TEST(Worker, NodeGroupsOfOneNode) {
  struct tl_config cfg = FourDevice();
  struct tl_worker w;
  ASSERT_EQ(tl_worker_init(&cfg, &w), TL_OK) << tl_last_error();
  struct tl_node_groups g;
  ASSERT_EQ(tl_worker_node_groups(&w, &g), TL_OK) << tl_last_error();
  EXPECT_EQ(g.nodes, 1);
  EXPECT_EQ(g.per_node, 4);
  EXPECT_EQ(tl_group_size(g.node), 4);
  EXPECT_EQ(tl_group_size(g.rail), 1);
  EXPECT_EQ(g.node, g.host_node);  // CPU: MPI groups
  float x = 1;
  ASSERT_EQ(tl_group_all_reduce(g.node, &x, &x, 1, TL_F32, TL_REDUCE_SUM, nullptr), TL_OK);
  EXPECT_EQ(x, 4.0f);
  tl_worker_node_groups_destroy(&g);
  EXPECT_EQ(g.node, nullptr);
  tl_worker_finalize(&w);
}
