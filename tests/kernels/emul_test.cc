// emul_test.cc — emulated GPUs keep CUDA's ordering (kernels/emul/emul.h):
// a kernel runs only when something waits for it, a stream's wait runs the
// queue through that stream's last item and no further, a copy to the host
// waits for everything, copies on the device and zeroing are queued on the
// legacy stream, and a group's operation runs what was issued before it —
// through the last kernel only under TRELLIS_FAULT=copies_unordered, none
// of it under collectives_unordered (emul_test_<fault>).
#include "kernels/emul/emul.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/alloc.h"
#include "core/env.h"
#include "kernels/backend.h"

namespace {

struct Gpu {
  tl_backend* be = nullptr;
  Gpu() { EXPECT_EQ(tl_backend_create(tl_cuda(0), &be), TL_OK) << tl_last_error(); }
  ~Gpu() { tl_backend_destroy(be); }
};

// A zeroed device buffer, its zeros written (they are queued too).
float* Buffer(tl_buffer** b, int n) {
  EXPECT_EQ(tl_buffer_create(tl_cuda(0), sizeof(float) * n, b), TL_OK) << tl_last_error();
  float first;
  EXPECT_EQ(tl_memcpy(tl_cpu(), &first, tl_cuda(0), (*b)->data, sizeof first), TL_OK);
  return static_cast<float*>((*b)->data);
}

// Writes v to the device and waits for it (a copy back to the host waits
// for everything: the first copy is only queued).
void Fill(float* dev, const std::vector<float>& v) {
  ASSERT_EQ(tl_memcpy(tl_cuda(0), dev, tl_cpu(), v.data(), sizeof(float) * v.size()), TL_OK);
  float first;
  ASSERT_EQ(tl_memcpy(tl_cpu(), &first, tl_cuda(0), dev, sizeof first), TL_OK);
  ASSERT_EQ(tl_emul_queued(), 0);
}

}  // namespace

TEST(Emul, ACudaDeviceIsAnEmulatedGpu) {
  ASSERT_TRUE(tl_env()->emulate_cuda) << "run with TRELLIS_EMULATE=cuda (the BUILD target does)";
  EXPECT_EQ(tl_cuda_device_count(nullptr), TL_EMUL_DEVICES);
  Gpu g;
  ASSERT_NE(g.be, nullptr);
  EXPECT_STREQ(g.be->ops->name, "cuda (emulated)");
}

// The device's memory is host memory, so the test reads it directly: what a
// queued kernel writes is not there until a wait runs it.
TEST(Emul, AKernelRunsOnlyWhenSomethingWaitsForIt) {
  Gpu g;
  tl_buffer *bx, *by;
  float* x = Buffer(&bx, 4);
  float* y = Buffer(&by, 4);
  Fill(x, {1, 2, 3, 4});
  ASSERT_EQ(g.be->ops->scale_forward(g.be->ctx, y, x, 2.0f, 4), TL_OK);
  EXPECT_EQ(tl_emul_queued(), 1);
  EXPECT_EQ(y[3], 0.0f);
  ASSERT_EQ(g.be->ops->synchronize(g.be->ctx), TL_OK);
  EXPECT_EQ(tl_emul_queued(), 0);
  EXPECT_EQ(y[3], 8.0f);
  // a copy to the host waits for everything queued
  ASSERT_EQ(g.be->ops->scale_forward(g.be->ctx, y, x, 3.0f, 4), TL_OK);
  float host[4] = {0};
  ASSERT_EQ(tl_memcpy(tl_cpu(), host, tl_cuda(0), y, sizeof host), TL_OK);
  EXPECT_EQ(host[3], 12.0f);
  EXPECT_EQ(tl_emul_queued(), 0);
  tl_buffer_destroy(bx);
  tl_buffer_destroy(by);
}

