// The op suite: every kernel of the CPU backend against its double-precision
// reference and central finite differences; the CUDA backend against the
// reference and against the CPU where a GPU exists (skipped with a message
// where none does); and proof that the suite catches broken gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/alloc.h"
#include "core/dtype.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cuda/cuda.h"
#include "kernels/opcheck.h"

namespace {

std::vector<int> AllCases() {
  std::vector<int> v;
  for (int i = 0; i < tl_opcheck_count(); i++) v.push_back(i);
  return v;
}

std::string CaseName(const testing::TestParamInfo<int>& info) {
  return tl_opcheck_name(info.param);
}

std::string Describe(const tl_opcheck_result& r) {
  char buf[512];
  snprintf(buf, sizeof buf,
           "%s: forward err %.3g (tol %.3g), gradient err %.3g (tol %.3g), worst %s", r.name,
           r.fwd_err, r.fwd_tol, r.grad_err, r.grad_tol, r.worst);
  return buf;
}

class CpuOp : public testing::TestWithParam<int> {
 protected:
  void SetUp() override { ASSERT_EQ(tl_backend_create(tl_cpu(), &be_), TL_OK) << tl_last_error(); }
  void TearDown() override { tl_backend_destroy(be_); }
  tl_backend* be_ = nullptr;
};

TEST_P(CpuOp, MatchesReferenceAndFiniteDifferences) {
  tl_opcheck_result r;
  ASSERT_EQ(tl_opcheck_run(be_, GetParam(), &r), TL_OK) << tl_last_error();
  EXPECT_TRUE(r.passed) << Describe(r);
  EXPECT_LE(r.fwd_err, r.fwd_tol) << Describe(r);
  EXPECT_LE(r.grad_err, r.grad_tol) << Describe(r);
  if (r.grad_tol > 0) {  // every op with a backward had its gradient checked
    EXPECT_GT(r.n_grad_checked, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Suite, CpuOp, testing::ValuesIn(AllCases()), CaseName);

class CudaOp : public testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    const char* why = nullptr;
    if (tl_cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
    ASSERT_EQ(tl_backend_create(tl_cuda(0), &cuda_), TL_OK) << tl_last_error();
    ASSERT_EQ(tl_backend_create(tl_cpu(), &cpu_), TL_OK) << tl_last_error();
  }
  void TearDown() override {
    tl_backend_destroy(cuda_);
    tl_backend_destroy(cpu_);
  }
  tl_backend* cuda_ = nullptr;
  tl_backend* cpu_ = nullptr;
};

TEST_P(CudaOp, MatchesReferenceAndFiniteDifferences) {
  tl_opcheck_result r;
  ASSERT_EQ(tl_opcheck_run(cuda_, GetParam(), &r), TL_OK) << tl_last_error();
  EXPECT_TRUE(r.passed) << Describe(r);
}

TEST_P(CudaOp, MatchesCpu) {
  tl_opcheck_result r;
  ASSERT_EQ(tl_opcheck_compare(cuda_, cpu_, GetParam(), &r), TL_OK) << tl_last_error();
  EXPECT_TRUE(r.passed) << Describe(r);
}

INSTANTIATE_TEST_SUITE_P(Suite, CudaOp, testing::ValuesIn(AllCases()), CaseName);

int CaseIndex(const char* name) {
  for (int i = 0; i < tl_opcheck_count(); i++)
    if (std::string(tl_opcheck_name(i)) == name) return i;
  return -1;
}

// --- The suite must fail on wrong gradients. Each mutant is a plausible bug.

// GELU backward that forgets the derivative of the tanh term.
tl_status GeluBackwardMissingTerm(void*, float* dinp, const float* inp, const float* dout,
                                  int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float x = inp[i];
    float th = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
    dinp[i] += 0.5f * (1.0f + th) * dout[i];
  }
  return TL_OK;
}

// Layernorm backward that drops the mean-of-gradient term.
tl_status LayernormBackwardMissingMean(void* ctx, float* dinp, float* dweight, float* dbias,
                                       const float* dout, const float* inp, const float* weight,
                                       const float* mean, const float* rstd, int n, int c) {
  TL_CHECK(tl_cpu_kernel_ops.layernorm_backward(ctx, nullptr, dweight, dbias, dout, inp, weight,
                                                mean, rstd, n, c));
  for (int i = 0; i < n; i++) {
    float dnn = 0.0f;
    for (int j = 0; j < c; j++)
      dnn += weight[j] * dout[i * c + j] * (inp[i * c + j] - mean[i]) * rstd[i];
    dnn /= c;
    for (int j = 0; j < c; j++) {
      float norm = (inp[i * c + j] - mean[i]) * rstd[i];
      dinp[i * c + j] += (weight[j] * dout[i * c + j] - norm * dnn) * rstd[i];
    }
  }
  return TL_OK;
}

// Residual-add backward that overwrites instead of accumulating.
tl_status AddBackwardOverwrites(void*, float* da, float* db, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; i++) da[i] = db[i] = dout[i];
  return TL_OK;
}

