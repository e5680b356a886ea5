// The process-group suite (group_suite.inc) on MPI with NCCL's ordering
// (core/group_emul.h): every result as the MPI backend's, each group's
// operations run one at a time in the order they were issued.
#define TL_TEST_EMUL
#include <unistd.h>

#include "tests/core/group_suite.inc"

namespace {
// Whether `req` completes within about 50 ms of polling.
bool CompletesSoon(tl_group_request* req) {
  bool done = false;
  for (int i = 0; i < 50 && !done; i++) {
    EXPECT_EQ(tl_group_test(req, &done), TL_OK) << tl_last_error();
    if (!done) usleep(1000);
  }
  return done;
}
}  // namespace

// A send ends only once its receive is posted (MPI's would end at once: 4
// bytes go eagerly), and what is issued after an operation waits for it:
// rank 0's send, queued behind a receive that rank 1 answers only later,
// does not start.
TEST(GroupEmul, ASendEndsWhenItsReceiveIsPostedAfterWhatWasIssuedBeforeIt) {
  if (tl_group_size(g_world) < 2) GTEST_SKIP() << "point-to-point needs two ranks";
  const int rank = tl_group_rank(g_world);
  float x = 3, y = 0, z = 5;
  if (rank == 0) {
    tl_group_request* send = nullptr;
    ASSERT_EQ(tl_group_send(g_world, &x, 1, TL_F32, 1, 1, &send), TL_OK);
    EXPECT_FALSE(CompletesSoon(send)) << "a send ended before its receive was posted";
    MPI_Barrier(MPI_COMM_WORLD);  // rank 1 receives after this
    ASSERT_EQ(tl_group_wait(send), TL_OK) << tl_last_error();
    tl_group_request *recv = nullptr, *after = nullptr;
    ASSERT_EQ(tl_group_recv(g_world, &y, 1, TL_F32, 1, 2, &recv), TL_OK);
    ASSERT_EQ(tl_group_send(g_world, &z, 1, TL_F32, 1, 3, &after), TL_OK);
    EXPECT_FALSE(CompletesSoon(after)) << "an operation ran before the one issued ahead of it";
    MPI_Barrier(MPI_COMM_WORLD);  // rank 1 sends, then receives
    ASSERT_EQ(tl_group_wait(recv), TL_OK) << tl_last_error();
    ASSERT_EQ(tl_group_wait(after), TL_OK) << tl_last_error();
    EXPECT_EQ(y, 6);
  } else if (rank == 1) {
    MPI_Barrier(MPI_COMM_WORLD);
    ASSERT_EQ(tl_group_recv(g_world, &y, 1, TL_F32, 0, 1, nullptr), TL_OK);
    MPI_Barrier(MPI_COMM_WORLD);
    y *= 2;
    ASSERT_EQ(tl_group_send(g_world, &y, 1, TL_F32, 0, 2, nullptr), TL_OK);
    ASSERT_EQ(tl_group_recv(g_world, &z, 1, TL_F32, 0, 3, nullptr), TL_OK);
    EXPECT_EQ(z, 5);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}
