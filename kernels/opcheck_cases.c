/* opcheck_cases.c — the op cases: for each kernel, how to call it and a
 * plain-loop double-precision reference of what it must compute. Adding a
 * kernel to struct tl_kernel_ops means adding its cases here (one line in
 * the table at the bottom per shape), and then the test suite and
 * `trellis check` cover it. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "kernels/opcheck_impl.h"

#define F(x) ((float*)(x))
#define I(x) ((const int32_t*)(x))
#define OPS be->ops
#define CTX be->ctx

/* ---- matmul: d = {m, n, k, trans_a, trans_b, flags}; flags 1 = bias, 2 = accumulate */

static tl_status matmul_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                            float* const* out) {
  int m = c->d[0], n = c->d[1], k = c->d[2];
  const float* bias = (c->d[5] & 1) ? F(in[2]) : NULL;
  int acc = (c->d[5] & 2) != 0;
  if (acc) /* the starting value of out is the last input */
    TL_CHECK(
        tl_memcpy(be->device, out[0], be->device, in[c->n_in - 1], sizeof(float) * (size_t)m * n));
  return OPS->matmul(CTX, out[0], F(in[0]), F(in[1]), bias, m, n, k, c->d[3], c->d[4], acc);
}

static tl_status matmul_bwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                            float* const* out, float* const* dout, float* const* din) {
  (void)out;
  float* dbias = (c->d[5] & 1) ? din[2] : NULL;
  return OPS->matmul_backward(CTX, din[0], din[1], dbias, dout[0], F(in[0]), F(in[1]), c->d[0],
                              c->d[1], c->d[2], c->d[3], c->d[4]);
}

static void matmul_ref(const struct opcheck_case* c, const double* const* in, double* const* out) {
  int m = c->d[0], n = c->d[1], k = c->d[2], ta = c->d[3], tb = c->d[4];
  const double *a = in[0], *b = in[1];
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = (c->d[5] & 1) ? in[2][j] : 0.0;
      if (c->d[5] & 2) s += in[c->n_in - 1][i * n + j];
      for (int p = 0; p < k; p++)
        s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      out[0][i * n + j] = s;
    }
}

#define MATMUL(nm, M, N, K, TA, TB, FL)                                                          \
  {                                                                                              \
    .name = nm, .n_in = 2 + ((FL)&1) + (((FL)&2) >> 1), .n_out = 1,                              \
    .in = {{"a", (M) * (K), OPCHECK_F32, -1, 1, 1},                                              \
           {"b", (K) * (N), OPCHECK_F32, -1, 1, 1},                                              \
           {((FL)&1) ? "bias" : "out0", ((FL)&1) ? (N) : (M) * (N), OPCHECK_F32, -1, 1, (FL)&1}, \
           {"out0", (M) * (N), OPCHECK_F32, -1, 1, 0}},                                          \
    .out = {{"out", (M) * (N), 1}}, .d = {M, N, K, TA, TB, FL}, .forward = matmul_fwd,           \
    .backward = matmul_bwd, .reference = matmul_ref, .fwd_tol = 1e-5, .grad_tol = 1e-4           \
  }

/* ---- matmul_ld: matmul's d, on operands inside wider rows: a's stored
 * rows MATMUL_LD_PAD_A floats longer than they are, b's _B longer, out's
 * _OUT longer; out starts as the last input, and its padding must keep it */

#define MATMUL_LD_PAD_A 3
#define MATMUL_LD_PAD_B 2
#define MATMUL_LD_PAD_OUT 4

static void matmul_ld_strides(const struct opcheck_case* c, int* lda, int* ldb, int* ldo) {
  int m = c->d[0], n = c->d[1], k = c->d[2];
  *lda = (c->d[3] ? m : k) + MATMUL_LD_PAD_A;
  *ldb = (c->d[4] ? k : n) + MATMUL_LD_PAD_B;
  *ldo = n + MATMUL_LD_PAD_OUT;
}

static tl_status matmul_ld_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                               float* const* out) {
  int m = c->d[0], n = c->d[1], k = c->d[2], lda, ldb, ldo;
  matmul_ld_strides(c, &lda, &ldb, &ldo);
  const float* bias = (c->d[5] & 1) ? F(in[2]) : NULL;
  TL_CHECK(
      tl_memcpy(be->device, out[0], be->device, in[c->n_in - 1], sizeof(float) * (size_t)m * ldo));
  return OPS->matmul_ld(CTX, out[0], ldo, F(in[0]), lda, F(in[1]), ldb, bias, m, n, k, c->d[3],
                        c->d[4], (c->d[5] & 2) != 0);
}

