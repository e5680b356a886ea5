// The counted allocator (memory_test and --metrics lean on its live and
// peak bytes), the 16-bit float conversions (bf16 training, safetensors'
// BF16 and F16 tensors) against independently stated bit patterns, and
// device names.
#include "core/alloc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "core/device.h"
#include "core/dtype.h"

TEST(Alloc, CountsLiveAndPeakBytesPerDevice) {
  tl_device cpu = tl_cpu();
  tl_alloc_reset_peak(cpu);
  tl_alloc_stats s0 = tl_alloc_stats_get(cpu);
  tl_buffer *a = nullptr, *b = nullptr;
  ASSERT_EQ(tl_buffer_create(cpu, 1000, &a), TL_OK);
  ASSERT_EQ(tl_buffer_create(cpu, 500, &b), TL_OK);
  tl_alloc_stats s1 = tl_alloc_stats_get(cpu);
  EXPECT_EQ(s1.live_bytes - s0.live_bytes, 1500);
  EXPECT_EQ(s1.n_live - s0.n_live, 2);
  tl_buffer_destroy(a);
  tl_alloc_stats s2 = tl_alloc_stats_get(cpu);
  EXPECT_EQ(s2.live_bytes - s0.live_bytes, 500);
  EXPECT_EQ(s2.peak_bytes - s0.live_bytes, 1500);  // the peak remembers
  tl_buffer_destroy(b);
  tl_buffer_destroy(nullptr);
  EXPECT_EQ(tl_alloc_stats_get(cpu).live_bytes, s0.live_bytes);
  tl_alloc_reset_peak(cpu);
  EXPECT_EQ(tl_alloc_stats_get(cpu).peak_bytes, s0.live_bytes);
}

TEST(Alloc, BuffersStartZeroed) {
  tl_buffer* b = nullptr;
  ASSERT_EQ(tl_buffer_create(tl_cpu(), 256, &b), TL_OK);
  for (int i = 0; i < 256; i++) EXPECT_EQ(((unsigned char*)b->data)[i], 0);
  tl_buffer_destroy(b);
}

TEST(Alloc, AnUnregisteredDeviceFailsWithAMessage) {
  tl_buffer* b = (tl_buffer*)0x1;
  EXPECT_EQ(tl_buffer_create(tl_cuda(3), 16, &b), TL_ERR_NO_DEVICE);
  EXPECT_EQ(b, nullptr);
  EXPECT_NE(std::string(tl_last_error()).find("cuda:3"), std::string::npos) << tl_last_error();
}

TEST(Dtype, NamesAndSizes) {
  EXPECT_EQ(tl_dtype_size(TL_F32), 4u);
  EXPECT_EQ(tl_dtype_size(TL_BF16), 2u);
  EXPECT_EQ(tl_dtype_size(TL_F16), 2u);
  EXPECT_EQ(tl_dtype_size(TL_U16), 2u);
  EXPECT_EQ(tl_dtype_size(TL_I32), 4u);
  EXPECT_EQ(tl_dtype_size(TL_I64), 8u);
  EXPECT_STREQ(tl_dtype_name(TL_BF16), "bf16");
  EXPECT_STREQ(tl_dtype_name(TL_F32), "f32");
}

// Bit patterns stated from the formats' definitions, not from the code:
// bf16 is the top half of an IEEE single, rounded to nearest, ties to
// even; f16 is IEEE half (5 exponent bits, bias 15, 10 mantissa bits).
TEST(Dtype, SixteenBitConversionsGiveTheStatedBits) {
  const struct {
    float x;
    uint16_t bf16;
  } bf[] = {
      {1.0f, 0x3f80},        {-2.0f, 0xc000},       {0.0f, 0x0000},
      {-0.0f, 0x8000},       {1.00390625f, 0x3f80},  // 1 + 2^-8: a tie, to the even 1
      {1.01171875f, 0x3f82},                         // 1 + 3 * 2^-8: a tie, to the even up
      {1.0078125f, 0x3f81},                          // 1 + 2^-7: exact
      {3.0e38f, 0x7f62},     {INFINITY, 0x7f80},    {-INFINITY, 0xff80},
      {1.0e-40f, 0x0001},  // a subnormal single: 0x000116c2 -> rounded to 1 ulp of bf16
  };
  for (const auto& c : bf) {
    EXPECT_EQ(tl_f32_to_bf16(c.x), c.bf16) << c.x;
    if (c.x == c.x && c.bf16 != 0x0001) {
      uint32_t bits = (uint32_t)c.bf16 << 16;
      float back;
      memcpy(&back, &bits, 4);
      EXPECT_EQ(tl_bf16_to_f32(c.bf16), back) << c.x;
    }
  }
  EXPECT_TRUE(std::isnan(tl_bf16_to_f32(tl_f32_to_bf16(NAN))));
  const struct {
    float x;
    uint16_t f16;
  } half[] = {
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {0.5f, 0x3800},
      {65504.0f, 0x7bff},
      {65520.0f, 0x7c00},  // past the largest half: infinity
      {1.0e6f, 0x7c00},
      {-1.0e6f, 0xfc00},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {std::ldexp(1.0f, -24), 0x0001},             // the smallest subnormal
      {std::ldexp(1.0f, -14), 0x0400},             // the smallest normal
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},      // a tie, to the even 1
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02},  // a tie, to the even up
      {0.1f, 0x2e66},
  };
  for (const auto& c : half) {
    EXPECT_EQ(tl_f32_to_f16(c.x), c.f16) << c.x;
  }
  EXPECT_EQ(tl_f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(tl_f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(tl_f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(tl_f16_to_f32(0xfc00), -INFINITY);
  EXPECT_EQ(tl_f16_to_f32(0x2e66), 0.0999755859375f);
  EXPECT_TRUE(std::isnan(tl_f16_to_f32(tl_f32_to_f16(NAN))));
}

TEST(Device, ParseAndName) {
  tl_device d;
  char buf[16];
  ASSERT_EQ(tl_device_parse("cuda:2", &d), TL_OK);
  EXPECT_EQ(d.type, TL_DEVICE_CUDA);
  EXPECT_EQ(d.index, 2);
  EXPECT_STREQ(tl_device_name(d, buf, sizeof buf), "cuda:2");
  ASSERT_EQ(tl_device_parse("cuda", &d), TL_OK);
  EXPECT_EQ(d.index, 0);
  ASSERT_EQ(tl_device_parse("cpu", &d), TL_OK);
  EXPECT_EQ(d.type, TL_DEVICE_CPU);
  EXPECT_STREQ(tl_device_name(d, buf, sizeof buf), "cpu");
  EXPECT_NE(tl_device_parse("gpu0", &d), TL_OK);
  EXPECT_NE(tl_device_parse("cuda:-1", &d), TL_OK);
}