// Matmul backward with the transposes of dB swapped.
tl_status MatmulBackwardWrongTranspose(void* ctx, float* da, float* db, float* dbias,
                                       const float* dout, const float* a, const float* b, int m,
                                       int n, int k, bool ta, bool tb) {
  return tl_cpu_kernel_ops.matmul_backward(ctx, da, db, dbias, dout, a, b, m, n, k, ta, !tb);
}

// RMSNorm backward that forgets rstd's dependence on x (the -x r^3 dot / C term).
tl_status RmsnormBackwardMissingTerm(void*, float* dinp, float* dweight, const float* dout,
                                     const float* inp, const float* weight, const float* rstd,
                                     int n, int c) {
  TL_CHECK(
      tl_cpu_kernel_ops.rmsnorm_backward(nullptr, nullptr, dweight, dout, inp, weight, rstd, n, c));
  for (int i = 0; i < n; i++)
    for (int j = 0; j < c; j++) dinp[i * c + j] += rstd[i] * weight[j] * dout[i * c + j];
  return TL_OK;
}

// RoPE backward that rotates forward again instead of back.
tl_status RopeBackwardWrongDirection(void* ctx, float* dinp, const float* dout, const tl_rope* r,
                                     int b, int t, int heads) {
  std::vector<float> y((size_t)b * t * heads * r->hs);
  TL_CHECK(tl_cpu_kernel_ops.rope_forward(ctx, y.data(), dout, r, b, t, heads));
  for (size_t i = 0; i < y.size(); i++) dinp[i] += y[i];
  return TL_OK;
}

// SwiGLU backward whose gate gradient is sigmoid's alone (silu' taken as sigma).
tl_status SwigluBackwardWrongDerivative(void*, float* dgate, float* dup, const float* dout,
                                        const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float g = gate[i], sig = 1.0f / (1.0f + std::exp(-g));
    dgate[i] += dout[i] * up[i] * sig;
    dup[i] += dout[i] * g * sig;
  }
  return TL_OK;
}

// Grouped-query backward that sends each key/value head the gradient of its
// group's first query head only (the others' contributions dropped).
tl_status AttentionBackwardOneHeadPerGroup(void* ctx, float* dq, float* dk, float* dv,
                                           const float* dout, const float* q, const float* k,
                                           const float* v, const float* out, const float* lse,
                                           const tl_attention_shape* s) {
  tl_attention_shape one = *s;
  one.nh = s->nkv;  // a multi-head problem over every group's first query head
  const int group = s->nh / s->nkv, hs = s->hs;
  const int64_t rows = (int64_t)s->b * s->t, c = (int64_t)s->nh * hs, c1 = (int64_t)s->nkv * hs;
  std::vector<float> q1(rows * c1), o1(rows * c1), d1(rows * c1), dq1(rows * c1, 0.0f),
      l1((size_t)s->b * s->nkv * s->t);
  for (int64_t r = 0; r < rows; r++)
    for (int h = 0; h < s->nkv; h++)
      for (int i = 0; i < hs; i++) {
        q1[r * c1 + h * hs + i] = q[r * s->ldq + (int64_t)h * group * hs + i];
        o1[r * c1 + h * hs + i] = out[r * c + (int64_t)h * group * hs + i];
        d1[r * c1 + h * hs + i] = dout[r * c + (int64_t)h * group * hs + i];
      }
  for (int b = 0; b < s->b; b++)
    for (int h = 0; h < s->nkv; h++)
      for (int t = 0; t < s->t; t++)
        l1[((size_t)b * s->nkv + h) * s->t + t] = lse[((size_t)b * s->nh + h * group) * s->t + t];
  one.ldq = c1;
  TL_CHECK(tl_cpu_kernel_ops.attention_backward(ctx, dq1.data(), dk, dv, d1.data(), q1.data(), k, v,
                                                o1.data(), l1.data(), &one));
  // dq of every head, right: the full kernel into a scratch dk, dv
  std::vector<float> dks(rows * s->ldkv, 0.0f), dvs(rows * s->ldkv, 0.0f);
  return tl_cpu_kernel_ops.attention_backward(ctx, dq, dks.data(), dvs.data(), dout, q, k, v, out,
                                              lse, s);
}