static void matmul_ld_ref(const struct opcheck_case* c, const double* const* in,
                          double* const* out) {
  int m = c->d[0], n = c->d[1], k = c->d[2], ta = c->d[3], tb = c->d[4], lda, ldb, ldo;
  matmul_ld_strides(c, &lda, &ldb, &ldo);
  const double *a = in[0], *b = in[1], *out0 = in[c->n_in - 1];
  for (int i = 0; i < m; i++)
    for (int j = 0; j < ldo; j++) {
      if (j >= n) { /* the padding: untouched */
        out[0][i * ldo + j] = out0[i * ldo + j];
        continue;
      }
      double s = (c->d[5] & 1) ? in[2][j] : 0.0;
      if (c->d[5] & 2) s += out0[i * ldo + j];
      for (int p = 0; p < k; p++)
        s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
      out[0][i * ldo + j] = s;
    }
}

#define MATMUL_LD(nm, M, N, K, TA, TB, FL)                                                        \
  {                                                                                               \
    .name = nm, .n_in = 3 + ((FL)&1), .n_out = 1,                                                 \
    .in = {{"a", ((TA) ? (K) : (M)) * (((TA) ? (M) : (K)) + MATMUL_LD_PAD_A), OPCHECK_F32, -1, 1, \
            0},                                                                                   \
           {"b", ((TB) ? (N) : (K)) * (((TB) ? (K) : (N)) + MATMUL_LD_PAD_B), OPCHECK_F32, -1, 1, \
            0},                                                                                   \
           {((FL)&1) ? "bias" : "out0", ((FL)&1) ? (N) : (M) * ((N) + MATMUL_LD_PAD_OUT),         \
            OPCHECK_F32, -1, 1, 0},                                                               \
           {"out0", (M) * ((N) + MATMUL_LD_PAD_OUT), OPCHECK_F32, -1, 1, 0}},                     \
    .out = {{"out", (M) * ((N) + MATMUL_LD_PAD_OUT), 1}}, .d = {M, N, K, TA, TB, FL},             \
    .forward = matmul_ld_fwd, .reference = matmul_ld_ref, .fwd_tol = 1e-5                         \
  }

/* ---- layernorm: d = {n, c} */

static tl_status layernorm_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                               float* const* out) {
  return OPS->layernorm_forward(CTX, out[0], out[1], out[2], F(in[0]), F(in[1]), F(in[2]), c->d[0],
                                c->d[1]);
}

static tl_status layernorm_bwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                               float* const* out, float* const* dout, float* const* din) {
  return OPS->layernorm_backward(CTX, din[0], din[1], din[2], dout[0], F(in[0]), F(in[1]), out[1],
                                 out[2], c->d[0], c->d[1]);
}

static void layernorm_ref(const struct opcheck_case* c, const double* const* in,
                          double* const* out) {
  int n = c->d[0], ch = c->d[1];
  for (int i = 0; i < n; i++) {
    const double* x = in[0] + i * ch;
    double m = 0, v = 0;
    for (int j = 0; j < ch; j++) m += x[j];
    m /= ch;
    for (int j = 0; j < ch; j++) v += (x[j] - m) * (x[j] - m);
    v /= ch;
    double s = 1.0 / sqrt(v + (double)TL_LAYERNORM_EPS);
    for (int j = 0; j < ch; j++) out[0][i * ch + j] = (x[j] - m) * s * in[1][j] + in[2][j];
    out[1][i] = m;
    out[2][i] = s;
  }
}

/* ---- gelu: d = {n} */

static tl_status gelu_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                          float* const* out) {
  return OPS->gelu_forward(CTX, out[0], F(in[0]), c->d[0]);
}

static tl_status gelu_bwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                          float* const* out, float* const* dout, float* const* din) {
  (void)out;
  return OPS->gelu_backward(CTX, din[0], F(in[0]), dout[0], c->d[0]);
}

static void gelu_ref(const struct opcheck_case* c, const double* const* in, double* const* out) {
  const double k = sqrt(2.0 / M_PI);
  for (int i = 0; i < c->d[0]; i++) {
    double x = in[0][i];
    out[0][i] = 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
  }
}

/* the softmax of one row (the attention reference uses it) */
static void softmax_row(const double* x, double* y, int n) {
  double mx = -INFINITY, s = 0;
  for (int j = 0; j < n; j++) mx = fmax(mx, x[j]);
  for (int j = 0; j < n; j++) s += (y[j] = exp(x[j] - mx));
  for (int j = 0; j < n; j++) y[j] /= s;
}

/* ---- attention: d = {B, T, NH, NKV, hs, fused}. Fused: one input qkv
 * (B,T,3C) of [Q | K | V] rows (NKV = NH); else q (B,T,NH*hs), k and v
 * (B,T,NKV*hs), query head h reading key/value head h / (NH / NKV). */

