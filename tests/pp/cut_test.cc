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

namespace {

// The cut as a scan of every k computes it: the definition the bisection
// in pp/cut.c must reproduce, ties and all.
std::vector<int> ScanCut(const std::vector<double>& fwd, double embed, double head, int p) {
  const int L = (int)fwd.size();
  std::vector<double> prefix(L + 1, 0), best((p + 1) * (L + 1), 1e300);
  std::vector<int> cut((p + 1) * (L + 1), 0);
  for (int l = 0; l < L; l++) prefix[l + 1] = prefix[l] + 3.0 * fwd[l];
  best[0] = 0;
  for (int s = 1; s <= p; s++)
    for (int l = s; l <= L - (p - s); l++)
      for (int k = s - 1; k < l; k++) {
        double c = prefix[l] - prefix[k] + (s == 1 ? 3.0 * embed : 0) + (s == p ? 3.0 * head : 0);
        double v = best[(s - 1) * (L + 1) + k] > c ? best[(s - 1) * (L + 1) + k] : c;
        if (v < best[s * (L + 1) + l]) best[s * (L + 1) + l] = v, cut[s * (L + 1) + l] = k;
      }
  std::vector<int> counts(p);
  for (int s = p, l = L; s >= 1; s--) {
    int k = cut[s * (L + 1) + l];
    counts[s - 1] = l - k;
    l = k;
  }
  return counts;
}

}  // namespace

// The bisection gives the scan's cut on every input tried: equal layers
// (a GPT's blocks: every tie), small integers (many ties), zeros, and
// random reals, with and without heavy ends, 1 to all stages.
TEST(Cut, BisectionIsTheScan) {
  unsigned seed = 12345;
  auto rnd = [&seed]() {
    seed = seed * 1103515245u + 12345u;
    return (seed >> 8) & 0xffff;
  };
  int tried = 0;
  for (int trial = 0; trial < 400; trial++) {
    const int L = 1 + (int)(rnd() % 40);
    const int kind = trial % 4;
    std::vector<double> fwd(L);
    for (int l = 0; l < L; l++)
      fwd[l] = kind == 0   ? 7.0
               : kind == 1 ? (double)(rnd() % 4)
               : kind == 2 ? (double)(rnd() % 3 == 0 ? 0 : 1 + rnd() % 5)
                           : (double)rnd() / 977.0;
    double embed = rnd() % 3 == 0 ? 0 : (double)(rnd() % 60);
    double head = rnd() % 3 == 0 ? 0 : (double)(rnd() % 60) + 0.5;
    for (int p = 1; p <= L; p++) {
      std::vector<int> counts(p);
      ASSERT_EQ(tl_pp_cut(fwd.data(), L, embed, head, p, counts.data()), TL_OK);
      ASSERT_EQ(counts, ScanCut(fwd, embed, head, p))
          << "trial " << trial << ": " << L << " layers into " << p;
      tried++;
    }
  }
  EXPECT_GT(tried, 3000);
}