// Attention backward without the softmax gradient's row term D = dout . out
// (as if out were zero): what a flash-attention backward gets wrong when it
// drops the correction.
tl_status AttentionBackwardWithoutRowTerm(void* ctx, float* dq, float* dk, float* dv,
                                          const float* dout, const float* q, const float* k,
                                          const float* v, const float* out, const float* lse,
                                          const tl_attention_shape* s) {
  (void)out;
  std::vector<float> zero((size_t)s->b * s->t * s->nh * s->hs, 0.0f);
  return tl_cpu_kernel_ops.attention_backward(ctx, dq, dk, dv, dout, q, k, v, zero.data(), lse, s);
}

// Cross-entropy whose gradient forgets the one-hot (softmax alone).
tl_status CrossentropyGradientWithoutOneHot(void* ctx, float* losses, float* dlogits,
                                            const float* logits, const int32_t* targets,
                                            const float* dlosses, int n, int v, int vp) {
  TL_CHECK(tl_cpu_kernel_ops.crossentropy_forward_backward(ctx, losses, dlogits, logits, targets,
                                                           dlosses, n, v, vp));
  if (dlogits)
    for (int i = 0; i < n; i++) dlogits[(int64_t)i * vp + targets[i]] += dlosses[i];
  return TL_OK;
}

// Vocabulary-parallel cross-entropy backward that forgets its shard's
// offset: the target's column and the padding taken as if it held column 0
// on.
tl_status XentShardBackwardWithoutOffset(void* ctx, float* dlogits, const float* logits,
                                         const int32_t* targets, const float* stats,
                                         const float* dlosses, int n, int cols, int v0, int v) {
  (void)v0;
  return tl_cpu_kernel_ops.xent_shard_backward(ctx, dlogits, logits, targets, stats, dlosses, n,
                                               cols, 0, v);
}

// Embedding backward that writes a token's row instead of adding to it: a
// token seen twice keeps only its last position's gradient.
tl_status EmbeddingBackwardOverwrites(void*, float* dwte, float* dwpe, const float* dout,
                                      const int32_t* tokens, int b, int t, int c, int row_begin,
                                      int rows) {
  for (int i = 0; i < b * t; i++) {
    const int row = tokens[i] - row_begin;
    for (int j = 0; j < c; j++) {
      if (row >= 0 && row < rows) dwte[(int64_t)row * c + j] = dout[(int64_t)i * c + j];
      if (dwpe) dwpe[(int64_t)(i % t) * c + j] += dout[(int64_t)i * c + j];
    }
  }
  return TL_OK;
}

struct Mutant {
  const char* op_case;
  void (*install)(tl_kernel_ops*);
};

class BrokenGradient : public testing::TestWithParam<Mutant> {};

TEST_P(BrokenGradient, IsCaughtByTheSuite) {
  tl_kernel_ops broken = tl_cpu_kernel_ops;
  GetParam().install(&broken);
  tl_backend be = {tl_cpu(), &broken, nullptr};
  int i = CaseIndex(GetParam().op_case);
  ASSERT_GE(i, 0);
  tl_opcheck_result r;
  ASSERT_EQ(tl_opcheck_run(&be, i, &r), TL_OK) << tl_last_error();
  EXPECT_FALSE(r.passed) << Describe(r);
  EXPECT_GT(r.grad_err, 100 * r.grad_tol) << Describe(r);
  EXPECT_LE(r.fwd_err, r.fwd_tol) << "only the backward was broken: " << Describe(r);
  EXPECT_NE(std::string(r.worst).find("gradient"), std::string::npos) << r.worst;
}