static struct tl_attention_shape attention_shape(const struct opcheck_case* c) {
  struct tl_attention_shape s = {
      .b = c->d[0], .t = c->d[1], .nh = c->d[2], .nkv = c->d[3], .hs = c->d[4]};
  s.ldq = c->d[5] ? 3LL * s.nh * s.hs : (int64_t)s.nh * s.hs;
  s.ldkv = c->d[5] ? s.ldq : (int64_t)s.nkv * s.hs;
  return s;
}

static tl_status attention_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                               float* const* out) {
  const struct tl_attention_shape s = attention_shape(c);
  const int64_t ch = (int64_t)s.nh * s.hs;
  if (c->d[5])
    return OPS->attention_forward(CTX, out[0], out[1], F(in[0]), F(in[0]) + ch, F(in[0]) + 2 * ch,
                                  &s);
  return OPS->attention_forward(CTX, out[0], out[1], F(in[0]), F(in[1]), F(in[2]), &s);
}

static tl_status attention_bwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                               float* const* out, float* const* dout, float* const* din) {
  const struct tl_attention_shape s = attention_shape(c);
  const int64_t ch = (int64_t)s.nh * s.hs;
  if (c->d[5])
    return OPS->attention_backward(CTX, din[0], din[0] + ch, din[0] + 2 * ch, dout[0], F(in[0]),
                                   F(in[0]) + ch, F(in[0]) + 2 * ch, out[0], out[1], &s);
  return OPS->attention_backward(CTX, din[0], din[1], din[2], dout[0], F(in[0]), F(in[1]), F(in[2]),
                                 out[0], out[1], &s);
}

static void attention_ref(const struct opcheck_case* c, const double* const* in,
                          double* const* out) {
  const int B = c->d[0], T = c->d[1], NH = c->d[2], NKV = c->d[3], hs = c->d[4];
  const int C = NH * hs, group = NH / NKV;
  /* where row (b, t) of q, k and v starts, and their strides */
  const double *q = in[0], *k = c->d[5] ? in[0] + C : in[1], *v = c->d[5] ? in[0] + 2 * C : in[2];
  const int ldq = c->d[5] ? 3 * C : C, ldkv = c->d[5] ? 3 * C : NKV * hs;
  double scores[T], a[T]; /* T >= 1: the case table never has empty sequences */
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double* qr = q + (b * T + t) * ldq + h * hs;
        const int kv = (h / group) * hs;
        double mx = -INFINITY, sum = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const double* kr = k + (b * T + t2) * ldkv + kv;
          double s = 0;
          for (int i = 0; i < hs; i++) s += qr[i] * kr[i];
          scores[t2] = s / sqrt((double)hs);
          mx = fmax(mx, scores[t2]);
        }
        for (int t2 = 0; t2 <= t; t2++) sum += exp(scores[t2] - mx);
        out[1][(b * NH + h) * T + t] = mx + log(sum); /* the row's log-sum-exp */
        softmax_row(scores, a, t + 1);
        double* o = out[0] + (b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) {
          double s = 0;
          for (int t2 = 0; t2 <= t; t2++) s += a[t2] * v[(b * T + t2) * ldkv + kv + i];
          o[i] = s;
        }
      }
}

/* ---- embedding: d = {B, T, C, row_begin, rows, flags}; wte holds rows
 * [row_begin, row_begin + rows) of the vocabulary (a tensor-parallel shard
 * or a piece); flags 1 = wpe, 2 = accumulate onto the last input */

static tl_status embedding_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                               float* const* out) {
  const bool acc = (c->d[5] & 2) != 0;
  if (acc)
    TL_CHECK(tl_memcpy(be->device, out[0], be->device, in[c->n_in - 1],
                       sizeof(float) * (size_t)c->d[0] * c->d[1] * c->d[2]));
  return OPS->embedding_forward(CTX, out[0], I(in[0]), F(in[1]), (c->d[5] & 1) ? F(in[2]) : NULL,
                                c->d[0], c->d[1], c->d[2], c->d[3], c->d[4], acc);
}

static tl_status embedding_bwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                               float* const* out, float* const* dout, float* const* din) {
  (void)out;
  return OPS->embedding_backward(CTX, din[1], (c->d[5] & 1) ? din[2] : NULL, dout[0], I(in[0]),
                                 c->d[0], c->d[1], c->d[2], c->d[3], c->d[4]);
}

static void embedding_ref(const struct opcheck_case* c, const double* const* in,
                          double* const* out) {
  int B = c->d[0], T = c->d[1], C = c->d[2], begin = c->d[3], rows = c->d[4];
  for (int p = 0; p < B * T; p++) {
    int row = (int)in[0][p] - begin;
    for (int i = 0; i < C; i++)
      out[0][p * C + i] = (row >= 0 && row < rows ? in[1][row * C + i] : 0.0) +
                          ((c->d[5] & 1) ? in[2][(p % T) * C + i] : 0.0) +
                          ((c->d[5] & 2) ? in[c->n_in - 1][p * C + i] : 0.0);
  }
}

