// ZeRO-3's bf16 gathers land a unit's image past the upper half of its
// fp32 slot; tl_dp_widen_in_place widens it there. Every kernel it runs
// must read nothing it writes (a GPU's threads run in any order): checked
// on a backend whose from_bf16 refuses overlapping ranges, and the values
// against the bf16 rounding of the originals, for every n up to 300.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

extern "C" {
#include "core/dtype.h"
#include "dp/buckets.h"
#include "kernels/backend.h"
}

namespace {

const tl_kernel_ops* g_cpu = nullptr;
int g_overlaps = 0, g_calls = 0;

tl_status checked_from_bf16(void* ctx, float* out, const uint16_t* x, int64_t n) {
  const char *o0 = (const char*)out, *o1 = (const char*)(out + n);
  const char *x0 = (const char*)x, *x1 = (const char*)(x + n);
  if (n > 0 && o0 < x1 && x0 < o1) g_overlaps++;
  g_calls++;
  return g_cpu->from_bf16(ctx, out, x, n);
}

}  // namespace

TEST(Widen, InPlaceNeverReadsWhatItWritesAndKeepsEveryValue) {
  tl_backend* cpu = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cpu(), &cpu), TL_OK) << tl_last_error();
  g_cpu = cpu->ops;
  tl_kernel_ops ops = *cpu->ops;
  ops.from_bf16 = checked_from_bf16;
  tl_backend be = *cpu;
  be.ops = &ops;
  for (int64_t n = 1; n <= 300; n++) {
    std::vector<float> slot(n + 1, -1.0f);
    std::vector<uint16_t> want(n);
    for (int64_t i = 0; i < n; i++) want[i] = tl_f32_to_bf16(1.0f + 0.37f * (float)i);
    // the image one past the upper half, as the gathers write it
    std::memcpy((uint16_t*)slot.data() + n + 1, want.data(), sizeof(uint16_t) * n);
    g_overlaps = g_calls = 0;
    ASSERT_EQ(tl_dp_widen_in_place(&be, slot.data(), n), TL_OK) << tl_last_error();
    EXPECT_EQ(g_overlaps, 0) << "n = " << n;
    EXPECT_LE(g_calls, 2 + 64 - __builtin_clzll((unsigned long long)n)) << "n = " << n;
    for (int64_t i = 0; i < n; i++)
      ASSERT_EQ(slot[i], tl_bf16_to_f32(want[i])) << "n = " << n << ", element " << i;
  }
  tl_backend_destroy(cpu);
}