INSTANTIATE_TEST_SUITE_P(
    Mutants, BrokenGradient,
    testing::Values(
        Mutant{"gelu", [](tl_kernel_ops* o) { o->gelu_backward = GeluBackwardMissingTerm; }},
        Mutant{"layernorm",
               [](tl_kernel_ops* o) { o->layernorm_backward = LayernormBackwardMissingMean; }},
        Mutant{"add", [](tl_kernel_ops* o) { o->add_backward = AddBackwardOverwrites; }},
        Mutant{"matmul_tn_bias",
               [](tl_kernel_ops* o) { o->matmul_backward = MatmulBackwardWrongTranspose; }},
        Mutant{"rmsnorm",
               [](tl_kernel_ops* o) { o->rmsnorm_backward = RmsnormBackwardMissingTerm; }},
        Mutant{"rope", [](tl_kernel_ops* o) { o->rope_backward = RopeBackwardWrongDirection; }},
        Mutant{"swiglu",
               [](tl_kernel_ops* o) { o->swiglu_backward = SwigluBackwardWrongDerivative; }},
        Mutant{"attention_gqa",
               [](tl_kernel_ops* o) { o->attention_backward = AttentionBackwardOneHeadPerGroup; }},
        Mutant{"attention",
               [](tl_kernel_ops* o) { o->attention_backward = AttentionBackwardWithoutRowTerm; }},
        Mutant{"crossentropy",
               [](tl_kernel_ops* o) {
                 o->crossentropy_forward_backward = CrossentropyGradientWithoutOneHot;
               }},
        Mutant{"xent_shard",
               [](tl_kernel_ops* o) { o->xent_shard_backward = XentShardBackwardWithoutOffset; }},
        Mutant{"embedding",
               [](tl_kernel_ops* o) { o->embedding_backward = EmbeddingBackwardOverwrites; }}),
    [](const testing::TestParamInfo<Mutant>& info) { return std::string(info.param.op_case); });

// RoPE pairing channel 2i with 2i + 1 (Meta's and llm.c's layout) instead
// of i with i + hs/2 (transformers'): a Hugging Face checkpoint's q and k
// would then need a permutation. The forward check must tell them apart.
tl_status RopeInterleavedPairs(void*, float* out, const float* inp, const tl_rope* r, int b, int t,
                               int heads) {
  std::vector<float> inv(r->hs / 2);
  tl_rope_inv_freq(r, inv.data());
  for (int64_t row = 0; row < (int64_t)b * t; row++)
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < r->hs / 2; i++) {
        const int64_t a = (row * heads + h) * r->hs + 2 * i;
        const float ang = inv[i] * (float)(row % t), c = std::cos(ang), sn = std::sin(ang);
        out[a] = inp[a] * c - inp[a + 1] * sn;
        out[a + 1] = inp[a + 1] * c + inp[a] * sn;
      }
  return TL_OK;
}

TEST(BrokenForward, RopeWithInterleavedPairsIsCaught) {
  tl_kernel_ops broken = tl_cpu_kernel_ops;
  broken.rope_forward = RopeInterleavedPairs;
  tl_backend be = {tl_cpu(), &broken, nullptr};
  for (const char* name : {"rope", "rope_llama3"}) {
    tl_opcheck_result r;
    ASSERT_EQ(tl_opcheck_run(&be, CaseIndex(name), &r), TL_OK) << tl_last_error();
    EXPECT_FALSE(r.passed) << Describe(r);
    EXPECT_GT(r.fwd_err, 100 * r.fwd_tol) << Describe(r);
  }
}

// AdamW without bias correction (the moments used as they are, as if at a
// late step): the update is the optimizer's forward, checked against the
// double reference.
tl_status AdamwWithoutBiasCorrection(void* ctx, float* params, const float* grads, float scale,
                                     float* m, float* v, int64_t n, float lr, float beta1,
                                     float beta2, float eps, float weight_decay, int step) {
  (void)step;
  return tl_cpu_kernel_ops.adamw(ctx, params, grads, scale, m, v, n, lr, beta1, beta2, eps,
                                 weight_decay, 1 << 20);
}

// AdamW that reads the gradients unclipped (the scale ignored).
tl_status AdamwIgnoringTheScale(void* ctx, float* params, const float* grads, float scale, float* m,
                                float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                                float weight_decay, int step) {
  (void)scale;
  return tl_cpu_kernel_ops.adamw(ctx, params, grads, 1.0f, m, v, n, lr, beta1, beta2, eps,
                                 weight_decay, step);
}