/* ---- fused cross-entropy: d = {N, V, Vp} */

static tl_status xent_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                          float* const* out) {
  return OPS->crossentropy_forward_backward(CTX, out[0], NULL, F(in[0]), I(in[1]), NULL, c->d[0],
                                            c->d[1], c->d[2]);
}

static tl_status xent_bwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                          float* const* out, float* const* dout, float* const* din) {
  return OPS->crossentropy_forward_backward(CTX, out[0], din[0], F(in[0]), I(in[1]), dout[0],
                                            c->d[0], c->d[1], c->d[2]);
}

static void xent_ref(const struct opcheck_case* c, const double* const* in, double* const* out) {
  int N = c->d[0], V = c->d[1], Vp = c->d[2];
  for (int i = 0; i < N; i++) {
    const double* x = in[0] + i * Vp;
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < V; j++) mx = fmax(mx, x[j]);
    for (int j = 0; j < V; j++) s += exp(x[j] - mx);
    out[0][i] = log(s) + mx - x[(int)in[1][i]];
  }
}

/* ---- vocabulary-parallel cross-entropy, one shard alone: d = {N, cols, v0,
 * V}. Alone, the shard's loss is log(sum of its exponentials) minus the
 * target's logit when it holds it — the function its gradient is of. */

static tl_status xent_shard_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                                float* const* out) {
  for (int phase = 0; phase < 3; phase++)
    TL_CHECK(OPS->xent_shard_forward(CTX, out[0], out[1], F(in[0]), I(in[1]), c->d[0], c->d[1],
                                     c->d[2], c->d[3], phase));
  return TL_OK;
}

static tl_status xent_shard_bwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                                float* const* out, float* const* dout, float* const* din) {
  return OPS->xent_shard_backward(CTX, din[0], F(in[0]), I(in[1]), out[1], dout[0], c->d[0],
                                  c->d[1], c->d[2], c->d[3]);
}

static void xent_shard_ref(const struct opcheck_case* c, const double* const* in,
                           double* const* out) {
  int N = c->d[0], cols = c->d[1], v0 = c->d[2], V = c->d[3];
  for (int i = 0; i < N; i++) {
    const double* x = in[0] + i * cols;
    double mx = -FLT_MAX, s = 0, t = 0;
    for (int j = 0; j < cols && v0 + j < V; j++) mx = fmax(mx, x[j]);
    for (int j = 0; j < cols && v0 + j < V; j++) s += exp(x[j] - mx);
    int local = (int)in[1][i] - v0;
    if (local >= 0 && local < cols && v0 + local < V) t = x[local];
    out[0][i] = log(s) + mx - t;
    out[1][i] = mx, out[1][N + i] = s, out[1][2 * N + i] = t;
  }
}

/* ---- rmsnorm: d = {n, c}; alpha = eps */

static tl_status rmsnorm_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                             float* const* out) {
  return OPS->rmsnorm_forward(CTX, out[0], out[1], F(in[0]), F(in[1]), c->d[0], c->d[1], c->alpha);
}

static tl_status rmsnorm_bwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                             float* const* out, float* const* dout, float* const* din) {
  return OPS->rmsnorm_backward(CTX, din[0], din[1], dout[0], F(in[0]), F(in[1]), out[1], c->d[0],
                               c->d[1]);
}

static void rmsnorm_ref(const struct opcheck_case* c, const double* const* in, double* const* out) {
  int n = c->d[0], ch = c->d[1];
  for (int i = 0; i < n; i++) {
    const double* x = in[0] + i * ch;
    double ss = 0;
    for (int j = 0; j < ch; j++) ss += x[j] * x[j];
    double r = 1.0 / sqrt(ss / ch + (double)c->alpha);
    for (int j = 0; j < ch; j++) out[0][i * ch + j] = x[j] * r * in[1][j];
    out[1][i] = r;
  }
}

/* ---- rope: d = {B, T, heads, hs, scaled}; scaled: Llama 3.1's frequency
 * scaling, with an original context short enough that the case's
 * frequencies fall in all three of its bands. Stated independently of the
 * kernels' float code: frequencies and angles in double. */

static struct tl_rope rope_case(const struct opcheck_case* c) {
  struct tl_rope r = {.hs = c->d[3], .theta = 10000.0f};
  if (c->d[4]) {
    r.factor = 8.0f, r.low_freq_factor = 1.0f, r.high_freq_factor = 4.0f;
    r.original_ctx = 64;
  }
  return r;
}

