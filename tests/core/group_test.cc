// The process-group suite (group_suite.inc) on the MPI backend, host buffers.
#include <unistd.h>

#include "core/env.h"
#include "tests/core/group_suite.inc"

// How the group waits follows TRELLIS_MPI_WAIT (the BUILD file runs this
// suite with it unset, "yield" and "spin"), and "auto" yields exactly when the
// node's ranks times their threads outnumber its cores.
TEST(GroupMpi, WaitsAsTrellisMpiWaitSays) {
  const char* v = getenv("TRELLIS_MPI_WAIT");
  std::string mode = v && *v ? v : "auto";
  bool want = mode == "yield";
  if (mode == "auto") {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int local = 1;
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = tl_env()->num_threads > 0 ? tl_env()->num_threads
                                            : (int)(cores / local > 0 ? cores / local : 1);
    want = (long)local * threads > cores;
  }
  EXPECT_EQ(tl_group_mpi_yields(g_mpi_world), want) << "TRELLIS_MPI_WAIT=" << mode;
  // groups split from it wait the same way
  tl_group* half = nullptr;
  int size = tl_group_size(g_mpi_world), rank = tl_group_rank(g_mpi_world);
  ASSERT_EQ(tl_group_split(g_mpi_world, rank % 2, rank, "half", &half), TL_OK) << tl_last_error();
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(tl_group_mpi_yields(half), want);
  EXPECT_EQ(tl_group_size(half), size / 2 + (rank % 2 == 0 ? size % 2 : 0));
  tl_group_destroy(half);
}