TEST(BrokenForward, AdamwIgnoringTheClippingScaleIsCaught) {
  tl_kernel_ops broken = tl_cpu_kernel_ops;
  broken.adamw = AdamwIgnoringTheScale;
  tl_backend be = {tl_cpu(), &broken, nullptr};
  tl_opcheck_result r;
  ASSERT_EQ(tl_opcheck_run(&be, CaseIndex("adamw"), &r), TL_OK) << tl_last_error();
  EXPECT_FALSE(r.passed) << Describe(r);
}

TEST(BrokenForward, AdamwWithoutBiasCorrectionIsCaught) {
  tl_kernel_ops broken = tl_cpu_kernel_ops;
  broken.adamw = AdamwWithoutBiasCorrection;
  tl_backend be = {tl_cpu(), &broken, nullptr};
  tl_opcheck_result r;
  ASSERT_EQ(tl_opcheck_run(&be, CaseIndex("adamw"), &r), TL_OK) << tl_last_error();
  EXPECT_FALSE(r.passed) << Describe(r);
  EXPECT_GT(r.fwd_err, 100 * r.fwd_tol) << Describe(r);
}

TEST(OpCheck, UnknownCaseIsAnError) {
  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  tl_opcheck_result r;
  EXPECT_EQ(tl_opcheck_run(be, tl_opcheck_count(), &r), TL_ERR_INVALID);
  tl_backend_destroy(be);
}

// x rounded to bf16's precision as arithmetic states it, apart from any
// bit manipulation: 8 significant bits (an ulp of 2^(e - 7) for x in
// [2^e, 2^(e+1)), subnormals below 2^-126 sharing 2^-133), to nearest with
// ties to even (the default rounding mode's nearbyint), past bf16's largest
// finite value and its half ulp an infinity, the sign of zero kept.
float Bf16Nearest(float x) {
  if (std::isnan(x) || std::isinf(x)) return x;
  if (x == 0) return x;
  const int e = std::max(std::ilogb(x), -126);
  const double ulp = std::ldexp(1.0, e - 7);
  const double r = std::nearbyint((double)x / ulp) * ulp;
  if (std::fabs(r) >= std::ldexp(1.0, 128)) return std::copysign(INFINITY, x);
  return r == 0 ? std::copysign(0.0f, x) : (float)r;
}

