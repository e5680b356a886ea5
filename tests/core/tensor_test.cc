// Tensors as views into counted buffers; dtype and device names.
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/alloc.h"

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
  tl_alloc_reset_peak(cpu);
  EXPECT_EQ(tl_alloc_stats_get(cpu).peak_bytes, s0.live_bytes);
}

TEST(Alloc, BuffersStartZeroed) {
  tl_buffer* b = nullptr;
  ASSERT_EQ(tl_buffer_create(tl_cpu(), 256, &b), TL_OK);
  for (int i = 0; i < 256; i++) EXPECT_EQ(((unsigned char*)b->data)[i], 0);
  tl_buffer_destroy(b);
}

TEST(Alloc, UnregisteredDeviceFailsWithAMessage) {
  tl_buffer* b = (tl_buffer*)0x1;
  EXPECT_EQ(tl_buffer_create(tl_cuda(3), 16, &b), TL_ERR_NO_DEVICE);
  EXPECT_EQ(b, nullptr);
  EXPECT_NE(std::string(tl_last_error()).find("cuda:3"), std::string::npos);
}

TEST(Tensor, ViewsShareTheFlatBuffer) {
  // Two parameters in one flat buffer, as the optimizer sees them.
  tl_buffer* flat = nullptr;
  ASSERT_EQ(tl_buffer_create(tl_cpu(), (6 + 4) * sizeof(float), &flat), TL_OK);
  tl_tensor w, bias;
  ASSERT_EQ(tl_tensor_view_2d(flat, 0, TL_F32, 2, 3, &w), TL_OK);
  ASSERT_EQ(tl_tensor_view_1d(flat, 6 * sizeof(float), TL_F32, 4, &bias), TL_OK);
  ((float*)bias.data)[0] = 5.0f;
  EXPECT_EQ(((float*)flat->data)[6], 5.0f);
  EXPECT_EQ(tl_tensor_numel(&w), 6);
  EXPECT_EQ(tl_tensor_nbytes(&bias), 16u);
  char buf[64];
  EXPECT_STREQ(tl_tensor_describe(&w, buf, sizeof buf), "f32[2,3]@cpu");

  tl_tensor row;
  ASSERT_EQ(tl_tensor_slice_rows(&w, 1, 1, &row), TL_OK);
  EXPECT_EQ(row.data, (float*)flat->data + 3);
  int64_t shape[1] = {6};
  tl_tensor flatw;
  ASSERT_EQ(tl_tensor_reshape(&w, 1, shape, &flatw), TL_OK);
  EXPECT_EQ(flatw.shape[0], 6);
  tl_buffer_destroy(flat);
}

TEST(Tensor, BadViewsAreRefusedWithTheReason) {
  tl_buffer* b = nullptr;
  ASSERT_EQ(tl_buffer_create(tl_cpu(), 64, &b), TL_OK);
  tl_tensor t;
  EXPECT_EQ(tl_tensor_view_2d(b, 0, TL_F32, 4, 5, &t), TL_ERR_INVALID);  // 80 bytes > 64
  EXPECT_NE(std::string(tl_last_error()).find("runs past the 64-byte buffer"), std::string::npos);
  EXPECT_EQ(tl_tensor_view_1d(b, 2, TL_F32, 1, &t), TL_ERR_INVALID);  // misaligned
  EXPECT_EQ(tl_tensor_view_1d(b, 0, TL_F32, 0, &t), TL_ERR_INVALID);  // empty dimension
  int64_t five[5] = {1, 1, 1, 1, 1};
  EXPECT_EQ(tl_tensor_view(b, 0, TL_F32, 5, five, &t), TL_ERR_INVALID);
  ASSERT_EQ(tl_tensor_view_2d(b, 0, TL_F32, 4, 4, &t), TL_OK);
  tl_tensor s;
  EXPECT_EQ(tl_tensor_slice_rows(&t, 3, 2, &s), TL_ERR_INVALID);
  int64_t shape[1] = {15};
  EXPECT_EQ(tl_tensor_reshape(&t, 1, shape, &s), TL_ERR_INVALID);
  tl_buffer_destroy(b);
}

TEST(Tensor, AllocOwnsAndFreesItsBuffer) {
  tl_alloc_stats s0 = tl_alloc_stats_get(tl_cpu());
  int64_t shape[3] = {2, 3, 4};
  tl_tensor t;
  ASSERT_EQ(tl_tensor_alloc(tl_cpu(), TL_BF16, 3, shape, &t), TL_OK);
  EXPECT_EQ(tl_alloc_stats_get(tl_cpu()).live_bytes - s0.live_bytes, 48);
  tl_tensor_free(&t);
  EXPECT_EQ(tl_alloc_stats_get(tl_cpu()).live_bytes, s0.live_bytes);
  EXPECT_EQ(t.data, nullptr);
}

TEST(Dtype, NamesSizesAndParsing) {
  tl_dtype d;
  ASSERT_EQ(tl_dtype_parse("bf16", &d), TL_OK);
  EXPECT_EQ(d, TL_BF16);
  EXPECT_EQ(tl_dtype_size(TL_U16), 2u);
  EXPECT_EQ(tl_dtype_size(TL_I32), 4u);
  EXPECT_EQ(tl_dtype_parse("float", &d), TL_ERR_INVALID);
  EXPECT_NE(std::string(tl_last_error()).find("'float'"), std::string::npos);
}

TEST(Dtype, HalfConversionsRoundToNearestEven) {
  EXPECT_EQ(tl_f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(tl_bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(tl_f32_to_bf16(1.00390625f), 0x3f80);
  EXPECT_EQ(tl_f32_to_bf16(1.01171875f), 0x3f82);  // 1 + 3*2^-8 ties up to even
  EXPECT_EQ(tl_f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(tl_f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(tl_f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(tl_f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(tl_f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_TRUE(std::isnan(tl_f16_to_f32(tl_f32_to_f16(NAN))));
  for (float x : {0.1f, -3.75f, 1234.5f, 6.1e-5f}) {
    EXPECT_NEAR(tl_f16_to_f32(tl_f32_to_f16(x)), x, std::fabs(x) * 1e-3);
    EXPECT_NEAR(tl_bf16_to_f32(tl_f32_to_bf16(x)), x, std::fabs(x) * 8e-3);
  }
}

TEST(Device, ParseAndName) {
  tl_device d;
  char buf[16];
  ASSERT_EQ(tl_device_parse("cuda:2", &d), TL_OK);
  EXPECT_STREQ(tl_device_name(d, buf, sizeof buf), "cuda:2");
  ASSERT_EQ(tl_device_parse("cpu", &d), TL_OK);
  EXPECT_EQ(d.type, TL_DEVICE_CPU);
  EXPECT_EQ(tl_device_parse("gpu0", &d), TL_ERR_INVALID);
  EXPECT_EQ(tl_device_parse("cuda:99", &d), TL_ERR_INVALID);
}