// Two compute streams: waiting for one runs the queue through its last
// item (and what was queued before it), not the other's later work.
TEST(Emul, AStreamsWaitRunsThroughItsLastItemOnly) {
  Gpu a, b;
  tl_buffer *bx, *by, *bz;
  float* x = Buffer(&bx, 2);
  float* y = Buffer(&by, 2);
  float* z = Buffer(&bz, 2);
  Fill(x, {1, 2});
  ASSERT_EQ(b.be->ops->scale_forward(b.be->ctx, z, x, 5.0f, 2), TL_OK);
  ASSERT_EQ(a.be->ops->scale_forward(a.be->ctx, y, x, 2.0f, 2), TL_OK);
  ASSERT_EQ(b.be->ops->scale_forward(b.be->ctx, z, x, 7.0f, 2), TL_OK);
  ASSERT_EQ(a.be->ops->synchronize(a.be->ctx), TL_OK);
  EXPECT_EQ(y[1], 4.0f);
  EXPECT_EQ(z[1], 10.0f);  // b's first, queued before a's
  EXPECT_EQ(tl_emul_queued(), 1);
  ASSERT_EQ(b.be->ops->synchronize(b.be->ctx), TL_OK);
  EXPECT_EQ(z[1], 14.0f);
  tl_buffer_destroy(bx);
  tl_buffer_destroy(by);
  tl_buffer_destroy(bz);
}

// Kernels take host structs by pointer (the attention's shape): the queue
// keeps a copy, as a launch copies its parameters, so the caller's may
// change or go before the kernel runs.
TEST(Emul, AQueuedKernelKeepsItsHostArguments) {
  Gpu g;
  const int t = 4, hs = 2;  // one sequence, one head
  tl_buffer *bq, *bo, *bl;
  float* q = Buffer(&bq, t * 3 * hs);
  float* out = Buffer(&bo, t * hs);
  float* lse = Buffer(&bl, t);
  std::vector<float> qkv(t * 3 * hs);
  for (size_t i = 0; i < qkv.size(); i++) qkv[i] = 0.1f * static_cast<float>(i % 7);
  Fill(q, qkv);
  float want[t * hs];
  {
    struct tl_attention_shape s = {};
    s.b = 1, s.t = t, s.nh = 1, s.nkv = 1, s.hs = hs, s.ldq = s.ldkv = 3 * hs;
    ASSERT_EQ(g.be->ops->attention_forward(g.be->ctx, out, lse, q, q + hs, q + 2 * hs, &s), TL_OK);
    ASSERT_EQ(tl_memcpy(tl_cpu(), want, tl_cuda(0), out, sizeof want), TL_OK);
    ASSERT_EQ(tl_memzero(tl_cuda(0), out, sizeof want), TL_OK);
    ASSERT_EQ(g.be->ops->attention_forward(g.be->ctx, out, lse, q, q + hs, q + 2 * hs, &s), TL_OK);
    s.t = 1, s.hs = 1;  // the caller's struct changes before the kernel runs
  }
  ASSERT_EQ(g.be->ops->synchronize(g.be->ctx), TL_OK);
  for (int i = 0; i < t * hs; i++) EXPECT_EQ(out[i], want[i]) << i;
  tl_buffer_destroy(bq);
  tl_buffer_destroy(bo);
  tl_buffer_destroy(bl);
}

// Copies on the device and zeroing return at once, queued on the legacy
// stream: a compute stream's wait runs them only up to its own last kernel.
TEST(Emul, CopiesAndZerosAreQueuedOnTheLegacyStream) {
  Gpu g;
  tl_buffer *bx, *by;
  float* x = Buffer(&bx, 2);
  float* y = Buffer(&by, 2);
  Fill(x, {1, 2});
  ASSERT_EQ(g.be->ops->scale_forward(g.be->ctx, y, x, 2.0f, 2), TL_OK);
  ASSERT_EQ(tl_memcpy(tl_cuda(0), x, tl_cuda(0), y, sizeof(float) * 2), TL_OK);
  ASSERT_EQ(tl_memzero(tl_cuda(0), y, sizeof(float) * 2), TL_OK);
  ASSERT_EQ(g.be->ops->synchronize(g.be->ctx), TL_OK);
  EXPECT_EQ(tl_emul_queued(), 2);  // the kernel ran, the copy and the zeros wait
  EXPECT_EQ(y[1], 4.0f);
  EXPECT_EQ(x[1], 2.0f);
  float host[2];
  ASSERT_EQ(tl_memcpy(tl_cpu(), host, tl_cuda(0), x, sizeof host), TL_OK);
  EXPECT_EQ(host[1], 4.0f);
  EXPECT_EQ(y[1], 0.0f);
  tl_buffer_destroy(bx);
  tl_buffer_destroy(by);
}

