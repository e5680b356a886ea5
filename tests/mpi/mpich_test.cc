// The MPICH glue itself: ranks start, see each other, and reduce. The mesh
// and process-group tests build on this harness.
#include <gtest/gtest.h>
#include <mpi.h>

TEST(Mpich, EveryRankJoinsTheWorld) {
  int size = 0, rank = -1;
  ASSERT_EQ(MPI_Comm_size(MPI_COMM_WORLD, &size), MPI_SUCCESS);
  ASSERT_EQ(MPI_Comm_rank(MPI_COMM_WORLD, &rank), MPI_SUCCESS);
  EXPECT_EQ(size, 2);
  EXPECT_GE(rank, 0);
  EXPECT_LT(rank, size);
}

TEST(Mpich, AllReduceSumsAcrossRanks) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  float mine[3] = {1.0f * rank, 2.0f, -0.5f * rank}, sum[3];
  ASSERT_EQ(MPI_Allreduce(mine, sum, 3, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_EQ(sum[0], size * (size - 1) / 2.0f);
  EXPECT_EQ(sum[1], 2.0f * size);
  EXPECT_EQ(sum[2], -0.25f * size * (size - 1));
}