// bf16 storage's conversions (train.precision "bf16"), on the CPU and on a
// GPU where there is one: element for element the rounding arithmetic
// states (Bf16Nearest: nearest, ties to even — 1 + 2^-8 and 1 + 3 * 2^-8 are
// ties — NaN kept a NaN, infinities, signed zeros, subnormals and the
// largest floats), the same bits as core/dtype.h's, and widening back exact.
void CheckBf16Conversions(tl_backend* be) {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          1.0f + 0x1p-8f,
                          1.0f + 3 * 0x1p-8f,
                          -1.0f - 0x1p-9f,
                          3.14159265f,
                          -2.71828183f,
                          1e-40f,
                          -1e-45f,
                          3.4e38f,
                          -3.4e38f,
                          INFINITY,
                          -INFINITY,
                          NAN,
                          65504.0f,
                          1.0f / 3.0f};
  for (int i = 0; i < 4000; i++)
    x.push_back((float)std::ldexp((i * 7919 % 4001) - 2000.5, i % 60 - 30));
  const int64_t n = (int64_t)x.size();
  tl_buffer *in = nullptr, *h = nullptr, *out = nullptr;
  ASSERT_EQ(tl_buffer_create(be->device, sizeof(float) * n, &in), TL_OK);
  ASSERT_EQ(tl_buffer_create(be->device, sizeof(uint16_t) * n, &h), TL_OK);
  ASSERT_EQ(tl_buffer_create(be->device, sizeof(float) * n, &out), TL_OK);
  ASSERT_EQ(tl_memcpy(be->device, in->data, tl_cpu(), x.data(), sizeof(float) * n), TL_OK);
  ASSERT_EQ(be->ops->to_bf16(be->ctx, (uint16_t*)h->data, (const float*)in->data, n), TL_OK);
  std::vector<uint16_t> half(n);
  ASSERT_EQ(be->ops->synchronize(be->ctx), TL_OK);
  ASSERT_EQ(tl_memcpy(tl_cpu(), half.data(), be->device, h->data, sizeof(uint16_t) * n), TL_OK);
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t bits = (uint32_t)half[i] << 16;  // bf16: the top half of a float
    float got;
    std::memcpy(&got, &bits, 4);
    const float want = Bf16Nearest(x[i]);
    const bool same = std::isnan(want) ? std::isnan(got) : std::memcmp(&got, &want, 4) == 0;
    if ((!same || half[i] != tl_f32_to_bf16(x[i])) && bad++ < 5)
      ADD_FAILURE() << be->ops->name << ": to_bf16(" << x[i] << ") = " << got << " (0x" << std::hex
                    << half[i] << std::dec << "), want " << want;
  }
  EXPECT_EQ(half[3], 0x3f80) << "1 + 2^-8 is a tie: to the even 1";
  EXPECT_EQ(half[4], 0x3f82) << "1 + 3 * 2^-8 is a tie: to the even 1 + 2^-6";
  EXPECT_TRUE(std::isnan(tl_bf16_to_f32(half[14])));
  std::vector<float> back(n), rounded(n);
  ASSERT_EQ(be->ops->from_bf16(be->ctx, (float*)out->data, (const uint16_t*)h->data, n), TL_OK);
  ASSERT_EQ(be->ops->synchronize(be->ctx), TL_OK);
  ASSERT_EQ(tl_memcpy(tl_cpu(), back.data(), be->device, out->data, sizeof(float) * n), TL_OK);
  ASSERT_EQ(be->ops->round_bf16(be->ctx, (float*)out->data, (const float*)in->data, n), TL_OK);
  ASSERT_EQ(be->ops->synchronize(be->ctx), TL_OK);
  ASSERT_EQ(tl_memcpy(tl_cpu(), rounded.data(), be->device, out->data, sizeof(float) * n), TL_OK);
  for (int64_t i = 0; i < n; i++) {
    const float want = tl_bf16_to_f32(half[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(back[i]) && std::isnan(rounded[i])) << i;
      continue;
    }
    if ((std::memcmp(&back[i], &want, 4) || std::memcmp(&rounded[i], &want, 4)) && bad++ < 10)
      ADD_FAILURE() << be->ops->name << ": element " << i << " widened " << back[i] << ", rounded "
                    << rounded[i] << ", want " << want;
  }
  EXPECT_EQ(bad, 0);
  tl_buffer_destroy(in);
  tl_buffer_destroy(h);
  tl_buffer_destroy(out);
}

TEST(Bf16, ConversionsAreTheCoreRoundingOnTheCpu) {
  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  CheckBf16Conversions(be);
  tl_backend_destroy(be);
}

TEST(Bf16, ConversionsAreTheCoreRoundingOnTheGpu) {
  const char* why = nullptr;
  if (tl_cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cuda(0), &be), TL_OK) << tl_last_error();
  CheckBf16Conversions(be);
  tl_backend_destroy(be);
}

// n bf16 numbers held in fp32, a sine's values rounded
std::vector<float> Bf16Numbers(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++)
    v[i] = tl_bf16_to_f32(tl_f32_to_bf16((float)std::sin(0.37 * (double)(i + 1) * seed)));
  return v;
}

// A copy of h in a buffer of be's device.
tl_buffer* OnDevice(const tl_backend* be, const std::vector<float>& h) {
  tl_buffer* b = nullptr;
  EXPECT_EQ(tl_buffer_create(be->device, sizeof(float) * h.size(), &b), TL_OK);
  EXPECT_EQ(tl_memcpy(be->device, b->data, tl_cpu(), h.data(), sizeof(float) * h.size()), TL_OK);
  return b;
}