static tl_status rope_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                          float* const* out) {
  const struct tl_rope r = rope_case(c);
  return OPS->rope_forward(CTX, out[0], F(in[0]), &r, c->d[0], c->d[1], c->d[2]);
}

static tl_status rope_bwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                          float* const* out, float* const* dout, float* const* din) {
  (void)in, (void)out;
  const struct tl_rope r = rope_case(c);
  return OPS->rope_backward(CTX, din[0], dout[0], &r, c->d[0], c->d[1], c->d[2]);
}

static void rope_ref(const struct opcheck_case* c, const double* const* in, double* const* out) {
  const int B = c->d[0], T = c->d[1], H = c->d[2], hs = c->d[3], half = hs / 2;
  const struct tl_rope r = rope_case(c);
  double inv[half];
  for (int i = 0; i < half; i++) {
    inv[i] = pow(r.theta, -2.0 * i / hs);
    if (!c->d[4]) continue;
    const double wavelen = 2 * M_PI / inv[i], ctx = r.original_ctx;
    if (wavelen > ctx / r.low_freq_factor) {
      inv[i] /= r.factor;
    } else if (wavelen >= ctx / r.high_freq_factor) {
      const double s =
          (ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      inv[i] = (1 - s) * inv[i] / r.factor + s * inv[i];
    }
  }
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < H; h++) {
        const int at = ((b * T + t) * H + h) * hs;
        const double* x = in[0] + at;
        for (int i = 0; i < half; i++) {
          const double co = cos(t * inv[i]), si = sin(t * inv[i]);
          out[0][at + i] = x[i] * co - x[i + half] * si;
          out[0][at + i + half] = x[i + half] * co + x[i] * si;
        }
      }
}

/* ---- swiglu: d = {n} */

static tl_status swiglu_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                            float* const* out) {
  return OPS->swiglu_forward(CTX, out[0], F(in[0]), F(in[1]), c->d[0]);
}

static tl_status swiglu_bwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                            float* const* out, float* const* dout, float* const* din) {
  (void)out;
  return OPS->swiglu_backward(CTX, din[0], din[1], dout[0], F(in[0]), F(in[1]), c->d[0]);
}

static void swiglu_ref(const struct opcheck_case* c, const double* const* in, double* const* out) {
  for (int i = 0; i < c->d[0]; i++) {
    const double g = in[0][i];
    out[0][i] = g / (1.0 + exp(-g)) * in[1][i];
  }
}

/* ---- add, scale, sum of squares: d = {n} */

static tl_status add_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                         float* const* out) {
  return OPS->add_forward(CTX, out[0], F(in[0]), F(in[1]), c->d[0]);
}

static tl_status add_bwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                         float* const* out, float* const* dout, float* const* din) {
  (void)in, (void)out;
  return OPS->add_backward(CTX, din[0], din[1], dout[0], c->d[0]);
}

static void add_ref(const struct opcheck_case* c, const double* const* in, double* const* out) {
  for (int i = 0; i < c->d[0]; i++) out[0][i] = in[0][i] + in[1][i];
}

static tl_status scale_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                           float* const* out) {
  return OPS->scale_forward(CTX, out[0], F(in[0]), c->alpha, c->d[0]);
}

static tl_status scale_bwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                           float* const* out, float* const* dout, float* const* din) {
  (void)in, (void)out;
  return OPS->scale_backward(CTX, din[0], dout[0], c->alpha, c->d[0]);
}

static void scale_ref(const struct opcheck_case* c, const double* const* in, double* const* out) {
  for (int i = 0; i < c->d[0]; i++) out[0][i] = (double)c->alpha * in[0][i];
}

static tl_status sumsq_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                           float* const* out) {
  return OPS->sumsq(CTX, out[0], F(in[0]), c->d[0]);
}

static void sumsq_ref(const struct opcheck_case* c, const double* const* in, double* const* out) {
  double s = 0;
  for (int i = 0; i < c->d[0]; i++) s += in[0][i] * in[0][i];
  out[0][0] = s;
}

/* ---- AdamW: d = {n, step}; alpha = weight decay. Forward-only: the
 * outputs are the updated parameters and moments. */

#define ADAM_LR 0.01f
#define ADAM_B1 0.9f
#define ADAM_B2 0.95f
#define ADAM_EPS 1e-8f
#define ADAM_GRAD_SCALE 0.75f /* clipping, folded into the update */

static tl_status adamw_fwd(const struct opcheck_case* c, const tl_backend* be, void* const* in,
                           float* const* out) {
  size_t bytes = sizeof(float) * (size_t)c->d[0];
  TL_CHECK(tl_memcpy(be->device, out[0], be->device, in[0], bytes));
  TL_CHECK(tl_memcpy(be->device, out[1], be->device, in[2], bytes));
  TL_CHECK(tl_memcpy(be->device, out[2], be->device, in[3], bytes));
  return OPS->adamw(CTX, out[0], F(in[1]), ADAM_GRAD_SCALE, out[1], out[2], c->d[0], ADAM_LR,
                    ADAM_B1, ADAM_B2, ADAM_EPS, c->alpha, c->d[1]);
}

