// Contiguous min-max partition: the cut that the trainer's pipeline stages
// and the planner's prediction of them share.
#include <gtest/gtest.h>

#include <vector>

#include "core/partition.h"

TEST(Partition, MinimisesTheLargestRunWithTheEndsExtras) {
  std::vector<double> cost = {1, 1, 1, 10};
  std::vector<int> counts(2);
  ASSERT_EQ(tl_partition_minmax(cost.data(), 4, 0, 0, 2, counts.data()), TL_OK);
  EXPECT_EQ(counts, (std::vector<int>{3, 1}));
  // a heavy head on the first run moves layers to the second
  ASSERT_EQ(tl_partition_minmax(cost.data(), 4, 20, 0, 2, counts.data()), TL_OK);
  EXPECT_EQ(counts, (std::vector<int>{1, 3}));
  // even costs, even cut; every run gets at least one item
  std::vector<double> even(8, 1.0);
  std::vector<int> four(4);
  ASSERT_EQ(tl_partition_minmax(even.data(), 8, 0, 0, 4, four.data()), TL_OK);
  EXPECT_EQ(four, (std::vector<int>{2, 2, 2, 2}));
  ASSERT_EQ(tl_partition_minmax(even.data(), 4, 0, 100, 4, four.data()), TL_OK);
  EXPECT_EQ(four, (std::vector<int>{1, 1, 1, 1}));
}

TEST(Partition, MorePartsThanItemsIsRefused) {
  std::vector<double> cost = {1, 1};
  std::vector<int> counts(3);
  EXPECT_EQ(tl_partition_minmax(cost.data(), 2, 0, 0, 3, counts.data()), TL_ERR_INVALID);
  EXPECT_EQ(tl_partition_minmax(cost.data(), 2, 0, 0, 0, counts.data()), TL_ERR_INVALID);
}
