// Philox-4x32-10 known answers and the slice-equals-whole property.
#include "core/rng.h"

#include <gtest/gtest.h>
#include <string.h>

#include <cmath>
#include <vector>

TEST(Rng, PhiloxMatchesPublishedKnownAnswers) {
  // Random123's kat_vectors for philox4x32 with 10 rounds.
  struct {
    uint32_t ctr[4], key[2], want[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (auto& k : kat) {
    uint32_t out[4];
    tl_philox4x32_10(k.ctr, k.key, out);
    for (int i = 0; i < 4; i++) EXPECT_EQ(out[i], k.want[i]) << "word " << i;
  }
}

static bool same_bits(const float* a, const float* b, size_t n) {
  return memcmp(a, b, n * 4) == 0;
}

TEST(Rng, AnySliceEqualsTheMatchingPartOfTheWholeTensorBitForBit) {
  const size_t n = 1001;  // odd, so slices start and end mid-block
  std::vector<float> whole_u(n), whole_n(n);
  tl_rng_uniform(42, 7, 0, n, -1.0f, 1.0f, whole_u.data());
  tl_rng_normal(42, 7, 0, n, 0.0f, 0.02f, whole_n.data());
  for (size_t start : {0, 1, 2, 3, 5, 333, 998}) {
    for (size_t len : {1, 2, 3, 7, 64}) {
      if (start + len > n) continue;
      std::vector<float> u(len), g(len);
      tl_rng_uniform(42, 7, start, len, -1.0f, 1.0f, u.data());
      tl_rng_normal(42, 7, start, len, 0.0f, 0.02f, g.data());
      EXPECT_TRUE(same_bits(u.data(), whole_u.data() + start, len)) << start << "+" << len;
      EXPECT_TRUE(same_bits(g.data(), whole_n.data() + start, len)) << start << "+" << len;
    }
  }
}

TEST(Rng, TwoDimensionalShardsReassembleTheFullMatrix) {
  // A (6, 10) matrix split as tensor parallelism would: 2 column shards x 3 row shards.
  const int rows = 6, cols = 10;
  std::vector<float> full(rows * cols), rebuilt(rows * cols);
  tl_rng_normal_2d(9, 3, cols, 0, rows, 0, cols, 0.0f, 1.0f, full.data());
  for (int r0 = 0; r0 < rows; r0 += 2)
    for (int c0 = 0; c0 < cols; c0 += 5) {
      std::vector<float> shard(2 * 5);
      tl_rng_normal_2d(9, 3, cols, r0, 2, c0, 5, 0.0f, 1.0f, shard.data());
      for (int r = 0; r < 2; r++)
        for (int c = 0; c < 5; c++) rebuilt[(r0 + r) * cols + c0 + c] = shard[r * 5 + c];
    }
  EXPECT_TRUE(same_bits(full.data(), rebuilt.data(), full.size()));
}

TEST(Rng, KeysSeparateParametersAndSeeds) {
  std::vector<float> a(16), b(16), c(16);
  tl_rng_normal(1, 0, 0, 16, 0, 1, a.data());
  tl_rng_normal(1, 1, 0, 16, 0, 1, b.data());
  tl_rng_normal(2, 0, 0, 16, 0, 1, c.data());
  EXPECT_FALSE(same_bits(a.data(), b.data(), 16));
  EXPECT_FALSE(same_bits(a.data(), c.data(), 16));
}

TEST(Rng, DrawsHaveTheRequestedDistribution) {
  const size_t n = 200000;
  std::vector<float> u(n), g(n);
  tl_rng_uniform(5, 0, 0, n, 2.0f, 4.0f, u.data());
  tl_rng_normal(5, 0, 0, n, 1.0f, 0.5f, g.data());
  double su = 0, sg = 0, sg2 = 0;
  float umin = 10, umax = -10;
  for (size_t i = 0; i < n; i++) {
    su += u[i], sg += g[i], sg2 += (double)g[i] * g[i];
    umin = std::fmin(umin, u[i]), umax = std::fmax(umax, u[i]);
    ASSERT_TRUE(std::isfinite(g[i]));
  }
  EXPECT_GE(umin, 2.0f);
  EXPECT_LT(umax, 4.0f);
  EXPECT_NEAR(su / n, 3.0, 0.01);
  double mean = sg / n, var = sg2 / n - mean * mean;
  EXPECT_NEAR(mean, 1.0, 0.01);
  EXPECT_NEAR(std::sqrt(var), 0.5, 0.01);
}