// The GPU's bf16 GEMM (matmul_bf16: tensor cores, fp32 accumulation) on
// bf16 numbers gives the CPU's fp32 matmul up to the order of the sums:
// every transpose, with bias and accumulation, and the backward's three
// products. Within 1e-5 of the largest |out| (the products are exact; a
// K = 192 fp32 sum reassociated moves by far less).
TEST(Bf16, CudaMatmulOfBf16OperandsMatchesTheCpu) {
  const char* why = nullptr;
  if (tl_cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  tl_backend *gpu = nullptr, *cpu = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cuda(0), &gpu), TL_OK) << tl_last_error();
  ASSERT_EQ(tl_backend_create(tl_cpu(), &cpu), TL_OK);
  ASSERT_NE(gpu->ops->matmul_bf16, nullptr);
  const int M = 96, N = 80, K = 192;
  auto bf16s = Bf16Numbers;
  auto to_gpu = [&](const std::vector<float>& h) { return OnDevice(gpu, h); };
  std::vector<float> a = bf16s((size_t)M * K, 3), b = bf16s((size_t)K * N, 5), bias = bf16s(N, 7);
  std::vector<float> dout = bf16s((size_t)M * N, 11);
  tl_buffer *ga = to_gpu(a), *gb = to_gpu(b), *gbias = to_gpu(bias), *gdout = to_gpu(dout);
  for (int t = 0; t < 4; t++) {
    const bool ta = t & 1, tb = t & 2;
    std::vector<float> want((size_t)M * N, 0.5f), got((size_t)M * N);
    tl_buffer* gout = to_gpu(want);
    ASSERT_EQ(cpu->ops->matmul(cpu->ctx, want.data(), a.data(), b.data(), bias.data(), M, N, K, ta,
                               tb, true),
              TL_OK);
    ASSERT_EQ(gpu->ops->matmul_bf16(gpu->ctx, (float*)gout->data, (float*)ga->data,
                                    (float*)gb->data, (float*)gbias->data, M, N, K, ta, tb, true),
              TL_OK)
        << tl_last_error();
    ASSERT_EQ(gpu->ops->synchronize(gpu->ctx), TL_OK);
    ASSERT_EQ(tl_memcpy(tl_cpu(), got.data(), gpu->device, gout->data, sizeof(float) * got.size()),
              TL_OK);
    double most = 0, worst = 0;
    for (size_t i = 0; i < got.size(); i++) most = std::max(most, (double)std::fabs(want[i]));
    for (size_t i = 0; i < got.size(); i++)
      worst = std::max(worst, std::fabs((double)got[i] - want[i]));
    EXPECT_LE(worst, 1e-5 * most) << "trans_a " << ta << " trans_b " << tb;
    // the backward: da, db, dbias
    std::vector<float> da(a.size(), 0.0f), db(b.size(), 0.0f), dbias(N, 0.0f);
    ASSERT_EQ(cpu->ops->matmul_backward(cpu->ctx, da.data(), db.data(), dbias.data(), dout.data(),
                                        a.data(), b.data(), M, N, K, ta, tb),
              TL_OK);
    tl_buffer *gda = to_gpu(std::vector<float>(a.size(), 0.0f)),
              *gdb = to_gpu(std::vector<float>(b.size(), 0.0f)),
              *gdbias = to_gpu(std::vector<float>(N, 0.0f));
    ASSERT_EQ(gpu->ops->matmul_backward_bf16(gpu->ctx, (float*)gda->data, (float*)gdb->data,
                                             (float*)gdbias->data, (float*)gdout->data,
                                             (float*)ga->data, (float*)gb->data, M, N, K, ta, tb),
              TL_OK)
        << tl_last_error();
    ASSERT_EQ(gpu->ops->synchronize(gpu->ctx), TL_OK);
    for (auto [host, dev] :
         {std::pair<std::vector<float>*, tl_buffer*>{&da, gda}, {&db, gdb}, {&dbias, gdbias}}) {
      std::vector<float> g(host->size());
      ASSERT_EQ(tl_memcpy(tl_cpu(), g.data(), gpu->device, dev->data, sizeof(float) * g.size()),
                TL_OK);
      double m2 = 0, w2 = 0;
      for (size_t i = 0; i < g.size(); i++) m2 = std::max(m2, (double)std::fabs((*host)[i]));
      for (size_t i = 0; i < g.size(); i++) w2 = std::max(w2, std::fabs((double)g[i] - (*host)[i]));
      EXPECT_LE(w2, 1e-5 * m2) << "backward, trans_a " << ta << " trans_b " << tb;
      tl_buffer_destroy(dev);
    }
    tl_buffer_destroy(gout);
  }
  for (tl_buffer* x : {ga, gb, gbias, gdout}) tl_buffer_destroy(x);
  tl_backend_destroy(gpu);
  tl_backend_destroy(cpu);
}

