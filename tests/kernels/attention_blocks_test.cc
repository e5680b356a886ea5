// Attention over a split sequence: the blocks context parallelism's ring
// computes (kernels/ops.h, struct tl_attention_shape's block fields) give
// the whole sequence's attention. The sequence is cut in 2·cp chunks; rank
// i holds chunks i and 2·cp − 1 − i (the load-balanced causal split) and
// meets every rank's key/value chunks in ring order. Its forward merges
// each block into out and lse; its backward adds each block's share into
// dq, dk, dv. On the CPU, and on a GPU where one exists (skipped, saying
// why, where none does).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/alloc.h"
#include "core/rng.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"

namespace {

struct Case {
  int b, t, nh, nkv, hs, cp;
};

// Device copies of host vectors, and back.
struct Dev {
  tl_backend* be;
  std::vector<tl_buffer*> bufs;
  float* put(const std::vector<float>& h) {
    tl_buffer* b = nullptr;
    EXPECT_EQ(tl_buffer_create(be->device, h.size() * sizeof(float), &b), TL_OK);
    EXPECT_EQ(tl_memcpy(be->device, b->data, tl_cpu(), h.data(), h.size() * sizeof(float)), TL_OK);
    bufs.push_back(b);
    return static_cast<float*>(b->data);
  }
  std::vector<float> get(const float* d, size_t n) {
    std::vector<float> h(n);
    EXPECT_EQ(be->ops->synchronize(be->ctx), TL_OK);
    EXPECT_EQ(tl_memcpy(tl_cpu(), h.data(), be->device, d, n * sizeof(float)), TL_OK);
    return h;
  }
  ~Dev() {
    for (tl_buffer* b : bufs) tl_buffer_destroy(b);
  }
};

std::vector<float> Random(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  tl_rng_normal(seed, 0, 0, n, 0.0f, 1.0f, v.data());
  return v;
}

double MaxRel(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1e-3;
  for (float x : b) scale = std::fmax(scale, std::fabs(x));
  for (size_t i = 0; i < a.size(); i++) worst = std::fmax(worst, std::fabs(a[i] - b[i]) / scale);
  return worst;
}

// Rank r's rows (chunks r and 2·cp − 1 − r of each sequence) of x, whose
// rows hold `w` floats: its local layout (b, 2h rows).
std::vector<float> Local(const std::vector<float>& x, const Case& c, int r, int w) {
  const int h = c.t / (2 * c.cp), mine[2] = {r, 2 * c.cp - 1 - r};
  std::vector<float> out((size_t)c.b * 2 * h * w);
  for (int b = 0; b < c.b; b++)
    for (int j = 0; j < 2; j++)
      for (int i = 0; i < h * w; i++)
        out[((size_t)b * 2 + j) * h * w + i] = x[((size_t)b * c.t + (size_t)mine[j] * h) * w + i];
  return out;
}

// The same for lse (b, nh, t): rank r's positions of each (b, head).
std::vector<float> LocalLse(const std::vector<float>& x, const Case& c, int r) {
  const int h = c.t / (2 * c.cp), mine[2] = {r, 2 * c.cp - 1 - r};
  std::vector<float> out((size_t)c.b * c.nh * 2 * h);
  for (int bh = 0; bh < c.b * c.nh; bh++)
    for (int j = 0; j < 2; j++)
      for (int i = 0; i < h; i++)
        out[((size_t)bh * 2 + j) * h + i] = x[(size_t)bh * c.t + (size_t)mine[j] * h + i];
  return out;
}

// The whole sequence's forward and backward, then every rank's blocks: each
// rank's out, lse and dq must be its rows of the whole's, and dk, dv summed
// over the ranks the whole's.
void Check(tl_backend* be, const Case& c, double tol) {
  const int C = c.nh * c.hs, KV = c.nkv * c.hs, h = c.t / (2 * c.cp);
  ASSERT_EQ(c.t % (2 * c.cp), 0);
  const size_t nq = (size_t)c.b * c.t * C, nkv = (size_t)c.b * c.t * KV,
               nl = (size_t)c.b * c.nh * c.t;
  const std::vector<float> q = Random(nq, 1), k = Random(nkv, 2), v = Random(nkv, 3),
                           dy = Random(nq, 4);
  Dev d{be, {}};
  float *Q = d.put(q), *K = d.put(k), *V = d.put(v), *DY = d.put(dy);
  float *O = d.put(std::vector<float>(nq)), *L = d.put(std::vector<float>(nl));
  float *DQ = d.put(std::vector<float>(nq)), *DK = d.put(std::vector<float>(nkv)),
        *DV = d.put(std::vector<float>(nkv));
  tl_attention_shape whole{};
  whole.b = c.b, whole.t = c.t, whole.nh = c.nh, whole.nkv = c.nkv, whole.hs = c.hs;
  whole.ldq = C, whole.ldkv = KV;
  ASSERT_EQ(be->ops->attention_forward(be->ctx, O, L, Q, K, V, &whole), TL_OK);
  ASSERT_EQ(be->ops->attention_backward(be->ctx, DQ, DK, DV, DY, Q, K, V, O, L, &whole), TL_OK);
  const std::vector<float> o = d.get(O, nq), l = d.get(L, nl), dq = d.get(DQ, nq),
                           dk = d.get(DK, nkv), dv = d.get(DV, nkv);
  // dk and dv of every rank's blocks, summed in the whole's layout (the
  // ring carries each block's share home)
  float *BDK = d.put(std::vector<float>(nkv)), *BDV = d.put(std::vector<float>(nkv));
  const size_t lq = (size_t)c.b * 2 * h * C, ll = (size_t)c.b * c.nh * 2 * h;
  for (int r = 0; r < c.cp; r++) {
    const int mine[2] = {r, 2 * c.cp - 1 - r};
    float *LQ = d.put(Local(q, c, r, C)), *LDY = d.put(Local(dy, c, r, C));
    float *LO = d.put(std::vector<float>(lq)), *LL = d.put(std::vector<float>(ll, -INFINITY)),
          *LDQ = d.put(std::vector<float>(lq));
    for (int pass = 0; pass < 2; pass++)
      for (int s = 0; s < c.cp; s++) {
        const int src = ((r - s) % c.cp + c.cp) % c.cp, theirs[2] = {src, 2 * c.cp - 1 - src};
        for (int qi = 0; qi < 2; qi++)
          for (int ki = 0; ki < 2; ki++) {
            const int qc = mine[qi], kc = theirs[ki];
            if (kc > qc) continue;  // wholly in the query chunk's future
            tl_attention_shape a = whole;
            a.t = a.tk = h;
            a.q_pos = qc * h, a.k_pos = kc * h;
            a.bq = a.bo = (int64_t)2 * h * C;  // local rows
            a.bkv = (int64_t)c.t * KV;         // the whole's rows
            a.ldlse = 2 * h;
            a.merge = true;
            const size_t qo = (size_t)qi * h * C, ko = (size_t)kc * h * KV;
            if (pass == 0)
              ASSERT_EQ(be->ops->attention_forward(be->ctx, LO + qo, LL + (size_t)qi * h, LQ + qo,
                                                   K + ko, V + ko, &a),
                        TL_OK);
            else
              ASSERT_EQ(be->ops->attention_backward(be->ctx, LDQ + qo, BDK + ko, BDV + ko, LDY + qo,
                                                    LQ + qo, K + ko, V + ko, LO + qo,
                                                    LL + (size_t)qi * h, &a),
                        TL_OK);
          }
      }
    EXPECT_LT(MaxRel(d.get(LO, lq), Local(o, c, r, C)), tol) << "out of rank " << r;
    EXPECT_LT(MaxRel(d.get(LL, ll), LocalLse(l, c, r)), tol) << "lse of rank " << r;
    EXPECT_LT(MaxRel(d.get(LDQ, lq), Local(dq, c, r, C)), tol) << "dq of rank " << r;
  }
  EXPECT_LT(MaxRel(d.get(BDK, nkv), dk), tol) << "dk";
  EXPECT_LT(MaxRel(d.get(BDV, nkv), dv), tol) << "dv";
}

const Case kCases[] = {
    {2, 16, 4, 4, 8, 2},    // multi-head, cp 2: chunks of 4
    {2, 64, 4, 2, 16, 4},   // grouped-query, cp 4
    {1, 256, 2, 1, 32, 2},  // multi-query, chunks of 64: several key tiles each
};

TEST(AttentionBlocks, RingOrderGivesTheWholeSequenceOnTheCpu) {
  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK) << tl_last_error();
  for (const Case& c : kCases) Check(be, c, 2e-5);
  tl_backend_destroy(be);
}

TEST(AttentionBlocks, RingOrderGivesTheWholeSequenceOnTheGpu) {
  const char* why = nullptr;
  if (tl_cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cuda(0), &be), TL_OK) << tl_last_error();
  for (const Case& c : kCases) Check(be, c, 2e-5);
  tl_backend_destroy(be);
}

}  // namespace
