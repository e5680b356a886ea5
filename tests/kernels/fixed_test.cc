// The deterministic mode's exact sums (kernels/ops.h fixed_add,
// fixed_to_float, sumsq_fixed) on the CPU backend: summing the same floats
// split and ordered any way gives the same bits, which float addition does
// not; values round to the fixed-point unit; out-of-range values are
// refused with the element.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"

namespace {

class Fixed : public testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(tl_backend_create(tl_cpu(), &be_), TL_OK) << tl_last_error(); }
  void TearDown() override { tl_backend_destroy(be_); }
  const tl_kernel_ops* ops() const { return be_->ops; }
  tl_backend* be_ = nullptr;
};

// Terms of very different sizes, as a gradient's contributions are.
std::vector<std::vector<float>> Terms(int parts, int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<std::vector<float>> t(parts, std::vector<float>(n));
  for (int p = 0; p < parts; p++)
    for (int i = 0; i < n; i++) t[p][i] = d(rng) * std::ldexp(1.0f, (int)(rng() % 40) - 30);
  return t;
}

TEST_F(Fixed, SumsInAnyOrderGiveTheSameBits) {
  const int parts = 8, n = 1000;
  auto terms = Terms(parts, n, 3);
  std::vector<int> order(parts);
  for (int p = 0; p < parts; p++) order[p] = p;
  std::vector<float> first, first_float;
  int float_orders_differ = 0;
  for (int trial = 0; trial < 6; trial++) {
    std::vector<int64_t> acc(n, 0);
    std::vector<float> plain(n, 0.0f);
    for (int p : order) {
      std::vector<float> x = terms[p];
      for (int i = 0; i < n; i++) plain[i] += x[i];
      ASSERT_EQ(ops()->fixed_add(be_->ctx, acc.data(), x.data(), n), TL_OK) << tl_last_error();
      for (int i = 0; i < n; i++) ASSERT_EQ(x[i], 0.0f) << "fixed_add leaves zeros";
    }
    std::vector<float> out(n);
    ASSERT_EQ(ops()->fixed_to_float(be_->ctx, out.data(), acc.data(), n), TL_OK);
    if (trial == 0) {
      first = out, first_float = plain;
    } else {
      EXPECT_EQ(memcmp(first.data(), out.data(), sizeof(float) * n), 0) << "order " << trial;
      float_orders_differ += memcmp(first_float.data(), plain.data(), sizeof(float) * n) != 0;
    }
    std::next_permutation(order.begin(), order.end());
    std::reverse(order.begin() + trial % parts, order.end());
  }
  EXPECT_GT(float_orders_differ, 0) << "float sums in other orders differ (the test can fail)";
  // and the fixed-point sum is the exact sum, rounded to the unit
  for (int i = 0; i < n; i++) {
    double exact = 0;
    for (int p = 0; p < parts; p++) exact += (double)terms[p][i];
    EXPECT_NEAR(first[i], exact, std::fabs(exact) * 1e-6 + std::ldexp(1.0, -TL_FIXED_SHIFT + 3));
  }
}

TEST_F(Fixed, SumOfSquaresIsTheSameForEverySplit) {
  auto x = Terms(1, 100003, 5)[0];
  int64_t whole[2], part[2];
  ASSERT_EQ(ops()->sumsq_fixed(be_->ctx, whole, x.data(), (int64_t)x.size()), TL_OK);
  __int128 w = (__int128)(((unsigned __int128)(uint64_t)whole[0] << 64) | (uint64_t)whole[1]);
  for (int cut : {1, 777, 50000, 99999}) {
    __int128 s = 0;
    ASSERT_EQ(ops()->sumsq_fixed(be_->ctx, part, x.data(), cut), TL_OK);
    s += (__int128)(((unsigned __int128)(uint64_t)part[0] << 64) | (uint64_t)part[1]);
    ASSERT_EQ(ops()->sumsq_fixed(be_->ctx, part, x.data() + cut, (int64_t)x.size() - cut), TL_OK);
    s += (__int128)(((unsigned __int128)(uint64_t)part[0] << 64) | (uint64_t)part[1]);
    EXPECT_TRUE(s == w) << "split at " << cut;
  }
  double exact = 0;
  for (float v : x) exact += (double)v * v;
  EXPECT_NEAR(std::ldexp((double)w, -TL_FIXED_SQ_SHIFT), exact, exact * 1e-12);
}

TEST_F(Fixed, OutOfRangeIsRefusedWithTheElement) {
  std::vector<float> x = {1.0f, std::ldexp(1.0f, 62 - TL_FIXED_SHIFT), 2.0f};
  std::vector<int64_t> acc(3, 0);
  EXPECT_EQ(ops()->fixed_add(be_->ctx, acc.data(), x.data(), 3), TL_ERR_INVALID);
  EXPECT_NE(std::string(tl_last_error()).find("element 1"), std::string::npos) << tl_last_error();
  x[1] = NAN;
  EXPECT_EQ(ops()->fixed_add(be_->ctx, acc.data(), x.data(), 3), TL_ERR_INVALID);
  // a running sum past int64, and a sum over ranks past the range, are refused too
  std::vector<float> big = {std::ldexp(1.0f, 61 - TL_FIXED_SHIFT)};
  std::vector<int64_t> one = {INT64_MAX - 5};
  EXPECT_EQ(ops()->fixed_add(be_->ctx, one.data(), big.data(), 1), TL_ERR_INVALID);
  std::vector<float> out(1);
  one[0] = ((int64_t)1 << 62) + 1;
  EXPECT_EQ(ops()->fixed_to_float(be_->ctx, out.data(), one.data(), 1), TL_ERR_INVALID);
  one[0] = (int64_t)1 << 40;
  EXPECT_EQ(ops()->fixed_to_float(be_->ctx, out.data(), one.data(), 1), TL_OK);
  EXPECT_EQ(out[0], std::ldexp(1.0f, 40 - TL_FIXED_SHIFT));
}

}  // namespace