// The strided bf16 GEMM (matmul_ld_bf16) on operands inside wider rows,
// as a piece of a weight's rows is read and written: the CPU's matmul_ld
// up to the order of the sums, and the rows' padding left as it was.
TEST(Bf16, CudaStridedMatmulOfBf16OperandsMatchesTheCpu) {
  const char* why = nullptr;
  if (tl_cuda_device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  tl_backend *gpu = nullptr, *cpu = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cuda(0), &gpu), TL_OK) << tl_last_error();
  ASSERT_EQ(tl_backend_create(tl_cpu(), &cpu), TL_OK);
  ASSERT_NE(gpu->ops->matmul_ld_bf16, nullptr);
  const int M = 64, N = 48, K = 160, pad = 24;
  auto bf16s = Bf16Numbers;
  auto to_gpu = [&](const std::vector<float>& h) { return OnDevice(gpu, h); };
  for (int t = 0; t < 8; t++) {
    const bool ta = t & 1, tb = t & 2, bias_on = t & 4;
    const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldo = N + pad;
    std::vector<float> a = bf16s((size_t)(ta ? K : M) * lda, 3),
                       b = bf16s((size_t)(tb ? N : K) * ldb, 5), bias = bf16s(N, 7),
                       want = bf16s((size_t)M * ldo, 11), got(want.size());
    tl_buffer *ga = to_gpu(a), *gb = to_gpu(b), *gbias = to_gpu(bias), *gout = to_gpu(want);
    const bool acc = !bias_on;
    ASSERT_EQ(cpu->ops->matmul_ld(cpu->ctx, want.data(), ldo, a.data(), lda, b.data(), ldb,
                                  bias_on ? bias.data() : nullptr, M, N, K, ta, tb, acc),
              TL_OK);
    ASSERT_EQ(gpu->ops->matmul_ld_bf16(
                  gpu->ctx, (float*)gout->data, ldo, (float*)ga->data, lda, (float*)gb->data, ldb,
                  bias_on ? (float*)gbias->data : nullptr, M, N, K, ta, tb, acc),
              TL_OK)
        << tl_last_error();
    ASSERT_EQ(gpu->ops->synchronize(gpu->ctx), TL_OK);
    ASSERT_EQ(tl_memcpy(tl_cpu(), got.data(), gpu->device, gout->data, sizeof(float) * got.size()),
              TL_OK);
    double most = 0, worst = 0, padding = 0;
    for (size_t i = 0; i < got.size(); i++) most = std::max(most, (double)std::fabs(want[i]));
    for (size_t i = 0; i < got.size(); i++) {
      const double d = std::fabs((double)got[i] - want[i]);
      if ((int)(i % ldo) < N)
        worst = std::max(worst, d);
      else
        padding = std::max(padding, d);
    }
    EXPECT_LE(worst, 1e-5 * most) << "trans_a " << ta << " trans_b " << tb << " bias " << bias_on;
    EXPECT_EQ(padding, 0.0) << "trans_a " << ta << " trans_b " << tb << " bias " << bias_on;
    for (tl_buffer* x : {ga, gb, gbias, gout}) tl_buffer_destroy(x);
  }
  tl_backend_destroy(gpu);
  tl_backend_destroy(cpu);
}

// cuBLAS is loaded, not linked (kernels/cuda/blas.cu): from the toolkit
// trellis was built against, with every entry point it calls, GPU or not.
TEST(Backend, CublasLoadsFromTheToolkit) {
  tl_status st = tl_cuda_blas_check();
  if (st == TL_ERR_NO_DEVICE) GTEST_SKIP() << tl_last_error();
  EXPECT_EQ(st, TL_OK) << tl_last_error();
}

TEST(Backend, CudaWithoutGpuSaysWhy) {
  const char* why = nullptr;
  if (tl_cuda_device_count(&why) > 0) GTEST_SKIP() << "a CUDA device is present";
  tl_backend* be = nullptr;
  EXPECT_EQ(tl_backend_create(tl_cuda(0), &be), TL_ERR_NO_DEVICE);
  EXPECT_EQ(be, nullptr);
  EXPECT_NE(std::string(tl_last_error()).find("cuda:0 is not available"), std::string::npos)
      << tl_last_error();
}

}  // namespace
