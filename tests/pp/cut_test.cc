// The balanced contiguous cut that the trainer's pipeline stages and the
// planner's prediction of them share (costs are forward FLOPs, each stage
// paying three times its own: forward and backward).
#include <gtest/gtest.h>

#include <vector>

#include "pp/cut.h"

TEST(Cut, MinimisesTheLargestRunWithTheEndsExtras) {
  std::vector<double> cost = {1, 1, 1, 10};
  std::vector<int> counts(2);
  ASSERT_EQ(tl_pp_cut(cost.data(), 4, 0, 0, 2, counts.data()), TL_OK);
  EXPECT_EQ(counts, (std::vector<int>{3, 1}));
  // a heavy head on the first run moves layers to the second
  ASSERT_EQ(tl_pp_cut(cost.data(), 4, 20, 0, 2, counts.data()), TL_OK);
  EXPECT_EQ(counts, (std::vector<int>{1, 3}));
  // even costs, even cut; every run gets at least one item
  std::vector<double> even(8, 1.0);
  std::vector<int> four(4);
  ASSERT_EQ(tl_pp_cut(even.data(), 8, 0, 0, 4, four.data()), TL_OK);
  EXPECT_EQ(four, (std::vector<int>{2, 2, 2, 2}));
  ASSERT_EQ(tl_pp_cut(even.data(), 4, 0, 100, 4, four.data()), TL_OK);
  EXPECT_EQ(four, (std::vector<int>{1, 1, 1, 1}));
}

TEST(Cut, MorePartsThanItemsIsRefused) {
  std::vector<double> cost = {1, 1};
  std::vector<int> counts(3);
  EXPECT_EQ(tl_pp_cut(cost.data(), 2, 0, 0, 3, counts.data()), TL_ERR_INVALID);
  EXPECT_EQ(tl_pp_cut(cost.data(), 2, 0, 0, 0, counts.data()), TL_ERR_INVALID);
}