static void adamw_ref(const struct opcheck_case* c, const double* const* in, double* const* out) {
  int t = c->d[1];
  double b1 = ADAM_B1, b2 = ADAM_B2;
  for (int i = 0; i < c->d[0]; i++) {
    double g = in[1][i] * (double)ADAM_GRAD_SCALE;
    double m = b1 * in[2][i] + (1 - b1) * g;
    double v = b2 * in[3][i] + (1 - b2) * g * g;
    double mhat = m / (1 - pow(b1, t)), vhat = v / (1 - pow(b2, t));
    out[0][i] = in[0][i] - (double)ADAM_LR * (mhat / (sqrt(vhat) + (double)ADAM_EPS) +
                                              (double)c->alpha * in[0][i]);
    out[1][i] = m;
    out[2][i] = v;
  }
}

/* ---- the table ------------------------------------------------------- */

/* clang-format off */
#define ELEMENTWISE(nm, N, fwd, bwd, ref, lo, hi, al)                                   \
  {.name = nm, .n_in = 1, .n_out = 1, .in = {{"x", N, OPCHECK_F32, lo, hi, 1}},         \
   .out = {{"out", N, 1}}, .d = {N}, .alpha = al, .forward = fwd, .backward = bwd,        \
   .reference = ref, .fwd_tol = 1e-5, .grad_tol = 1e-4}

#define LAYERNORM(nm, N, C)                                                             \
  {.name = nm, .n_in = 3, .n_out = 3,                                                   \
   .in = {{"inp", (N) * (C), OPCHECK_F32, -2, 2, 1},                                    \
          {"weight", C, OPCHECK_F32, 0.5f, 1.5f, 1},                                    \
          {"bias", C, OPCHECK_F32, -0.5f, 0.5f, 1}},                                    \
   .out = {{"out", (N) * (C), 1}, {"mean", N, 0}, {"rstd", N, 0}}, .d = {N, C},         \
   .forward = layernorm_fwd, .backward = layernorm_bwd, .reference = layernorm_ref,     \
   .fwd_tol = 1e-5, .grad_tol = 1e-4}

#define ATTENTION(nm, B, T, C, NH)                                                      \
  {.name = nm, .n_in = 1, .n_out = 2,                                                   \
   .in = {{"qkv", (B) * (T) * 3 * (C), OPCHECK_F32, -1, 1, 1}},                          \
   .out = {{"out", (B) * (T) * (C), 1}, {"lse", (B) * (NH) * (T), 0}},                   \
   .d = {B, T, NH, NH, (C) / (NH), 1}, .forward = attention_fwd,                         \
   .backward = attention_bwd, .reference = attention_ref, .fwd_tol = 1e-5,               \
   .grad_tol = 1e-4}

/* grouped-query: NH query heads over NKV key/value heads of HS channels */
#define ATTENTION_GQA(nm, B, T, NH, NKV, HS)                                            \
  {.name = nm, .n_in = 3, .n_out = 2,                                                   \
   .in = {{"q", (B) * (T) * (NH) * (HS), OPCHECK_F32, -1, 1, 1},                         \
          {"k", (B) * (T) * (NKV) * (HS), OPCHECK_F32, -1, 1, 1},                        \
          {"v", (B) * (T) * (NKV) * (HS), OPCHECK_F32, -1, 1, 1}},                       \
   .out = {{"out", (B) * (T) * (NH) * (HS), 1}, {"lse", (B) * (NH) * (T), 0}},           \
   .d = {B, T, NH, NKV, HS, 0}, .forward = attention_fwd, .backward = attention_bwd,     \
   .reference = attention_ref, .fwd_tol = 1e-5, .grad_tol = 1e-4}

#define CROSSENTROPY(nm, N, V, VP)                                                      \
  {.name = nm, .n_in = 2, .n_out = 1,                                                   \
   .in = {{"logits", (N) * (VP), OPCHECK_F32, -3, 3, 1},                                 \
          {"targets", N, OPCHECK_I32, 0, V, 0}},                                         \
   .out = {{"losses", N, 1}}, .d = {N, V, VP}, .forward = xent_fwd,                      \
   .backward = xent_bwd, .reference = xent_ref, .fwd_tol = 1e-5, .grad_tol = 1e-4,       \
   .writes_grad = 1}