// A small copy from the host is staged and queued (pinned memory on a GPU):
// the host may change its source at once; a large one waits for the queue
// first, as cudaMemcpy from pageable memory does.
TEST(Emul, ACopyFromTheHostIsStagedAndQueued) {
  Gpu g;
  tl_buffer* bx;
  float* x = Buffer(&bx, 4);
  std::vector<float> src = {1, 2, 3, 4};
  ASSERT_EQ(tl_memcpy(tl_cuda(0), x, tl_cpu(), src.data(), sizeof(float) * 4), TL_OK);
  EXPECT_EQ(tl_emul_queued(), 1);
  src[3] = 99;
  EXPECT_EQ(x[3], 0.0f);
  ASSERT_EQ(g.be->ops->scale_forward(g.be->ctx, x, x, 2.0f, 4), TL_OK);
  ASSERT_EQ(g.be->ops->synchronize(g.be->ctx), TL_OK);
  EXPECT_EQ(x[3], 8.0f);
  tl_buffer_destroy(bx);
  const size_t big = (size_t)1 << 19;  // floats: 2 MiB
  tl_buffer* bb;
  float* b = Buffer(&bb, (int)big);
  std::vector<float> host(big, 1.0f);
  ASSERT_EQ(g.be->ops->scale_forward(g.be->ctx, b, b, 2.0f, (int64_t)big), TL_OK);
  ASSERT_EQ(tl_memcpy(tl_cuda(0), b, tl_cpu(), host.data(), sizeof(float) * big), TL_OK);
  EXPECT_EQ(tl_emul_queued(), 1);  // the kernel ran first; the copy is queued
  ASSERT_EQ(g.be->ops->synchronize(g.be->ctx), TL_OK);
  tl_buffer_destroy(bb);
}

// What a GPU group's operation waits for (core/group_emul.c calls these):
// every item issued before its mark — the CUDA groups' event on the legacy
// stream — and nothing after. The faults narrow it to the kernels, or drop it.
TEST(Emul, AGroupOperationRunsWhatWasIssuedBeforeIt) {
  Gpu g;
  tl_buffer *bx, *by, *bz;
  float* x = Buffer(&bx, 2);
  float* y = Buffer(&by, 2);
  float* z = Buffer(&bz, 2);
  Fill(x, {1, 2});
  ASSERT_EQ(g.be->ops->scale_forward(g.be->ctx, y, x, 2.0f, 2), TL_OK);
  ASSERT_EQ(tl_memcpy(tl_cuda(0), z, tl_cuda(0), x, sizeof(float) * 2), TL_OK);
  const uint64_t mark = tl_device_mark(tl_cuda(0));
  ASSERT_EQ(g.be->ops->scale_forward(g.be->ctx, x, x, 10.0f, 2), TL_OK);
  ASSERT_EQ(tl_device_run_to(tl_cuda(0), mark), TL_OK);
  if (tl_fault_on(TL_FAULT_COLLECTIVES_UNORDERED)) {
    EXPECT_EQ(tl_emul_queued(), 3);
    EXPECT_EQ(y[1], 0.0f);
  } else if (tl_fault_on(TL_FAULT_COPIES_UNORDERED)) {
    EXPECT_EQ(tl_emul_queued(), 2);
    EXPECT_EQ(y[1], 4.0f);
    EXPECT_EQ(z[1], 0.0f);
  } else {
    EXPECT_EQ(tl_emul_queued(), 1);
    EXPECT_EQ(y[1], 4.0f);
    EXPECT_EQ(z[1], 2.0f);
    EXPECT_EQ(x[1], 2.0f);  // the kernel issued after the mark has not run
  }
  ASSERT_EQ(g.be->ops->synchronize(g.be->ctx), TL_OK);
  EXPECT_EQ(x[1], 20.0f);
  EXPECT_EQ(z[1], 2.0f);
  tl_buffer_destroy(bx);
  tl_buffer_destroy(by);
  tl_buffer_destroy(bz);
}