#define RMSNORM(nm, N, C, EPS)                                                          \
  {.name = nm, .n_in = 2, .n_out = 2,                                                   \
   .in = {{"inp", (N) * (C), OPCHECK_F32, -2, 2, 1},                                    \
          {"weight", C, OPCHECK_F32, 0.5f, 1.5f, 1}},                                   \
   .out = {{"out", (N) * (C), 1}, {"rstd", N, 0}}, .d = {N, C}, .alpha = EPS,           \
   .forward = rmsnorm_fwd, .backward = rmsnorm_bwd, .reference = rmsnorm_ref,           \
   .fwd_tol = 1e-5, .grad_tol = 1e-4}

#define ROPE(nm, B, T, H, HS, SCALED)                                                   \
  {.name = nm, .n_in = 1, .n_out = 1,                                                   \
   .in = {{"x", (B) * (T) * (H) * (HS), OPCHECK_F32, -1, 1, 1}},                         \
   .out = {{"out", (B) * (T) * (H) * (HS), 1}}, .d = {B, T, H, HS, SCALED},              \
   .forward = rope_fwd, .backward = rope_bwd, .reference = rope_ref, .fwd_tol = 1e-5,    \
   .grad_tol = 1e-4}

/* a shard of columns [v0, v0 + COLS) of a vocabulary of V (padded beyond) */
#define XENT_SHARD(nm, N, COLS, V0, V)                                                  \
  {.name = nm, .n_in = 2, .n_out = 2,                                                   \
   .in = {{"logits", (N) * (COLS), OPCHECK_F32, -3, 3, 1},                               \
          {"targets", N, OPCHECK_I32, 0, V, 0}},                                         \
   .out = {{"losses", N, 1}, {"stats", 3 * (N), 0}}, .d = {N, COLS, V0, V},              \
   .forward = xent_shard_fwd, .backward = xent_shard_bwd, .reference = xent_shard_ref,   \
   .fwd_tol = 1e-5, .grad_tol = 1e-4, .writes_grad = 1}

const struct opcheck_case tl__opcheck_cases[] = {
    MATMUL("matmul_nn", 5, 7, 6, 0, 0, 0),
    MATMUL("matmul_nt_bias", 5, 7, 6, 0, 1, 1),
    MATMUL("matmul_tn_bias", 4, 9, 3, 1, 0, 1),
    MATMUL("matmul_tt", 6, 5, 8, 1, 1, 0),
    MATMUL("matmul_nt_accumulate", 5, 7, 6, 0, 1, 2),
    MATMUL("matmul_tn_bias_accumulate", 4, 9, 3, 1, 0, 3),
    /* strided: a piece's columns of a wider output (its gradient) read and
     * written in place, every transpose */
    MATMUL_LD("matmul_ld_nt_bias", 5, 7, 6, 0, 1, 1),
    MATMUL_LD("matmul_ld_tn_accumulate", 4, 9, 3, 1, 0, 2),
    MATMUL_LD("matmul_ld_nn_bias_accumulate", 6, 5, 8, 0, 0, 3),
    MATMUL_LD("matmul_ld_tt", 3, 4, 7, 1, 1, 0),
    LAYERNORM("layernorm", 6, 10),
    ELEMENTWISE("gelu", 64, gelu_fwd, gelu_bwd, gelu_ref, -5.0f, 5.0f, 0),
    ATTENTION("attention", 2, 5, 12, 3),
    {.name = "embedding", .n_in = 3, .n_out = 1,
     .in = {{"tokens", 2 * 4, OPCHECK_I32, 0, 5, 0},
            {"wte", 5 * 6, OPCHECK_F32, -1, 1, 1},
            {"wpe", 4 * 6, OPCHECK_F32, -1, 1, 1}},
     .out = {{"out", 2 * 4 * 6, 1}}, .d = {2, 4, 6, 0, 5, 1}, .forward = embedding_fwd,
     .backward = embedding_bwd, .reference = embedding_ref, .fwd_tol = 1e-6, .grad_tol = 1e-5},
    /* a tensor-parallel shard: rows 3..5 of a vocabulary of 9, no position term */
    {.name = "embedding_shard", .n_in = 3, .n_out = 1,
     .in = {{"tokens", 3 * 5, OPCHECK_I32, 0, 9, 0},
            {"wte", 3 * 6, OPCHECK_F32, -1, 1, 1},
            {"wpe", 5 * 6, OPCHECK_F32, -1, 1, 0}},
     .out = {{"out", 3 * 5 * 6, 1}}, .d = {3, 5, 6, 3, 3, 0}, .forward = embedding_fwd,
     .backward = embedding_bwd, .reference = embedding_ref, .fwd_tol = 1e-6, .grad_tol = 1e-5},
    /* a piece of the table's rows added onto the output (ZeRO-3 reading
     * the table in pieces): rows 2..5 of 9, the other tokens untouched */
    {.name = "embedding_piece_added", .n_in = 4, .n_out = 1,
     .in = {{"tokens", 2 * 5, OPCHECK_I32, 0, 9, 0},
            {"wte", 4 * 6, OPCHECK_F32, -1, 1, 1},
            {"wpe", 5 * 6, OPCHECK_F32, -1, 1, 0},
            {"out0", 2 * 5 * 6, OPCHECK_F32, -1, 1, 0}},
     .out = {{"out", 2 * 5 * 6, 1}}, .d = {2, 5, 6, 2, 4, 2}, .forward = embedding_fwd,
     .backward = embedding_bwd, .reference = embedding_ref, .fwd_tol = 1e-6, .grad_tol = 1e-5},
    CROSSENTROPY("crossentropy", 6, 10, 16),
    XENT_SHARD("xent_shard", 7, 16, 8, 20),
    XENT_SHARD("xent_shard_wide", 3, 300, 300, 1000),
    /* Wider shapes: rows longer than a warp (32) or a block (256), sequences
     * longer than a warp, heads of 32 — the paths GPU kernels take at real sizes. */
    LAYERNORM("layernorm_wide", 4, 100),
    ATTENTION("attention_long", 1, 40, 64, 2),
    /* past two of the CPU kernel's 64-key tiles: the online softmax's rescaling */
    ATTENTION("attention_tiled", 1, 150, 16, 2),
    /* grouped-query (two query heads a key/value head), multi-query, and
     * separate q, k, v with as many key/value heads as query heads */
    ATTENTION_GQA("attention_gqa", 2, 5, 4, 2, 3),
    ATTENTION_GQA("attention_mqa", 1, 7, 3, 1, 4),
    ATTENTION_GQA("attention_separate", 2, 4, 2, 2, 5),
    ATTENTION_GQA("attention_gqa_tiled", 1, 140, 4, 2, 8),
    CROSSENTROPY("crossentropy_wide", 3, 300, 384),
    RMSNORM("rmsnorm", 6, 10, 1e-5f),
    /* a row longer than a warp, and an eps that matters (rows of small x) */
    RMSNORM("rmsnorm_wide", 4, 100, 0.5f),
    ROPE("rope", 2, 5, 3, 8, 0),
    /* Llama 3.1's scaling, and positions far enough for large angles */
    ROPE("rope_llama3", 1, 70, 2, 16, 1),
    {.name = "swiglu", .n_in = 2, .n_out = 1,
     .in = {{"gate", 64, OPCHECK_F32, -6, 6, 1}, {"up", 64, OPCHECK_F32, -2, 2, 1}},
     .out = {{"out", 64, 1}}, .d = {64}, .forward = swiglu_fwd, .backward = swiglu_bwd,
     .reference = swiglu_ref, .fwd_tol = 1e-5, .grad_tol = 1e-4},
    {.name = "add", .n_in = 2, .n_out = 1,
     .in = {{"a", 50, OPCHECK_F32, -1, 1, 1}, {"b", 50, OPCHECK_F32, -1, 1, 1}},
     .out = {{"out", 50, 1}}, .d = {50}, .forward = add_fwd, .backward = add_bwd,
     .reference = add_ref, .fwd_tol = 1e-6, .grad_tol = 1e-5},
    ELEMENTWISE("scale", 50, scale_fwd, scale_bwd, scale_ref, -1.0f, 1.0f, 0.37f),
    /* forward-only: more than one fixed-size chunk of the CPU reduction */
    {.name = "sumsq", .n_in = 1, .n_out = 1, .in = {{"x", 70000, OPCHECK_F32, -1, 1, 0}},
     .out = {{"out", 1, 0}}, .d = {70000}, .forward = sumsq_fwd, .reference = sumsq_ref,
     .fwd_tol = 1e-6, .grad_tol = 0},
    /* forward-only: the outputs are the updated parameters and moments */
    {.name = "adamw", .n_in = 4, .n_out = 3,
     .in = {{"params", 50, OPCHECK_F32, -1, 1, 0},
            {"grads", 50, OPCHECK_F32, -1, 1, 0},
            {"m", 50, OPCHECK_F32, -0.1f, 0.1f, 0},
            {"v", 50, OPCHECK_F32, 0.0f, 0.01f, 0}},
     .out = {{"params", 50, 0}, {"m", 50, 0}, {"v", 50, 0}}, .d = {50, 3}, .alpha = 0.1f,
     .forward = adamw_fwd, .backward = NULL, .reference = adamw_ref, .fwd_tol = 1e-5,
     .grad_tol = 0},
};
/* clang-format on */

const int tl__opcheck_n_cases = (int)(sizeof tl__opcheck_cases / sizeof tl__opcheck_cases[0]);
